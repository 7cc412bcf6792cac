"""The torch op on the CPU: its argument rules (typed errors naming the argument), its graphs (built
through pygraph once per key, planning skipped), and its execution replaced by a stand-in that
computes the float64 reference on the host tensors; the op's outputs and autograd gradients against
the reference's, `torch.compile(fullgraph=True)` and `torch.library.opcheck` over the same path.
The device run of the same op (the backend's plan) is ``test_sdpa_ops_sm90.py``.
"""

from __future__ import annotations

import concurrent.futures

import pytest

torch = pytest.importorskip("torch")

from pygraph.errors import OpInputError  # noqa: E402
from pygraph.op_support import BuiltGraph  # noqa: E402
from pygraph_sdpa import op_arguments, op_graphs  # noqa: E402
from pygraph_sdpa import ops as ops_mod  # noqa: E402
from pygraph_sdpa.ops import sdpa  # noqa: E402
from pygraph_sdpa.reference import sdpa_backward_reference, sdpa_reference  # noqa: E402


class StandIn:
    """Stands in for planning and execution: each graph's (problem, masks, scale) by its id, and the
    reference computed into the bound output tensors."""

    def __init__(self) -> None:
        self.problems: dict[int, tuple] = {}
        self.runs: list[str] = []

    def wrap(self, real):
        def builder(p, masks, scale):
            built = real(p, masks, scale)
            self.problems[id(built.graph)] = (p, masks, scale)
            return built

        return builder

    def execute(self, built, tensors, device) -> None:
        p, masks, scale = self.problems[id(built.graph)]
        opts = {"scale": scale, **masks.reference_options()}
        if p.padded:
            opts |= {
                "seq_len_q": tensors["seq_len_q"].reshape(-1),
                "seq_len_kv": tensors["seq_len_kv"].reshape(-1),
            }
        q, k, v = tensors["q"], tensors["k"], tensors["v"]
        if "dO" in tensors:
            self.runs.append("sdpa_backward")
            # a custom op's body runs below the autograd dispatch key (thread-local state): the
            # reference's autograd runs on another thread
            with concurrent.futures.ThreadPoolExecutor(1) as pool:
                grads = pool.submit(sdpa_backward_reference, q, k, v, tensors["dO"], **opts).result()
            for name, grad in zip(("dQ", "dK", "dV"), grads):
                tensors[name].copy_(grad)
        else:
            self.runs.append("sdpa")
            o, lse = sdpa_reference(q, k, v, return_lse=True, **opts)
            tensors["o"].copy_(o)
            tensors["lse"].copy_(lse)


@pytest.fixture
def stand_in(monkeypatch):
    monkeypatch.setattr(
        op_arguments, "DEVICE_TYPES", ("cuda", "cpu")
    )  # host tensors: the stand-in reads them
    monkeypatch.setattr(op_graphs, "_built", lambda g, ports: BuiltGraph(g, ports, 0))
    recorder = StandIn()
    monkeypatch.setattr(op_graphs, "forward_graph", recorder.wrap(op_graphs.forward_graph))
    monkeypatch.setattr(op_graphs, "backward_graph", recorder.wrap(op_graphs.backward_graph))
    monkeypatch.setattr(ops_mod, "execute", recorder.execute)
    op_graphs.GRAPHS.clear()
    yield recorder
    op_graphs.GRAPHS.clear()


def _inputs(b=2, hq=4, hkv=2, s_q=9, s_kv=13, d=16, dv=None, io=torch.bfloat16, seed=0):
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(b, hq, s_q, d, generator=gen).to(io)
    k = torch.randn(b, hkv, s_kv, d, generator=gen).to(io)
    v = torch.randn(b, hkv, s_kv, dv or d, generator=gen).to(io)
    return q, k, v


def _rel(got, want) -> float:
    return float((got.double() - want.double()).norm() / want.double().norm().clamp_min(1e-30))


CASES = {
    "plain": {},
    "causal": {"is_causal": True},
    "bottom-right": {"is_causal": True, "causal_bottom_right": True},
    "window": {"is_causal": True, "window_left": 4, "window_right": 0},
    "scale": {"scale": 0.3},
}


@pytest.mark.parametrize("name", CASES)
def test_forward_values_equal_the_float64_reference(stand_in, name):
    q, k, v = _inputs()
    o, lse = sdpa(q, k, v, return_lse=True, **CASES[name])
    opts = {k_: v_ for k_, v_ in CASES[name].items() if k_ != "window_right"}
    want_o, want_lse = sdpa_reference(q, k, v, return_lse=True, **opts)
    assert o.dtype == q.dtype and o.shape == (2, 4, 9, 16) and lse.shape == (2, 4, 9, 1)
    assert lse.dtype == torch.float32
    assert _rel(o, want_o) <= 1e-2 and _rel(lse, want_lse) <= 1e-6
    assert stand_in.runs == ["sdpa"]


def test_padding_masks_the_keys_past_each_length(stand_in):
    q, k, v = _inputs(s_q=8, s_kv=8)
    lengths_q = torch.tensor([8, 3], dtype=torch.int32)
    lengths_kv = torch.tensor([5, 8], dtype=torch.int32)
    o = sdpa(q, k, v, seq_len_q=lengths_q, seq_len_kv=lengths_kv)
    want = sdpa_reference(q, k, v, seq_len_q=lengths_q, seq_len_kv=lengths_kv)
    assert _rel(o[0], want[0]) <= 1e-2 and _rel(o[1, :, :3], want[1, :, :3]) <= 1e-2
    (key,) = op_graphs.GRAPHS.keys()
    assert key[1].padded


