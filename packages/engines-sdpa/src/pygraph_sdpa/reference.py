"""Plain-torch references of the SDPA families: attention forward (O and log-sum-exp) and backward.

    S = scale * Q K^T, masked;  P = softmax(S);  O = P V;  lse = log(sum(exp(S)))  (per query row)

computed in ``dtype`` (float64 by default) from the inputs converted to it, so the result carries
no rounding of the inputs' own precision. The backward is autograd through the same forward. The
families' correctness suites check the engines against these, and a user can check a graph's
attention the same way::

    from pygraph_sdpa.reference import sdpa_reference
    o, lse = sdpa_reference(q, k, v, is_causal=True, return_lse=True)
    err = (out.double() - o).norm() / o.norm()

Layouts: dense ``[B, H, S, D]``; ragged (THD) ``[T, H, D]`` with ``cu_seqlens_q`` and
``cu_seqlens_kv`` (``[N + 1]`` prefix sums, sequences of length 0 and 1 included). K and V may
have fewer heads than Q (GQA; one head is MQA): query head ``h`` reads K head
``h // (H_q // H_k)`` and V head ``h // (H_q // H_v)``.

Masks, in the backend's terms (the same as the graph's ``sdpa`` attributes): a query row ``i`` of
a sequence with ``s_q`` queries and ``s_kv`` keys has its diagonal at key ``i + offset``, where
``offset`` is 0 (top-left alignment) or ``s_kv - s_q`` (bottom-right, ``causal_bottom_right``).
Key ``j`` is visible when ``j <= i + offset + window_right`` (``is_causal`` is ``window_right=0``)
and ``j > i + offset - window_left`` (``window_left`` keys are visible including the diagonal one,
the backend's ``diagonal_band_left_bound`` / ``sliding_window_length``); -1 leaves a side
unbounded. ``seq_len_q`` / ``seq_len_kv`` (``[B]``, any shape with B elements) pad a dense batch:
keys past a sequence's length are masked, query rows past it are 0, and the bottom-right diagonal
uses the actual lengths. A row that sees no key is 0 in O, ``-inf`` in lse, and has zero gradients.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import torch

__all__ = ["sdpa_backward_reference", "sdpa_reference"]

_CALL = "pygraph_sdpa.reference.sdpa_reference"


def _fail(message: str) -> ValueError:
    return ValueError(f"{_CALL}: {message}")


def _lengths(t: torch.Tensor | None, batch: int, name: str) -> list[int] | None:
    if t is None:
        return None
    values = [int(x) for x in t.reshape(-1).tolist()]
    if len(values) != batch:
        raise _fail(f"{name} has {len(values)} values (shape {list(t.shape)}), the batch is {batch}")
    if any(x < 0 for x in values):
        raise _fail(f"{name} has a negative length: {values}")
    return values


def _prefix_sums(t: torch.Tensor, total: int, name: str) -> list[int]:
    values = [int(x) for x in t.reshape(-1).tolist()]
    if len(values) < 1 or values[0] != 0 or values[-1] != total:
        raise _fail(f"{name} must run from 0 to the token count {total}, got {values}")
    if any(b < a for a, b in itertools.pairwise(values)):
        raise _fail(f"{name} must not decrease, got {values}")
    return values


def _visible(
    s_q: int,
    s_kv: int,
    rows: int,
    cols: int,
    *,
    bottom_right: bool,
    window_left: int,
    window_right: int,
    device: torch.device,
) -> torch.Tensor:
    """[s_q, s_kv] bool: which keys each query row sees, for a sequence of ``rows`` queries and ``cols`` keys."""
    i = torch.arange(s_q, device=device).reshape(-1, 1)
    j = torch.arange(s_kv, device=device).reshape(1, -1)
    diagonal = i + (cols - rows if bottom_right else 0)
    seen = (i < rows) & (j < cols)
    if window_right >= 0:
        seen &= j <= diagonal + window_right
    if window_left >= 0:
        seen &= j > diagonal - window_left
    return seen


def _attend(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, seen: torch.Tensor, scale: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """(O [H, S_q, D_v], lse [H, S_q, 1]) of one sequence; ``q`` [H, S_q, D], ``k``/``v`` [H, S_kv, D]."""
    if k.shape[-2] == 0:  # no key at all: nothing to attend to (reductions over 0 keys are undefined)
        return q.new_zeros((*q.shape[:-1], v.shape[-1])), q.new_full((*q.shape[:-1], 1), float("-inf"))
    scores = torch.matmul(q, k.transpose(-1, -2)) * scale
    scores = scores.masked_fill(~seen, float("-inf"))
    any_seen = seen.any(dim=-1, keepdim=True)
    # The row maximum only shifts the exponentials (O and lse do not depend on it), so it carries no
    # gradient; a row that sees nothing shifts by 0 and sums to 0.
    peak = torch.where(any_seen, scores.amax(dim=-1, keepdim=True), 0.0).detach()
    weights = torch.exp(scores - peak)
    total = weights.sum(dim=-1, keepdim=True)
    safe_total = torch.where(any_seen, total, 1.0)
    out = torch.matmul(weights / safe_total, v)
    lse = torch.where(any_seen, peak + torch.log(safe_total), float("-inf"))
    return out, lse


def _expand_heads(t: torch.Tensor, heads: int, name: str, head_dim: int) -> torch.Tensor:
    """``t`` [H_t, ...] with each head repeated so there are ``heads`` (GQA/MQA)."""
    if heads % t.shape[head_dim]:
        raise _fail(f"{name} has {t.shape[head_dim]} heads, which does not divide the query's {heads}")
    return t.repeat_interleave(heads // t.shape[head_dim], dim=head_dim)


def sdpa_reference(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    *,
    scale: float | None = None,
    is_causal: bool = False,
    causal_bottom_right: bool = False,
    window_left: int = -1,
    window_right: int = -1,
    seq_len_q: torch.Tensor | None = None,
    seq_len_kv: torch.Tensor | None = None,
    cu_seqlens_q: torch.Tensor | None = None,
    cu_seqlens_kv: torch.Tensor | None = None,
    return_lse: bool = False,
    dtype: torch.dtype = torch.float64,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """O (and lse, shaped like O with a last dim of 1, when ``return_lse``), computed in ``dtype``.

    ``scale`` defaults to ``D_qk ** -0.5``. The module docstring gives the layouts and the masks.
    Differentiable: gradients reach ``query``, ``key`` and ``value`` through the conversion.
    """
    if window_left == 0 or window_left < -1:
        raise _fail(
            f"window_left counts the visible keys including the diagonal (>= 1) or is -1, got {window_left}"
        )
    if window_right < -1:
        raise _fail(f"window_right is >= 0 or -1 (unbounded), got {window_right}")
    if is_causal and window_right > 0:
        raise _fail(f"is_causal masks every key past the diagonal, window_right={window_right} admits some")
    if causal_bottom_right and not (is_causal or window_left >= 0 or window_right >= 0):
        raise _fail(
            "causal_bottom_right aligns a diagonal band; set is_causal, window_left or window_right too"
        )
    right = 0 if is_causal else window_right
    ragged = cu_seqlens_q is not None or cu_seqlens_kv is not None
    if ragged and (cu_seqlens_q is None or cu_seqlens_kv is None):
        raise _fail("ragged (THD) inputs need both cu_seqlens_q and cu_seqlens_kv")
    if ragged and (seq_len_q is not None or seq_len_kv is not None):
        raise _fail(
            "ragged (THD) inputs take their lengths from cu_seqlens; do not pass seq_len_q/seq_len_kv"
        )
    rank = 3 if ragged else 4
    for name, t in (("query", query), ("key", key), ("value", value)):
        if t.dim() != rank:
            layout = "[T, H, D] (THD, with cu_seqlens)" if ragged else "[B, H, S, D]"
            raise _fail(f"{name} must be {layout}, got shape {list(t.shape)}")
    if query.shape[-1] != key.shape[-1]:
        raise _fail(f"query head dim {query.shape[-1]} and key head dim {key.shape[-1]} differ")
    seq_axis = 0 if ragged else 2
    if key.shape[seq_axis] != value.shape[seq_axis] or (not ragged and key.shape[0] != value.shape[0]):
        raise _fail(
            f"key {list(key.shape)} and value {list(value.shape)} disagree on batch or sequence length"
        )
    scale = query.shape[-1] ** -0.5 if scale is None else float(scale)
    q, k, v = (t.to(dtype) for t in (query, key, value))
    flags = {"bottom_right": causal_bottom_right, "window_left": window_left, "window_right": right}
    if ragged:
        return _ragged(q, k, v, cu_seqlens_q, cu_seqlens_kv, scale, flags, return_lse)
    batch, heads, s_q, _ = q.shape
    if k.shape[0] != batch:
        raise _fail(f"query batch {batch} and key batch {k.shape[0]} differ")
    k, v = _expand_heads(k, heads, "key", 1), _expand_heads(v, heads, "value", 1)
    s_kv = k.shape[2]
    rows = _lengths(seq_len_q, batch, "seq_len_q") or [s_q] * batch
    cols = _lengths(seq_len_kv, batch, "seq_len_kv") or [s_kv] * batch
    outs, lses = [], []
    for b in range(batch):
        rows_b, cols_b = min(rows[b], s_q), min(cols[b], s_kv)
        seen = _visible(s_q, s_kv, rows_b, cols_b, device=q.device, **flags)
        out, lse = _attend(q[b], k[b], v[b], seen, scale)
        outs.append(out)
        lses.append(lse)
    out, lse = torch.stack(outs), torch.stack(lses)
    return (out, lse) if return_lse else out


def _ragged(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    cu_seqlens_q: torch.Tensor,
    cu_seqlens_kv: torch.Tensor,
    scale: float,
    flags: dict,
    return_lse: bool,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    starts_q = _prefix_sums(cu_seqlens_q, q.shape[0], "cu_seqlens_q")
    starts_kv = _prefix_sums(cu_seqlens_kv, k.shape[0], "cu_seqlens_kv")
    if len(starts_q) != len(starts_kv):
        raise _fail(
            f"cu_seqlens_q has {len(starts_q) - 1} sequences and cu_seqlens_kv {len(starts_kv) - 1}; they must match"
        )
    heads = q.shape[1]
    k, v = _expand_heads(k, heads, "key", 1), _expand_heads(v, heads, "value", 1)
    out = q.new_zeros((q.shape[0], heads, v.shape[-1]))
    lse = q.new_full((q.shape[0], heads, 1), float("-inf"))
    pieces_o, pieces_lse = [], []
    for n in range(len(starts_q) - 1):
        q0, q1, k0, k1 = starts_q[n], starts_q[n + 1], starts_kv[n], starts_kv[n + 1]
        seen = _visible(q1 - q0, k1 - k0, q1 - q0, k1 - k0, device=q.device, **flags)
        o_n, lse_n = _attend(
            q[q0:q1].transpose(0, 1), k[k0:k1].transpose(0, 1), v[k0:k1].transpose(0, 1), seen, scale
        )
        pieces_o.append(o_n.transpose(0, 1))
        pieces_lse.append(lse_n.transpose(0, 1))
    if pieces_o:
        out = torch.cat(pieces_o)
        lse = torch.cat(pieces_lse)
    return (out, lse) if return_lse else out


def sdpa_backward_reference(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    grad_out: torch.Tensor,
    *,
    grad_lse: torch.Tensor | None = None,
    dtype: torch.dtype = torch.float64,
    **options: object,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(dQ, dK, dV) in ``dtype``: autograd through `sdpa_reference` with the same ``options``.

    ``grad_out`` is dO, shaped like O; ``grad_lse`` (optional) the gradient flowing into lse.
    """
    inputs = [t.detach().to(dtype).requires_grad_(True) for t in (query, key, value)]
    with torch.enable_grad():
        result = sdpa_reference(*inputs, return_lse=grad_lse is not None, dtype=dtype, **options)
        outputs: Sequence[torch.Tensor] = result if isinstance(result, tuple) else (result,)
        grads = [grad_out.to(dtype)] + ([grad_lse.to(dtype)] if grad_lse is not None else [])
        # a row that sees no key has lse -inf: its incoming gradient is zero, not inf * 0
        if grad_lse is not None:
            grads[1] = torch.where(torch.isinf(outputs[1]), 0.0, grads[1])
        dq, dk, dv = torch.autograd.grad(outputs, inputs, grads)
    return dq, dk, dv
