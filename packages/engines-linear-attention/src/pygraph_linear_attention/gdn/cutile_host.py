"""The host side of the cuTile forward (``gdn.cutile_fwd``): the problem as the kernels see it, the
workspace carve, the grids, each kernel's argument tuple and the launch order.

Pure Python (no cuTile import): the engine sizes the workspace while planning and binds a plan
from this record; `launch_forward` takes the kernels as an argument (``gdn.cutile_fwd.KERNELS``),
so the call path runs, and is tested, with stand-ins where cuTile is absent.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

from pygraph_linear_attention.common.host import (
    CHUNK,
    TABLE_BLOCK,
    TABLE_SEQ_BLOCK,
    Region,
    layout_regions,
    regions_bytes,
)

__all__ = [
    "BLOCK_V",
    "HINTED_BWD",
    "HINTED_FWD",
    "OCCUPANCY",
    "OCCUPANCY_BWD",
    "SEGMENT",
    "GdnCutileConfig",
    "kernel_arguments",
    "launch_forward",
]

# BLOCK_V: value rows of the state one scan program carries (the scan's grid is sequences x heads x
# V / BLOCK_V); the first point is the default
BLOCK_V = (64, 32, 128)
# OCCUPANCY: cuTile's occupancy hint for chunk_prepare_kernel (0: the compiler's choice). Compiled
# for sm_90 its default is 255 registers, a 488-byte spill frame and 168 KB of shared memory, one
# CTA per SM; 2 gives 255 registers, no spill, 110 KB; 4 gives 128 registers, a 1032-byte frame,
# 54 KB (scripts/cutile_resources.py --occupancy N). The hook ranks 2 first, by measurement
# (heuristics.py); 4 timed the same.
OCCUPANCY = (0, 2, 4)
# the forward's launches each OCCUPANCY hint applies to. The scan takes 2 only: at 2 it fits two
# CTAs per SM (111 / 106 KB of shared memory at BLOCK_V 32 / 64, spill frames of 24 / 152 B; by
# default 141 / 155 KB, one CTA), which lets BLOCK_V 32 keep every one of 256 programs (B4 T4096)
# resident; at 4 it spills 640-776 B. Measured on the H200 at the hook's first plans: the scan's
# hint changed nothing there (B4 T4096, BLOCK_V 64: 0.325 ms against 0.324; B1 T32768, BLOCK_V 32:
# 1.384 against 1.391).
HINTED_FWD = {2: ("prepare", "scan"), 4: ("prepare",)}
# OCCUPANCY of the backward: the hint for its per-chunk kernels (chunk_prepare_kernel,
# chunk_grad_output_kernel, chunk_grad_wy_kernel), each one CTA per SM by default (168-215 KB of
# shared memory, 240-255 registers, at K = V = 128 for sm_90). With 2 each fits two CTAs per SM:
# 100-110 KB, 255 registers, spill frames of 0 / 184 / 152 bytes; 3 spills 700 bytes and is not
# offered. 2 is ranked first, by measurement (heuristics.py).
OCCUPANCY_BWD = (0, 2)
# the backward's launches the OCCUPANCY hint applies to
HINTED_BWD = ("prepare", "chunk_grad_output", "chunk_grad_wy")
# SEGMENT: chunks per segment of the split scan (0: one scan program per sequence, head and value
# block, chunk after chunk). With S chunks per segment, a sequence's state passing runs as
# segment_scan (every segment at once, from zero and from the identity), segment_combine (one step
# per segment) and the fused scan over the segments: more programs for a long sequence, about twice
# the state arithmetic (the backward splits its two scans the same way). Untimed: offered after
# every other plan.
SEGMENT = (0, 32, 16)


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
    segment: int = 0  # chunks per segment of the split scan (0: none)

    def __post_init__(self) -> None:
        if self.segment and self.key_dim % self.block_v:
            # segment_scan's programs carry M's K rows in blocks of BLOCK_V
            raise ValueError(
                f"GdnCutileConfig: segment={self.segment} needs key_dim ({self.key_dim}) to be a "
                f"multiple of block_v ({self.block_v})"
            )

    @property
    def heads_out(self) -> int:
        return max(self.heads_qk, self.heads_v)

    @property
    def chunk_slots(self) -> int:
        """Rows of the chunk table: each sequence adds at most one partial chunk to cdiv(T, CHUNK)."""
        return -(-self.tokens // CHUNK) + self.sequences

    @property
    def segment_slots(self) -> int:
        """Rows of the segment table: as `chunk_slots`, in segments of ``segment`` chunks."""
        return -(-self.tokens // (self.segment * CHUNK)) + self.sequences if self.segment else 0

    def group(self, heads: int) -> int:
        """Output heads per head of a tensor with ``heads`` heads."""
        return self.heads_out // heads

    def workspace_regions(self) -> tuple[Region, ...]:
        """The workspace, carved: the chunk table, gamma, w, u, and a small spare array that
        stands in for absent optional inputs (never read: their kernel branches are compiled out)."""
        t, ho, k, v = self.tokens, self.heads_out, self.key_dim, self.value_dim
        shapes = [
            ("table", "int32", (self.chunk_slots, 2)),
            ("gamma", "float32", (t, ho)),
            ("w", self.io_dtype, (t, ho, k)),
            ("u", self.io_dtype, (t, ho, v)),
        ]
        shapes += self.segment_regions()
        shapes.append(("spare", "float32", (16,)))
        return layout_regions(shapes)

    def segment_regions(self) -> list[tuple[str, str, tuple[int, ...]]]:
        """The split scan's workspace rows (none without ``segment``): the segment table, each
        sequence's first segment slot, the segments' first tokens, their N and M, the state
        entering each."""
        if not self.segment:
            return []
        segments, ho, k, v = self.segment_slots, self.heads_out, self.key_dim, self.value_dim
        return [
            ("seg_table", "int32", (segments, 2)),
            ("seg_offsets", "int32", (self.sequences,)),
            ("seg_cu", "int32", (segments + 1,)),
            ("seg_n", "float32", (segments, ho, v, k)),
            ("seg_m", "float32", (segments, ho, k, k)),
            ("seg_h0", "float32", (segments, ho, v, k)),
        ]

    @property
    def workspace_bytes(self) -> int:
        return regions_bytes(self.workspace_regions())

    def grids(self) -> dict[str, tuple[int, ...]]:
        """Launch grids of the kernels (the split scan's where ``segment`` is set)."""
        ho, blocks = self.heads_out, self.value_dim // self.block_v
        grids = {
            "table": (-(-self.chunk_slots // TABLE_BLOCK),),
            "prepare": (self.chunk_slots, ho),
            "scan": (self.sequences, ho, blocks),
        }
        if self.segment:
            segments = self.segment_slots
            grids |= {
                "seg_table": (-(-segments // TABLE_BLOCK),),
                "seg_offsets": (1,),
                "seg_bounds": (-(-(segments + 1) // TABLE_BLOCK),),
                "segment_scan": (segments, ho, blocks + self.key_dim // self.block_v),
                "segment_combine": (self.sequences, ho, blocks),
                "scan": (segments, ho, blocks),
            }
        return grids


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
    args = {
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
    if not cfg.segment:
        return args
    seg, segments = cfg.segment * CHUNK, cfg.segment_slots
    n, kv = cfg.sequences, (cfg.key_dim, cfg.value_dim, cfg.block_v)
    return args | {
        "seg_table": (arrays["cu_seqlens"], arrays["seg_table"], n, seg, TABLE_BLOCK, TABLE_SEQ_BLOCK),
        "seg_offsets": (arrays["cu_seqlens"], arrays["seg_offsets"], n, seg, TABLE_SEQ_BLOCK),
        "seg_bounds": (arrays["cu_seqlens"], arrays["seg_table"], arrays["seg_cu"], segments, cfg.tokens, seg, TABLE_BLOCK),
        "segment_scan": (
            arrays["k"], arrays["w"], arrays["u"], arrays["gamma"], arrays["seg_cu"], arrays["seg_n"], arrays["seg_m"],
            ho // cfg.heads_qk, int(cfg.use_qk_l2norm), *kv, CHUNK,
        ),
        "segment_combine": (
            arrays["seg_n"], arrays["seg_m"], arrays["seg_offsets"], arrays["cu_seqlens"], get("h0", "spare4"),
            arrays["seg_h0"], get("ht", "spare4"), int(cfg.has_initial_state), int(cfg.output_final_state), *kv, seg,
            min(32, cfg.key_dim), 0,
        ),
        # the fused scan over the segments, each from the state segment_combine passed it
        "scan": (
            arrays["q"], arrays["k"], arrays["w"], arrays["u"], arrays["gamma"], arrays["seg_cu"], arrays["seg_h0"],
            arrays["o"], arrays["spare4"], ho // cfg.heads_qk, int(cfg.use_qk_l2norm), 1, 0, cfg.key_dim,
            cfg.block_v, CHUNK, float(cfg.scale),
        ),
    }  # fmt: skip


def launch_forward(
    launch: Callable[[tuple, Any, tuple], Any],
    kernels: Mapping[str, Any],
    cfg: GdnCutileConfig,
    arrays: Mapping[str, Any],
) -> None:
    """The forward: the table, then the chunks' preparation, then the scan, in stream order (with
    ``cfg.segment``, the split scan's launches before the scan, which then runs over segments).

    ``launch(grid, kernel, args)`` enqueues one kernel (``ct.launch`` on the call's stream);
    ``kernels`` maps table, prepare and scan to the kernels (``gdn.cutile_fwd.KERNELS``).
    """
    args, grids = kernel_arguments(cfg, arrays), cfg.grids()
    for name in FORWARD_LAUNCHES if not cfg.segment else SPLIT_FORWARD_LAUNCHES:
        launch(grids[name], kernels[name], args[name])


FORWARD_LAUNCHES = ("table", "prepare", "scan")
SPLIT_FORWARD_LAUNCHES = (
    "table", "prepare", "seg_table", "seg_offsets", "seg_bounds", "segment_scan", "segment_combine", "scan",
)  # fmt: skip
