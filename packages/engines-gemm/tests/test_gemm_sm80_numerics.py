"""The portable SM80 GEMM (kernels/gemm_sm80.py) against the float64 reference, one test per
`gemm_cases` SM80 case, built for the GPU's own architecture.

The problem goes through the same user-to-kernel argument mapping as the SM90 engine
(`frame.kernel_frame`, `frame.kernel_layout`); only the compiled function differs. A cubin loads
only on its own major architecture, so on an H200 the kernel is built for sm_90 (its A100 target,
sm_80, compiles on the CPU: scripts/kernel_objects.py digests it). Marked ``sm90``, the GPU it is
run on; one case per config family is marked ``memcheck`` too.
"""

from __future__ import annotations

import pytest
from gemm_cases import SM80_CASES, SM80_KNOBS, SM80_MEMCHECK, Case, sm80_key

pytestmark = pytest.mark.sm90


def _params():
    return [
        pytest.param(c, id=c.id, marks=[pytest.mark.memcheck] if c in SM80_MEMCHECK else [])
        for c in SM80_CASES
    ]


@pytest.mark.parametrize("case", _params())
def test_sm80_gemm_matches_the_float64_reference(case: Case):
    import torch
    from gemm_operands import assert_close, operands

    from pygraph_gemm.kernels.compile_cache import get_compiled
    from pygraph_gemm.kernels.config import can_implement
    from pygraph_gemm.kernels.frame import kernel_frame

    torch.manual_seed(0)
    ops = operands(case)
    a, b, c, res, x, vecs = ops.a, ops.b, ops.c, ops.residual, ops.aux, ops.vectors
    st = lambda t: tuple(t.stride()) if t is not None else (0, 0, 0)  # noqa: E731
    assert (st(a), st(b), st(c)) == case.strides()
    why = can_implement(
        case.m, case.n, case.k, case.l, a.dtype, b.dtype, c.dtype, st(a), st(b), st(c),
        a.data_ptr(), b.data_ptr(), c.data_ptr(), case.knobs or SM80_KNOBS, case.spec(),
        st(res) if res is not None else None, st(x) if x is not None else None,
        tuple(v.data_ptr() for v in vecs.values()), res.data_ptr() if res is not None else 0,
        x.data_ptr() if x is not None else 0,
    )  # fmt: skip
    assert why is None, f"{case.id}: can_implement refused: {why}"
    knobs, kepi, lay = sm80_key(case)
    major, minor = torch.cuda.get_device_capability()
    # the compile cache's memory and disk layers (scripts/device/precompile_gemm.py fills the disk one)
    fn = get_compiled(knobs, kepi, lay, f"sm_{major}{minor}", kernel="sm80")
    order, geometry = kernel_frame(lay, knobs.swap_ab)
    ptrs = (
        a.data_ptr(),
        b.data_ptr(),
        c.data_ptr(),
        vecs["bias"].data_ptr() if case.bias else 0,
        vecs["row_scale"].data_ptr() if case.row_scale else 0,
        vecs["col_scale"].data_ptr() if case.col_scale else 0,
        res.data_ptr() if res is not None else 0,
        x.data_ptr() if x is not None else 0,
    )
    geo = geometry(case.m, case.n, case.k, case.l, st(a), st(b), st(c), st(res), st(x))
    fn(*(ptrs[i] for i in order), *geo, torch.cuda.current_stream().cuda_stream)
    torch.cuda.synchronize()
    assert_close(case, ops)
    pad = case.pads()[2]
    if pad:  # a store past N (row-major C) or M (column-major C) lands in the padding
        assert torch.isnan(ops.c_store[:, :, -pad:]).all(), f"{case.id}: a store hit C's row padding"
