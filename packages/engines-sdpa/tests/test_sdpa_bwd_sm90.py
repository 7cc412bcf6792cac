"""sdpa_bwd_sm90 on the device: the CuTe DSL backward (dQ, dK, dV) against the float64 reference's
autograd and against the backend's plan of the same graph, on fresh random inputs (O and the stats
the reference's, dO random, 0 past each sequence) with every output poisoned (NaN) first.

The table is the backend path's plus the forward suite's kernel cases (`test_sdpa_fwd_sm90`):
many query blocks under the causal bound, more keys than queries with a bottom-right window, more
queries than keys (rows that see no key: lse -inf), fp16 at head dim 128, padding with a window.
Relative errors at most 1e-2 in bf16 and 5e-3 in fp16, printed per case. The hook ranks the
backend first, so each test selects the engine's plan by name.
"""

from __future__ import annotations

import pytest

import pygraph
from pygraph import data_type as dt

pytestmark = pytest.mark.sm90

torch = pytest.importorskip("torch")

from sdpa_cases import (  # noqa: E402
    CASES,
    KERNEL_CASES,
    TOLERANCE,
    Case,
    _handle,
    _inputs,
    _mask_attrs,
    _padding,
    _rel,
    _valid_keys,
    _valid_rows,
    _where,
)

from pygraph_sdpa.reference import sdpa_backward_reference, sdpa_reference  # noqa: E402

ENGINE = "sdpa_bwd_sm90"


def _backward(case: Case, tensors: tuple, plan_engine: str | None) -> tuple[dict, str]:
    """({dQ, dK, dV}, plan name) of an sdpa_backward graph run on the first plan whose name starts
    with ``plan_engine`` (None: the planner's first)."""
    q, k, v, o, d_o, stats = tensors
    grads = {name: torch.full_like(x, float("nan")) for name, x in (("dQ", q), ("dK", k), ("dV", v))}
    g = pygraph.Graph(f"sdpa-bwd-{case.name}", q.dtype, dt.FLOAT, dt.FLOAT, handle=_handle())
    tq, tk, tv, to, tdo, ts = (g.tensor_like(x) for x in tensors)
    padding, bound = _padding(g, case)
    outs = g.sdpa_backward(tq, tk, tv, to, tdo, ts, attn_scale=case.d**-0.5, **_mask_attrs(case), **padding)
    bindings = {tq: q, tk: k, tv: v, to: o, tdo: d_o, ts: stats, **bound}
    for name, port in zip(("dQ", "dK", "dV"), outs):
        port.set_output(True).set_dim(list(grads[name].shape)).set_stride(list(grads[name].stride()))
        port.set_data_type(q.dtype)
        bindings[port] = grads[name]
    g.create_execution_plans()
    if plan_engine is not None:
        names = [g.get_plan_name_at_index(i) for i in range(g.get_execution_plan_count())]
        ours = [i for i, n in enumerate(names) if n.startswith(plan_engine)]
        assert ours, f"{plan_engine} offers no plan for {case.name}: {g.decline_reasons()}"
        g.select_plan(ours[0])
    g.build_plans()
    workspace = torch.empty(max(g.get_workspace_size(), 1) + 256, device="cuda", dtype=torch.uint8)
    workspace = workspace[(-workspace.data_ptr()) % 256 :]
    g.execute(bindings, workspace)
    torch.cuda.synchronize()
    return grads, g.selected_plan.name


