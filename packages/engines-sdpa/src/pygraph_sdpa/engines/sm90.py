"""``sdpa_fwd_sm90`` and ``sdpa_bwd_sm90``: the sdpa families' Hopper engines (CuTe DSL,
``kernels/sdpa_fwd_sm90.py`` and ``kernels/sdpa_bwd_sm90.py``).

They serve [B, H, S, D] attention with D == D_v (64, 128 or 256 forward; 64 or 128 backward) in
bf16 or fp16: causal masks in either alignment, sliding windows (left and right bounds), GQA and
MQA, padding through seq_len_q / seq_len_kv, ragged (THD) operands through ragged offsets with the
padding mask, a numeric attn_scale and the Stats. A ragged offset is each sequence's first element
in its operand's buffer and must be a multiple of 8 (the rows are copied 16 bytes at a time; the
offsets are device data, so this is the caller's contract, as cuDNN's); the buffer of a ragged
operand is the declared [B, H, S, D] or the packed [T, H, D] with the declared head and row
strides. Every other feature (dropout, bias, ALiBi, cu_seq_len ports, paged KV, a tensor scale,
...) is declined with the reason, and the backend serves it. Knobs: the forward's P_REGS (P through shared memory or in registers), the
backward's DETERMINISTIC (dQ by atomics or by its own pass). `build_plan` compiles the configuration
(a few seconds on a CPU core, then kept per process and on disk: `sdpa_fwd_sm90_host`); a call
checks the declared geometry and the 16-byte alignment the copies need, and launches with raw
addresses.
"""

from __future__ import annotations

import importlib.util
import math
from types import MappingProxyType
from typing import Any

from pygraph.engines.base import (
    BaseEngine,
    Capabilities,
    CompiledPlan,
    EngineRequest,
    ExecutionContext,
    PlanConfig,
    kernels_ready,
)
from pygraph.errors import GraphNotSupportedError
from pygraph.execution.errors import OperandGeometryError
from pygraph.ir.dtypes import data_type
from pygraph_sdpa.analyzer import SdpaFacts
from pygraph_sdpa.kernels.sdpa_fwd_sm90_host import (
    BWD_POINTERS,
    HEAD_DIMS,
    HEAD_DIMS_BWD,
    POINTERS,
    SdpaBwdKey,
    SdpaFwdKey,
    backward_workspace,
    compiled_backward,
    compiled_forward,
)

__all__ = ["SdpaBwdSm90Engine", "SdpaBwdSm90Plan", "SdpaFwdSm90Engine", "SdpaFwdSm90Plan"]

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
        "ragged",
        "stats",
    }
)
# the backward reads the stats (it has no Stats output); deterministic: its DETERMINISTIC knob at 1
_BWD_FEATURES = (_FEATURES - {"stats"}) | {"deterministic"}
DETERMINISTIC = (0, 1)  # the backward's knob: 1 is dQ by its own pass, bitwise reproducible
_IO = {data_type.BFLOAT16: "bfloat16", data_type.HALF: "float16"}
_VEC = 8  # elements per 16-byte copy
_LOG2E = 1.4426950408889634


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


def _common_reason(facts: SdpaFacts, head_dims: tuple[int, ...]) -> str | None:
    """Why a python engine of ``head_dims`` cannot serve these facts (the rule and the value), or None."""
    if facts.stray_nodes:
        return f"serves a graph of one attention node, this one also has {list(facts.stray_nodes)}"
    if facts.head_dim_qk != facts.head_dim_v or facts.head_dim_qk not in head_dims:
        return (
            f"head dims qk={facts.head_dim_qk}, v={facts.head_dim_v}: both must be one of {head_dims}, equal"
        )
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
    if facts.stats is not None:
        if facts.stats.data_type is not data_type.FLOAT:
            return f"Stats must be FLOAT, got {facts.stats.data_type.name}"
        want = [facts.batch, facts.heads_q, facts.seq_q, 1]
        got_dims, got_strides = list(_dims(facts.stats)), _strides(facts.stats)
        if got_dims != want or got_strides[:3] != (facts.heads_q * facts.seq_q, facts.seq_q, 1):
            return f"Stats must be contiguous {want}, got shape {got_dims} stride {list(got_strides)}"
    return None


