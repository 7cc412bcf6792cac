"""The plain-torch references of Kimi Delta Attention (``kda``) and Gated DeltaNet-2 (``gdn2``): the
recurrences, token by token.

KDA (`kimi_delta_attention_reference`) is GDN's loop (`gdn.reference`) with a decay per key
channel: g is [T, HG, K] and the decay scales the state's columns, ``S = S * exp(g_t)[None, :]``
(beta stays one value per token and head). Its ``safe_gate`` bounds the decay from below (the shared
loop's options, `common.reference`). This is nvidia-cudnn-frontend 1.32's KDA gate, and
flash-linear-attention's with its lower bound.

GDN-2 (`gated_delta_net_v2_reference`) makes every gate channel-wise: g and beta are [T, HG, K], and
a write gate ``w`` [T, HG, V] scales the value written::

    S = S * exp(g_t)[None, :]                         # decay per key channel
    S = S + (w_t * v_t - S (beta_t * k_t)) k_t^T      # erase read through beta, write through w
    o_t = scale * S q_t

that is, with the key-major state X = S^T of the formulation nvidia-cudnn-frontend 1.32 documents,
``X_t = (I - k_t (beta_t * k_t)^T) Diag(exp(g_t)) X_{t-1} + k_t (w_t * v_t)^T``. With beta and w
equal to one value per token and head across their channels it is KDA, and with g too, GDN. Its
options are KDA's (the safe gate per key channel, use_beta_sigmoid and allow_neg_eigval on beta;
w is taken as given, post-activation). The backwards are autograd through the same loops.
"""

from __future__ import annotations

import torch

from pygraph_linear_attention.common.reference import autograd_backward, prepare_inputs, recurrence

__all__ = [
    "gated_delta_net_v2_backward_reference",
    "gated_delta_net_v2_reference",
    "kimi_delta_attention_backward_reference",
    "kimi_delta_attention_reference",
]


def kimi_delta_attention_reference(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    cu_seqlens: torch.Tensor,
    *,
    initial_state: torch.Tensor | None = None,
    output_final_state: bool = False,
    gate_lower_bound: float | None = None,
    **options: object,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """KDA: (O [T, HO, V], final state [N, HO, V, K] or None) in ``dtype``, g [T, HG, K] decaying the
    state per key channel (the module docstring has the math and the gate). ``options``: those of
    `gdn.reference.gated_delta_net_reference` (scale, use_qk_l2norm, use_beta_sigmoid, allow_neg_eigval,
    safe_gate, a_log, dt_bias, dtype). Differentiable."""
    prepared = prepare_inputs(
        q, k, v, g, beta, cu_seqlens, initial_state=initial_state, channel_gate=True,
        gate_lower_bound=gate_lower_bound, **options,
    )  # fmt: skip
    return recurrence(prepared, initial_state, output_final_state)


def gated_delta_net_v2_reference(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    w: torch.Tensor,
    cu_seqlens: torch.Tensor,
    *,
    initial_state: torch.Tensor | None = None,
    output_final_state: bool = False,
    gate_lower_bound: float | None = None,
    **options: object,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """GDN-2: (O [T, HO, V], final state [N, HO, V, K] or None) in ``dtype``, g and beta [T, HG, K],
    the write gate w [T, HG, V] (the module docstring has the recurrence). ``options``: KDA's.
    Differentiable."""
    prepared = prepare_inputs(
        q, k, v, g, beta, cu_seqlens, initial_state=initial_state, channel_gate=True,
        gate_lower_bound=gate_lower_bound, w=w, **options,
    )  # fmt: skip
    return recurrence(prepared, initial_state, output_final_state)


def kimi_delta_attention_backward_reference(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    cu_seqlens: torch.Tensor,
    grad_out: torch.Tensor,
    **options: object,
) -> dict[str, torch.Tensor]:
    """The graph's ``kda_bwd`` outputs (`gdn.reference.gated_delta_net_backward_reference`'s keys, dG [T, HG, K]) by
    autograd through `kimi_delta_attention_reference`."""
    return autograd_backward(
        kimi_delta_attention_reference, q, k, v, g, beta, cu_seqlens, grad_out, **options
    )


def gated_delta_net_v2_backward_reference(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    w: torch.Tensor,
    cu_seqlens: torch.Tensor,
    grad_out: torch.Tensor,
    **options: object,
) -> dict[str, torch.Tensor]:
    """The graph's ``gdn2_bwd`` outputs: `gdn.reference.gated_delta_net_backward_reference`'s keys (dG and dBeta
    [T, HG, K]) and dW [T, HG, V], by autograd through `gated_delta_net_v2_reference`."""
    return autograd_backward(
        gated_delta_net_v2_reference, q, k, v, g, beta, cu_seqlens, grad_out, w=w, **options
    )
