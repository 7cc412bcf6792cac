"""Host side of the KDA / GDN-2 cuTile forward (`kda.cutile_fwd`): one problem's configuration, its
workspace regions, each kernel's grid and arguments, and the launch order (table, offsets, prepare,
states, output).

The workspace layout and the chunk table are the shared ones (`common.host`: `layout_regions`, `CHUNK`,
the table kernel's blocks); gamma is per key channel here ([T, HO, K] fp32). ``launch(grid, kernel,
args)`` enqueues one kernel: ``ct.launch`` on the call's stream on a device, the numpy stand-in in
the CPU tests.
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

__all__ = ["BLOCK_V", "LAUNCHES", "SUB_CHUNK", "KdaCutileConfig", "kernel_arguments", "launch_forward"]

BLOCK_V = (64, 32)  # the engines' knob BLOCK_V: value rows of the state one scan program carries
SUB_CHUNK = 16  # rows per sub-chunk of the decay-weighted products (kda_cutile_fwd's SUB)
DEFAULT_LOWER_BOUND = -5.0  # the safe gate's bound when none is given
LAUNCHES = ("table", "offsets", "prepare", "states", "output")


@dataclasses.dataclass(frozen=True)
class KdaCutileConfig:
    """One KDA (``op`` "kda") or GDN-2 ("gdn2") forward problem as the kernels see it."""

    op: str
    tokens: int  # T
    sequences: int  # N
    heads_qk: int  # H
    heads_v: int  # HV
    key_dim: int  # K
    value_dim: int  # V
    io_dtype: str
    scale: float
    heads_g: int = 0  # g's heads (0: HO); beta's, w's, a_log's, dt_bias's likewise
    heads_beta: int = 0
    heads_w: int = 0
    heads_a_log: int = 0
    heads_dt_bias: int = 0
    use_qk_l2norm: bool = False
    use_beta_sigmoid: bool = False
    allow_neg_eigval: bool = False
    safe_gate: bool = False
    has_a_log: bool = False
    has_dt_bias: bool = False
    gate_lower_bound: float = DEFAULT_LOWER_BOUND
    has_initial_state: bool = False
    output_final_state: bool = False
    block_v: int = 64

    def __post_init__(self) -> None:
        if self.op not in ("kda", "gdn2"):
            raise ValueError(f"KdaCutileConfig: op must be 'kda' or 'gdn2', got {self.op!r}")
        if self.value_dim % self.block_v:
            raise ValueError(
                f"KdaCutileConfig: block_v={self.block_v} must divide value_dim={self.value_dim}"
            )
        if not self.gate_lower_bound < 0:
            raise ValueError(
                f"KdaCutileConfig: gate_lower_bound must be negative, got {self.gate_lower_bound}"
            )

    @property
    def heads_out(self) -> int:
        return max(self.heads_qk, self.heads_v)

    @property
    def chunk_slots(self) -> int:
        """Rows of the chunk table (as gdn_cutile's): cdiv(T, CHUNK) + N bounds any lengths."""
        return -(-self.tokens // CHUNK) + self.sequences

    def group(self, heads: int) -> int:
        """Output heads per head of a tensor with ``heads`` heads (0: one per output head)."""
        return self.heads_out // (heads or self.heads_out)

    @property
    def key_block(self) -> int:
        """Key channels per step of the per-channel products (BK): min(32, K / 2). A whole [64, K] of
        fp32 decay factors spilled 3.2-4.9 KB per thread at K = 128 on sm_90 (scripts/cutile_resources.py),
        32 channels a step 16 B; at least two steps, as tileiras 13.4 rejects an accumulating loop of
        one (`GdnCutileBwdConfig.grad_block_v`)."""
        return min(32, self.key_dim // 2)

    @property
    def output_key_block(self) -> int:
        """Key channels per step of the output kernel's scores: min(16, K / 2). At K = 128 on sm_90,
        with the L2 norm: a spill frame of 1112 B at 32 channels a step, 288 B at 16 (and 9 KB of
        shared memory against 218)."""
        return min(16, self.key_dim // 2)

    @property
    def value_block(self) -> int:
        """Value rows per step of prepare's u = T (beta v): min(64, V / 2), at least two steps."""
        return min(64, self.value_dim // 2)

    def forward_shapes(self) -> list[tuple[str, str, tuple[int, ...]]]:
        """The forward's workspace arrays as (name, dtype, shape): what the backward carves too."""
        t, ho, k, v, io = self.tokens, self.heads_out, self.key_dim, self.value_dim, self.io_dtype
        return [
            ("table", "int32", (self.chunk_slots, 2)),
            ("offsets", "int32", (self.sequences,)),
            ("gamma", "float32", (t, ho, k)),
            ("w", io, (t, ho, k)),
            ("u", io, (t, ho, v)),
            ("h", io, (self.chunk_slots, ho, v, k)),  # the state entering each chunk
            ("v_new", io, (t, ho, v)),
        ]

    def workspace_regions(self) -> tuple[Region, ...]:
        # the spare: what an absent operand's argument points at (never read)
        return layout_regions([*self.forward_shapes(), ("spare", "float32", (1,))])

    @property
    def workspace_bytes(self) -> int:
        return regions_bytes(self.workspace_regions())

    def grids(self) -> dict[str, tuple[int, ...]]:
        return {
            "table": (-(-self.chunk_slots // TABLE_BLOCK),),
            "offsets": (1,),
            "prepare": (self.chunk_slots, self.heads_out),
            "states": (self.sequences, self.heads_out, self.value_dim // self.block_v),
            "output": (self.chunk_slots, self.heads_out, self.value_dim // self.block_v),
        }


def kernel_arguments(cfg: KdaCutileConfig, arrays: Mapping[str, Any]) -> dict[str, tuple]:
    """Each kernel's arguments in its order. ``arrays``: the operands by name (q, k, v, g, beta,
    cu_seqlens, o; w_gate for GDN-2; a_log, dt_bias, h0, ht where used), the workspace regions by
    name (``spare`` among them) and ``spare2`` / ``spare4`` ([1, 1] / [1, 1, 1, 1] views of it)
    standing in for the absent ones."""

    def get(name: str, spare: str) -> Any:
        return arrays[name] if arrays.get(name) is not None else arrays[spare]

    flag = int
    return {
        "table": (arrays["cu_seqlens"], arrays["table"], cfg.sequences, CHUNK, TABLE_BLOCK, TABLE_SEQ_BLOCK),
        "prepare": (
            arrays["k"], arrays["v"], arrays["g"], arrays["beta"], get("w_gate", "spare"),
            get("a_log", "spare"), get("dt_bias", "spare2"), arrays["cu_seqlens"], arrays["table"],
            arrays["gamma"], arrays["w"], arrays["u"], get("t", "spare4"), arrays["q"], get("q_decayed", "spare"),
            get("k_decayed", "spare"), get("scores", "spare"), cfg.group(cfg.heads_qk), cfg.group(cfg.heads_v), cfg.group(cfg.heads_g), cfg.group(cfg.heads_beta),
            cfg.group(cfg.heads_w), cfg.group(cfg.heads_a_log), cfg.group(cfg.heads_dt_bias),
            flag(cfg.use_qk_l2norm), flag(cfg.use_beta_sigmoid), flag(cfg.allow_neg_eigval),
            flag(cfg.safe_gate), flag(cfg.has_a_log), flag(cfg.has_dt_bias), flag(cfg.op == "gdn2"),
            float(cfg.gate_lower_bound), flag(cfg.op == "gdn2"), flag(arrays.get("t") is not None),
            cfg.key_dim, cfg.value_dim, cfg.key_block, cfg.value_block, CHUNK,
        ),
        "offsets": (arrays["cu_seqlens"], arrays["offsets"], cfg.sequences, CHUNK, TABLE_SEQ_BLOCK),
        "states": (
            arrays["k"], arrays["w"], arrays["u"], arrays["gamma"], arrays["cu_seqlens"], arrays["offsets"],
            get("h0", "spare4"), arrays["h"], arrays["v_new"], get("ht", "spare4"), cfg.group(cfg.heads_qk),
            flag(cfg.use_qk_l2norm), flag(cfg.has_initial_state), flag(cfg.output_final_state), cfg.key_dim,
            cfg.block_v, CHUNK,
        ),
        "output": (
            arrays["q"], arrays["k"], arrays["gamma"], arrays["cu_seqlens"], arrays["table"], arrays["h"],
            arrays["v_new"], arrays["o"], cfg.group(cfg.heads_qk), flag(cfg.use_qk_l2norm), cfg.key_dim,
            cfg.output_key_block, cfg.block_v, CHUNK, float(cfg.scale),
        ),
    }  # fmt: skip


def launch_forward(
    launch: Callable[[tuple, Any, tuple], None], kernels: Mapping[str, Any], cfg: KdaCutileConfig, arrays
) -> None:
    """The forward in stream order: `LAUNCHES`, each ``launch(grid, kernels[name], args)``."""
    grids, args = cfg.grids(), kernel_arguments(cfg, arrays)
    for name in LAUNCHES:
        launch(grids[name], kernels[name], args[name])
