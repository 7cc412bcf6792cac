"""The chunked backward (`gdn.chunked_bwd`, no autograd) against autograd through the token loop, in float64.

Every gradient of the graph's gdn_bwd (dQ dK dV dG dBeta, d_initial_state, d_a_log, d_dt_bias) on
the same fresh inputs and output gradients: lengths around the chunk, a varlen batch with odd and
empty sequences, each option alone and all together, GQA/GVA, chunk sizes.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from gdn_inputs import F64, OPTIONS, gdn_inputs  # noqa: E402

from pygraph_linear_attention.gdn.chunked_bwd import chunked_gated_delta_net_backward  # noqa: E402
from pygraph_linear_attention.reference import gated_delta_net_backward_reference  # noqa: E402


def _grads(lengths, options=(), chunk_size=64, **shape):
    args, kwargs = gdn_inputs(lengths, options=options, **shape)
    gen = torch.Generator().manual_seed(5)
    t, n = sum(lengths), len(lengths)
    ho, dv, dk = max(args["q"].shape[1], args["v"].shape[1]), args["v"].shape[2], args["q"].shape[2]
    grad_out = torch.randn(t, ho, dv, dtype=F64, generator=gen)
    final = (
        torch.randn(n, ho, dv, dk, dtype=F64, generator=gen)
        if kwargs.pop("output_final_state", False)
        else None
    )
    want = gated_delta_net_backward_reference(**args, grad_out=grad_out, grad_final_state=final, **kwargs)
    got = chunked_gated_delta_net_backward(
        **args, grad_out=grad_out, grad_final_state=final, chunk_size=chunk_size, **kwargs
    )
    return got, want


def _check(lengths, options=(), **kw):
    got, want = _grads(lengths, options, **kw)
    assert set(got) == set(want)
    for name, w in want.items():
        torch.testing.assert_close(
            got[name], w, rtol=1e-9, atol=1e-10, msg=lambda m, name=name: f"{name}: {m}"
        )


@pytest.mark.parametrize("length", [1, 63, 64, 65, 130])
def test_one_sequence_around_the_chunk_length(length):
    _check((length,), options=("final_state",))


def test_a_varlen_batch_with_odd_and_empty_sequences():
    _check((65, 1, 0, 130, 63, 64), options=("initial_state", "final_state"))


@pytest.mark.parametrize("option", OPTIONS)
def test_each_option_alone(option):
    _check((70, 5), options=(option,))


def test_every_option_together_with_gva():
    _check((130, 1, 0, 64), options=tuple(OPTIONS), h=1, hv=2)


@pytest.mark.parametrize(("h", "hv"), [(1, 4), (2, 4), (4, 2)], ids=["gva4", "gva2", "gqa2"])
def test_grouped_heads(h, hv):
    _check((65, 30), options=("initial_state", "final_state", "safe_gate"), h=h, hv=hv)


@pytest.mark.parametrize("chunk_size", [1, 16, 37])
def test_the_result_does_not_depend_on_the_chunk_size(chunk_size):
    _check((65, 20), options=("initial_state", "final_state", "qk_l2norm"), chunk_size=chunk_size)


def test_the_keys_follow_the_graphs_conditional_outputs():
    got, _ = _grads((9,))
    assert sorted(got) == ["dBeta", "dG", "dK", "dQ", "dV"]
    got, _ = _grads((9,), options=("initial_state", "safe_gate"))
    assert {"d_initial_state", "d_a_log", "d_dt_bias"} <= set(got)
