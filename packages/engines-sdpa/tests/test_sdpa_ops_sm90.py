"""The torch op on the device (the planner's first plan: today the cuDNN backend's): its outputs and
gradients against the float64 reference and its autograd, `torch.library.opcheck`, and a
`torch.compile(fullgraph=True)` training step of a small attention block.
"""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.sm90

torch = pytest.importorskip("torch")

from pygraph_sdpa.ops import sdpa  # noqa: E402
from pygraph_sdpa.reference import sdpa_backward_reference, sdpa_reference  # noqa: E402

CASES = {
    "d128": ({}, {}),
    "causal-gqa": ({"hq": 16, "hkv": 2}, {"is_causal": True}),
    "bottom-right": ({"s_q": 96, "s_kv": 200}, {"is_causal": True, "causal_bottom_right": True}),
    "window-d64": ({"d": 64}, {"is_causal": True, "window_left": 48}),
    "fp16-mqa": ({"hq": 8, "hkv": 1, "io": torch.float16}, {}),
}
TOLERANCE = {torch.bfloat16: 1e-2, torch.float16: 5e-3}


def _inputs(b=2, hq=4, hkv=4, s_q=160, s_kv=160, d=128, io=torch.bfloat16, seed=0):
    gen = torch.Generator(device="cuda").manual_seed(seed)
    shapes = ((b, hq, s_q, d), (b, hkv, s_kv, d), (b, hkv, s_kv, d))
    return [torch.randn(s, generator=gen, device="cuda").to(io).requires_grad_(True) for s in shapes]


def _rel(got, want) -> float:
    got, want = got.detach().double(), want.detach().double()
    return float((got - want).norm() / want.norm().clamp_min(1e-30))


@pytest.mark.parametrize("name", CASES)
def test_the_op_and_its_gradients_match_the_reference(name):
    shape, opts = CASES[name]
    q, k, v = _inputs(**shape)
    o, lse = sdpa(q, k, v, return_lse=True, **opts)
    d_o = torch.randn_like(o)
    o.backward(d_o)
    want_o, want_lse = sdpa_reference(q, k, v, return_lse=True, **opts)
    want = sdpa_backward_reference(q, k, v, d_o, **opts)
    errors = {"o": _rel(o, want_o), "lse": _rel(lse, want_lse)}
    errors |= {n: _rel(t.grad, w) for n, t, w in zip(("dq", "dk", "dv"), (q, k, v), want)}
    print(f"sdpa-op-{name}: {errors}")
    assert all(err <= TOLERANCE[q.dtype] for err in errors.values()), errors


# ragged (THD) batches: sequences of length 0 and 1 among them, lengths multiples of no tile
RAGGED = {
    "thd-causal-gqa": (([129, 0, 1, 300], [129, 5, 1, 300]), {"hq": 8, "hkv": 2}, {"is_causal": True}),
    "thd-bottom-right": (([64, 1, 200], [250, 1, 333]), {}, {"is_causal": True, "causal_bottom_right": True}),
    "thd-plain-d64": (([77, 1, 0, 190], [60, 0, 3, 190]), {"d": 64}, {}),  # a query that sees no key
}


@pytest.fixture
def python_engines(request, monkeypatch):
    """The op's graphs planned onto the CuTe DSL engines (the hook ranks the backend first): the
    first plan named ``sdpa_fwd_sm90[P_REGS=1`` or ``sdpa_bwd_sm90[DETERMINISTIC=<param>``."""
    from pygraph.op_support import GraphCache
    from pygraph_sdpa import op_graphs, ops

    deterministic = request.param

    def plan_and_build(g):
        g.create_execution_plans()
        names = [g.get_plan_name_at_index(i) for i in range(g.get_execution_plan_count())]
        want = ("sdpa_fwd_sm90[P_REGS=1", f"sdpa_bwd_sm90[DETERMINISTIC={deterministic}")
        ours = [i for i, n in enumerate(names) if n.startswith(want)]
        assert ours, f"no python plan among {names}: {g.decline_reasons()}"
        g.select_plan(ours[0])
        g.build_plans()

    monkeypatch.setattr(op_graphs, "plan_and_build", plan_and_build)
    monkeypatch.setattr(op_graphs, "GRAPHS", GraphCache())
    # every output poisoned (NaN) before the kernels run: a row they leave unwritten shows
    for name in ("_forward_outputs", "_gradient_outputs"):
        made = getattr(ops, name)
        monkeypatch.setattr(ops, name, lambda *a, made=made: tuple(t.fill_(float("nan")) for t in made(*a)))
    return deterministic