@pytest.mark.parametrize("name", ["plain", "causal", "window"])
def test_autograd_gradients_equal_the_float64_reference(stand_in, name):
    q, k, v = (t.requires_grad_(True) for t in _inputs(seed=1))
    d_o = torch.randn(2, 4, 9, 16, generator=torch.Generator().manual_seed(2)).to(q.dtype)
    sdpa(q, k, v, **CASES[name]).backward(d_o)
    opts = {k_: v_ for k_, v_ in CASES[name].items() if k_ != "window_right"}
    want = sdpa_backward_reference(q, k, v, d_o, **opts)
    for got, ref in zip((q.grad, k.grad, v.grad), want):
        assert got.dtype == q.dtype and _rel(got, ref) <= 1e-2
    assert stand_in.runs == ["sdpa", "sdpa_backward"]


def test_one_graph_per_key_reused_across_calls(stand_in):
    q, k, v = _inputs()
    sdpa(q, k, v)
    sdpa(*_inputs(seed=3))
    assert op_graphs.GRAPHS.builds == 1
    sdpa(q, k, v, is_causal=True)
    sdpa(*_inputs(s_q=10))
    assert op_graphs.GRAPHS.builds == 3


def test_a_gradient_through_lse_is_refused_naming_it(stand_in):
    q, k, v = (t.requires_grad_(True) for t in _inputs())
    o, lse = sdpa(q, k, v, return_lse=True)
    with pytest.raises(OpInputError, match=r"pygraph_sdpa.sdpa\(\): a gradient reached lse"):
        (o.float().sum() + lse.sum()).backward()


def test_empty_inputs_run_no_graph(stand_in):
    q, k, v = _inputs(s_q=0)
    o, lse = sdpa(q, k, v, return_lse=True)
    assert o.shape == (2, 4, 0, 16) and lse.shape == (2, 4, 0, 1) and stand_in.runs == []


def test_torch_compile_fullgraph_traces_the_op_and_its_gradient(stand_in):
    q, k, v = (t.requires_grad_(True) for t in _inputs(seed=4))

    def step(q, k, v):
        return sdpa(q, k, v, is_causal=True).float().square().mean()

    torch.compile(step, fullgraph=True, backend="aot_eager")(q, k, v).backward()
    grads = [t.grad.clone() for t in (q, k, v)]
    for t in (q, k, v):
        t.grad = None
    step(q, k, v).backward()
    for got, want in zip(grads, (q.grad, k.grad, v.grad)):
        assert _rel(got, want) <= 1e-6


def test_opcheck(stand_in):
    q, k, v = _inputs(seed=5)
    torch.library.opcheck(torch.ops.pygraph_sdpa.sdpa_forward, (q, k, v, 0.25, True, False, -1, None, None))


BAD = [
    ({"query": torch.zeros(2, 9, 16)}, r"query must be \[B, H, S, D\] \(rank 4\), got shape \[2, 9, 16\]"),
    (
        {
            "key": torch.zeros(2, 3, 13, 16, dtype=torch.bfloat16),
            "value": torch.zeros(2, 3, 13, 16, dtype=torch.bfloat16),
        },
        r"key/value heads H_kv = 3 must divide query heads H = 4",
    ),
    (
        {"value": torch.zeros(2, 2, 13, 16, dtype=torch.float16)},
        r"value must be query's dtype torch.bfloat16",
    ),
    ({"window_right": 3}, r"window_right=3: the op serves -1"),
    ({"causal_bottom_right": True}, r"causal_bottom_right aligns the causal diagonal"),
    ({"window_left": 0}, r"window_left counts the visible keys"),
    ({"window_left": 4}, r"window_left=4 is a sliding window behind the causal diagonal"),
    ({"cu_seqlens_q": torch.zeros(3, dtype=torch.int32)}, r"ragged \(THD\) inputs"),
    ({"seq_len_q": torch.ones(2, dtype=torch.int32)}, r"padding takes both seq_len_q and seq_len_kv"),
    ({"seq_len_q": torch.ones(2), "seq_len_kv": torch.ones(2)}, r"seq_len_q must be torch.int32"),
    ({"scale": float("nan")}, r"scale must be a finite float or None"),
    ({"is_causal": 1}, r"is_causal must be a bool, got int 1"),
    ({"return_lse": "yes"}, r"return_lse must be a bool"),
]


@pytest.mark.parametrize(
    ("change", "message"), BAD, ids=[f"{i}-{m.split()[0]}" for i, (_, m) in enumerate(BAD)]
)
def test_a_bad_argument_raises_a_typed_error_naming_it(stand_in, change, message):
    q, k, v = _inputs()
    args = {"query": q, "key": k, "value": v, **change}
    with pytest.raises(OpInputError, match=r"pygraph_sdpa.sdpa\(\): " + message):
        sdpa(args.pop("query"), args.pop("key"), args.pop("value"), **args)
    assert stand_in.runs == [] and op_graphs.GRAPHS.builds == 0


def test_a_host_tensor_is_refused_before_anything_runs():
    q, k, v = _inputs()
    with pytest.raises(OpInputError, match=r"query is on cpu: the op runs on cuda devices"):
        sdpa(q, k, v)