def _ragged_reason(facts: SdpaFacts, operands: dict[str, Any]) -> str | None:
    """Why the ragged (THD) operands cannot be read (the rule and the value), or None; every operand
    then needs INT32 ragged offsets of B + 1 values, read as element offsets."""
    node = facts.node
    if not facts.ragged:
        offset = [r for r, t in operands.items() if t is not None and t.ragged_offset is not None]
        if offset:
            return f"{offset} carry ragged offsets but q, k and v do not: every operand or none is ragged"
        return None
    if facts.stats is not None and facts.stats.ragged_offset is not None:
        return "Stats has a ragged offset: the kernels write it dense [B, H, S_q, 1]"
    ports = [p for p in ("cu_seq_len_q", "cu_seq_len_kv") if node.inputs.get(p) is not None]
    if ports:
        return f"ragged batches through ragged offsets only, got the {ports} ports"
    if not facts.padded:
        return "ragged operands need the padding mask (use_padding_mask with seq_len_q and seq_len_kv)"
    for role, t in operands.items():
        off = t.ragged_offset
        if off is None:
            return f"ragged: every operand needs ragged offsets, {role} has none"
        if off.data_type is not data_type.INT32 or math.prod(_dims(off)) != facts.batch + 1:
            return (
                f"ragged: {role}'s ragged offsets must be INT32 with batch + 1 ({facts.batch + 1}) values, got "
                f"{getattr(off.data_type, 'name', off.data_type)} {list(_dims(off))}"
            )
        if t.ragged_offset_multiplier != 1:
            return f"ragged: {role}'s ragged offset multiplier must be 1 (element offsets), got {t.ragged_offset_multiplier}"
    return None


def _offsets(facts: SdpaFacts, operands: dict[str, Any]) -> dict[str, Any]:
    """Each operand's ragged offsets as a pointer role ``<role>_offset`` (None when not ragged)."""
    return {f"{role}_offset": t.ragged_offset if facts.ragged else None for role, t in operands.items()}


def _rows_reason(role: str, t: Any) -> str | None:
    """Why operand ``t`` cannot be read or written by the kernels' 16-byte row copies, or None."""
    dims, strides = _dims(t), _strides(t)
    if len(dims) != 4:
        return f"{role} must be 4-d [B, H, S, D], got {list(dims)}"
    if strides[3] != 1:
        return f"{role}'s head dim must be contiguous (stride 1), got strides {list(strides)}"
    if any(s % _VEC for s in strides[:3]):
        return f"{role}'s batch, head and row strides must be multiples of {_VEC} (16-byte rows), got {list(strides)}"
    # a ragged operand's batch stride is unused (its rows start at its ragged offsets, int32 values)
    first = 1 if t.ragged_offset is not None else 0
    span = sum((d - 1) * s for d, s in zip(dims[first:], strides[first:])) + 1
    if span >= 2**31:
        return f"{role} spans {span} elements: the kernel indexes with 32-bit offsets (< 2^31)"
    return None


def _support_reason(facts: SdpaFacts) -> str | None:
    """Why sdpa_fwd_sm90 cannot serve these facts (the rule and the value), or None."""
    if facts.backward:
        return "serves SDPA (forward) graphs; SDPA_BWD graphs are sdpa_bwd_sm90's"
    reason = _common_reason(facts, HEAD_DIMS)
    if reason is not None:
        return reason
    if len(set(facts.dtypes)) != 1 or facts.o.data_type is not facts.q.data_type:
        names = [getattr(t.data_type, "name", t.data_type) for t in (facts.q, facts.k, facts.v, facts.o)]
        return f"q, k, v and O must share one dtype, got {names}"
    for role, t in (("q", facts.q), ("k", facts.k), ("v", facts.v), ("O", facts.o)):
        reason = _rows_reason(role, t)
        if reason is not None:
            return reason
    return _ragged_reason(facts, _fwd_operands(facts))


def _fwd_operands(facts: SdpaFacts) -> dict[str, Any]:
    return {"q": facts.q, "k": facts.k, "v": facts.v, "o": facts.o}


def _bwd_operands(facts: SdpaFacts) -> dict[str, Any]:
    node = facts.node
    return {
        "q": facts.q, "k": facts.k, "v": facts.v, "o": facts.o, "dO": node.inputs.get("dO"),
        "dQ": node.outputs.get("dQ"), "dK": node.outputs.get("dK"), "dV": node.outputs.get("dV"),
    }  # fmt: skip


