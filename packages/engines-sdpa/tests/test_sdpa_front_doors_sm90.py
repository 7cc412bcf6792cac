"""`pygraph_sdpa.flash_attn` against flash-attn itself on shared inputs, on Hopper: out, softmax_lse
and the gradients of ``flash_attn_func`` (causal bottom-right with S_q != S_k, a window, GQA) and of
``flash_attn_varlen_func``. Skipped where flash-attn is not importable."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.sm90
BF = torch.bfloat16


def _rel(got, want) -> float:
    got, want = got.detach().double(), want.detach().double()
    return float((got - want).norm() / want.norm().clamp_min(1e-30))


def _grads(fn, tensors, **options):
    leaves = [t.detach().clone().requires_grad_(True) for t in tensors]
    out, lse, _ = fn(*leaves, return_attn_probs=True, **options)
    w = torch.randn(out.shape, generator=torch.Generator(device="cuda").manual_seed(5), device="cuda").to(BF)
    (out.float() * w.float()).sum().backward()
    return out, lse, [t.grad for t in leaves]


CASES = {
    "causal-bottom-right-gqa": (256, 384, {"causal": True}),
    "window": (512, 512, {"causal": True, "window_size": (128, 0)}),
    "scale": (200, 200, {"softmax_scale": 0.05}),
}


@pytest.mark.parametrize("case", list(CASES))
def test_flash_attn_func_matches_flash_attn(case):
    theirs = pytest.importorskip("flash_attn", reason="flash-attn is not installed").flash_attn_func
    from pygraph_sdpa.flash_attn import flash_attn_func as ours

    s_q, s_k, options = CASES[case]
    gen = torch.Generator(device="cuda").manual_seed(0)
    shapes = ((2, s_q, 8, 128), (2, s_k, 2, 128), (2, s_k, 2, 128))
    tensors = [torch.randn(s, generator=gen, device="cuda").to(BF) for s in shapes]
    out, lse, grads = _grads(ours, tensors, **options)
    want, want_lse, want_grads = _grads(theirs, tensors, **options)
    errors = {"out": _rel(out, want), "lse": _rel(lse, want_lse)}
    errors |= {f"d{n}": _rel(g, w) for n, g, w in zip("qkv", grads, want_grads)}
    print(case, errors)
    assert out.shape == want.shape and lse.shape == want_lse.shape
    assert all(e <= 1e-2 for e in errors.values()), errors


def test_flash_attn_varlen_func_matches_flash_attn():
    theirs = pytest.importorskip("flash_attn", reason="flash-attn is not installed").flash_attn_varlen_func
    from pygraph_sdpa.flash_attn import flash_attn_varlen_func as ours

    cu_q = torch.tensor([0, 100, 101, 357], dtype=torch.int32, device="cuda")
    cu_k = torch.tensor([0, 180, 300, 556], dtype=torch.int32, device="cuda")
    gen = torch.Generator(device="cuda").manual_seed(1)
    tensors = [
        torch.randn(t, h, 128, generator=gen, device="cuda").to(BF) for t, h in ((357, 8), (556, 2), (556, 2))
    ]
    args = (cu_q, cu_k, 256, 256)

    def ours_(*t, **o):
        return ours(*t, *args, **o)

    def theirs_(*t, **o):
        return theirs(*t, *args, **o)

    out, lse, grads = _grads(ours_, tensors, causal=True)
    want, want_lse, want_grads = _grads(theirs_, tensors, causal=True)
    errors = {"out": _rel(out, want), "lse": _rel(lse, want_lse)}
    errors |= {f"d{n}": _rel(g, w) for n, g, w in zip("qkv", grads, want_grads)}
    print(errors)
    assert lse.shape == want_lse.shape and all(e <= 1e-2 for e in errors.values()), errors
