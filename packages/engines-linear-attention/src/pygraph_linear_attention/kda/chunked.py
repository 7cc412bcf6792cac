"""The chunked KDA and GDN-2 forwards in plain torch: the executable specs of kda's kernels.

`chunked_kimi_delta_attention` and `chunked_gated_delta_net_v2` compute the `kda.reference`
recurrences' outputs chunk by chunk, as the engines do: the algorithm is `common.chunked`'s with the
decay per key channel (and, for GDN-2, beta per key channel and the write gate), the per-channel
products optionally by sub-chunks (``sub_chunk``, the kernels' form).
"""

from __future__ import annotations

import torch

from pygraph_linear_attention.common.chunked import CHUNK, chunk_by_chunk
from pygraph_linear_attention.common.reference import prepare_inputs, reference_error

__all__ = ["chunked_gated_delta_net_v2", "chunked_kimi_delta_attention"]


def chunked_kimi_delta_attention(
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
    chunk_size: int = CHUNK,
    sub_chunk: int | None = None,
    **options: object,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """KDA chunk by chunk: `reference.kimi_delta_attention_reference`'s arguments and result, plus
    ``chunk_size`` and ``sub_chunk`` (the per-channel products by sub-chunks: `common.chunked`)."""
    if chunk_size < 1:
        raise reference_error(f"chunk_size must be positive, got {chunk_size}")
    prepared = prepare_inputs(
        q, k, v, g, beta, cu_seqlens, initial_state=initial_state, channel_gate=True,
        gate_lower_bound=gate_lower_bound, **options,
    )  # fmt: skip
    return chunk_by_chunk(prepared, initial_state, output_final_state, chunk_size, sub_chunk)


def chunked_gated_delta_net_v2(
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
    chunk_size: int = CHUNK,
    sub_chunk: int | None = None,
    **options: object,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """GDN-2 chunk by chunk: `reference.gated_delta_net_v2_reference`'s arguments and result, plus
    ``chunk_size`` and ``sub_chunk``."""
    if chunk_size < 1:
        raise reference_error(f"chunk_size must be positive, got {chunk_size}")
    prepared = prepare_inputs(
        q, k, v, g, beta, cu_seqlens, initial_state=initial_state, channel_gate=True,
        gate_lower_bound=gate_lower_bound, w=w, **options,
    )  # fmt: skip
    return chunk_by_chunk(prepared, initial_state, output_final_state, chunk_size, sub_chunk)
