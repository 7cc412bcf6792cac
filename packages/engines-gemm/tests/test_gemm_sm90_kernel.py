"""The SM90 GEMM's plans on two streams (needs an SM90 GPU) and `can_implement`'s reasons.

The numerics, case by case, are test_gemm_sm90_numerics.py's (cases in gemm_cases.py).
"""

from __future__ import annotations

import pytest

from pygraph_gemm.kernels.config import EpilogueSpec, GemmKnobs, can_implement


@pytest.mark.sm90
def test_split_k_plan_runs_concurrently_on_two_streams():
    """Each stream gets its own engine-owned semaphores: one split-K plan launched back to back on
    two streams (no ordering between them) gives both outputs right, many times over."""
    import torch

    from pygraph_gemm.kernels.plan import Plan
    from pygraph_gemm.kernels.semaphores import stream_semaphores

    m, n, k = 128, 2048, 2048
    knobs = GemmKnobs(tile_m=128, tile_n=64, split_k=2)
    plan = Plan(knobs, EpilogueSpec(), "bf16", "bf16", (0, k, 1), (0, n, 1), (0, n, 1), m, n, k, 1)
    streams = [torch.cuda.Stream(), torch.cuda.Stream()]
    torch.manual_seed(0)
    jobs = []
    for s in streams:
        a = torch.randn(m, k, device="cuda").bfloat16()
        b = torch.randn(k, n, device="cuda").bfloat16()
        c = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
        ws = torch.full((plan.workspace_bytes(m, n, 1),), 0xFF, device="cuda", dtype=torch.uint8)
        jobs.append((s, a, b, c, ws))
    torch.cuda.synchronize()
    for _ in range(20):
        for s, a, b, c, ws in jobs:
            with torch.cuda.stream(s):
                plan(a.data_ptr(), b.data_ptr(), c.data_ptr(), m, n, k, 1, (0, k, 1), (0, n, 1), (0, n, 1),
                     stream=s.cuda_stream, workspace=ws.data_ptr())  # fmt: skip
    torch.cuda.synchronize()
    dev, words = torch.cuda.current_device(), 1
    own = {stream_semaphores().address(dev, s.cuda_stream, words) for s in streams}
    assert len(own) == 2  # a buffer per stream
    for _s, a, b, c, _ws in jobs:
        ref = a.double() @ b.double()
        assert not torch.isnan(c).any()
        assert ((c.double() - ref).norm() / ref.norm()).item() < 1e-2


def test_can_implement_declines_with_reasons():
    ok = can_implement(256, 256, 256, 1, "bf16", "bf16", "bf16", (0, 256, 1), (0, 256, 1), (0, 256, 1))
    assert ok is None
    r = can_implement(256, 256, 250, 1, "bf16", "bf16", "bf16", (0, 250, 1), (0, 256, 1), (0, 256, 1))
    assert r and "16" in r  # K=250 row stride of 500 bytes breaks TMA's 16-byte rule
    assert "dtype" in can_implement(8, 8, 8, 1, "fp8", "fp8", "bf16", (0, 8, 1), (0, 8, 1), (0, 8, 1))
    assert "differ" in can_implement(8, 8, 8, 1, "bf16", "fp16", "bf16", (0, 8, 1), (0, 8, 1), (0, 8, 1))
    assert can_implement(0, 8, 8, 1, "bf16", "bf16", "bf16", (0, 8, 1), (0, 8, 1), (0, 8, 1))
    assert can_implement(
        8, 8, 8, 1, "bf16", "bf16", "bf16", (0, 8, 1), (0, 8, 1), (0, 8, 1), knobs=GemmKnobs(tile_m=96)
    )
    assert can_implement(
        8,
        8,
        8,
        1,
        "bf16",
        "bf16",
        "bf16",
        (0, 8, 1),
        (0, 8, 1),
        (0, 8, 1),
        spec=EpilogueSpec(activation="mish"),
    )
    assert can_implement(8, 8, 8, 1, "bf16", "bf16", "bf16", (0, 8, 1), (0, 8, 1), (0, 8, 1), a_ptr=3)
    assert can_implement(8, 8, 8, 2, "bf16", "bf16", "bf16", (64, 8, 1), (64, 8, 1), (0, 8, 1))  # bcast C
    assert "cannot analyse" in can_implement(8, 8, 8, 1, "bf16", "bf16", "bf16", None, (0, 8, 1), (0, 8, 1))
