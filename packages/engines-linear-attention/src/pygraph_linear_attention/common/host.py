"""What the ops' host sides share, in pure Python (no framework, no DSL): the chunk every kernel
tiles the tokens by, the chunk table's blocking, the workspace carve (`Region`, `layout_regions`),
the per-chunk state slots the CuTe DSL kernels index, and the slot search's trip count.

The CuTe DSL kernels read `CHUNK` from here too (`common.sm90_tiles`), so it is one of the sources
their disk cache digests (`common.sm90_compile`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Any

__all__ = [
    "CHUNK",
    "ITEMSIZE",
    "TABLE_BLOCK",
    "TABLE_SEQ_BLOCK",
    "WARMUP_LOG_DECAY",
    "Region",
    "chunk_state_elements",
    "layout_regions",
    "prepare_slots",
    "regions_bytes",
    "search_steps",
]

CHUNK = 64  # tokens per chunk (the kernels' C): the tokens one triangular solve covers
# the summed log decay past which a segmented scan drops a segment's transition matrix (the warmup:
# `common.transitions.warmup_start`, `gdn.sm90_fused`): exp(-16) = 1.1e-7, under twice fp32's unit
# roundoff, bounds the dropped history relative to the state it came from
WARMUP_LOG_DECAY = -16.0
TABLE_BLOCK = 128  # chunk slots per program of the table kernel
TABLE_SEQ_BLOCK = 64  # sequences read per step of the table kernel
_ALIGN = 256  # every workspace region starts 256-byte aligned (TMA needs 16; a cache line is 128)

ITEMSIZE = {"bfloat16": 2, "float16": 2, "float32": 4, "int32": 4, "int64": 8}


@dataclasses.dataclass(frozen=True)
class Region:
    """One workspace array: its byte offset, dtype name and shape (row-major)."""

    name: str
    offset: int
    dtype: str
    shape: tuple[int, ...]

    @property
    def nbytes(self) -> int:
        size = ITEMSIZE[self.dtype]
        for d in self.shape:
            size *= d
        return size


def layout_regions(shapes: Iterable[tuple[str, str, tuple[int, ...]]]) -> tuple[Region, ...]:
    """The regions of ``(name, dtype, shape)`` rows laid out one after another, each `_ALIGN`-aligned."""
    regions, offset = [], 0
    for name, dtype, shape in shapes:
        region = Region(name, offset, dtype, shape)
        regions.append(region)
        offset += -(-region.nbytes // _ALIGN) * _ALIGN
    return tuple(regions)


def regions_bytes(regions: tuple[Region, ...]) -> int:
    """The bytes a `layout_regions` layout spans: its last region's end."""
    return regions[-1].offset + regions[-1].nbytes


def prepare_slots(cfg: Any) -> int:
    """The CuTe DSL prepare kernels' chunk slots (``cfg``: a kernel config with ``tokens`` and
    ``sequences``): sequence n's chunks start at cu_seqlens[n] // 64 + n."""
    return cfg.tokens // CHUNK + cfg.sequences + 1


def chunk_state_elements(facts: Any) -> int:
    """Elements of the per-chunk states the CuTe DSL split scan and backward store, (T // 64 + N + 1)
    chunk slots x heads x V x K: the kernels index them with 32-bit offsets (below 2^31)."""
    slots = facts.tokens // CHUNK + facts.sequences + 1
    return slots * facts.heads_out * facts.head_dim_v * facts.head_dim_k


def search_steps(sequences: int) -> int:
    """Halvings of [0, sequences) until one sequence is left: the slot search's trip count."""
    return max(sequences, 1).bit_length()
