"""The SM90 GEMM (`torch_gemm.gemm`) against the float64 reference, one test per `gemm_cases` case.

Needs an SM90 GPU (marked ``sm90``; skipped with the reason elsewhere). One case per config family
is marked ``memcheck`` too, for compute-sanitizer (scripts/device/run.sh gemm memcheck)::

    python -m pytest packages/engines-gemm/tests/test_gemm_sm90_numerics.py -k 128x256c21z8g2
"""

from __future__ import annotations

import pytest
from gemm_cases import SM90_CASES, SM90_MEMCHECK, Case

pytestmark = pytest.mark.sm90


def _params():
    return [
        pytest.param(c, id=c.id, marks=[pytest.mark.memcheck] if c in SM90_MEMCHECK else [])
        for c in SM90_CASES
    ]


@pytest.mark.parametrize("case", _params())
def test_sm90_gemm_matches_the_float64_reference(case: Case):
    import torch
    from gemm_operands import assert_close, operands

    from pygraph_gemm.kernels.torch_gemm import gemm

    torch.manual_seed(0)
    ops = operands(case)
    a, b, c, aux, residual = ops.a, ops.b, ops.c, ops.aux, ops.residual
    if case.l == 1:  # unbatched problems go through the 2-D API
        a, b, c = a[0], b[0], c[0]
        aux = aux[0] if aux is not None else None
        residual = residual[0] if residual is not None else None
    for _ in range(case.reps):  # split-K: later launches reuse the semaphores the first one left zeroed
        if case.reps > 1:
            c.fill_(float("nan"))
            if aux is not None:
                aux.fill_(float("nan"))
        gemm(a, b, c, activation=case.act, aux=aux, knobs=case.knobs, residual=residual, **ops.vectors)
    torch.cuda.synchronize()
    assert_close(case, ops)
