"""The host side of the cuTile backward (``gdn_cutile_bwd``): the workspace carve, the grids, each
launch's arguments and the launch order. Pure Python, like `gdn.cutile_host` (whose table and
prepare launches it reuses): the kernels come in as an argument, so the call path runs, and is
tested, with stand-ins where cuTile is absent.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

from pygraph_linear_attention.common.host import CHUNK, TABLE_SEQ_BLOCK, Region, layout_regions
from pygraph_linear_attention.gdn.cutile_host import GdnCutileConfig, kernel_arguments

__all__ = ["SUM_BLOCK", "GdnCutileBwdConfig", "backward_arguments", "launch_backward"]

SUM_BLOCK = 64  # tokens per program of the head-group sums

# launch name -> the kernel it runs (the table and prepare kernels are the forward's)
KERNEL_OF = {
    "table": "table", "offsets": "offsets", "prepare": "prepare", "states": "states",
    "grad_scan": "grad_scan", "chunk_grad_output": "chunk_grad_output", "chunk_grad_wy": "chunk_grad_wy",
    "dQ": "group_sum", "dK": "group_sum",
    "dV": "group_sum", "dG": "gate_sum", "dBeta": "gate_sum", "d_a_log": "param_sum", "d_dt_bias": "param_sum",
    # the split scans (SEGMENT): the forward's segment kernels, the chunk offsets of the segments,
    # grad_scan from zero over each segment (its G), and the reverse walk over the segments
    "seg_table": "seg_table", "seg_offsets": "seg_offsets", "seg_bounds": "seg_bounds",
    "seg_chunk_offsets": "offsets", "segment_scan": "segment_scan", "segment_combine": "segment_combine",
    "grad_segments": "grad_scan", "segment_combine_grad": "segment_combine_grad",
}  # fmt: skip
_SPLIT = ("seg_table", "seg_offsets", "seg_bounds", "seg_chunk_offsets", "segment_scan", "segment_combine")


@dataclasses.dataclass(frozen=True)
class GdnCutileBwdConfig(GdnCutileConfig):
    """One gdn_bwd problem as the kernels see it: the forward's fields (``has_initial_state``: the
    graph gives initial_state and wants d_initial_state) plus whether d_final_state is given."""

    has_d_final_state: bool = False

    def workspace_regions(self) -> tuple[Region, ...]:
        """The forward's table, gamma, w and u; the chunk offsets; each chunk's T (fp32); the
        per-chunk states and their gradients (io dtype); v_new and dv_new; the per-output-head fp32
        gradients, w's, and each key block's terms of d gamma; a spare."""
        t, ho, kd, vd, io = self.tokens, self.heads_out, self.key_dim, self.value_dim, self.io_dtype
        slots = self.chunk_slots
        shapes = [
            ("table", "int32", (slots, 2)),
            ("offsets", "int32", (self.sequences,)),
            ("t", "float32", (slots, ho, CHUNK, CHUNK)),
            ("gamma", "float32", (t, ho)),
            ("w", io, (t, ho, kd)),
            ("u", io, (t, ho, vd)),
            ("h", io, (slots, ho, vd, kd)),
            ("dh", io, (slots, ho, vd, kd)),
            ("v_new", io, (t, ho, vd)),
            ("dv_new", io, (t, ho, vd)),
            ("dq", "float32", (t, ho, kd)),
            ("dk", "float32", (t, ho, kd)),
            ("dw", "float32", (t, ho, kd)),
            ("dgamma", "float32", (t, ho, kd // self.grad_block_k)),
            ("dv", "float32", (t, ho, vd)),
            ("dg", "float32", (t, ho)),
            ("dbeta", "float32", (t, ho)),
            ("da", "float32", (t, ho)),
        ]
        if self.segment:
            # seg_n holds each segment's N, then (once segment_combine has read it) its G, the
            # gradient grad_scan makes from zero inside it; seg_h0 the state entering each segment,
            # then (once the state scan has read it) the gradient of the state leaving it
            shapes += [*self.segment_regions(), ("seg_chunk_offsets", "int32", (self.segment_slots,))]
        shapes.append(("spare", "float32", (16,)))
        return layout_regions(shapes)

    @property
    def grad_block_v(self) -> int:
        """Value rows per step of the chunk gradient kernels' loops over the value dim: min(64, V / 2),
        so a loop runs at least twice. With one step (BV = V: V = 64 at 64, or V = 128 at 128)
        tileiras 13.4 fails to schedule such a kernel ("invalid use-def chain in schedule"), on
        sm_90 as on the others; with two or more it compiles (checked for V = 64, 128 and 256)."""
        return min(64, self.value_dim // 2)

    @property
    def grad_block_k(self) -> int:
        """Key columns per program of chunk_grad_output_kernel (and per step of chunk_grad_wy_kernel's
        loops over the key dim): min(64, K / 2), for the same reason as `grad_block_v`. A program's
        three [64, BK] fp32 accumulators and its [64, 64] one then fit in registers: the whole key
        dim in one program spilled 15.8 KB per thread at K = 128 (scripts/cutile_resources.py)."""
        return min(64, self.key_dim // 2)

    @property
    def direct_qk(self) -> bool:
        """Whether the chunk kernels write dQ and dK themselves: one output head per q/k head and no
        l2 norm to take them through, so their head sums would only cast."""
        return self.heads_qk == self.heads_out and not self.use_qk_l2norm

    @property
    def direct_v(self) -> bool:
        """Whether chunk_grad_wy_kernel writes dV itself (one output head per v head)."""
        return self.heads_v == self.heads_out

    def launches(self) -> tuple[str, ...]:
        """The launches in stream order (the head sums only where a gradient is not written
        directly, the parameter sums only where the graph has those outputs)."""
        names = ["table", "offsets", "prepare"]
        if self.segment:
            names += [*_SPLIT, "states", "grad_segments", "segment_combine_grad", "grad_scan"]
        else:
            names += ["states", "grad_scan"]
        names += ["chunk_grad_output", "chunk_grad_wy"]
        if not self.direct_qk:
            names += ["dQ", "dK"]
        if not self.direct_v:
            names.append("dV")
        names += ["dG", "dBeta"]
        if self.safe_gate:
            names.append("d_a_log")
            if self.has_dt_bias:
                names.append("d_dt_bias")
        return tuple(names)

    def grids(self) -> dict[str, tuple[int, ...]]:
        forward = super().grids()
        blocks = -(-self.tokens // SUM_BLOCK)
        split = {name: forward[name] for name in _SPLIT if name in forward}
        if self.segment:
            split |= {
                "seg_chunk_offsets": (1,),
                "grad_segments": forward["scan"],
                "segment_combine_grad": forward["segment_combine"],
            }
        return split | {
            "table": forward["table"],
            "offsets": (1,),
            "prepare": forward["prepare"],
            "states": forward["scan"],
            "grad_scan": forward["scan"],
            "chunk_grad_output": (self.chunk_slots, self.heads_out, self.key_dim // self.grad_block_k),
            "chunk_grad_wy": (self.chunk_slots, self.heads_out),
            "dQ": (blocks, self.heads_qk),
            "dK": (blocks, self.heads_qk),
            "dV": (blocks, self.heads_v),
            "dG": (blocks, self.heads_g),
            "dBeta": (blocks, self.heads_beta),
            "d_a_log": (self.heads_a_log,),
            "d_dt_bias": (self.heads_dt_bias,),
        }


def backward_arguments(cfg: GdnCutileBwdConfig, arrays: Mapping[str, Any]) -> dict[str, tuple]:
    """Each launch's argument tuple, from the call's arrays by name.

    ``arrays``: the graph's q k v g beta cu_seqlens dO and dQ dK dV dG dBeta; a_log dt_bias, h0
    (initial_state), dht (d_final_state), dh0 (d_initial_state), d_a_log d_dt_bias (1-d views)
    where the graph has them; the workspace's regions by name (`GdnCutileBwdConfig.workspace_regions`)
    and ``spare4`` (the spare region as [1, 1, 1, 1]). An absent optional array is a spare, never
    read or written: its flag is off.
    """

    def get(name: str, spare: str) -> Any:
        found = arrays.get(name)
        return arrays[spare] if found is None else found

    # the forward's tuples: its table and prepare (and its split scan's first launches) run here,
    # its scan never (cfg.output_final_state is off in a backward: no final state is stored)
    forward = kernel_arguments(cfg, {"o": None, **arrays})
    ho, a = cfg.heads_out, arrays
    kg, l2, scale = ho // cfg.heads_qk, int(cfg.use_qk_l2norm), float(cfg.scale)
    kd, vd, bv = cfg.key_dim, cfg.value_dim, cfg.block_v

    def states(cu: Any, offsets: Any, h0: Any, has_h0: int) -> tuple:
        return (
            a["k"], a["w"], a["u"], a["gamma"], cu, offsets, h0, a["h"], a["v_new"], kg, l2, has_h0, kd, bv, CHUNK,
        )  # fmt: skip

    def grad_scan(cu: Any, offsets: Any, dht: Any, dh0: Any, has_dht: int, has_h0: int, store: int) -> tuple:
        return (
            a["q"], a["k"], a["w"], a["gamma"], a["dO"], cu, offsets, dht, a["dh"], a["dv_new"], dh0, kg, l2,
            has_dht, has_h0, store, kd, bv, CHUNK, scale,
        )  # fmt: skip

    split: dict[str, tuple] = {}
    if cfg.segment:
        combine_grad = (
            a["seg_n"], a["seg_m"], a["seg_offsets"], a["cu_seqlens"], get("dht", "spare4"), a["seg_h0"],
            get("dh0", "spare4"), int(cfg.has_d_final_state), int(cfg.has_initial_state), kd, vd, bv,
            cfg.segment * CHUNK, min(32, kd), 1,
        )  # fmt: skip
        segments, seg_cu, seg_offsets = cfg.segment_slots, a["seg_cu"], a["seg_chunk_offsets"]
        split = {name: forward[name] for name in _SPLIT if name in forward}  # the forward's own
        split |= {
            "seg_chunk_offsets": (seg_cu, seg_offsets, segments, CHUNK, TABLE_SEQ_BLOCK),
            # the state scan over the segments, each from its entering state
            "states": states(seg_cu, seg_offsets, a["seg_h0"], 1),
            # each segment's G: grad_scan from zero, its per-chunk stores off, its last state to seg_n
            "grad_segments": grad_scan(seg_cu, seg_offsets, a["spare4"], a["seg_n"], 0, 1, 0),
            # the forward's walk reversed: from d_final_state, dS M^T + G segment after segment
            "segment_combine_grad": combine_grad,
            # the gradient scan over the segments, each from the gradient leaving it
            "grad_scan": grad_scan(seg_cu, seg_offsets, a["seg_h0"], a["spare4"], 1, 0, 1),
        }
    args = {
        "table": forward["table"],
        "offsets": (a["cu_seqlens"], a["offsets"], cfg.sequences, CHUNK, TABLE_SEQ_BLOCK),
        "prepare": forward["prepare"],
        "states": states(a["cu_seqlens"], a["offsets"], get("h0", "spare4"), int(cfg.has_initial_state)),
        "grad_scan": grad_scan(
            a["cu_seqlens"], a["offsets"], get("dht", "spare4"), get("dh0", "spare4"), int(cfg.has_d_final_state),
            int(cfg.has_initial_state), 1,
        ),
        "chunk_grad_output": (
            a["q"], a["k"], a["gamma"], a["dO"], a["cu_seqlens"], a["table"], a["h"], a["dh"], a["v_new"],
            a["dv_new"], a["dq"], a["dQ"], a["dk"], a["dw"], a["dgamma"], kg, l2, int(cfg.direct_qk), kd, vd,
            cfg.grad_block_k,
            cfg.grad_block_v, CHUNK, scale,
        ),
        "chunk_grad_wy": (
            a["k"], a["v"], a["g"], a["beta"], get("a_log", "spare"), get("dt_bias", "spare"), a["cu_seqlens"],
            a["table"], a["t"], a["dv_new"], a["dw"], a["dk"], a["dgamma"], a["dv"], a["dK"], a["dV"], a["dg"],
            a["dbeta"], a["da"], kg, ho // cfg.heads_v, ho // cfg.heads_g, ho // cfg.heads_beta,
            ho // cfg.heads_a_log, ho // cfg.heads_dt_bias, l2, int(cfg.use_beta_sigmoid), int(cfg.allow_neg_eigval),
            int(cfg.safe_gate), int(cfg.has_dt_bias), int(cfg.direct_qk), int(cfg.direct_v), kd, vd, cfg.grad_block_k, cfg.grad_block_v, kd // cfg.grad_block_k, CHUNK,
        ),
        "dQ": (a["dq"], a["q"], a["dQ"], kg, l2, kd, SUM_BLOCK),
        "dK": (a["dk"], a["k"], a["dK"], kg, l2, kd, SUM_BLOCK),
        "dV": (a["dv"], a["v"], a["dV"], ho // cfg.heads_v, 0, vd, SUM_BLOCK),
        "dG": (a["dg"], a["dG"], ho // cfg.heads_g, SUM_BLOCK),
        "dBeta": (a["dbeta"], a["dBeta"], ho // cfg.heads_beta, SUM_BLOCK),
        "d_a_log": (a["da"], get("d_a_log", "spare"), cfg.tokens, ho // cfg.heads_a_log, SUM_BLOCK),
        "d_dt_bias": (a["dg"], get("d_dt_bias", "spare"), cfg.tokens, ho // cfg.heads_dt_bias, SUM_BLOCK),
    }  # fmt: skip
    return args | split


def launch_backward(
    launch: Callable[[tuple, Any, tuple], Any],
    kernels: Mapping[str, Any],
    cfg: GdnCutileBwdConfig,
    arrays: Mapping[str, Any],
) -> None:
    """The backward's launches in stream order (`GdnCutileBwdConfig.launches`).

    ``launch(grid, kernel, args)`` enqueues one kernel; ``kernels`` maps the forward's table and
    prepare and the backward's kernels by name (``{**gdn.cutile_fwd.KERNELS, **gdn.cutile_bwd.BWD_KERNELS}``).
    """
    args, grids = backward_arguments(cfg, arrays), cfg.grids()
    for name in cfg.launches():
        launch(grids[name], kernels[KERNEL_OF[name]], args[name])