def _bwd_reason(facts: SdpaFacts) -> str | None:
    """Why sdpa_bwd_sm90 cannot serve these facts (the rule and the value), or None."""
    if not facts.backward:
        return "serves SDPA_BWD graphs; SDPA (forward) graphs are sdpa_fwd_sm90's"
    reason = _common_reason(facts, HEAD_DIMS_BWD)
    if reason is not None:
        return reason
    if facts.heads_k != facts.heads_v:
        return f"K and V must have the same heads, got {facts.heads_k} and {facts.heads_v}"
    if facts.stats is None:
        return "needs the forward's stats"
    ops = _bwd_operands(facts)
    dtypes = {role: t.data_type for role, t in ops.items() if t is not None}
    if len(dtypes) != 8 or len(set(dtypes.values())) != 1:
        return f"q, k, v, O, dO, dQ, dK and dV must share one dtype, got { {r: getattr(d, 'name', d) for r, d in dtypes.items()} }"
    for role, t in ops.items():
        reason = _rows_reason(role, t)
        if reason is not None:
            return reason
    for like, roles in (("q", ("dO", "dQ")), ("k", ("v", "dK", "dV"))):
        for role in roles:
            if _strides(ops[role]) != _strides(ops[like]):
                return (
                    f"{role}'s strides {list(_strides(ops[role]))} must equal {like}'s {list(_strides(ops[like]))} "
                    "(the kernel reads them with one layout)"
                )
    return _ragged_reason(facts, ops)


P_REGS = (0, 1)  # the forward's knob: 1 keeps P in registers as the A operand of P V


def key_for(facts: SdpaFacts, p_in_registers: bool = False) -> SdpaFwdKey:
    return SdpaFwdKey(
        head_dim=facts.head_dim_qk,
        io_dtype=_IO[facts.q.data_type],
        bottom_right=facts.bottom_right,
        window_left=-1 if facts.window_left is None else int(facts.window_left),
        window_right=-1 if facts.window_right is None else int(facts.window_right),
        padded=facts.padded,
        store_stats=facts.stats is not None,
        p_in_registers=p_in_registers,
        ragged=facts.ragged,
    )


class SdpaFwdSm90Plan(CompiledPlan):
    """The compiled forward bound to one graph: each pointer's pack position (or none) and the sizes."""

    reads_stream = True
    checks_geometry = (
        True  # every operand held to its declared geometry (or a ragged one's THD rows) in `_pointers`
    )
    engine_name = "sdpa_fwd_sm90"
    copied = frozenset({"q", "k", "v", "o"})  # the operands whose rows the kernels copy 16 bytes at a time

    def __init__(
        self, name: str, fn: Any, rows: tuple, sizes: tuple, scale: float, ragged: bool = False
    ) -> None:
        # scale: the compiled function's scale argument as it takes it
        self._name, self._fn, self._sizes, self._scale = name, fn, sizes, scale
        # the operands whose buffers may be packed THD (their rows from the ragged offsets)
        self.ragged = self.copied if ragged else frozenset()
        # (role, pack position or -1, declared shape, declared stride, read or written by 16-byte copies)
        self._rows = tuple((*row, row[0] in self.copied) for row in rows)

    def get_workspace_size(self) -> int:
        return 0

    def _refuse(self, rule: str) -> None:
        raise OperandGeometryError(f"{self.engine_name} (graph {self._name!r}): {rule}", tensor=None)

    def _pointers(self, pack: Any) -> list[int]:
        """The call's addresses in the compiled function's order (0 for an absent operand), each
        buffer checked against the declared geometry and, where copied 16 bytes at a time, its alignment."""
        bufs = pack.buffers
        pointers = []
        for role, pos, shape, stride, copied in self._rows:
            if pos < 0:
                pointers.append(0)
                continue
            buf = bufs[pos]
            packed = (  # a ragged operand's THD buffer [T, H, D]: the declared head and row strides
                role in self.ragged
                and len(buf.shape) == 3
                and (buf.shape[1], buf.shape[2]) == (shape[1], shape[3])
                and buf.stride == (stride[2], stride[1], 1)
            )
            if not packed and (buf.shape != shape or buf.stride != stride):
                self._refuse(
                    f"operand {role} is shape {list(buf.shape)} stride {list(buf.stride)}; the plan is "
                    f"compiled for the declared {list(shape)} stride {list(stride)}"
                )
            if copied and buf.pointer % 16:
                self._refuse(
                    f"operand {role} at {buf.pointer:#x} is not 16-byte aligned (its rows are copied 16 bytes at a time)"
                )
            pointers.append(buf.pointer)
        return pointers

    def execute(self, graph: Any, pack: Any, ctx: ExecutionContext) -> None:
        pointers = self._pointers(pack)
        self._fn(*pointers, *self._sizes, self._scale, ctx.stream or 0)


