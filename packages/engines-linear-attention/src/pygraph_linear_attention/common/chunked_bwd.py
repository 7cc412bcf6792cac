"""The options' chain rules the chunked backward specs share (`gdn.chunked_bwd`, `kda.chunked_bwd`):
from the per-output-head gradients of the effective q, k, v and beta to the graph's inputs, through
the q/k L2 norm, the beta sigmoid and the negative-eigenvalue scaling, then summed over the output
heads each input head serves (GQA/GVA, per-head gates).
"""

from __future__ import annotations

import torch

__all__ = ["beta_backward", "group_sum", "qkv_backward"]


def group_sum(x: torch.Tensor, heads: int, axis: int = 1) -> torch.Tensor:
    """Per-output-head gradients [.., HO, ..] summed into ``heads`` input heads (each serving HO // heads)."""
    ho = x.shape[axis]
    return x.unflatten(axis, (heads, ho // heads)).sum(axis + 1)


def _l2norm_backward(x: torch.Tensor, dy: torch.Tensor) -> torch.Tensor:
    """Gradient through y = x / max(|x|, 1e-12) (torch's F.normalize), rows over the last dim."""
    norm = x.norm(dim=-1, keepdim=True)
    y = x / norm.clamp_min(1e-12)
    return torch.where(
        norm > 1e-12, (dy - y * (dy * y).sum(-1, keepdim=True)) / norm.clamp_min(1e-12), dy / 1e-12
    )


def qkv_backward(
    per_head: dict[str, torch.Tensor], q: torch.Tensor, k: torch.Tensor, v_heads: int, heads: int, *,
    use_qk_l2norm: bool, dtype: torch.dtype,
) -> dict[str, torch.Tensor]:  # fmt: skip
    """dQ, dK, dV from the per-output-head dq, dk, dv: through the q/k L2 norm (per output head, of
    the q/k head it reads), then summed over the output heads each input head serves."""
    dq, dk = per_head["dq"], per_head["dk"]
    if use_qk_l2norm:
        qh = q.to(dtype).repeat_interleave(heads // q.shape[1], dim=1)
        kh = k.to(dtype).repeat_interleave(heads // k.shape[1], dim=1)
        dq, dk = _l2norm_backward(qh, dq), _l2norm_backward(kh, dk)
    return {
        "dQ": group_sum(dq, q.shape[1]),
        "dK": group_sum(dk, k.shape[1]),
        "dV": group_sum(per_head["dv"], v_heads),
    }


def beta_backward(
    d_write: torch.Tensor, beta: torch.Tensor, heads: int, *, use_beta_sigmoid: bool, allow_neg_eigval: bool,
    dtype: torch.dtype,
) -> torch.Tensor:  # fmt: skip
    """dBeta from the effective beta's per-output-head gradient (through the 2x scaling and the
    sigmoid), summed over the output heads each beta head serves."""
    if allow_neg_eigval:
        d_write = 2 * d_write
    if use_beta_sigmoid:
        s = torch.sigmoid(beta.to(dtype).repeat_interleave(heads // beta.shape[1], dim=1))
        d_write = d_write * s * (1 - s)
    return group_sum(d_write, beta.shape[1])
