"""``sdpa_fwd_sm90``: the ``sdpa_fwd`` family's Hopper forward (CuTe DSL, ``kernels/sdpa_fwd_sm90.py``).

It serves dense [B, H, S, D] attention with D == D_v of 64 or 128 in bf16 or fp16: causal masks in
either alignment, sliding windows (left and right bounds), GQA and MQA, padding through seq_len_q /
seq_len_kv, a numeric attn_scale and the Stats output. Every other feature (dropout, bias, ALiBi,
ragged THD, paged KV, a tensor scale, ...) is declined with the reason, and the backend serves it.
`build_plan` compiles the configuration (about 10 s on a CPU core, then kept per process and on
disk: `sdpa_fwd_sm90_host.compiled_forward`); a call checks the declared geometry and the 16-byte
alignment the copies need, and launches with raw addresses.
"""

from __future__ import annotations

import importlib.util
import math
from typing import Any

from pygraph.engines.base import (
    BaseEngine,
    Capabilities,
    CompiledPlan,
    EngineRequest,
    ExecutionContext,
    PlanConfig,
)
from pygraph.errors import GraphNotSupportedError
from pygraph.ir.dtypes import data_type
from pygraph_sdpa.analyzer import SdpaFacts
from pygraph_sdpa.kernels.sdpa_fwd_sm90_host import HEAD_DIMS, POINTERS, SdpaFwdKey, compiled_forward

__all__ = ["SdpaFwdSm90Engine", "SdpaFwdSm90Plan"]

_INSTALL = "pip install 'pygraph-engines-sdpa[cute]'"
_FEATURES = frozenset(
    {
        "causal",
        "causal_bottom_right",
        "bottom_right",
        "window_left",
        "window_right",
        "gqa",
        "padding",
        "stats",
    }
)
_IO = {data_type.BFLOAT16: "bfloat16", data_type.HALF: "float16"}
_VEC = 8  # elements per 16-byte copy


def _dims(t: Any) -> tuple[int, ...]:
    return tuple(int(d) for d in t.dim)


def _strides(t: Any) -> tuple[int, ...]:
    dims = _dims(t)
    if t.stride:
        return tuple(int(s) for s in t.stride)
    out, acc = [], 1
    for d in reversed(dims):
        out.append(acc)
        acc *= d
    return tuple(reversed(out))


def _support_reason(facts: SdpaFacts) -> str | None:
    """Why sdpa_fwd_sm90 cannot serve these facts (the rule and the value), or None."""
    if facts.backward:
        return "serves SDPA (forward) graphs; SDPA_BWD graphs are the backend's"
    if facts.stray_nodes:
        return f"serves a graph of one SDPA node, this one also has {list(facts.stray_nodes)}"
    if facts.head_dim_qk != facts.head_dim_v or facts.head_dim_qk not in HEAD_DIMS:
        return (
            f"head dims qk={facts.head_dim_qk}, v={facts.head_dim_v}: both must be one of {HEAD_DIMS}, equal"
        )
    if len(set(facts.dtypes)) != 1 or facts.o.data_type is not facts.q.data_type:
        names = [getattr(t.data_type, "name", t.data_type) for t in (facts.q, facts.k, facts.v, facts.o)]
        return f"q, k, v and O must share one dtype, got {names}"
    if facts.gqa_ratio is None or facts.heads_v <= 0 or facts.heads_q % facts.heads_v:
        return (
            f"query heads {facts.heads_q} must be a multiple of K's {facts.heads_k} and V's {facts.heads_v}"
        )
    if facts.scale is None:
        why = "a tensor" if facts.scale_is_tensor else "not given (the backend's default applies)"
        return f"attn_scale must be a number, it is {why}"
    if facts.scale <= 0:
        return f"attn_scale must be positive (masked scores stay -inf through it), got {facts.scale}"
    if facts.window_left is not None and facts.window_left < 1:
        return f"window_left must be >= 1 or unbounded, got {facts.window_left}"
    if facts.window_right is not None and facts.window_right < 0:
        return f"window_right must be >= 0 or unbounded, got {facts.window_right}"
    if facts.stats is not None and facts.stats.data_type is not data_type.FLOAT:
        return f"Stats must be FLOAT, got {facts.stats.data_type.name}"
    for role, t in (("q", facts.q), ("k", facts.k), ("v", facts.v), ("O", facts.o)):
        dims, strides = _dims(t), _strides(t)
        if len(dims) != 4:
            return f"{role} must be 4-d [B, H, S, D], got {list(dims)}"
        if strides[3] != 1:
            return f"{role}'s head dim must be contiguous (stride 1), got strides {list(strides)}"
        if any(s % _VEC for s in strides[:3]):
            return f"{role}'s batch, head and row strides must be multiples of {_VEC} (16-byte rows), got {list(strides)}"
        span = sum((d - 1) * s for d, s in zip(dims, strides)) + 1
        if span >= 2**31:
            return f"{role} spans {span} elements: the kernel indexes with 32-bit offsets (< 2^31)"
    if facts.stats is not None:
        want = [facts.batch, facts.heads_q, facts.seq_q, 1]
        if list(_dims(facts.stats)) != want or _strides(facts.stats)[:3] != (
            facts.heads_q * facts.seq_q,
            facts.seq_q,
            1,
        ):
            return f"Stats must be contiguous {want}, got shape {list(_dims(facts.stats))} stride {list(_strides(facts.stats))}"
    return None