class SdpaFwdSm90Engine(BaseEngine):
    name = "sdpa_fwd_sm90"
    requires = MappingProxyType({"cutlass": f"CuTe DSL ({_INSTALL})"})
    capabilities = Capabilities(
        sm_lo=90,
        sm_hi=90,
        dtypes={data_type.BFLOAT16, data_type.HALF},
        features=_FEATURES,
        knob_domains={"P_REGS": P_REGS},
    )

    def _facts(self, request: EngineRequest) -> SdpaFacts:
        facts = request.facts
        if not isinstance(facts, SdpaFacts):
            raise GraphNotSupportedError(
                f"{self.name}: graph {request.graph.name!r} came with no sdpa facts (got {type(facts).__name__})"
            )
        request.refuse_contradicting_geometry(self.name)
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
        tensors = {
            **_fwd_operands(facts), "stats": facts.stats, **self._lengths(facts),
            **_offsets(facts, _fwd_operands(facts)),
        }  # fmt: skip
        rows = self._rows(request, tensors, POINTERS)
        q, k, v, o = (_strides(tensors[r]) for r in ("q", "k", "v", "o"))
        sizes = (
            facts.batch, facts.heads_q, facts.heads_k, facts.heads_v, facts.seq_q, facts.seq_kv,
            *q[:3], *k[:3], *v[:3], *o[:3],
        )  # fmt: skip
        knobs = {getattr(k, "name", k): v for k, v in (plan.knobs or {}).items()}
        # no knob: P in registers, which measured 7-13% faster in every timed cell (docs/sdpa.md)
        key = key_for(facts, bool(knobs.get("P_REGS", 1)))
        what = f"{self.plan_name(plan)}, head dim {facts.head_dim_qk}"
        fn = kernels_ready(self.name, what, lambda: compiled_forward(key))
        # the kernel takes the scale in the log2 domain of its softmax
        return SdpaFwdSm90Plan(request.graph.name, fn, rows, sizes, facts.scale * _LOG2E, facts.ragged)

    def _lengths(self, facts: SdpaFacts) -> dict[str, Any]:
        """seq_len_q and seq_len_kv (None without padding), checked: INT32, one value per batch."""
        node = facts.node
        lengths = {
            role: node.inputs.get(role) if facts.padded else None for role in ("seq_len_q", "seq_len_kv")
        }
        if facts.padded and None in lengths.values():
            raise GraphNotSupportedError(f"{self.name}: padding needs both seq_len_q and seq_len_kv")
        for role, t in lengths.items():
            if t is not None and (t.data_type is not data_type.INT32 or math.prod(_dims(t)) != facts.batch):
                raise GraphNotSupportedError(
                    f"{self.name}: {role} must be INT32 with one value per batch ({facts.batch}), "
                    f"got {getattr(t.data_type, 'name', t.data_type)} {list(_dims(t))}"
                )
        return lengths

    @staticmethod
    def _rows(request: EngineRequest, tensors: dict[str, Any], roles: tuple[str, ...]) -> tuple:
        """(role, pack position or -1, declared shape, declared stride) for each pointer role."""
        layout = request.layout
        rows = []
        for role in roles:
            t = tensors[role]
            if t is None:
                rows.append((role, -1, (), ()))
                continue
            pos = layout.position(t)
            d = layout.declared[pos]
            rows.append((role, pos, tuple(d.shape), tuple(d.stride)))
        return tuple(rows)


def bwd_key_for(facts: SdpaFacts, deterministic: bool = True) -> SdpaBwdKey:
    fwd = key_for(facts)
    return SdpaBwdKey(
        head_dim=fwd.head_dim, io_dtype=fwd.io_dtype, bottom_right=fwd.bottom_right, window_left=fwd.window_left,
        window_right=fwd.window_right, padded=fwd.padded, deterministic=deterministic, ragged=fwd.ragged,
    )  # fmt: skip


