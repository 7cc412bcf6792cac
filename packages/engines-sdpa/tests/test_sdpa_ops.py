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
        self.ragged_ports: list[list[str]] = []

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
        if p.ragged:  # the prefix sums back from the ragged offsets (elements: tokens times H D)
            self.ragged_ports.append(sorted(n for n in tensors if n.endswith("_offset")))
            cu_q = (tensors["q_offset"].reshape(-1) // (q.shape[1] * q.shape[2])).to(torch.int32)
            cu_kv = (tensors["k_offset"].reshape(-1) // (k.shape[1] * k.shape[2])).to(torch.int32)
            assert torch.equal(tensors["seq_len_q"].reshape(-1), cu_q[1:] - cu_q[:-1])
            opts |= {"cu_seqlens_q": cu_q, "cu_seqlens_kv": cu_kv}
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
            if p.ragged:  # the graph's stats per sequence, [N, H, S, 1] (rows past a length: -inf here)
                stats = tensors["lse"].fill_(float("-inf"))
                cu = opts["cu_seqlens_q"].tolist()
                for n in range(len(cu) - 1):
                    stats[n, :, : cu[n + 1] - cu[n]] = lse[cu[n] : cu[n + 1]].transpose(0, 1)
            else:
                tensors["lse"].copy_(lse)


@pytest.fixture
def stand_in(monkeypatch):
    monkeypatch.setattr(
        op_arguments, "DEVICE_TYPES", ("cuda", "cpu")
    )  # host tensors: the stand-in reads them
    monkeypatch.setattr(op_graphs, "_built", lambda g, ports, device: BuiltGraph(g, ports, 0))
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
    ({"cu_seqlens_q": torch.zeros(3, dtype=torch.int32)}, r"ragged \(THD\) inputs take both cu_seqlens_q"),
    ({"seq_len_q": torch.ones(2, dtype=torch.int32)}, r"padding takes both seq_len_q and seq_len_kv"),
    ({"seq_len_q": torch.ones(2), "seq_len_kv": torch.ones(2)}, r"seq_len_q must be torch.int32"),
    ({"scale": float("nan")}, r"scale must be a finite float or None"),
    ({"is_causal": 1}, r"is_causal must be a bool, got int 1"),
    ({"return_lse": "yes"}, r"return_lse must be a bool"),
    # a zero head dim is refused naming the op (no empty problem: a row's scores would all be 0)
    (
        {
            "query": torch.zeros(2, 4, 9, 0, dtype=torch.bfloat16),
            "key": torch.zeros(2, 2, 13, 0, dtype=torch.bfloat16),
        },
        r"query must have a head dim D >= 1, got shape \[2, 4, 9, 0\]",
    ),
    (
        {"value": torch.zeros(2, 2, 13, 0, dtype=torch.bfloat16)},
        r"value must have a head dim D_v >= 1, got shape \[2, 2, 13, 0\]",
    ),
    ({"is_causal": True, "window_left": 2**70}, r"window_left=1180591620717411303424 is beyond int64"),
    ({"scale": 2**1100}, r"scale must be a finite float or None"),
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


# --- ragged (THD) ---------------------------------------------------------------------------------


def _thd(lengths_q, lengths_kv, hq=4, hkv=2, d=16, seed=6):
    gen = torch.Generator().manual_seed(seed)
    t_q, t_kv = sum(lengths_q), sum(lengths_kv)
    q = torch.randn(t_q, hq, d, generator=gen).to(torch.bfloat16)
    k, v = (torch.randn(t_kv, hkv, d, generator=gen).to(torch.bfloat16) for _ in range(2))
    cu = [
        torch.tensor([0, *lengths], dtype=torch.int32).cumsum(0, dtype=torch.int32)
        for lengths in (lengths_q, lengths_kv)
    ]
    ragged = {"cu_seqlens_q": cu[0], "cu_seqlens_kv": cu[1]}
    return q, k, v, ragged, {"max_seqlen_q": max(lengths_q), "max_seqlen_kv": max(lengths_kv)}


# sequences of length 0 and 1 among them; more keys than queries in one
RAGGED = {
    "plain": {},
    "causal": {"is_causal": True},
    "bottom-right": {"is_causal": True, "causal_bottom_right": True},
}


@pytest.mark.parametrize("name", RAGGED)
def test_ragged_forward_and_lse_equal_the_float64_reference(stand_in, name):
    q, k, v, cu, longest = _thd([5, 0, 1, 9], [7, 3, 1, 9])
    o, lse = sdpa(q, k, v, return_lse=True, **cu, **longest, **RAGGED[name])
    want_o, want_lse = sdpa_reference(q, k, v, return_lse=True, **cu, **RAGGED[name])
    assert o.shape == (15, 4, 16) and lse.shape == (15, 4, 1) and lse.dtype == torch.float32
    assert _rel(o, want_o) <= 1e-2 and _rel(lse, want_lse) <= 1e-6
    # every THD tensor carries its ragged offsets into the graph
    assert stand_in.ragged_ports == [["k_offset", "o_offset", "q_offset", "v_offset"]]
    (key,) = op_graphs.GRAPHS.keys()
    assert key[1].ragged and (key[1].batch, key[1].seq_q, key[1].seq_kv) == (4, 64, 64)


def test_ragged_gradients_equal_the_float64_reference(stand_in):
    q, k, v, cu, longest = _thd([5, 0, 1, 9], [7, 3, 1, 9], seed=7)
    q, k, v = (t.requires_grad_(True) for t in (q, k, v))
    d_o = torch.randn(15, 4, 16, generator=torch.Generator().manual_seed(8)).to(q.dtype)
    sdpa(q, k, v, is_causal=True, **cu, **longest).backward(d_o)
    want = sdpa_backward_reference(q, k, v, d_o, is_causal=True, **cu)
    for got, ref in zip((q.grad, k.grad, v.grad), want):
        assert got.shape == ref.shape and _rel(got, ref) <= 1e-2
    assert stand_in.runs == ["sdpa", "sdpa_backward"]
    thd = ("q", "k", "v", "o", "dO", "dQ", "dK", "dV")
    assert stand_in.ragged_ports[1] == sorted(f"{name}_offset" for name in thd)


def test_ragged_calls_share_a_graph_per_bucket_of_their_longest_sequences(stand_in):
    sdpa(*_thd([5, 3], [5, 3])[:3], **_thd([5, 3], [5, 3])[3], **_thd([5, 3], [5, 3])[4])
    q, k, v, cu, longest = _thd([40, 20], [60, 2])  # other tokens, the same buckets (64)
    sdpa(q, k, v, **cu, **longest)
    assert op_graphs.GRAPHS.builds == 1
    q, k, v, cu, longest = _thd([65], [65])
    sdpa(q, k, v, **cu, **longest)
    assert op_graphs.GRAPHS.builds == 2


def test_ragged_traces_under_torch_compile(stand_in):
    q, k, v, cu, longest = _thd([5, 1, 9], [7, 1, 9], seed=9)
    q, k, v = (t.requires_grad_(True) for t in (q, k, v))

    def step(q, k, v):
        o, lse = sdpa(q, k, v, is_causal=True, return_lse=True, **cu, **longest)
        return o.float().square().mean() + 0 * lse.detach().sum()

    torch.compile(step, fullgraph=True, backend="aot_eager")(q, k, v).backward()
    grads = [t.grad.clone() for t in (q, k, v)]
    for t in (q, k, v):
        t.grad = None
    step(q, k, v).backward()
    for got, want in zip(grads, (q.grad, k.grad, v.grad)):
        assert _rel(got, want) <= 1e-6


def test_ragged_opcheck(stand_in):
    q, k, v, cu, _ = _thd([5, 0, 9], [7, 3, 9], seed=10)
    args = (q, k, v, 0.25, True, False, -1, None, None, cu["cu_seqlens_q"], cu["cu_seqlens_kv"], 9, 9)
    torch.library.opcheck(torch.ops.pygraph_sdpa.sdpa_forward, args)


RAGGED_BAD = [
    ({"max_seqlen_q": 0}, r"max_seqlen_q=0: a ragged call gives its longest sequence's length"),
    ({"max_seqlen_kv": 99}, r"max_seqlen_kv=99 exceeds key's 19 tokens"),
    ({"cu_seqlens_q": torch.tensor([0, 5, 14], dtype=torch.int64)}, r"cu_seqlens_q must be torch.int32"),
    (
        {"cu_seqlens_kv": torch.tensor([0, 19], dtype=torch.int32)},
        r"cu_seqlens_q has 3 entries and cu_seqlens_kv 2",
    ),
    (
        {"seq_len_q": torch.ones(2, dtype=torch.int32)},
        r"ragged \(THD\) inputs take their lengths from cu_seqlens",
    ),
    (
        {"query": torch.zeros(1, 14, 4, 16, dtype=torch.bfloat16)},
        r"query must be \[T, H, D\] \(THD, with cu_seqlens\)",
    ),
    ({"max_seqlen_q": True}, r"max_seqlen_q must be an int, got bool True"),
    (
        {
            "query": torch.zeros(14, 4, 0, dtype=torch.bfloat16),
            "key": torch.zeros(19, 2, 0, dtype=torch.bfloat16),
        },
        r"query must have a head dim D >= 1, got shape \[14, 4, 0\]",
    ),
]


@pytest.mark.parametrize(("change", "message"), RAGGED_BAD, ids=[m for _, m in RAGGED_BAD])
def test_a_bad_ragged_argument_raises_naming_it(stand_in, change, message):
    q, k, v, cu, longest = _thd([5, 9], [10, 9])
    args = {"query": q, "key": k, "value": v, **cu, **longest, **change}
    with pytest.raises(OpInputError, match=r"pygraph_sdpa.sdpa\(\): " + message):
        sdpa(**args)
    assert stand_in.runs == []


# --- CUDA-graph capture: a first call (a graph build) inside a capture is refused ---------------------


def test_a_first_call_inside_a_capture_is_refused_and_a_warmed_one_is_served(stand_in, monkeypatch):
    from pygraph import op_support
    from pygraph.errors import StreamCaptureError

    q, k, v = (t.requires_grad_(True) for t in _inputs())
    monkeypatch.setattr(op_support, "capturing", lambda device: True)  # as inside torch.cuda.graph()
    with pytest.raises(
        StreamCaptureError, match=r"^pygraph_sdpa\.sdpa\(\): the first call of graph \('sdpa', "
    ):
        sdpa(q, k, v)
    assert stand_in.runs == [] and op_graphs.GRAPHS.builds == 0
    monkeypatch.setattr(op_support, "capturing", lambda device: False)
    d_o = torch.randn(q.shape).to(q.dtype)
    sdpa(q, k, v).backward(d_o)  # the eager warm-up: forward and backward graphs built
    grads = [t.grad.clone() for t in (q, k, v)]
    for t in (q, k, v):
        t.grad = None
    monkeypatch.setattr(op_support, "capturing", lambda device: True)
    sdpa(q, k, v).backward(d_o)  # served by the graphs built eagerly: nothing is built in the capture
    assert op_graphs.GRAPHS.builds == 2
    assert all(torch.equal(t.grad, g) for t, g in zip((q, k, v), grads))
    x = _inputs(s_q=10)[0].requires_grad_(True)
    monkeypatch.setattr(op_support, "capturing", lambda device: False)
    o = sdpa(x, k, v)  # a new key's forward, eagerly
    monkeypatch.setattr(op_support, "capturing", lambda device: True)
    with pytest.raises(StreamCaptureError, match=r"'sdpa_backward'"):  # its backward never ran: refused
        o.backward(torch.randn(o.shape).to(o.dtype))


# --- prepared calls: a repeated signature skips the checks, a changed one is checked again ------------


@pytest.fixture
def checks(monkeypatch):
    """Counts the op's argument checks (check_forward) on its calls."""
    seen = []
    real = ops_mod.check_forward

    def counted(*args):
        seen.append(args)
        return real(*args)

    monkeypatch.setattr(ops_mod, "check_forward", counted)
    return seen


@pytest.mark.parametrize("grad", [False, True], ids=["direct", "through the dispatcher"])
def test_a_repeated_call_is_served_prepared_with_the_checked_calls_values(stand_in, checks, grad):
    q, k, v = (t.requires_grad_(grad) for t in _inputs())
    first = sdpa(q, k, v, is_causal=True, return_lse=True)
    assert len(checks) == 1 and op_graphs.GRAPHS.builds == 1
    again = sdpa(q, k, v, is_causal=True, return_lse=True)
    assert len(checks) == 1 and op_graphs.GRAPHS.builds == 1  # no check, no lookup, no build
    assert all(torch.equal(a, b) for a, b in zip(first, again))
    assert stand_in.runs == ["sdpa", "sdpa"]


def test_a_call_differing_in_anything_the_checks_read_is_checked_again(stand_in, checks):
    q, k, v = _inputs()
    sdpa(q, k, v)
    changed = [
        ((q[:, :, :8], k, v), {}),  # a shape
        ((q.transpose(2, 3).contiguous().transpose(2, 3), k, v), {}),  # a stride
        ((q.half(), k.half(), v.half()), {}),  # a dtype
        ((q, k, v), {"is_causal": True}),  # a flag
        ((q, k, v), {"scale": 0.5}),  # the scale
        ((q, k, v), {"scale": 1}),  # the scale's type (an int)
    ]
    for n, (args, kwargs) in enumerate(changed, start=2):
        sdpa(*args, **kwargs)
        assert len(checks) == n, (n, kwargs)
    sdpa(q, k, v, scale=0.5)
    assert len(checks) == len(changed) + 1  # remembered


def test_a_bad_call_after_a_good_one_still_raises_the_typed_error(stand_in, checks, monkeypatch):
    q, k, v = _inputs()
    sdpa(q, k, v)
    with pytest.raises(OpInputError, match=r"value must be query's dtype"):
        sdpa(q, k, v.half())
    with pytest.raises(OpInputError, match=r"window_left=4 is a sliding window"):
        ops_mod._forward_op(q, k, v, None, False, False, 4)
    # the devices the op serves are part of the signature: a narrower rule refuses a remembered call
    monkeypatch.setattr(op_arguments, "DEVICE_TYPES", ("cuda",))
    with pytest.raises(OpInputError, match=r"query is on cpu: the op runs on cuda devices"):
        sdpa(q, k, v)


@pytest.mark.parametrize("padded", [False, True], ids=["dense", "padded"])
def test_a_misaligned_operand_is_copied_onto_a_16_byte_boundary(stand_in, padded, monkeypatch):
    # the engines copy rows 16 bytes at a time and refuse an operand off 16 bytes (torch's SDPA takes
    # it): a contiguous view starting inside its storage is copied, on the checked and the remembered
    # call alike
    seen = []
    run = stand_in.execute

    def execute(built, tensors, device):
        seen.append({n: t.data_ptr() % 16 for n, t in tensors.items() if n in ("q", "k", "v")})
        run(built, tensors, device)

    monkeypatch.setattr(ops_mod, "execute", execute)
    q, k, v = _inputs(s_q=8, s_kv=8)
    pad = {
        "seq_len_q": torch.tensor([8, 5], dtype=torch.int32),
        "seq_len_kv": torch.tensor([8, 6], dtype=torch.int32),
    }
    pad = pad if padded else {}
    want = sdpa(q, k, v, **pad)
    k_off = torch.empty(k.numel() + 1, dtype=k.dtype)[1:].view(k.shape).copy_(k)
    assert k_off.is_contiguous() and k_off.data_ptr() % 16
    for _ in range(2):  # checked (a new signature? no: the same shape and stride) and remembered
        assert torch.equal(sdpa(q, k_off, v, **pad), want)
    assert seen and all(not any(ptrs.values()) for ptrs in seen), seen


@pytest.mark.filterwarnings("ignore:The PyTorch API of nested tensors:UserWarning")
def test_a_sparse_or_nested_operand_is_a_typed_error_naming_it(stand_in):
    q, k, v = _inputs()
    sdpa(q, k, v)  # remembered: the bad calls below are not served by it
    with pytest.raises(
        OpInputError, match=r"query must be a dense \(torch.strided\) tensor, got a torch.sparse_coo"
    ):
        sdpa(q.to_sparse(), k, v)
    with pytest.raises(
        OpInputError, match=r"value must be a dense \(torch.strided\) tensor, got a nested one"
    ):
        sdpa(q, k, torch.nested.nested_tensor(list(v)))
    with pytest.raises(OpInputError, match=r"seq_len_q must be a dense \(torch.strided\) tensor"):
        lengths = torch.tensor([9, 9], dtype=torch.int32)
        sdpa(q, k, v, seq_len_q=lengths.to_sparse(), seq_len_kv=lengths)


def test_a_non_contiguous_operand_is_copied_on_every_call(stand_in):
    q, k, v = _inputs(s_q=8, s_kv=8)
    k_t = k.transpose(2, 3).contiguous().transpose(2, 3)
    assert not k_t.is_contiguous()
    want = sdpa(q, k, v)
    assert torch.equal(sdpa(q, k_t, v), want) and torch.equal(sdpa(q, k_t, v), want)


def test_cleared_graphs_drop_their_prepared_calls(stand_in, checks):
    q, k, v = _inputs()
    sdpa(q, k, v)
    op_graphs.GRAPHS.clear()
    sdpa(q, k, v)
    assert len(checks) == 2 and op_graphs.GRAPHS.builds == 1


def test_new_engine_settings_miss_the_prepared_call(stand_in, checks, monkeypatch):
    q, k, v = _inputs()
    sdpa(q, k, v)
    monkeypatch.setenv("PYGRAPH_DISABLE_ENGINES", "some_engine")
    sdpa(q, k, v)
    assert len(checks) == 2 and op_graphs.GRAPHS.builds == 2


# --- the backward's prepared calls: as the forward's ---------------------------------------------------


def _backward_args(q, k, v, **options):
    """The backward op's arguments of a forward call of q, k, v (O, a dO and lse), ``options`` the
    forward's (scale, is_causal, ...)."""
    o, lse = ops_mod._forward_op(q, k, v, options.pop("scale", None), **options)
    d_o = torch.randn(o.shape, generator=torch.Generator().manual_seed(1)).to(o.dtype)
    return (q, k, v, o, d_o, lse, None), options


@pytest.mark.parametrize("padded", [False, True], ids=["dense", "padded"])
def test_a_repeated_backward_is_served_prepared_with_the_checked_calls_values(stand_in, checks, padded):
    q, k, v = _inputs()
    pad = {
        "seq_len_q": torch.tensor([9, 5], dtype=torch.int32),
        "seq_len_kv": torch.tensor([13, 6], dtype=torch.int32),
    }
    args, options = _backward_args(q, k, v, is_causal=True, **(pad if padded else {}))
    first = ops_mod._backward_op(*args, **options)
    assert len(checks) == 2 and op_graphs.GRAPHS.builds == 2  # the forward's and the backward's
    again = ops_mod._backward_op(*args, **options)
    assert len(checks) == 2 and op_graphs.GRAPHS.builds == 2  # no check, no lookup, no build
    assert all(torch.equal(a, b) for a, b in zip(first, again))
    assert stand_in.runs == ["sdpa", "sdpa_backward", "sdpa_backward"]


@pytest.mark.parametrize("grad_mode", [False, True], ids=["direct", "through the dispatcher"])
def test_autograds_repeated_backward_is_served_prepared(stand_in, checks, grad_mode, monkeypatch):
    # create_graph keeps grad mode on in the backward: the call goes through torch's dispatcher
    dispatched = []
    op = ops_mod._backward_op
    monkeypatch.setattr(ops_mod, "_backward_op", lambda *args: dispatched.append(1) or op(*args))
    q, k, v = (t.requires_grad_(True) for t in _inputs())
    d_o = torch.randn(q.shape).to(q.dtype)
    grads = []
    for _ in range(2):
        o = sdpa(q, k, v, is_causal=True)
        grads.append([t.detach() for t in torch.autograd.grad(o, (q, k, v), d_o, create_graph=grad_mode)])
    assert len(checks) == 2 and op_graphs.GRAPHS.builds == 2  # the first forward's and backward's
    assert all(torch.equal(a, b) for a, b in zip(*grads))
    assert stand_in.runs == ["sdpa", "sdpa_backward"] * 2
    assert len(dispatched) == (2 if grad_mode else 1)  # the repeated call: without the dispatcher


def test_a_backward_differing_in_anything_the_checks_read_is_checked_again(stand_in, checks):
    q, k, v = _inputs()
    args, _ = _backward_args(q, k, v)
    ops_mod._backward_op(*args)
    base = len(checks)
    query, key, value, o, d_o, lse, scale = args
    strided = torch.empty(d_o.shape[:-2] + d_o.shape[-1:] + d_o.shape[-2:-1], dtype=d_o.dtype)
    strided = strided.transpose(-1, -2).copy_(d_o)
    changed = [
        (query, key, value, o, strided, lse, scale),  # dO's stride
        (query, key, value, o.transpose(2, 3).contiguous().transpose(2, 3), d_o, lse, scale),  # O's stride
        (query, key, value, o, d_o, lse, 0.5),  # the scale
        (query, key, value, o, d_o, lse, 1),  # the scale's type (an int)
    ]
    for n, call in enumerate(changed, start=1):
        ops_mod._backward_op(*call)
        assert len(checks) == base + n, n
    ops_mod._backward_op(*args, is_causal=True)  # a flag
    assert len(checks) == base + len(changed) + 1
    q8 = q[:, :, :8]
    args8, _ = _backward_args(q8, k, v)  # a shape (its forward checked too)
    ops_mod._backward_op(*args8)
    assert len(checks) == base + len(changed) + 3
    ops_mod._backward_op(*changed[2])
    assert len(checks) == base + len(changed) + 3  # remembered


def test_a_bad_backward_after_a_good_one_still_raises_the_typed_error(stand_in, monkeypatch):
    q, k, v = _inputs()
    args, _ = _backward_args(q, k, v)
    ops_mod._backward_op(*args)
    query, key, value, o, d_o, lse, scale = args
    with pytest.raises(OpInputError, match=r"grad of out must be torch.bfloat16, got torch.float16"):
        ops_mod._backward_op(query, key, value, o, d_o.half(), lse, scale)
    with pytest.raises(OpInputError, match=r"lse must be \[2, 4, 9, 1\], got shape \[2, 4, 8, 1\]"):
        ops_mod._backward_op(query, key, value, o, d_o, lse[:, :, :8], scale)
    with pytest.raises(OpInputError, match=r"lse must be torch.float32, got torch.float64"):
        ops_mod._backward_op(query, key, value, o, d_o, lse.double(), scale)
    with pytest.raises(OpInputError, match=r"window_left=4 is a sliding window"):
        ops_mod._backward_op(*args, False, False, 4)
    # the devices the op serves are part of the signature: a narrower rule refuses a remembered call
    monkeypatch.setattr(op_arguments, "DEVICE_TYPES", ("cuda",))
    with pytest.raises(OpInputError, match=r"query is on cpu: the op runs on cuda devices"):
        ops_mod._backward_op(*args)
