"""The plain-torch reference of Gated DeltaNet (``gdn``): the recurrence, token by token.

Per sequence of ``cu_seqlens`` and per head, with the state ``S`` [V, K] starting at
``initial_state`` (or 0), for each token ``t``::

    S = exp(g_t) * S                          # decay (g is log-space)
    S = S + beta_t * (v_t - S k_t) k_t^T      # delta-rule write
    o_t = scale * S q_t                       # read (scale defaults to K ** -0.5)

g and beta are [T, HG] (one value per token and head). The backward is autograd through the same
loop (`gated_delta_net_backward_reference`). The family's correctness suites check the engines
against these, and a user can check a graph's ``gdn`` the same way::

    from pygraph_linear_attention.reference import gated_delta_net_reference
    o, final_state = gated_delta_net_reference(q, k, v, g, beta, cu_seqlens, output_final_state=True)

Layout, the options and the checks are the shared loop's (`common.reference`).
"""

from __future__ import annotations

import torch

from pygraph_linear_attention.common.reference import autograd_backward, prepare_inputs, recurrence

__all__ = ["gated_delta_net_backward_reference", "gated_delta_net_reference"]


def gated_delta_net_reference(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    cu_seqlens: torch.Tensor,
    *,
    scale: float | None = None,
    initial_state: torch.Tensor | None = None,
    output_final_state: bool = False,
    use_qk_l2norm: bool = False,
    use_beta_sigmoid: bool = False,
    allow_neg_eigval: bool = False,
    safe_gate: bool = False,
    a_log: torch.Tensor | None = None,
    dt_bias: torch.Tensor | None = None,
    dtype: torch.dtype = torch.float64,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(O [T, HO, V], final state [N, HO, V, K] or None) in ``dtype``; the module docstring has the math.

    Differentiable in every tensor input (autograd through the loop).
    """
    prepared = prepare_inputs(
        q, k, v, g, beta, cu_seqlens, scale=scale, initial_state=initial_state,
        use_qk_l2norm=use_qk_l2norm, use_beta_sigmoid=use_beta_sigmoid, allow_neg_eigval=allow_neg_eigval,
        safe_gate=safe_gate, a_log=a_log, dt_bias=dt_bias, dtype=dtype,
    )  # fmt: skip
    return recurrence(prepared, initial_state, output_final_state)


def gated_delta_net_backward_reference(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    cu_seqlens: torch.Tensor,
    grad_out: torch.Tensor,
    **options: object,
) -> dict[str, torch.Tensor]:
    """The graph's ``gdn_bwd`` outputs in ``dtype``, by autograd through `gated_delta_net_reference`.

    Keys: ``dQ dK dV dG dBeta``, plus ``d_initial_state`` when ``initial_state`` is given and
    ``d_a_log`` / ``d_dt_bias`` when ``safe_gate`` is set and they are given. ``grad_out`` is dO;
    ``grad_final_state`` the gradient flowing into the final state (0 when None); the other keywords
    are the forward's.
    """
    return autograd_backward(gated_delta_net_reference, q, k, v, g, beta, cu_seqlens, grad_out, **options)
