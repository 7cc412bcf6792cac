"""`pygraph.engines.base.kernels_ready`: a slow kernel build (a first use's compile) is logged at info
with its time; a fast one (a disk-cache load) is not."""

from __future__ import annotations

import pytest

from pygraph.engines import base


def test_a_slow_kernel_build_is_logged_with_its_time(monkeypatch, caplog):
    clock = iter([10.0, 41.5, 50.0, 50.2])
    monkeypatch.setattr(base.time, "perf_counter", lambda: next(clock))
    with caplog.at_level("INFO", logger="pygraph.engines.build"):
        assert base.kernels_ready("kda_sm90", "K=128 V=128 [BLOCK_V=32]", lambda: "compiled") == "compiled"
        assert base.kernels_ready("kda_sm90", "K=64 V=64", lambda: "loaded") == "loaded"
    assert [r.getMessage() for r in caplog.records] == [
        "kda_sm90: kernels for K=128 V=128 [BLOCK_V=32] ready in 31.5 s (compiled; kept on disk for later processes)"
    ]


def test_a_build_that_raises_logs_nothing_and_raises(caplog):
    def fails():
        raise RuntimeError("the DSL refused")

    with (
        caplog.at_level("INFO", logger="pygraph.engines.build"),
        pytest.raises(RuntimeError, match="refused"),
    ):
        base.kernels_ready("kda_sm90", "K=128 V=128", fails)
    assert caplog.records == []