@pytest.mark.parametrize("deterministic", [0, 1], ids=["atomic-dq", "deterministic"])
@pytest.mark.parametrize("case", CASES + KERNEL_CASES, ids=[c.name for c in CASES + KERNEL_CASES])
def test_the_backward_matches_the_reference_and_the_backend(case: Case, deterministic: int) -> None:
    q, k, v = _inputs(case, seed=12)
    scale = case.d**-0.5
    opts = case.reference_options()
    want_o, want_lse = sdpa_reference(q, k, v, scale=scale, return_lse=True, **opts)
    gen = torch.Generator(device="cuda").manual_seed(13)
    d_o = torch.randn(q.shape, generator=gen, device="cuda").to(q.dtype)
    if case.seq_len_q is not None:  # rows past a sequence carry no gradient
        for b in range(case.b):
            d_o[b, :, case.seq_len_q[b] :] = 0
    tensors = (q, k, v, want_o.to(q.dtype), d_o, want_lse.float())
    grads, plan = _backward(case, tensors, f"{ENGINE}[DETERMINISTIC={deterministic}")
    want = dict(zip(("dQ", "dK", "dV"), sdpa_backward_reference(q, k, v, d_o, scale=scale, **opts)))

    def errors_of(got: dict, ref: dict, tag: str = "") -> dict:
        return {
            f"dQ{tag}": _rel(_valid_rows(case, got["dQ"]), _valid_rows(case, ref["dQ"])),
            f"dK{tag}": _rel(_valid_keys(case, got["dK"]), _valid_keys(case, ref["dK"])),
            f"dV{tag}": _rel(_valid_keys(case, got["dV"]), _valid_keys(case, ref["dV"])),
        }

    errors = errors_of(grads, want)
    if deterministic:  # bitwise reproducible: a second run gives the same bits
        again, _ = _backward(case, tensors, f"{ENGINE}[DETERMINISTIC=1")
        assert all(bool(torch.equal(again[n], grads[n])) for n in grads)
    if case in CASES:  # the backend path serves these (its own test): ours against its plan too
        errors |= errors_of(grads, _backward(case, tensors, None)[0], "_vs_backend")
    print(f"{ENGINE}-{case.name}: {{plan: {plan!r}, rel: {errors}}}")
    assert plan.startswith(ENGINE)
    for b in range(case.b if case.seq_len_q else 0):  # past a sequence: zero gradients (the reference's)
        assert bool((grads["dQ"][b, :, case.seq_len_q[b] :] == 0).all()), b
        assert all(bool((grads[n][b, :, case.seq_len_kv[b] :] == 0).all()) for n in ("dK", "dV")), b
    assert all(err <= TOLERANCE[case.io] for err in errors.values()), (
        errors,
        {n: _where(grads[n], want[n].to(grads[n].dtype)) for n in grads},
    )


PADDED = (
    next(c for c in CASES if c.name == "padding"),  # batch 0: every key seen, 56 query rows past its length
    next(c for c in KERNEL_CASES if c.name == "padding-window"),
)


@pytest.mark.parametrize("deterministic", [0, 1], ids=["atomic-dq", "deterministic"])
@pytest.mark.parametrize("case", PADDED, ids=[c.name for c in PADDED])
def test_rows_past_a_sequence_reach_no_gradient_whatever_they_hold(case: Case, deterministic: int) -> None:
    """Rows past seq_len_q are unspecified: dO random there and the stats as the forward writes them
    (-inf). A query block that the masks and the key length leave whole but the query length cuts
    must still test each row (a row's P there is not computed, it is chosen 0)."""
    q, k, v = _inputs(case, seed=21)
    scale = case.d**-0.5
    opts = case.reference_options()
    want_o, want_lse = sdpa_reference(q, k, v, scale=scale, return_lse=True, **opts)
    gen = torch.Generator(device="cuda").manual_seed(22)
    d_o = torch.randn(q.shape, generator=gen, device="cuda").to(q.dtype)
    stats, o = want_lse.float().clone(), want_o.to(q.dtype).clone()
    clean = d_o.clone()
    for b in range(case.b):
        stats[b, :, case.seq_len_q[b] :] = float("-inf")
        o[b, :, case.seq_len_q[b] :] = 0
        clean[b, :, case.seq_len_q[b] :] = 0
    grads, plan = _backward(case, (q, k, v, o, d_o, stats), f"{ENGINE}[DETERMINISTIC={deterministic}")
    want = dict(zip(("dQ", "dK", "dV"), sdpa_backward_reference(q, k, v, clean, scale=scale, **opts)))
    errors = {
        "dQ": _rel(_valid_rows(case, grads["dQ"]), _valid_rows(case, want["dQ"])),
        "dK": _rel(_valid_keys(case, grads["dK"]), _valid_keys(case, want["dK"])),
        "dV": _rel(_valid_keys(case, grads["dV"]), _valid_keys(case, want["dV"])),
    }
    print(f"{ENGINE}-unspecified-rows-{case.name}: {{plan: {plan!r}, rel: {errors}}}")
    assert plan.startswith(ENGINE)
    assert all(err <= TOLERANCE[case.io] for err in errors.values()), errors
