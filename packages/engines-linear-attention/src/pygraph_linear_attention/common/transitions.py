"""The delta rule's state transitions in plain torch: the algebra the segmented scans run on.

A chunk's state passing (`common.chunked`, step 4) is affine in the entering state, each row of S
[V, K] on its own:

    S' = S diag(exp(last)) + (u - w S^T)^T kd = S M + B,
    M = diag(exp(last)) - w^T kd  [K, K],   B = u^T kd  [V, K],   kd = k exp(last - gamma)

(one gamma per token for GDN, where diag(exp(last)) is exp(last) I; per key channel for KDA and
GDN-2). A span of chunks is the composition of theirs, ``compose((M1, B1), (M2, B2)) = (M1 M2,
B1 M2 + B2)``, which is associative: a long sequence's spans (segments of one GPU, or the ranks of
a context-parallel group) are summarised independently and combined in a short pass
(`entering_states`), exactly, with no truncation of the history.

The kernels (`gdn.sm90_fused`'s SEGMENT) get a segment's (M, B) without forming any chunk's M:
they run the chunk step itself over the segment on V + K rows, zero rows with the chunks' u (B)
and the identity's rows with u = 0 (M), which is `span_transition` below.

The backward's state gradient runs the other way and is affine too. With dh the gradient of the
state leaving a chunk and ``do`` the output's gradient (times the scale), the gradient of the state
entering it (`gdn.chunked_bwd.chunk_state_step`) is

    dh_in = dh M^T + D,   D = do^T (qd - P w)  [V, K],   qd = q exp(gamma)

with the same M and P the chunk's decayed causal scores: `chunk_gradient_transition`. A span's
gradient transition is its chunks' composed in reverse order, so its matrix is the forward span's
M transposed (the forward's summary serves both directions) and only D needs a pass of its own;
`gradient_boundaries` combines the spans from the sequence's end.

The warmup: with unit keys and every write strength beta in [0, 2], a token's homogeneous step
``S -> S exp(g) (I - beta k k^T)`` has spectral norm at most exp(g), so a span's M is bounded by
exp(the span's summed log decay). `warmup_start` finds, from a segment's end, the first chunk at
which that sum falls below a threshold (`common.host.WARMUP_LOG_DECAY` in the kernels): the state
leaving the segment is then B of the chunks from there on, from zero, to within exp(threshold)
times the norm of the state entering them; the segment's M is dropped.
"""

from __future__ import annotations

import torch

__all__ = [
    "apply", "chunk_gradient_transition", "chunk_transition", "compose", "entering_states", "gradient_boundaries",
    "span_transition", "warmup_start",
]  # fmt: skip

Transition = tuple[torch.Tensor, torch.Tensor]  # (M [..., K, K], B [..., V, K])


def chunk_transition(w: torch.Tensor, u: torch.Tensor, k: torch.Tensor, gamma: torch.Tensor) -> Transition:
    """(M, B) of one chunk from its WY operands (`common.chunked.chunk_prepare`): w and k [..., C, K],
    u [..., C, V], gamma [..., C] (per token) or [..., C, K] (per key channel)."""
    m, kd = _chunk_matrix(w, k, gamma)
    return m, u.transpose(-1, -2) @ kd


