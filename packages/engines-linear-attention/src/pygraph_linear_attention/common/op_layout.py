"""The layouts the ops' Python functions take beside THD, brought to the THD their custom ops take.

``gated_delta_net``, ``kimi_delta_attention`` and ``gated_delta_net_v2`` take

- THD, q [T, H, K], with ``cu_seqlens`` [N + 1] or without it (one sequence: [0, T]);
- [B, T, H, K] without ``cu_seqlens``: B sequences of T tokens each, flattened to [B * T, H, K] (a view
  of a contiguous tensor; ``reshape`` copies one that cannot be viewed so) with the implied
  ``cu_seqlens`` [0, T, 2T, ..., B T] (int32, on q's device; made once per (B, T, device) and kept);
- [1, T, H, K] with ``cu_seqlens`` (flash-linear-attention's varlen convention: the sequences packed
  along T with B = 1), squeezed to [T, H, K].

Every per-token tensor (k, v, g, beta, w) takes q's layout: its first two dims q's [B, T] in the
batched one. O comes back in q's layout ([B, T, HO, V] for a batched call); the states stay
[N, HO, V, K] (N = B for a batched call without ``cu_seqlens``).

Gates in half precision: g (and beta where it is neither fp32 nor q's dtype) in bfloat16 or
float16 is converted to fp32 on each call (a copy of T x HO (x K) values, differentiable), where the
kernels read it. Each refusal is an `pygraph.errors.OpInputError` naming the call, the tensor and
the value; what the layouts leave for the op's checks (`common.op_arguments`) is named there.
"""

from __future__ import annotations

from typing import Any

import torch

from pygraph.errors import OpInputError
from pygraph.op_support import capturing

__all__ = ["thd"]

_HALF = (torch.bfloat16, torch.float16)
_TENSOR = torch.Tensor
_implied: dict[tuple, torch.Tensor] = {}  # (B, T, device) -> [0, T, ..., B T] int32
_IMPLIED_KEPT = 64
_dispatch_modes = getattr(torch._C, "_len_torch_dispatch_stack", lambda: 0)


def _implied_cu_seqlens(batch: int, tokens: int, device: torch.device) -> torch.Tensor:
    """[0, T, 2T, ..., B T] int32 on ``device``, made once per (B, T, device) (not kept while torch's
    stream captures a CUDA graph or torch.compile traces: such a tensor is the capture's or the
    trace's; neither kept nor looked up under a dispatch mode, e.g. a FakeTensorMode, whose tensors
    are its own and which refuses a real one). One made under ``torch.inference_mode`` is made as a
    normal tensor: an inference tensor kept here would be refused by a later call that autograd
    records (it saves cu_seqlens for the backward)."""
    if not torch.compiler.is_compiling() and _dispatch_modes():
        return _arange(batch, tokens, device)
    key = (batch, tokens, device)
    found = _implied.get(key)
    if found is not None:
        return found
    if torch.compiler.is_compiling() or capturing(device):
        return _arange(batch, tokens, device)
    if torch.is_inference_mode_enabled():
        with torch.inference_mode(False):
            cu = _arange(batch, tokens, device)
    else:
        cu = _arange(batch, tokens, device)
    if len(_implied) >= _IMPLIED_KEPT:
        _implied.clear()
    _implied[key] = cu
    return cu


def _arange(batch: int, tokens: int, device: torch.device) -> torch.Tensor:
    if tokens:
        return torch.arange(0, (batch + 1) * tokens, tokens, dtype=torch.int32, device=device)
    return torch.zeros(batch + 1, dtype=torch.int32, device=device)


def _dense(t: Any) -> bool:
    """A dense (torch.strided, not nested) tensor: what the layouts can flatten (the op's checks name
    another)."""
    return isinstance(t, _TENSOR) and not t.is_nested and t.layout is torch.strided


def _flat(call: str, name: str, t: Any, lead: tuple[int, int]) -> Any:
    """``t`` [B, T, ...] as [B * T, ...]; a tensor without q's leading [B, T] is refused naming it."""
    if not _dense(t):
        return t  # not a dense tensor: the op's checks name it
    if t.dim() < 3 or tuple(t.shape[:2]) != lead:
        raise OpInputError(
            f"{call}: {name} must be [B, T, ...] with q's [B, T] = {list(lead)} (q is [B, T, H, K]), got "
            f"shape {list(t.shape)}"
        )
    return t.reshape(lead[0] * lead[1], *t.shape[2:])


def thd(call: str, tensors: list[Any], cu_seqlens: Any) -> tuple[tuple[int, int] | None, Any]:
    """(the batch's [B, T] to give O back in, or None for a THD call; ``cu_seqlens`` as the custom op
    takes it), with ``tensors`` (q, k, v, g, beta, w: w None for gdn and kda) rewritten in place as
    the custom op takes them. The module docstring has the layouts."""
    q, g, beta = tensors[0], tensors[3], tensors[4]
    if not _dense(q):
        return None, cu_seqlens  # the op's checks name q
    if isinstance(g, _TENSOR) and g.dtype in _HALF:
        tensors[3] = g.float()
    if isinstance(beta, _TENSOR) and beta.dtype in _HALF and beta.dtype is not q.dtype:
        tensors[4] = beta.float()
    rank = q.dim()
    if rank == 3:
        if cu_seqlens is None:
            cu_seqlens = _implied_cu_seqlens(1, q.shape[0], q.device)
        return None, cu_seqlens
    if rank != 4:
        raise OpInputError(f"{call}: q must be [T, H, K] (THD) or [B, T, H, K], got shape {list(q.shape)}")
    batch, tokens = q.shape[0], q.shape[1]
    if cu_seqlens is not None and batch != 1:
        raise OpInputError(
            f"{call}: cu_seqlens given with q [B, T, H, K] of B = {batch}: variable-length sequences are "
            f"packed along T with B = 1 (flash-linear-attention's convention), got q {list(q.shape)}; "
            "pass cu_seqlens=None for B sequences of T tokens each"
        )
    names = ("q", "k", "v", "g", "beta", "w")
    for i, name in enumerate(names):
        tensors[i] = _flat(call, name, tensors[i], (batch, tokens))
    if cu_seqlens is None:
        cu_seqlens = _implied_cu_seqlens(batch, tokens, q.device)
    return (batch, tokens), cu_seqlens
