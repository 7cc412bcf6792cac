"""flash-attn's ``flash_attn_func`` and ``flash_attn_varlen_func`` with its argument names, layout and
causal convention, over `pygraph_sdpa.sdpa` (pygraph's plan list: the cuDNN backend where a cuDNN
runtime is installed, else ``sdpa_fwd_sm90``).

A flash-attn 2 user changes one import::

    from flash_attn import flash_attn_func, flash_attn_varlen_func         # before
    from pygraph_sdpa.flash_attn import flash_attn_func, flash_attn_varlen_func  # after

- Layout: ``flash_attn_func`` takes q [B, S_q, H, D], k and v [B, S_k, H_kv, D(_v)] (H_kv dividing H)
  and returns out [B, S_q, H, D_v]; pygraph's op is [B, H, S, D], so q, k and v are passed as
  transposed views, which the op copies into its layout, and out is copied back into flash-attn's
  (four copies per call, each the size of its tensor). ``flash_attn_varlen_func`` takes the packed
  [total, H, D] with ``cu_seqlens_q`` / ``cu_seqlens_k`` (int32 [N + 1]) and ``max_seqlen_q`` /
  ``max_seqlen_k``, pygraph's ragged layout: nothing is copied.
- ``causal``: flash-attn aligns the causal diagonal to the bottom right when S_q != S_k (a query
  sees the keys up to its own position counted from the end), pygraph's ``causal_bottom_right``;
  with S_q == S_k (and in varlen with one cu_seqlens tensor for both) it is the top-left mask.
- ``window_size=(left, right)``: ``(-1, -1)`` none; ``(left, 0)`` (or any left with ``causal``) a
  sliding window of ``left`` keys before the diagonal, pygraph's ``window_left = left + 1`` (the
  diagonal's key counted) with the causal mask. A band past the diagonal (right > 0, or right = -1
  with left >= 0 and no causal) is not served.
- ``softmax_scale``: pygraph's ``scale`` (default D ** -0.5). A graph is built per distinct scale.
- ``return_attn_probs=True``: ``(out, softmax_lse, None)`` with softmax_lse fp32 [B, H, S_q]
  (varlen: [H, total_q]), the natural-log sum of each row's exponentials; flash-attn's third value
  (the dropout pattern, meaningful only with dropout) is None. A gradient through softmax_lse is
  refused (the backward takes out's). A row that sees no key (causal with S_q > S_k) has out 0 in
  both, and softmax_lse -inf here (the log of an empty sum) where flash-attn 2 writes +inf.

What flash-attn accepts and pygraph cannot serve raises `pygraph.errors.OpInputError` naming the
function, flash-attn's argument and the value: ``dropout_p`` other than 0, ``softcap`` other than 0,
``alibi_slopes``, ``deterministic=True`` (the backward's determinism is not promised),
``block_table`` (paged KV), a window band past the diagonal. Tensors (dtype, shapes, devices) are
checked by `pygraph_sdpa.sdpa` in its own terms. Migration notes: ``docs/migrating.md``.
"""

from __future__ import annotations

from typing import Any

import torch

from pygraph.errors import OpInputError
from pygraph_sdpa.ops import sdpa

__all__ = ["flash_attn_func", "flash_attn_varlen_func"]

Tensor = torch.Tensor
_FUNC = "pygraph_sdpa.flash_attn.flash_attn_func()"
_VARLEN = "pygraph_sdpa.flash_attn.flash_attn_varlen_func()"


def _fail(call: str, message: str) -> OpInputError:
    return OpInputError(f"{call}: {message}")


def _not_served(
    call: str, dropout_p: Any, softcap: Any, alibi_slopes: Any, deterministic: Any, block_table: Any = None
) -> None:
    if dropout_p != 0.0:
        raise _fail(call, f"dropout_p={dropout_p!r}: attention dropout is not served (pass 0.0)")
    if softcap != 0.0:
        raise _fail(call, f"softcap={softcap!r}: a soft cap on the scores is not served (pass 0.0)")
    if alibi_slopes is not None:
        raise _fail(call, f"alibi_slopes={type(alibi_slopes).__name__}: ALiBi biases are not served")
    if deterministic is not False:
        raise _fail(
            call, f"deterministic={deterministic!r}: a deterministic backward is not promised (pass False)"
        )
    if block_table is not None:
        raise _fail(call, f"block_table={type(block_table).__name__}: a paged KV cache is not served")