def _chunk_matrix(w: torch.Tensor, k: torch.Tensor, gamma: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """A chunk's M [..., K, K] and its decayed keys kd = k exp(last - gamma) [..., C, K]."""
    per_channel = gamma.dim() == k.dim()
    last = gamma[..., -1:, :] if per_channel else gamma[..., -1:]  # the padding decays nothing
    kd = k * torch.exp(last - gamma if per_channel else (last - gamma)[..., None])
    eye = torch.eye(k.shape[-1], dtype=k.dtype, device=k.device)
    decay = torch.exp(last[..., 0, :]) if per_channel else torch.exp(last)
    m = (eye * decay[..., None, :] if per_channel else eye * decay[..., None]) - w.transpose(-1, -2) @ kd
    return m, kd


def chunk_gradient_transition(
    w: torch.Tensor, k: torch.Tensor, gamma: torch.Tensor, q: torch.Tensor, do: torch.Tensor
) -> Transition:
    """(M^T, D) of one chunk's reverse step, ``dh_in = dh M^T + D`` (the module's docstring): w, k
    and q [..., C, K], gamma [..., C] or [..., C, K], ``do`` [..., C, V] (dO times the scale)."""
    per_channel = gamma.dim() == k.dim()
    m, _ = _chunk_matrix(w, k, gamma)
    size = k.shape[-2]
    causal = torch.ones(size, size, dtype=torch.bool, device=k.device).tril()
    if per_channel:  # P[r, j] = sum_c q[r, c] k[j, c] exp(gamma[r, c] - gamma[j, c]), j <= r
        gap = gamma[..., :, None, :] - gamma[..., None, :, :]
        gap = torch.where(causal[..., None], gap, torch.full_like(gap, -torch.inf))
        scores = (q[..., :, None, :] * k[..., None, :, :] * torch.exp(gap)).sum(-1)
        qd = q * torch.exp(gamma)
    else:
        gap = gamma[..., :, None] - gamma[..., None, :]
        scores = (q @ k.transpose(-1, -2)) * torch.exp(
            torch.where(causal, gap, torch.full_like(gap, -torch.inf))
        )
        qd = q * torch.exp(gamma)[..., None]
    return m.transpose(-1, -2), do.transpose(-1, -2) @ (qd - scores @ w)


def apply(transition: Transition, state: torch.Tensor) -> torch.Tensor:
    """The state leaving a span from the state [..., V, K] entering it."""
    m, b = transition
    return state @ m + b


def compose(first: Transition, second: Transition) -> Transition:
    """The transition of ``first``'s span followed by ``second``'s."""
    m1, b1 = first
    m2, b2 = second
    return m1 @ m2, b1 @ m2 + b2


def span_transition(step, value_rows: torch.Tensor, key_dim: int) -> Transition:
    """(M, B) of a span the way the kernels get it: ``step(rows, with_u)`` runs the span's chunk
    steps on state rows [..., R, K] (with the chunks' u, or with u = 0) and returns the rows leaving
    it; B is what it makes of zero rows with u (``value_rows``: a zero tensor [..., V, K]), M what it
    makes of the identity's rows with u = 0. The same for the gradient's span (M^T, D): ``step``
    the reverse chunk steps, from the span's last chunk, with or without the output's gradient."""
    eye = torch.eye(key_dim, dtype=value_rows.dtype, device=value_rows.device)
    eye = eye.expand(*value_rows.shape[:-2], key_dim, key_dim)
    return step(eye, False), step(value_rows, True)


def entering_states(transitions: list[Transition], initial: torch.Tensor) -> list[torch.Tensor]:
    """The state entering each span and the one leaving the last: ``initial``, then each span's
    transition applied in order (the segments' combine, a step a span)."""
    states = [initial]
    for transition in transitions:
        states.append(apply(transition, states[-1]))
    return states


def gradient_boundaries(transitions: list[Transition], final: torch.Tensor) -> list[torch.Tensor]:
    """The state's gradient at each span boundary, in the spans' (forward) order: ``transitions``
    are the spans' gradient transitions in forward order, ``final`` the gradient of the state leaving
    the last span; the first boundary's is the initial state's gradient (a step a span, from the end)."""
    grads = [final]
    for transition in reversed(transitions):
        grads.append(apply(transition, grads[-1]))
    return grads[::-1]


def warmup_start(chunk_decays: list[float], in_range: list[bool], threshold: float) -> int | None:
    """The first chunk of a segment's warmup, or None (keep the exact M): walking back from the
    last chunk, the first whose running sum of the chunks' log decays (each chunk's last gamma) is
    below ``threshold``, provided every chunk walked so far has its ``beta ||k||^2`` in [0, 2]
    (``in_range``) and no positive log decay; the rule phase 1 of gdn_sm90's segmented scan applies
    per segment and head (`gdn.sm90_fused`)."""
    total = 0.0
    for c in range(len(chunk_decays) - 1, -1, -1):
        if not in_range[c] or chunk_decays[c] > 0.0:
            return None
        total += chunk_decays[c]
        if total < threshold:
            return c
    return None
