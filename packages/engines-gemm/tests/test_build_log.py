"""build_plans says which gemm_sm90 kernel it made ready and how long that took (compiling one takes
0.5-3 s), on the engine's logger at INFO. No GPU: the compile is stood in for."""

from __future__ import annotations

import logging

import pytest

pytest.importorskip("cutlass")

import pygraph
from pygraph import data_type as dt
from pygraph_gemm.engines import sm90 as engine_sm90
from pygraph_gemm.kernels import plan as launch_plan


def test_build_plans_logs_the_kernel_it_made_ready(monkeypatch, caplog):
    monkeypatch.setattr(launch_plan, "get_compiled", lambda *a, **k: lambda *args: None)
    monkeypatch.setattr(engine_sm90.GemmSm90Engine, "_arch_reason", lambda self: None)
    g = pygraph.Graph(name="mm", io_data_type=dt.BFLOAT16, compute_data_type=dt.FLOAT)
    a = g.tensor(name="A", dim=[1, 128, 4096], data_type=dt.BFLOAT16)
    b = g.tensor(name="B", dim=[1, 4096, 4096], stride=[4096 * 4096, 1, 4096], data_type=dt.BFLOAT16)
    g.matmul(a, b, compute_data_type=dt.FLOAT, name="mm").set_output(True).set_data_type(dt.BFLOAT16)
    g.create_execution_plans()
    with caplog.at_level(logging.INFO, logger=engine_sm90.__name__):
        g.build_plans()
    assert g.selected_engine is not None and g.selected_engine.name == "gemm_sm90"
    (record,) = [r for r in caplog.records if r.name == engine_sm90.__name__]
    message = record.getMessage()
    assert message.startswith(
        "gemm_sm90: kernel 64x64c21 (bf16 -> bf16, no activation) for 128x4096x4096 ready in "
    )
    assert message.endswith(" s")
