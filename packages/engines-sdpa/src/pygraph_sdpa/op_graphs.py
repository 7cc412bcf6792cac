"""The torch op's graphs: one ``sdpa`` (or ``sdpa_backward``) graph per problem, planned and built
once, then executed per call with the call's tensors.

A key is everything a graph declares: the `SdpaProblem` (shapes, dtype, device, padding, ragged),
the masks and the scale. A ragged (THD) problem's tensors are declared [N, H, S, D] with the THD
strides (a token's heads side by side, tokens one after another) and a ragged offset each
(int32 [N + 1, 1, 1, 1], the element offset of each sequence's first token), with the padding mask
over each sequence's length, as cuDNN's SDPA takes them; the stats stay [N, H, S, 1]. The first
call of a key builds the graph, so it runs whatever plan the planner ranks first (the cuDNN backend's where a
cuDNN runtime is installed, else the CuTe DSL engine's); a graph nothing serves raises the planner's
`pygraph.GraphNotSupportedError`, which is not cached; a first call while torch's current stream
captures a CUDA graph raises `pygraph.errors.StreamCaptureError` instead of building. Operands are
declared contiguous (the op passes contiguous tensors); O and the gradients in the io dtype, the
stats (lse) fp32. The cache and `execute` (on torch's current stream) are `pygraph.op_support`'s.
"""

from __future__ import annotations

from typing import Any

import torch

from pygraph.op_support import (
    BuiltGraph,
    GraphCache,
    built,
    declare,
    declare_output,
    device_facts,
    execute,
    plan_and_build,
)
from pygraph_sdpa.op_arguments import CALL, SdpaMasks, SdpaProblem

__all__ = ["GRAPHS", "backward_graph", "execute", "forward_graph"]

GRAPHS = GraphCache()


def _shape(p: SdpaProblem, name: str) -> tuple[int, int, int, int]:
    heads, seq = (p.heads_q, p.seq_q) if name in ("q", "o", "dO", "dQ") else (p.heads_kv, p.seq_kv)
    dim = p.head_dim_v if name in ("v", "o", "dO", "dV") else p.head_dim_qk
    return (p.batch, heads, seq, dim)


def _bind(g: Any, p: SdpaProblem, ports: dict[str, Any], name: str, t: Any) -> None:
    """``t`` as port ``name``; in a ragged problem with the THD strides and its ragged offset, port
    ``<name>_offset``."""
    ports[name] = t
    if p.ragged:
        b, h, s, d = _shape(p, name)
        t.set_stride([s * h * d, d, h * d, 1])
        ports[f"{name}_offset"] = declare(g, f"{name}_offset", (b + 1, 1, 1, 1), torch.int32)
        t.set_ragged_offset(ports[f"{name}_offset"])


def _port(g: Any, p: SdpaProblem, ports: dict[str, Any], name: str) -> None:
    _bind(g, p, ports, name, declare(g, name, _shape(p, name), p.io_dtype))


def _output(g: Any, p: SdpaProblem, ports: dict[str, Any], name: str, t: Any) -> None:
    declare_output(t, _shape(p, name), p.io_dtype)
    _bind(g, p, ports, name, t)


def _inputs(g: Any, p: SdpaProblem) -> dict[str, Any]:
    ports: dict[str, Any] = {}
    for name in ("q", "k", "v"):
        _port(g, p, ports, name)
    if p.padded or p.ragged:
        ports["seq_len_q"] = declare(g, "seq_len_q", (p.batch, 1, 1, 1), torch.int32)
        ports["seq_len_kv"] = declare(g, "seq_len_kv", (p.batch, 1, 1, 1), torch.int32)
    return ports


def _padding(ports: dict[str, Any]) -> dict[str, Any]:
    if "seq_len_q" not in ports:
        return {}
    return {"use_padding_mask": True, "seq_len_q": ports["seq_len_q"], "seq_len_kv": ports["seq_len_kv"]}


def _graph(name: str, p: SdpaProblem) -> Any:
    import pygraph

    # fp32 intermediates and compute: the cuDNN backend refuses an sdpa node whose accumulation type
    # is left to default (it must be FLOAT or HALF), and fp32 is the only one that keeps softmax exact
    return pygraph.Graph(
        name=name, io_data_type=p.io_dtype, intermediate_data_type=torch.float32,
        compute_data_type=torch.float32, **device_facts(p.device),
    )  # fmt: skip


def _built(g: Any, ports: dict[str, Any], device: torch.device) -> BuiltGraph:
    plan_and_build(g)  # this module's name: the device tests plan onto the python engines through it
    return built(g, ports, device)


def forward_graph(p: SdpaProblem, masks: SdpaMasks, scale: float) -> BuiltGraph:
    """The built sdpa graph of ``p``: outputs O [B, H, S_q, D_v] (io dtype) and lse [B, H, S_q, 1] fp32."""
    key = ("sdpa", p, masks, scale)

    def build() -> BuiltGraph:
        g = _graph("sdpa", p)
        ports = _inputs(g, p)
        o, stats = g.sdpa(
            ports["q"], ports["k"], ports["v"], generate_stats=True, attn_scale=scale,
            **masks.graph_attrs(), **_padding(ports),
        )  # fmt: skip
        _output(g, p, ports, "o", o)
        declare_output(stats, p.lse_shape, torch.float32)
        ports["lse"] = stats
        return _built(g, ports, p.device)

    return GRAPHS.get(key, build, call=CALL, device=p.device)


def backward_graph(p: SdpaProblem, masks: SdpaMasks, scale: float) -> BuiltGraph:
    """The built sdpa_backward graph of ``p``: inputs plus O, dO and lse; dQ, dK, dV in the io dtype."""
    key = ("sdpa_backward", p, masks, scale)

    def build() -> BuiltGraph:
        g = _graph("sdpa_backward", p)
        ports = _inputs(g, p)
        _port(g, p, ports, "o")
        _port(g, p, ports, "dO")
        ports["lse"] = declare(g, "lse", p.lse_shape, torch.float32)
        grads = g.sdpa_backward(
            ports["q"], ports["k"], ports["v"], ports["o"], ports["dO"], ports["lse"], attn_scale=scale,
            **masks.graph_attrs(), **_padding(ports),
        )  # fmt: skip
        for name, port in zip(("dQ", "dK", "dV"), grads):
            _output(g, p, ports, name, port)
        return _built(g, ports, p.device)

    return GRAPHS.get(key, build, call=CALL, device=p.device)
