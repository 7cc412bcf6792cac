"""The chunked algorithm (`gdn.chunked`, on `common.chunked`) against the token-by-token recurrence, in float64 on the CPU.

Every case runs both on the same inputs: sequence lengths around the chunk (1, 63, 64, 65, 130),
several sequences in one varlen batch (an empty one among them), every option alone and all
together, GQA and GVA, an initial state and the final state; then gradients by autograd through
both, and the pieces of the chunk (the triangular solve) against their definition.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from gdn_inputs import F64, OPTIONS, cu_seqlens, gdn_inputs  # noqa: E402

from pygraph_linear_attention.common.chunked import CHUNK, chunk_prepare  # noqa: E402
from pygraph_linear_attention.gdn.chunked import chunked_gated_delta_net  # noqa: E402
from pygraph_linear_attention.reference import gated_delta_net_reference  # noqa: E402


def _check(lengths, options=(), chunk_size=CHUNK, **shape):
    args, kwargs = gdn_inputs(lengths, options=options, **shape)
    want_o, want_s = gated_delta_net_reference(**args, **kwargs)
    got_o, got_s = chunked_gated_delta_net(**args, **kwargs, chunk_size=chunk_size)
    torch.testing.assert_close(got_o, want_o, rtol=1e-9, atol=1e-10)
    if want_s is None:
        assert got_s is None
    else:
        torch.testing.assert_close(got_s, want_s, rtol=1e-9, atol=1e-10)


@pytest.mark.parametrize("length", [1, 63, 64, 65, 130])
def test_one_sequence_around_the_chunk_length(length):
    _check((length,), options=("final_state",))


def test_a_varlen_batch_with_odd_and_empty_sequences():
    _check((65, 1, 0, 130, 63, 64), options=("initial_state", "final_state"))


@pytest.mark.parametrize("option", OPTIONS)
def test_each_option_alone(option):
    _check((70, 5), options=(option,))


def test_every_option_together():
    _check((130, 1, 64), options=tuple(OPTIONS))


@pytest.mark.parametrize(("h", "hv"), [(1, 4), (2, 4), (4, 2)], ids=["gva4", "gva2", "gqa2"])
def test_grouped_heads(h, hv):
    _check((65, 30), options=("initial_state", "final_state"), h=h, hv=hv)


@pytest.mark.parametrize("chunk_size", [1, 16, 37])
def test_the_result_does_not_depend_on_the_chunk_size(chunk_size):
    _check((65, 20), options=("initial_state", "final_state", "qk_l2norm"), chunk_size=chunk_size)


def test_head_dims_of_the_engines_shape():
    _check((65,), options=("final_state",), k=64, v=128)


def test_the_triangular_solve_is_the_delta_rule_inside_the_chunk():
    """w and u satisfy (I + A) w = beta exp(gamma) k and (I + A) u = beta v, A strictly lower."""
    gen = torch.Generator().manual_seed(3)
    k = torch.randn(2, CHUNK, 16, dtype=F64, generator=gen) / 4
    v = torch.randn(2, CHUNK, 8, dtype=F64, generator=gen)
    g, beta = -torch.rand(2, CHUNK, dtype=F64, generator=gen), torch.rand(2, CHUNK, dtype=F64, generator=gen)
    gamma, w, u = chunk_prepare(k, v, g, beta)
    torch.testing.assert_close(gamma, g.cumsum(-1))
    a = beta[..., :, None] * (k @ k.transpose(-1, -2)) * torch.exp(gamma[..., :, None] - gamma[..., None, :])
    a = a.tril(-1)
    eye = torch.eye(CHUNK, dtype=F64)
    torch.testing.assert_close((eye + a) @ w, (beta * gamma.exp())[..., None] * k)
    torch.testing.assert_close((eye + a) @ u, beta[..., None] * v)


def test_gradients_by_autograd_match_the_reference():
    args, kwargs = gdn_inputs((65, 3), options=("initial_state", "final_state", "qk_l2norm", "safe_gate"))
    tensors = {n: t for n, t in {**args, **kwargs}.items() if torch.is_tensor(t) and n != "cu_seqlens"}
    leaves = {n: t.clone().requires_grad_(True) for n, t in tensors.items()}
    leaves["cu_seqlens"] = args["cu_seqlens"]
    flags = {n: x for n, x in kwargs.items() if not torch.is_tensor(x)}
    gen = torch.Generator().manual_seed(9)
    grads = {}
    for fn in (gated_delta_net_reference, chunked_gated_delta_net):
        o, s = fn(**leaves, **flags)
        d_o = torch.randn(o.shape, dtype=F64, generator=gen.manual_seed(1))
        d_s = torch.randn(s.shape, dtype=F64, generator=gen.manual_seed(2))
        inputs = [t for n, t in leaves.items() if n != "cu_seqlens"]
        grads[fn] = torch.autograd.grad((o, s), inputs, (d_o, d_s))
    for want, got in zip(grads[gated_delta_net_reference], grads[chunked_gated_delta_net]):
        torch.testing.assert_close(got, want, rtol=1e-8, atol=1e-10)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_lower_precision_runs_in_the_dtype_asked(dtype):
    args, kwargs = gdn_inputs((65,), options=("final_state",))
    o, s = chunked_gated_delta_net(**args, **kwargs, dtype=dtype)
    assert o.dtype == dtype and s.dtype == dtype
    want, _ = gated_delta_net_reference(**args, **kwargs)
    tol = 1e-5 if dtype == torch.float32 else 1e-1
    torch.testing.assert_close(o.double(), want, rtol=tol, atol=tol)


def test_bad_arguments_raise_the_references_errors():
    args, _ = gdn_inputs((8,))
    with pytest.raises(ValueError, match="gated_delta_net_reference: cu_seqlens must run from 0"):
        chunked_gated_delta_net(**{**args, "cu_seqlens": cu_seqlens(5)})
    with pytest.raises(ValueError, match="chunk_size must be positive, got 0"):
        chunked_gated_delta_net(**args, chunk_size=0)
