"""Host side of the KDA / GDN-2 cuTile backward (`kda.cutile_bwd`): the workspace carve, the grids,
each launch's arguments and the launch order. Pure Python, like `kda.cutile_host` (whose table and
prepare launches it reuses, T stored): the kernels come in as an argument, so the call path runs,
and is tested, with stand-ins where cuTile is absent.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

from pygraph_linear_attention.common.host import CHUNK, Region, layout_regions
from pygraph_linear_attention.kda.cutile_host import KdaCutileConfig, kernel_arguments

__all__ = ["SUM_BLOCK", "KdaCutileBwdConfig", "backward_arguments", "launch_backward"]

SUM_BLOCK = 64  # tokens per program of the head-group sums

# launch name -> the kernel it runs (`kda.cutile_bwd.BWD_KERNELS`)
KERNEL_OF = {
    "table": "table", "offsets": "offsets", "prepare": "prepare", "states": "states", "grad_scan": "grad_scan",
    "grad_output": "grad_output", "grad_dt": "grad_dt", "grad_wy": "grad_wy", "dQ": "group_sum", "dK": "group_sum", "dV": "group_sum",
    "dG": "group_sum", "dBeta": "group_sum", "dBeta_token": "gate_sum", "dW": "group_sum",
    "d_a_log": "param_sum", "d_dt_bias": "channel_param_sum",
}  # fmt: skip


@dataclasses.dataclass(frozen=True)
class KdaCutileBwdConfig(KdaCutileConfig):
    """One kda_bwd / gdn2_bwd problem as the kernels see it: the forward's fields
    (``has_initial_state``: the graph gives initial_state and wants d_initial_state) plus whether
    d_final_state is given."""

    has_d_final_state: bool = False

    @property
    def grad_block_v(self) -> int:
        """Value rows per step of the chunk gradient kernels' loops: min(64, V / 2), so a loop runs
        at least twice (tileiras 13.4 fails to schedule such an accumulating loop of one step:
        `GdnCutileBwdConfig.grad_block_v`)."""
        return min(64, self.value_dim // 2)

    @property
    def key_block(self) -> int:
        """Key channels per step of the backward's prepare launch: min(16, K / 2). It also takes the
        gradient scan's decayed operands (the scores P, q exp(gamma), k exp(last - gamma)); at K = 128
        on sm_90 its spill frame is 552 B at 16 channels a step against 1704 B at the forward's 32,
        and the gradient scan's falls from 3544 B (P computed inside the sequential loop) to 136 B."""
        return min(16, self.key_dim // 2)

    @property
    def grad_key_block(self) -> int:
        """Key channels per program of kda_grad_output_kernel and per step of kda_grad_dt_kernel:
        min(16, K / 2) (each channel's terms are its own; the whole key dim at once spilled 11.4 KB
        per thread in grad_output at K = 128 on sm_90, 16 channels 616 B)."""
        return min(16, self.key_dim // 2)

    @property
    def wy_key_block(self) -> int:
        """Key channels per step of kda_grad_wy_kernel: min(8, K / 2) (spill frames at K = 128 on
        sm_90: 2392 B at 16, 808 B at 8; its dA and T tiles stay live across the steps)."""
        return min(8, self.key_dim // 2)

    def workspace_regions(self) -> tuple[Region, ...]:
        """The forward's arrays (`KdaCutileConfig.forward_shapes`); each chunk's T and dA (fp32);
        the per-chunk state gradients and dv_new (io dtype); the per-output-head fp32 gradients; a
        spare."""
        t, ho, kd, vd, io = self.tokens, self.heads_out, self.key_dim, self.value_dim, self.io_dtype
        slots = self.chunk_slots
        beta = (t, ho, kd) if self.op == "gdn2" else (t, ho)
        shapes = [
            *self.forward_shapes(),
            ("t", "float32", (slots, ho, CHUNK, CHUNK)),
            ("da_mat", "float32", (slots, ho, CHUNK, CHUNK)),  # dA, from grad_dt to grad_wy
            ("dh", io, (slots, ho, vd, kd)),
            # the gradient scan's decayed operands (the prepare launch's, with T)
            ("q_decayed", io, (t, ho, kd)),
            ("k_decayed", io, (t, ho, kd)),
            ("scores", io, (t, ho, CHUNK)),
            ("dv_new", io, (t, ho, vd)),
            ("dq", "float32", (t, ho, kd)),
            ("dk", "float32", (t, ho, kd)),
            ("dw", "float32", (t, ho, kd)),
            ("dgamma", "float32", (t, ho, kd)),
            ("dv", "float32", (t, ho, vd)),
            ("dg", "float32", (t, ho, kd)),
            ("dbeta", "float32", beta),
            ("da", "float32", (t, ho)),
        ]
        if self.op == "gdn2":
            shapes.append(("dwg", "float32", (t, ho, vd)))
        shapes.append(("spare", "float32", (16,)))
        return layout_regions(shapes)

    def launches(self) -> tuple[str, ...]:
        """The launches in stream order (the parameter sums only where the graph has those outputs)."""
        names = ["table", "offsets", "prepare", "states", "grad_scan", "grad_output", "grad_dt", "grad_wy"]
        names += ["dQ", "dK", "dV", "dG", "dBeta" if self.op == "gdn2" else "dBeta_token"]
        if self.op == "gdn2":
            names.append("dW")
        if self.safe_gate and self.has_a_log:
            names.append("d_a_log")
        if self.safe_gate and self.has_dt_bias:
            names.append("d_dt_bias")
        return tuple(names)

    def grids(self) -> dict[str, tuple[int, ...]]:
        forward = super().grids()
        blocks = -(-self.tokens // SUM_BLOCK)
        return {
            **{name: forward[name] for name in ("table", "offsets", "prepare", "states")},
            "grad_scan": forward["states"],
            "grad_output": (self.chunk_slots, self.heads_out, self.key_dim // self.grad_key_block),
            "grad_dt": (self.chunk_slots, self.heads_out),
            "grad_wy": (self.chunk_slots, self.heads_out),
            "dQ": (blocks, self.heads_qk),
            "dK": (blocks, self.heads_qk),
            "dV": (blocks, self.heads_v),
            "dG": (blocks, self.heads_g or self.heads_out),
            "dBeta": (blocks, self.heads_beta or self.heads_out),
            "dBeta_token": (blocks, self.heads_beta or self.heads_out),
            "dW": (blocks, self.heads_w or self.heads_out),
            "d_a_log": (self.heads_a_log or self.heads_out,),
            "d_dt_bias": (self.heads_dt_bias or self.heads_out,),
        }


def backward_arguments(cfg: KdaCutileBwdConfig, arrays: Mapping[str, Any]) -> dict[str, tuple]:
    """Each launch's argument tuple, from the call's arrays by name.

    ``arrays``: the graph's q k v g beta cu_seqlens dO and dQ dK dV dG dBeta (GDN-2: w_gate, dW);
    a_log dt_bias, h0 (initial_state), dht (d_final_state), dh0 (d_initial_state), d_a_log
    d_dt_bias where the graph has them; the workspace's regions by name and ``spare2`` /
    ``spare4`` (the spare region as [1, 1] / [1, 1, 1, 1]). An absent optional array is a spare,
    never read or written: its flag is off.
    """

    def get(name: str, spare: str) -> Any:
        found = arrays.get(name)
        return arrays[spare] if found is None else found

    a = arrays
    forward = kernel_arguments(cfg, {"o": None, **arrays})  # its table and prepare (T stored: a["t"])
    kd, vd, bv, gv = cfg.key_dim, cfg.value_dim, cfg.block_v, cfg.grad_block_v
    kg, l2, scale = cfg.group(cfg.heads_qk), int(cfg.use_qk_l2norm), float(cfg.scale)
    gdn2 = cfg.op == "gdn2"
    return {
        "table": forward["table"],
        "offsets": forward["offsets"],
        "prepare": forward["prepare"],
        "states": forward["states"],  # the forward's state scan (no final state stored in a backward)
        "grad_scan": (
            a["q_decayed"], a["k_decayed"], a["scores"], a["w"], a["gamma"], a["dO"], a["cu_seqlens"],
            a["offsets"], get("dht", "spare4"), a["dh"], a["dv_new"], get("dh0", "spare4"),
            int(cfg.has_d_final_state), int(cfg.has_initial_state), kd, bv, CHUNK, scale,
        ),
        "grad_output": (
            a["q"], a["k"], a["gamma"], a["dO"], a["cu_seqlens"], a["table"], a["h"], a["dh"], a["v_new"],
            a["dv_new"], a["dq"], a["dk"], a["dw"], a["dgamma"], kg, l2, kd, vd, cfg.grad_key_block, gv, CHUNK,
            scale,
        ),
        "grad_dt": (
            a["k"], a["v"], a["beta"], get("w_gate", "spare"), a["gamma"], a["cu_seqlens"], a["table"], a["t"],
            a["dv_new"], a["dw"], a["dv"], get("dwg", "spare"), a["dbeta"], a["da_mat"], kg,
            cfg.group(cfg.heads_v), cfg.group(cfg.heads_beta), cfg.group(cfg.heads_w), l2,
            int(cfg.use_beta_sigmoid), int(cfg.allow_neg_eigval), int(gdn2), int(gdn2), kd, vd, cfg.grad_key_block,
            gv, CHUNK,
        ),
        "grad_wy": (
            a["k"], a["g"], a["beta"], get("a_log", "spare"), get("dt_bias", "spare2"), a["gamma"],
            a["cu_seqlens"], a["table"], a["t"], a["da_mat"], a["dw"], a["dk"], a["dgamma"], a["dg"], a["dbeta"],
            a["da"], kg, cfg.group(cfg.heads_g), cfg.group(cfg.heads_beta), cfg.group(cfg.heads_a_log),
            cfg.group(cfg.heads_dt_bias), l2, int(cfg.use_beta_sigmoid), int(cfg.allow_neg_eigval),
            int(cfg.safe_gate), int(cfg.has_a_log), int(cfg.has_dt_bias), float(cfg.gate_lower_bound), int(gdn2),
            kd, cfg.wy_key_block, CHUNK,
        ),
        "dQ": (a["dq"], a["q"], a["dQ"], kg, l2, kd, SUM_BLOCK),
        "dK": (a["dk"], a["k"], a["dK"], kg, l2, kd, SUM_BLOCK),
        "dV": (a["dv"], a["v"], a["dV"], cfg.group(cfg.heads_v), 0, vd, SUM_BLOCK),
        "dG": (a["dg"], a["g"], a["dG"], cfg.group(cfg.heads_g), 0, kd, SUM_BLOCK),
        "dBeta": (a["dbeta"], a["beta"], a["dBeta"], cfg.group(cfg.heads_beta), 0, kd, SUM_BLOCK),
        "dBeta_token": (a["dbeta"], a["dBeta"], cfg.group(cfg.heads_beta), SUM_BLOCK),
        "dW": (a["dwg"] if gdn2 else None, get("w_gate", "spare"), get("dW", "spare"), cfg.group(cfg.heads_w), 0, vd,
               SUM_BLOCK),
        "d_a_log": (a["da"], get("d_a_log", "spare"), cfg.tokens, cfg.group(cfg.heads_a_log), SUM_BLOCK),
        "d_dt_bias": (a["dg"], get("d_dt_bias", "spare2"), cfg.tokens, cfg.group(cfg.heads_dt_bias), kd, SUM_BLOCK),
    }  # fmt: skip


def launch_backward(
    launch: Callable[[tuple, Any, tuple], Any],
    kernels: Mapping[str, Any],
    cfg: KdaCutileBwdConfig,
    arrays: Mapping[str, Any],
) -> None:
    """The backward's launches in stream order (`KdaCutileBwdConfig.launches`); ``kernels`` is
    `kda.cutile_bwd.BWD_KERNELS` (or stand-ins)."""
    args, grids = backward_arguments(cfg, arrays), cfg.grids()
    for name in cfg.launches():
        launch(grids[name], kernels[KERNEL_OF[name]], args[name])