class SdpaBwdSm90Plan(SdpaFwdSm90Plan):
    """The compiled backward bound to one graph; its workspace holds delta and dQ's fp32 sums."""

    engine_name = "sdpa_bwd_sm90"
    copied = frozenset({"q", "k", "v", "o", "dO", "dQ", "dK", "dV"})

    def __init__(
        self,
        name: str,
        fn: Any,
        rows: tuple,
        sizes: tuple,
        scale: float,
        workspace: tuple,
        ragged: bool = False,
    ) -> None:
        super().__init__(name, fn, rows, sizes, scale, ragged)
        # (with DETERMINISTIC=1 the accumulator is absent: its pointer is the workspace's, unread)
        acc_offset, self._workspace_bytes = workspace
        self._acc_offset = acc_offset if acc_offset < self._workspace_bytes else 0

    def get_workspace_size(self) -> int:
        return self._workspace_bytes

    def execute(self, graph: Any, pack: Any, ctx: ExecutionContext) -> None:
        workspace = ctx.workspace or 0
        if not workspace:
            self._refuse(f"needs a workspace of {self._workspace_bytes} bytes, got none")
        if workspace % 256:
            self._refuse(f"workspace pointer {workspace:#x} is not 256-byte aligned")
        pointers = self._pointers(pack)
        self._fn(
            *pointers, workspace, workspace + self._acc_offset, *self._sizes, self._scale, ctx.stream or 0
        )


class SdpaBwdSm90Engine(SdpaFwdSm90Engine):
    """``sdpa_bwd_sm90``: SDPA_BWD graphs (dQ, dK, dV from q, k, v, O, dO and the stats)."""

    name = "sdpa_bwd_sm90"
    capabilities = Capabilities(
        sm_lo=90,
        sm_hi=90,
        dtypes={data_type.BFLOAT16, data_type.HALF},
        features=_BWD_FEATURES,
        knob_domains={"DETERMINISTIC": DETERMINISTIC},
    )

    def _deterministic(self, facts: SdpaFacts, plan: PlanConfig) -> bool:
        """The plan's DETERMINISTIC knob (default 1: dQ by its own pass measured faster than by atomics
        in every timed cell, docs/sdpa.md), checked: a graph that sets use_deterministic_algorithm
        takes only 1."""
        problem = self.capabilities.mismatch(facts, plan.knobs or {})
        if problem is not None:
            raise GraphNotSupportedError(f"{self.name}: {problem}")
        knobs = {getattr(k, "name", k): v for k, v in (plan.knobs or {}).items()}
        value = knobs.get("DETERMINISTIC", 1)
        if facts.deterministic and not value:
            raise GraphNotSupportedError(
                f"{self.name}: knob DETERMINISTIC=0 sums dQ by atomics in no fixed order; the graph sets "
                "use_deterministic_algorithm"
            )
        return bool(value)

    def check_support(self, request: EngineRequest) -> None:
        facts = self._facts(request)
        reason = _bwd_reason(facts) or self.capabilities.mismatch(facts, device=request.device)
        if reason is not None:
            raise GraphNotSupportedError(f"{self.name}: {reason}")
        if importlib.util.find_spec("cutlass") is None:
            raise ImportError(f"{self.name}: needs CuTe DSL ({_INSTALL})")

    def get_workspace_size(self, request: EngineRequest, plan: PlanConfig) -> int:
        f = self._facts(request)
        return backward_workspace(f.batch, f.heads_q, f.seq_q, f.head_dim_qk, self._deterministic(f, plan))[1]

    def build_plan(
        self, request: EngineRequest, plan: PlanConfig, ctx: ExecutionContext | None
    ) -> CompiledPlan:
        self.check_support(request)
        facts = self._facts(request)
        deterministic = self._deterministic(facts, plan)
        ops = _bwd_operands(facts)
        tensors = {**ops, "stats": facts.stats, **self._lengths(facts), **_offsets(facts, ops)}
        rows = self._rows(request, tensors, BWD_POINTERS[:-2])  # then the workspace's delta and dq_acc
        q, k, o = (_strides(tensors[r]) for r in ("q", "k", "o"))
        sizes = (facts.batch, facts.heads_q, facts.heads_k, facts.seq_q, facts.seq_kv, *q[:3], *k[:3], *o[:3])
        workspace = backward_workspace(
            facts.batch, facts.heads_q, facts.seq_q, facts.head_dim_qk, deterministic
        )
        key = bwd_key_for(facts, deterministic)
        what = f"{self.plan_name(plan)}, head dim {facts.head_dim_qk}"
        fn = kernels_ready(self.name, what, lambda: compiled_backward(key))
        return SdpaBwdSm90Plan(request.graph.name, fn, rows, sizes, facts.scale, workspace, facts.ragged)
