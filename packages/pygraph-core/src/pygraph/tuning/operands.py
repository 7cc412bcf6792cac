"""Operands to time a graph on: torch tensors on the CUDA device, in the graph's declared geometry.

``pygraph bench`` and ``pygraph autotune`` (and the demo's run) bind each operand of a graph to a
fresh device tensor: floating operands normal, integer ones zero, except sequence offsets
(``cu_seqlens``), which split the tokens evenly so that a kernel reads real sequences. Imports torch.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["random_operands", "workspace_allocator"]


def _torch_dtypes(torch: Any) -> dict[Any, Any]:
    from pygraph.ir.dtypes import _TORCH_NAMES

    # reversed: the first spelling of a data type (float32 before float) wins
    return {dt: getattr(torch, name) for name, dt in reversed(_TORCH_NAMES.items()) if hasattr(torch, name)}


def _offset_tensors(graph: Any) -> dict[int, int]:
    """uid of each ``cu_seqlens`` operand -> the token count it splits."""
    out = {}
    for node in graph.nodes:
        cu = node.inputs.get("cu_seqlens")
        q = node.inputs.get("q")
        if cu is not None and q is not None:
            out[cu.uid] = q.dim[0]
    return out


def random_operands(graph: Any, device: str = "cuda") -> dict[Any, Any]:
    """Tensor -> a torch tensor on ``device`` for every operand of ``graph`` (planned or not)."""
    import torch

    dtypes = _torch_dtypes(torch)
    offsets = _offset_tensors(graph)
    bindings = {}
    for t in graph.engine_request().layout.tensors:
        buf = torch.empty_strided(tuple(t.dim), tuple(t.stride), dtype=dtypes[t.data_type], device=device)
        if t.uid in offsets:
            sequences = t.dim[0] - 1
            tokens = offsets[t.uid]
            buf.copy_(torch.arange(sequences + 1, device=device) * (tokens // sequences))
            buf[-1] = tokens
        elif buf.is_floating_point():
            buf.normal_()
        else:
            buf.zero_()
        bindings[t] = buf
    return bindings


def workspace_allocator(device: str = "cuda") -> Callable[[int], Any]:
    """A callable giving a uint8 device buffer of at least one byte for a byte count."""
    import torch

    def allocate(nbytes: int) -> Any:
        return torch.empty(max(int(nbytes), 1), dtype=torch.uint8, device=device)

    return allocate
