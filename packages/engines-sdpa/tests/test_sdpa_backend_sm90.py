"""The path that serves attention today, on the device: SDPA forward and backward graphs built
through pygraph, lowered and executed on the cuDNN backend's plan, against the float64 reference
(`pygraph_sdpa.reference`) on fresh random inputs with every output poisoned (NaN) first.

Every later engine of the family is compared against this path. Relative errors (Frobenius norm
over the valid rows) must stay at or below 1e-2 in bf16 and 5e-3 in fp16; each case prints its
numbers. Padded cases compare the rows inside each sequence's length (the backend's contract says
nothing of the rows past it).
"""

from __future__ import annotations

import dataclasses

import pytest

import pygraph
from pygraph import data_type as dt

pytestmark = pytest.mark.sm90

torch = pytest.importorskip("torch")

from pygraph_sdpa.reference import sdpa_backward_reference, sdpa_reference  # noqa: E402

TOLERANCE = {"bfloat16": 1e-2, "float16": 5e-3}


@dataclasses.dataclass(frozen=True)
class Case:
    name: str
    b: int = 2
    hq: int = 4
    hkv: int = 4
    s_q: int = 256
    s_kv: int = 256
    d: int = 128
    io: str = "bfloat16"
    causal: bool = False
    bottom_right: bool = False
    window: int = -1  # keys visible left of the diagonal, the diagonal's included (with causal)
    seq_len_q: tuple[int, ...] | None = None
    seq_len_kv: tuple[int, ...] | None = None

    def reference_options(self) -> dict:
        opts = {
            "is_causal": self.causal,
            "causal_bottom_right": self.bottom_right,
            "window_left": self.window,
        }
        if self.seq_len_q is not None:
            opts["seq_len_q"] = torch.tensor(self.seq_len_q)
            opts["seq_len_kv"] = torch.tensor(self.seq_len_kv)
        return opts


CASES = (
    Case("d128"),
    Case("d64-fp16", d=64, io="float16"),
    Case("causal", causal=True),
    Case("causal-bottom-right", s_q=192, s_kv=320, causal=True, bottom_right=True),
    Case("odd-lengths", s_q=131, s_kv=77, d=64),
    Case("odd-causal-top-left", s_q=97, s_kv=203, causal=True),
    Case("window", s_q=300, s_kv=300, causal=True, window=64),
    Case("gqa-8-causal", hq=16, hkv=2, causal=True),
    Case("gqa-8", hq=16, hkv=2, s_q=200, s_kv=200),
    Case("mqa", hq=8, hkv=1, d=64),
    Case("padding", s_q=256, s_kv=256, seq_len_q=(200, 37), seq_len_kv=(256, 100)),
    Case("padding-causal", s_q=160, s_kv=160, causal=True, seq_len_q=(160, 1), seq_len_kv=(160, 90)),
)


def _torch_dtype(name: str):
    return {"bfloat16": torch.bfloat16, "float16": torch.float16}[name]


def _handle():
    cudnn = pytest.importorskip("cudnn")
    return cudnn.create_handle()


def _mask_attrs(case: Case) -> dict:
    attrs = {}
    if case.causal:
        attrs["use_causal_mask_bottom_right" if case.bottom_right else "use_causal_mask"] = True
    if case.window > 0:
        attrs["sliding_window_length"] = case.window
    return attrs


def _padding(g, case: Case) -> tuple[dict, dict]:
    """The graph's padding attributes and ports, and the device tensors bound to them."""
    if case.seq_len_q is None:
        return {}, {}
    lengths_q = torch.tensor(case.seq_len_q, dtype=torch.int32, device="cuda").view(-1, 1, 1, 1)
    lengths_kv = torch.tensor(case.seq_len_kv, dtype=torch.int32, device="cuda").view(-1, 1, 1, 1)
    tq, tkv = g.tensor_like(lengths_q), g.tensor_like(lengths_kv)
    return {"use_padding_mask": True, "seq_len_q": tq, "seq_len_kv": tkv}, {tq: lengths_q, tkv: lengths_kv}


def _run(g, bindings: dict) -> str:
    g.create_execution_plans()
    g.build_plans()
    workspace = torch.empty(max(g.get_workspace_size(), 1), device="cuda", dtype=torch.uint8)
    g.execute(bindings, workspace)
    torch.cuda.synchronize()
    return g.selected_plan.name


def _valid_rows(case: Case, x):
    """x [B, H, S_q, ...] with each batch's rows past its seq_len_q dropped, flattened."""
    if case.seq_len_q is None:
        return x.reshape(-1)
    return torch.cat([x[b, :, : case.seq_len_q[b]].reshape(-1) for b in range(case.b)])


def _valid_keys(case: Case, x):
    """x [B, H, S_kv, ...] with each batch's keys past its seq_len_kv dropped, flattened."""
    if case.seq_len_kv is None:
        return x.reshape(-1)
    return torch.cat([x[b, :, : case.seq_len_kv[b]].reshape(-1) for b in range(case.b)])


def _rel(got, want) -> float:
    got, want = got.double(), want.double()
    finite = torch.isfinite(want)
    if not bool(torch.equal(torch.isfinite(got), finite)):
        return float("inf")
    return float((got[finite] - want[finite]).norm() / want[finite].norm().clamp_min(1e-30))


def _inputs(case: Case, seed: int):
    gen = torch.Generator(device="cuda").manual_seed(seed)
    io = _torch_dtype(case.io)

    def normal(*shape):
        return torch.randn(*shape, generator=gen, device="cuda", dtype=torch.float32).to(io)

    q = normal(case.b, case.hq, case.s_q, case.d)
    k = normal(case.b, case.hkv, case.s_kv, case.d)
    v = normal(case.b, case.hkv, case.s_kv, case.d)
    return q, k, v


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