@pytest.mark.parametrize("name", RAGGED)
def test_the_ragged_op_and_its_gradients_match_the_reference(name):
    _ragged_case(name, "backend")


@pytest.mark.parametrize("python_engines", [0, 1], ids=["atomic-dq", "dq-pass"], indirect=True)
@pytest.mark.parametrize("name", RAGGED)
def test_the_ragged_op_on_the_python_engines_matches_the_reference(name, python_engines):
    _ragged_case(name, f"sm90-det{python_engines}")


def _ragged_case(name: str, path: str) -> None:
    (lengths_q, lengths_kv), shape, opts = RAGGED[name]
    hq, hkv, d = shape.get("hq", 4), shape.get("hkv", 4), shape.get("d", 128)
    gen = torch.Generator(device="cuda").manual_seed(3)
    q = torch.randn(sum(lengths_q), hq, d, generator=gen, device="cuda").to(torch.bfloat16)
    k, v = (
        torch.randn(sum(lengths_kv), hkv, d, generator=gen, device="cuda").to(torch.bfloat16)
        for _ in range(2)
    )
    q, k, v = (t.requires_grad_(True) for t in (q, k, v))
    cu = {
        name: torch.tensor([0, *lengths], device="cuda").cumsum(0).to(torch.int32)
        for name, lengths in (("cu_seqlens_q", lengths_q), ("cu_seqlens_kv", lengths_kv))
    }
    longest = {"max_seqlen_q": max(lengths_q), "max_seqlen_kv": max(lengths_kv)}
    o, lse = sdpa(q, k, v, return_lse=True, **cu, **longest, **opts)
    d_o = torch.randn_like(o)
    o.backward(d_o)
    want_o, want_lse = sdpa_reference(q, k, v, return_lse=True, **cu, **opts)
    want = sdpa_backward_reference(q, k, v, d_o, **cu, **opts)
    seen = torch.isfinite(want_lse)  # a row with no key: lse -inf in both
    errors = {"o": _rel(o, want_o), "lse": _rel(lse[seen], want_lse[seen])}
    errors["lse rows without keys"] = float((lse[~seen] != float("-inf")).sum())
    errors |= {n: _rel(t.grad, w) for n, t, w in zip(("dq", "dk", "dv"), (q, k, v), want)}
    print(f"sdpa-op-{name} ({path}): {errors}")
    assert errors.pop("lse rows without keys") == 0
    assert all(err <= TOLERANCE[torch.bfloat16] for err in errors.values()), errors


def test_opcheck():
    q, k, v = (t.detach() for t in _inputs(s_q=64, s_kv=64, d=64))
    torch.library.opcheck(torch.ops.pygraph_sdpa.sdpa_forward, (q, k, v, 0.125, True, False, -1, None, None))


def test_a_compiled_training_step_of_an_attention_block():
    torch.manual_seed(0)
    dim, heads = 256, 4

    class Block(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.qkv = torch.nn.Linear(dim, 3 * dim, bias=False)
            self.out = torch.nn.Linear(dim, dim, bias=False)

        def forward(self, x):
            b, s, _ = x.shape
            q, k, v = self.qkv(x).view(b, s, 3, heads, dim // heads).permute(2, 0, 3, 1, 4)
            o = sdpa(q, k, v, is_causal=True)
            return self.out(o.transpose(1, 2).reshape(b, s, dim))

    block = Block().cuda().to(torch.bfloat16)
    x = torch.randn(2, 128, dim, device="cuda", dtype=torch.bfloat16)

    def loss_and_grads(step):
        block.zero_grad()
        loss = step(x)
        loss.backward()
        return float(loss.detach()), [p.grad.detach().clone() for p in block.parameters()]

    eager_loss, eager_grads = loss_and_grads(lambda t: block(t).float().square().mean())
    step = torch.compile(lambda t: block(t).float().square().mean(), fullgraph=True)
    compiled_loss, compiled_grads = loss_and_grads(step)
    # the compiled step runs the same op and backward as eager: the loss and every weight's gradient agree
    # to bf16 rounding, and no gradient is zero (the op's backward reached the projections)
    assert abs(compiled_loss - eager_loss) <= 1e-2 * abs(eager_loss), (compiled_loss, eager_loss)
    for got, want in zip(compiled_grads, eager_grads):
        assert want.abs().max() > 0 and _rel(got, want) <= TOLERANCE[torch.bfloat16], _rel(got, want)
