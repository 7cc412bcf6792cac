"""`gdn_cases.gate_parameter_error`, the measure the torch op's device suite takes of the safe gate's
parameter gradients, on the CPU: its terms sum to the float64 reference's d_a_log and d_dt_bias (so
the magnitudes it divides by are of the right terms), and it is zero for the right answer and the
terms' relative error for a perturbed one."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from gdn_cases import BWD_CASES, gate_parameter_error, make_inputs  # noqa: E402
from pygraph_linear_attention.reference import gated_delta_net_reference  # noqa: E402


@pytest.fixture(scope="module")
def reference():
    """The inputs of the op suite's all-options-gva case (seed 3) and their float64 leaves, after one
    backward of the reference."""
    case = next(c for c in BWD_CASES if c.name == "all-options-gva")
    tensors, options = make_inputs(case, seed=3, device="cpu")
    leaves = ("q", "k", "v", "g", "beta", "initial_state", "a_log", "dt_bias")
    x = {n: t.detach().double().requires_grad_(n in leaves) for n, t in tensors.items() if n != "cu_seqlens"}
    extra = {n: x[n] for n in ("initial_state", "a_log", "dt_bias")}
    o, _ = gated_delta_net_reference(
        *(x[n] for n in ("q", "k", "v", "g", "beta")), tensors["cu_seqlens"], **extra, **options
    )
    (
        o * torch.randn(o.shape, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    ).sum().backward()
    return tensors, x


def test_the_terms_sum_to_the_parameters_gradients(reference):
    _, x = reference
    b = x["g"].detach() + x["dt_bias"].detach()
    d_g = x["g"].grad
    a_log_terms = d_g * torch.nn.functional.softplus(b) / torch.sigmoid(b)
    torch.testing.assert_close(a_log_terms.sum(0), x["a_log"].grad, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(d_g.sum(0), x["dt_bias"].grad, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("name", ["a_log", "dt_bias"])
def test_the_error_is_zero_when_right_and_relative_to_the_terms_magnitudes_when_not(name, reference):
    tensors, x = reference
    want = x[name].grad
    assert gate_parameter_error(name, want, want, tensors, x["g"].grad) == 0.0
    # every term off by 1%: the sum off by at most 1% of the summed magnitudes, more of ||want|| (the terms
    # cancel)
    d_g = x["g"].grad
    off = gate_parameter_error(name, want * 1.01, want, tensors, d_g)
    plain = float((want * 0.01).norm() / want.norm())
    assert 0.0 < off < plain
    with pytest.raises(ValueError, match="'a_log' or 'dt_bias'"):
        gate_parameter_error("beta", want, want, tensors, d_g)