def _masks(call: str, causal: Any, window_size: Any) -> tuple[bool, int]:
    """(is_causal, window_left) of flash-attn's ``causal`` and ``window_size``."""
    if not isinstance(causal, bool):
        raise _fail(call, f"causal must be a bool, got {type(causal).__name__} {causal!r}")
    try:
        left, right = (int(w) for w in window_size)
    except (TypeError, ValueError):
        raise _fail(call, f"window_size must be a pair of ints (left, right), got {window_size!r}") from None
    if left < -1 or right < -1:
        raise _fail(call, f"window_size={tuple(window_size)}: each side is >= 0 or -1 (unbounded)")
    if causal:
        right = 0  # flash-attn: causal is window_size[1] = 0
    if right == -1 and left == -1:
        return False, -1
    if right != 0:
        raise _fail(
            call,
            f"window_size={tuple(window_size)} with causal={causal}: a band reaching past the diagonal "
            "(right > 0, or a left bound without the causal mask) is not served; pygraph serves "
            "(left, 0) and causal=True",
        )
    return True, (-1 if left == -1 else left + 1)


def flash_attn_func(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    dropout_p: float = 0.0,
    softmax_scale: float | None = None,
    causal: bool = False,
    window_size: tuple[int, int] = (-1, -1),
    softcap: float = 0.0,
    alibi_slopes: Tensor | None = None,
    deterministic: bool = False,
    return_attn_probs: bool = False,
) -> Tensor | tuple[Tensor, Tensor, None]:
    """flash-attn's ``flash_attn_func``: out [B, S_q, H, D_v] of q [B, S_q, H, D], k [B, S_k, H_kv, D]
    and v [B, S_k, H_kv, D_v] (bfloat16 or float16), or ``(out, softmax_lse [B, H, S_q], None)``
    with ``return_attn_probs``. The module docstring has the conventions and the refusals."""
    _not_served(_FUNC, dropout_p, softcap, alibi_slopes, deterministic)
    is_causal, window_left = _masks(_FUNC, causal, window_size)
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, Tensor) or t.dim() != 4:
            shape = list(t.shape) if isinstance(t, Tensor) else type(t).__name__
            raise _fail(_FUNC, f"{name} must be [B, S, H, D] (flash-attn's layout), got {shape}")
    bottom_right = is_causal and q.shape[1] != k.shape[1]
    result = sdpa(
        q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), scale=softmax_scale, is_causal=is_causal,
        causal_bottom_right=bottom_right, window_left=window_left, return_lse=bool(return_attn_probs),
    )  # fmt: skip
    if not return_attn_probs:
        return result.transpose(1, 2).contiguous()
    o, lse = result
    return o.transpose(1, 2).contiguous(), lse.squeeze(-1), None


def flash_attn_varlen_func(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    cu_seqlens_q: Tensor,
    cu_seqlens_k: Tensor,
    max_seqlen_q: int,
    max_seqlen_k: int,
    dropout_p: float = 0.0,
    softmax_scale: float | None = None,
    causal: bool = False,
    window_size: tuple[int, int] = (-1, -1),
    softcap: float = 0.0,
    alibi_slopes: Tensor | None = None,
    deterministic: bool = False,
    return_attn_probs: bool = False,
    block_table: Tensor | None = None,
) -> Tensor | tuple[Tensor, Tensor, None]:
    """flash-attn's ``flash_attn_varlen_func``: out [total_q, H, D_v] of the packed q [total_q, H, D],
    k [total_k, H_kv, D], v [total_k, H_kv, D_v] with cu_seqlens_q / cu_seqlens_k (int32 [N + 1])
    and the longest lengths max_seqlen_q / max_seqlen_k; or ``(out, softmax_lse [H, total_q], None)``
    with ``return_attn_probs``. Causal is bottom-right per sequence (flash-attn's)."""
    _not_served(_VARLEN, dropout_p, softcap, alibi_slopes, deterministic, block_table)
    is_causal, window_left = _masks(_VARLEN, causal, window_size)
    # one prefix sum for both: every sequence's lengths agree, where bottom-right is top-left
    bottom_right = is_causal and cu_seqlens_q is not cu_seqlens_k
    result = sdpa(
        q, k, v, scale=softmax_scale, is_causal=is_causal, causal_bottom_right=bottom_right,
        window_left=window_left, cu_seqlens_q=cu_seqlens_q, cu_seqlens_kv=cu_seqlens_k,
        max_seqlen_q=max_seqlen_q, max_seqlen_kv=max_seqlen_k, return_lse=bool(return_attn_probs),
    )  # fmt: skip
    if not return_attn_probs:
        return result
    o, lse = result
    return o, lse.squeeze(-1).transpose(0, 1), None
