"""pygraph_gemm.reference against the epilogue written out element by element, on the CPU."""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")

from pygraph_gemm.reference import activation, gemm_reference  # noqa: E402

_SCALAR = {
    "none": lambda x: x,
    "relu": lambda x: max(x, 0.0),
    "gelu": lambda x: 0.5 * x * (1 + math.erf(x / math.sqrt(2))),
    "gelu_approx_tanh": lambda x: 0.5 * x * (1 + math.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3))),
    "silu": lambda x: x / (1 + math.exp(-x)),
    "sigmoid": lambda x: 1 / (1 + math.exp(-x)),
    "tanh": math.tanh,
}


@pytest.mark.parametrize("act", sorted(_SCALAR))
def test_every_epilogue_piece_matches_the_elementwise_formula(act):
    g = torch.Generator().manual_seed(0)
    l, m, n, k = 2, 3, 5, 4
    a = torch.randn(l, m, k, generator=g).bfloat16()
    b = torch.randn(k, n, generator=g).bfloat16()  # one B for every batch
    rs, cs, bias = (
        torch.rand(m, generator=g) + 0.5,
        torch.rand(n, generator=g) + 0.5,
        torch.randn(n, generator=g),
    )
    res = torch.randn(l, m, n, generator=g).half()
    out, pre = gemm_reference(a, b, row_scale=rs, col_scale=cs, bias=bias, residual=res, activation=act)
    assert out.dtype == pre.dtype == torch.float64 and out.shape == (l, m, n)
    for z in range(l):
        for i in range(m):
            for j in range(n):
                acc = sum(float(a[z, i, p]) * float(b[p, j]) for p in range(k))
                x = acc * float(rs[i]) * float(cs[j]) + float(bias[j]) + float(res[z, i, j])
                assert pre[z, i, j].item() == pytest.approx(x, rel=1e-12, abs=1e-12)
                assert out[z, i, j].item() == pytest.approx(_SCALAR[act](x), rel=1e-12, abs=1e-12)


def test_without_an_epilogue_it_is_the_float64_matmul():
    a, b = torch.randn(7, 3), torch.randn(3, 2)
    out, pre = gemm_reference(a, b)
    assert torch.equal(out, a.double() @ b.double()) and torch.equal(pre, out)
    out32, _ = gemm_reference(a, b, dtype=torch.float32)
    assert out32.dtype == torch.float32


def test_activation_aliases_and_an_unknown_name():
    x = torch.linspace(-3, 3, 7, dtype=torch.float64)
    assert torch.equal(activation(x, "swish"), activation(x, "silu"))
    assert torch.equal(activation(x, "gelu_tanh"), activation(x, "gelu_approx_tanh"))
    with pytest.raises(ValueError, match=r"pygraph_gemm.reference.activation: activation 'mish'"):
        activation(x, "mish")
