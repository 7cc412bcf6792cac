"""The chunked Gated DeltaNet forward in plain torch: the executable spec of gdn's kernels.

`chunked_gated_delta_net` computes `gdn.reference.gated_delta_net_reference`'s outputs chunk by chunk,
as the engines do: the algorithm (the steps, the padding of a sequence's last chunk) is
`common.chunked`'s, with one decay per token and head.
"""

from __future__ import annotations

import torch

from pygraph_linear_attention.common.chunked import CHUNK, chunk_by_chunk
from pygraph_linear_attention.common.reference import prepare_inputs, reference_error

__all__ = ["chunked_gated_delta_net"]


def chunked_gated_delta_net(
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
    chunk_size: int = CHUNK,
    dtype: torch.dtype = torch.float64,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(O [T, HO, V], final state [N, HO, V, K] or None) in ``dtype``, chunk by chunk.

    Same arguments, layout and result as `reference.gated_delta_net_reference`, plus
    ``chunk_size`` (any positive size gives the same result; the engines use `CHUNK`).
    """
    if chunk_size < 1:
        raise reference_error(f"chunk_size must be positive, got {chunk_size}")
    prepared = prepare_inputs(
        q, k, v, g, beta, cu_seqlens, scale=scale, initial_state=initial_state,
        use_qk_l2norm=use_qk_l2norm, use_beta_sigmoid=use_beta_sigmoid, allow_neg_eigval=allow_neg_eigval,
        safe_gate=safe_gate, a_log=a_log, dt_bias=dt_bias, dtype=dtype,
    )  # fmt: skip
    return chunk_by_chunk(prepared, initial_state, output_final_state, chunk_size)
