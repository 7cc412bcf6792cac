"""The host side of the cuTile forward (``gdn_cutile_fwd``): the problem as the kernels see it, the
workspace carve, the grids, each kernel's argument tuple and the launch order.

Pure Python (no cuTile import): the engine sizes the workspace while planning and binds a plan
from this record; `launch_forward` takes the kernels as an argument (``gdn_cutile_fwd.KERNELS``),
so the call path runs, and is tested, with stand-ins where cuTile is absent.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping
from typing import Any

__all__ = [
    "BLOCK_V",
    "CHUNK",
    "HINTED_BWD",
    "ITEMSIZE",
    "OCCUPANCY",
    "OCCUPANCY_BWD",
    "GdnCutileConfig",
    "Region",
    "kernel_arguments",
    "launch_forward",
    "layout_regions",
]

# BLOCK_V: value rows of the state one scan program carries (the scan's grid is sequences x heads x
# V / BLOCK_V); the first point is the default
BLOCK_V = (64, 32, 128)
# OCCUPANCY: cuTile's occupancy hint for chunk_prepare_kernel (0: the compiler's choice). Compiled
# for sm_90 its default is 255 registers, a 488-byte spill frame and 168 KB of shared memory, one
# CTA per SM; 2 gives 255 registers, no spill, 110 KB; 4 gives 128 registers, a 1032-byte frame,
# 54 KB (scripts/cutile_resources.py --occupancy N). Untimed: offered after the default for autotune to measure.
OCCUPANCY = (0, 2, 4)
# OCCUPANCY of the backward: the hint for its per-chunk kernels (chunk_prepare_kernel,
# chunk_grad_output_kernel, chunk_grad_wy_kernel), each one CTA per SM by default (168-215 KB of
# shared memory, 240-255 registers, at K = V = 128 for sm_90). With 2 each fits two CTAs per SM:
# 100-110 KB, 255 registers, spill frames of 0 / 184 / 152 bytes; 3 spills 700 bytes and is not
# offered. Untimed, like the forward's: offered after the default.
OCCUPANCY_BWD = (0, 2)
# the backward's launches the OCCUPANCY hint applies to
HINTED_BWD = ("prepare", "chunk_grad_output", "chunk_grad_wy")
CHUNK = 64  # tokens per chunk (the kernels' C)
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


@dataclasses.dataclass(frozen=True)
class GdnCutileConfig:
    """One gdn forward problem as the kernels see it (dtypes by name: bfloat16, float16, float32, ...)."""

    tokens: int  # T
    sequences: int  # N
    heads_qk: int  # H
    heads_v: int  # HV
    heads_g: int  # g's heads
    heads_beta: int  # beta's heads
    heads_a_log: int  # a_log's length (1 when absent)
    heads_dt_bias: int  # dt_bias's length (1 when absent)
    key_dim: int  # K
    value_dim: int  # V
    io_dtype: str  # q, k, v (and o, w, u)
    scale: float
    use_qk_l2norm: bool = False
    use_beta_sigmoid: bool = False
    allow_neg_eigval: bool = False
    safe_gate: bool = False
    has_dt_bias: bool = False
    has_initial_state: bool = False
    output_final_state: bool = False
    block_v: int = 64  # BV: value rows of the state one scan program carries

    @property
    def heads_out(self) -> int:
        return max(self.heads_qk, self.heads_v)

    @property
    def chunk_slots(self) -> int:
        """Rows of the chunk table: each sequence adds at most one partial chunk to cdiv(T, CHUNK)."""
        return -(-self.tokens // CHUNK) + self.sequences

    def group(self, heads: int) -> int:
        """Output heads per head of a tensor with ``heads`` heads."""
        return self.heads_out // heads

    def workspace_regions(self) -> tuple[Region, ...]:
        """The workspace, carved: the chunk table, gamma, w, u, and a small spare array that
        stands in for absent optional inputs (never read: their kernel branches are compiled out)."""
        t, ho = self.tokens, self.heads_out
        shapes = (
            ("table", "int32", (self.chunk_slots, 2)),
            ("gamma", "float32", (t, ho)),
            ("w", self.io_dtype, (t, ho, self.key_dim)),
            ("u", self.io_dtype, (t, ho, self.value_dim)),
            ("spare", "float32", (16,)),
        )
        return layout_regions(shapes)

    @property
    def workspace_bytes(self) -> int:
        last = self.workspace_regions()[-1]
        return last.offset + last.nbytes

    def grids(self) -> dict[str, tuple[int, ...]]:
        """Launch grids of the three kernels."""
        return {
            "table": (-(-self.chunk_slots // TABLE_BLOCK),),
            "prepare": (self.chunk_slots, self.heads_out),
            "scan": (self.sequences, self.heads_out, self.value_dim // self.block_v),
        }


# --- the arguments of each kernel, and the three launches -------------------------------------------


def kernel_arguments(cfg: GdnCutileConfig, arrays: Mapping[str, Any]) -> dict[str, tuple]:
    """Each kernel's argument tuple, from the call's arrays by name.

    ``arrays``: q k v g beta cu_seqlens o (the graph's), a_log dt_bias h0 ht where the graph has
    them, the workspace's regions (table gamma w u spare: `GdnCutileConfig.workspace_regions`)
    and ``spare4``, the spare region seen as [1, 1, 1, 1]; ``t`` (the backward's workspace region
    for each chunk's T) makes the prepare kernel store T. An absent optional input is the spare
    region of its rank, never read: its flag is off. Flags and head groups are runtime ints (one
    compiled kernel serves every option); dims, the chunk and the scale are compile-time.
    """

    def get(name: str, spare: str) -> Any:
        found = arrays.get(name)
        return arrays[spare] if found is None else found

    ho = cfg.heads_out
    return {
        "table": (arrays["cu_seqlens"], arrays["table"], cfg.sequences, CHUNK, TABLE_BLOCK, TABLE_SEQ_BLOCK),
        "prepare": (
            arrays["k"], arrays["v"], arrays["g"], arrays["beta"], get("a_log", "spare"), get("dt_bias", "spare"),
            arrays["cu_seqlens"], arrays["table"], arrays["gamma"], arrays["w"], arrays["u"], get("t", "spare4"),
            ho // cfg.heads_qk, ho // cfg.heads_v, ho // cfg.heads_g, ho // cfg.heads_beta,
            ho // cfg.heads_a_log, ho // cfg.heads_dt_bias, int(cfg.use_qk_l2norm), int(cfg.use_beta_sigmoid),
            int(cfg.allow_neg_eigval), int(cfg.safe_gate), int(cfg.has_dt_bias), int(arrays.get("t") is not None),
            cfg.key_dim, cfg.value_dim, CHUNK,
        ),
        "scan": (
            arrays["q"], arrays["k"], arrays["w"], arrays["u"], arrays["gamma"], arrays["cu_seqlens"],
            get("h0", "spare4"), arrays["o"], get("ht", "spare4"), ho // cfg.heads_qk, int(cfg.use_qk_l2norm),
            int(cfg.has_initial_state), int(cfg.output_final_state), cfg.key_dim, cfg.block_v, CHUNK,
            float(cfg.scale),
        ),
    }  # fmt: skip


def launch_forward(
    launch: Callable[[tuple, Any, tuple], Any],
    kernels: Mapping[str, Any],
    cfg: GdnCutileConfig,
    arrays: Mapping[str, Any],
) -> None:
    """The forward: the table, then the chunks' preparation, then the scan, in stream order.

    ``launch(grid, kernel, args)`` enqueues one kernel (``ct.launch`` on the call's stream);
    ``kernels`` maps table, prepare and scan to the kernels (``gdn_cutile_fwd.KERNELS``).
    """
    args, grids = kernel_arguments(cfg, arrays), cfg.grids()
    for name in ("table", "prepare", "scan"):
        launch(grids[name], kernels[name], args[name])
