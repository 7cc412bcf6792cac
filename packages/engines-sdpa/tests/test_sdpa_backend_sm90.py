"""The path that serves attention today, on the device: SDPA forward and backward graphs built
through pygraph, lowered and executed on the cuDNN backend's plan, against the float64 reference
(`pygraph_sdpa.reference`) on fresh random inputs with every output poisoned (NaN) first.

Every later engine of the family is compared against this path. Relative errors (Frobenius norm
over the valid rows) must stay at or below 1e-2 in bf16 and 5e-3 in fp16; each case prints its
numbers. Padded cases compare the rows inside each sequence's length (the backend's contract says
nothing of the rows past it).
"""

from __future__ import annotations

import pytest

import pygraph
from pygraph import data_type as dt

pytestmark = pytest.mark.sm90

torch = pytest.importorskip("torch")

from sdpa_cases import (  # noqa: E402
    CASES,
    TOLERANCE,
    Case,
    _handle,
    _inputs,
    _mask_attrs,
    _padding,
    _rel,
    _run,
    _valid_keys,
    _valid_rows,
)

from pygraph_sdpa.reference import sdpa_backward_reference, sdpa_reference  # noqa: E402


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_the_backend_serves_the_forward(case: Case) -> None:
    q, k, v = _inputs(case, seed=1)
    scale = case.d**-0.5
    o = torch.full_like(q, float("nan"))
    stats = torch.full((case.b, case.hq, case.s_q, 1), float("nan"), device="cuda", dtype=torch.float32)
    g = pygraph.Graph(f"sdpa-{case.name}", q.dtype, dt.FLOAT, dt.FLOAT, handle=_handle())
    tq, tk, tv = g.tensor_like(q), g.tensor_like(k), g.tensor_like(v)
    padding, bound = _padding(g, case)
    to, tstats = g.sdpa(tq, tk, tv, generate_stats=True, attn_scale=scale, **_mask_attrs(case), **padding)
    to.set_output(True).set_dim(list(o.shape)).set_stride(list(o.stride())).set_data_type(q.dtype)
    tstats.set_output(True).set_data_type(dt.FLOAT)
    plan = _run(g, {tq: q, tk: k, tv: v, to: o, tstats: stats, **bound})
    want_o, want_lse = sdpa_reference(q, k, v, scale=scale, return_lse=True, **case.reference_options())
    errors = {
        "o": _rel(_valid_rows(case, o), _valid_rows(case, want_o)),
        "stats": _rel(_valid_rows(case, stats), _valid_rows(case, want_lse)),
    }
    print(f"sdpa-fwd-{case.name}: {{plan: {plan!r}, rel: {errors}}}")
    assert all(err <= TOLERANCE[case.io] for err in errors.values()), errors


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_the_backend_serves_the_backward(case: Case) -> None:
    q, k, v = _inputs(case, seed=2)
    scale = case.d**-0.5
    opts = case.reference_options()
    want_o, want_lse = sdpa_reference(q, k, v, scale=scale, return_lse=True, **opts)
    gen = torch.Generator(device="cuda").manual_seed(3)
    d_o = torch.randn(q.shape, generator=gen, device="cuda").to(q.dtype)
    if case.seq_len_q is not None:  # rows past a sequence carry no gradient
        for b in range(case.b):
            d_o[b, :, case.seq_len_q[b] :] = 0
    o = want_o.to(q.dtype)
    stats = want_lse.float()
    grads = {name: torch.full_like(x, float("nan")) for name, x in (("dQ", q), ("dK", k), ("dV", v))}
    g = pygraph.Graph(f"sdpa-bwd-{case.name}", q.dtype, dt.FLOAT, dt.FLOAT, handle=_handle())
    tq, tk, tv, to, tdo, ts = (g.tensor_like(x) for x in (q, k, v, o, d_o, stats))
    padding, bound = _padding(g, case)
    outs = g.sdpa_backward(tq, tk, tv, to, tdo, ts, attn_scale=scale, **_mask_attrs(case), **padding)
    bindings = {tq: q, tk: k, tv: v, to: o, tdo: d_o, ts: stats, **bound}
    for name, port in zip(("dQ", "dK", "dV"), outs):
        port.set_output(True).set_dim(list(grads[name].shape)).set_stride(list(grads[name].stride()))
        port.set_data_type(q.dtype)
        bindings[port] = grads[name]
    plan = _run(g, bindings)
    want = dict(zip(("dQ", "dK", "dV"), sdpa_backward_reference(q, k, v, d_o, scale=scale, **opts)))
    errors = {
        "dQ": _rel(_valid_rows(case, grads["dQ"]), _valid_rows(case, want["dQ"])),
        "dK": _rel(_valid_keys(case, grads["dK"]), _valid_keys(case, want["dK"])),
        "dV": _rel(_valid_keys(case, grads["dV"]), _valid_keys(case, want["dV"])),
    }
    print(f"sdpa-bwd-{case.name}: {{plan: {plan!r}, rel: {errors}}}")
    assert all(err <= TOLERANCE[case.io] for err in errors.values()), errors
