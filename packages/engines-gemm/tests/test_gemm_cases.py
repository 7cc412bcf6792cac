"""The correctness cases (gemm_cases.py) on the CPU: readable, distinct ids; the operands the
numerics tests build are stored as `Case.strides` says; `compile_keys` names the kernels the tests
compile (the SM90 key checked against what `torch_gemm.gemm` hands `Plan`); every case is one the
kernels accept."""

from __future__ import annotations

import dataclasses

import gemm_cases
import pytest
from gemm_cases import SM80_CASES, SM80_KNOBS, SM80_MEMCHECK, SM90_CASES, SM90_MEMCHECK, Case

from pygraph_gemm.kernels.config import GemmKnobs, KernelEpilogue, can_implement
from pygraph_gemm.kernels.frame import kernel_layout

torch = pytest.importorskip("torch")


def test_ids_are_distinct_and_read_back_the_problem():
    for cases in (SM90_CASES, SM80_CASES):
        ids = [c.id for c in cases]
        assert len(set(ids)) == len(ids)
    case = Case(
        m=1000, n=1048, k=520, bias=True, act="gelu", knobs=GemmKnobs(tile_m=128, tile_n=256, cga_m=2)
    )
    assert case.id == "bf16-1000x1048x520-bias-gelu-128x256c21"
    assert Case(m=8, n=8, k=8, l=3, out="fp32", b_col=True, reps=2, knobs=GemmKnobs()).id == (
        "bf16>fp32-8x8x8-batch3-Bcol-128x256c11-2launches"
    )


def test_the_memcheck_cases_are_cases_of_their_suite():
    assert SM90_MEMCHECK <= set(SM90_CASES) and SM80_MEMCHECK <= set(SM80_CASES)
    # a family's first case, so families that share one share its run under memcheck
    assert 0 < len(SM90_MEMCHECK) <= len(gemm_cases._SM90_FAMILIES)
    assert len(SM80_MEMCHECK) == len(gemm_cases._SM80_FAMILIES)


@pytest.mark.parametrize("case", SM90_CASES + SM80_CASES, ids=lambda c: c.id)
def test_the_operands_are_stored_as_the_case_says(case):
    from gemm_operands import operands

    ops = operands(case, device="meta")
    a, b, c = case.strides()
    assert ops.a.stride() == a and ops.b.stride() == b and ops.c.stride() == c
    assert ops.a.shape == (case.l, case.m, case.k) and ops.c.shape == (case.l, case.m, case.n)


class _Planned(Exception):
    """What `torch_gemm.gemm` handed `Plan`, raised before anything launches."""


def _plan_recorder(*args, **kwargs):
    raise _Planned(args)


@pytest.mark.parametrize("case", SM90_CASES, ids=lambda c: c.id)
def test_the_sm90_compile_key_is_the_one_torch_gemm_builds(case, monkeypatch):
    from gemm_operands import operands

    from pygraph_gemm.kernels import torch_gemm

    monkeypatch.setattr(torch_gemm, "Plan", _plan_recorder)
    ops = operands(case, device="meta")
    a, b, c, aux, res = ops.a, ops.b, ops.c, ops.aux, ops.residual
    if case.l == 1:
        a, b, c = a[0], b[0], c[0]
        aux = aux[0] if aux is not None else None
        res = res[0] if res is not None else None
    with pytest.raises(_Planned) as planned:  # a ValueError here: can_implement refused the case
        torch_gemm.gemm(a, b, c, activation=case.act, aux=aux, knobs=case.knobs, residual=res, **ops.vectors)
    kn, spec, ab, cd, a_st, b_st, c_st, m, n, k, l = planned.value.args[0]
    got = (
        kn,
        KernelEpilogue.from_spec(spec, kn.swap_ab),
        kernel_layout(kn.swap_ab, ab, cd, a_st, b_st, c_st, m, n, k, l),
    )
    assert got == gemm_cases.sm90_key(case)


@pytest.mark.parametrize("case", SM80_CASES, ids=lambda c: c.id)
def test_every_sm80_case_is_one_the_portable_kernel_accepts(case):
    from pygraph_gemm.kernels.gemm_sm80 import can_implement_sm80

    a, b, c = case.strides()
    res = (case.m * case.n, case.n, 1) if case.residual else None
    kn = case.knobs or SM80_KNOBS
    why = can_implement(
        case.m, case.n, case.k, case.l, case.dt, case.dt, case.out, a, b, c, knobs=kn, spec=case.spec(),
        residual_strides=res, aux_strides=c if case.aux else None,
    )  # fmt: skip
    assert why is None
    knobs, kepi, lay = gemm_cases.sm80_key(case)
    assert can_implement_sm80(knobs, lay, kepi) is None


def test_compile_keys_name_every_case_of_both_suites():
    keys = list(gemm_cases.compile_keys())
    assert len(keys) == len(SM90_CASES) + len(SM80_CASES)
    assert {k[:2] for k in keys} == {("sm90", "sm_90a"), ("sm80", "sm_80")}
    assert all(dataclasses.is_dataclass(part) for key in keys for part in key[2:])