def key_for(facts: SdpaFacts) -> SdpaFwdKey:
    return SdpaFwdKey(
        head_dim=facts.head_dim_qk,
        io_dtype=_IO[facts.q.data_type],
        bottom_right=facts.bottom_right,
        window_left=-1 if facts.window_left is None else int(facts.window_left),
        window_right=-1 if facts.window_right is None else int(facts.window_right),
        padded=facts.padded,
        store_stats=facts.stats is not None,
    )


class SdpaFwdSm90Plan(CompiledPlan):
    """The compiled forward bound to one graph: each pointer's pack position (or none) and the sizes."""

    reads_stream = True

    def __init__(self, name: str, fn: Any, rows: tuple, sizes: tuple, scale_log2: float) -> None:
        self._name, self._fn, self._sizes, self._scale_log2 = name, fn, sizes, scale_log2
        self._rows = rows  # (role, pack position or -1, declared shape, declared stride)

    def get_workspace_size(self) -> int:
        return 0

    def execute(self, graph: Any, pack: Any, ctx: ExecutionContext) -> None:
        bufs = pack.buffers
        pointers = []
        for role, pos, shape, stride in self._rows:
            if pos < 0:
                pointers.append(0)
                continue
            buf = bufs[pos]
            if buf.shape != shape or buf.stride != stride:
                raise ValueError(
                    f"sdpa_fwd_sm90 (graph {self._name!r}): operand {role} is shape {list(buf.shape)} stride "
                    f"{list(buf.stride)}; the plan is compiled for the declared {list(shape)} stride {list(stride)}"
                )
            if role in ("q", "k", "v", "o") and buf.pointer % 16:
                raise ValueError(
                    f"sdpa_fwd_sm90 (graph {self._name!r}): operand {role} at {buf.pointer:#x} is not 16-byte "
                    "aligned (its rows are copied 16 bytes at a time)"
                )
            pointers.append(buf.pointer)
        self._fn(*pointers, *self._sizes, self._scale_log2, ctx.stream or 0)


class SdpaFwdSm90Engine(BaseEngine):
    name = "sdpa_fwd_sm90"
    capabilities = Capabilities(
        sm_lo=90, sm_hi=90, dtypes={data_type.BFLOAT16, data_type.HALF}, features=_FEATURES, knob_domains={}
    )

    def _facts(self, request: EngineRequest) -> SdpaFacts:
        facts = request.facts
        if not isinstance(facts, SdpaFacts):
            raise GraphNotSupportedError(
                f"{self.name}: graph {request.graph.name!r} came with no sdpa facts (got {type(facts).__name__})"
            )
        return facts

    def check_support(self, request: EngineRequest) -> None:
        facts = self._facts(request)
        reason = self.capabilities.mismatch(facts, device=request.device) or _support_reason(facts)
        if reason is not None:
            raise GraphNotSupportedError(f"{self.name}: {reason}")
        if importlib.util.find_spec("cutlass") is None:
            raise ImportError(f"{self.name}: needs CuTe DSL ({_INSTALL})")

    def get_workspace_size(self, request: EngineRequest, plan: PlanConfig) -> int:
        return 0

    def build_plan(
        self, request: EngineRequest, plan: PlanConfig, ctx: ExecutionContext | None
    ) -> CompiledPlan:
        self.check_support(request)
        facts = self._facts(request)
        problem = self.capabilities.mismatch(facts, plan.knobs or {})
        if problem is not None:
            raise GraphNotSupportedError(f"{self.name}: {problem}")
        node = facts.node
        tensors = {
            "q": facts.q,
            "k": facts.k,
            "v": facts.v,
            "o": facts.o,
            "stats": facts.stats,
            "seq_len_q": node.inputs.get("seq_len_q") if facts.padded else None,
            "seq_len_kv": node.inputs.get("seq_len_kv") if facts.padded else None,
        }
        if facts.padded and (tensors["seq_len_q"] is None or tensors["seq_len_kv"] is None):
            raise GraphNotSupportedError(f"{self.name}: padding needs both seq_len_q and seq_len_kv")
        for role in ("seq_len_q", "seq_len_kv"):
            t = tensors[role]
            if t is not None and (t.data_type is not data_type.INT32 or math.prod(_dims(t)) != facts.batch):
                raise GraphNotSupportedError(
                    f"{self.name}: {role} must be INT32 with one value per batch ({facts.batch}), "
                    f"got {getattr(t.data_type, 'name', t.data_type)} {list(_dims(t))}"
                )
        layout = request.layout
        rows = []
        for role in POINTERS:
            t = tensors[role]
            if t is None:
                rows.append((role, -1, (), ()))
                continue
            pos = layout.position(t)
            d = layout.declared[pos]
            rows.append((role, pos, tuple(d.shape), tuple(d.stride)))
        q, k, v, o = (_strides(tensors[r]) for r in ("q", "k", "v", "o"))
        sizes = (
            facts.batch, facts.heads_q, facts.heads_k, facts.heads_v, facts.seq_q, facts.seq_kv,
            *q[:3], *k[:3], *v[:3], *o[:3],
        )  # fmt: skip
        fn = compiled_forward(key_for(facts))
        return SdpaFwdSm90Plan(request.graph.name, fn, tuple(rows), sizes, facts.scale * math.log2(math.e))
