"""``gemm_sm90``: the Hopper engine of the ``gemm`` family (CuTe DSL, TMA + wgmma, fused epilogue).

Deciding support reads only the facts and probes for the DSL without importing it; the DSL is
imported and the kernel compiled in `build_plan`. The compiled plan follows the per-call pattern:
everything the build settled (operand positions, which epilogue pointers exist, the kernel's
argument mapping) is captured once; a call reads pointers, M/N/K and strides and launches. What the
call path will not launch (a misaligned pointer, a batch it cannot collapse) goes to `_refuse`,
which names the rule and raises before anything runs.
"""

from __future__ import annotations

import importlib.util
from math import prod
from typing import Any

from pygraph.engines.base import BaseEngine, Capabilities, CompiledPlan, ExecutionContext, PlanConfig
from pygraph.errors import GraphNotSupportedError
from pygraph.ir.dtypes import data_type
from pygraph.planning.planner import planner_of

from pygraph_gemm.analyzer import GemmFacts, analyze
from pygraph_gemm.support import chain_reason, dtype_short, epilogue_spec_fields, layout_reason

__all__ = ["KNOB_DOMAINS", "GemmSm90Engine", "knobs_from_config"]

# Knob axes and their domains; the first point of each is the engine's default.
KNOB_DOMAINS: dict[str, tuple[Any, ...]] = {
    "TILE_M": (128, 64),
    "TILE_N": (256, 128, 64, 16),
    "TILEK": (64,),
    "TILE_CGA_M": (1, 2),
    "TILE_CGA_N": (1, 2, 4),
    "STAGES": (0,),  # 0: as many stages as shared memory holds
    "SWAP_AB": (False, True),
    "RASTER": ("m", "n"),
}

_FEATURES = frozenset({"bias", "row_scale", "col_scale", "residual", "activation", "aux_output", "batched"})
_TMA_ALIGN = 16


def knobs_from_config(knobs: Any) -> Any:
    """The kernel's GemmKnobs for a PlanConfig's knobs (names as in KNOB_DOMAINS)."""
    from pygraph_gemm.kernels.config import GemmKnobs

    k = {getattr(name, "name", name): v for name, v in (knobs or {}).items()}
    return GemmKnobs(
        tile_m=k.get("TILE_M", 128),
        tile_n=k.get("TILE_N", 256),
        tile_k=k.get("TILEK", 64),
        cga_m=k.get("TILE_CGA_M", 1),
        cga_n=k.get("TILE_CGA_N", 1),
        stages=k.get("STAGES", 0),
        swap_ab=bool(k.get("SWAP_AB", False)),
        raster=k.get("RASTER", "m"),
    )


def _batch_stride(shape: tuple[int, ...], stride: tuple[int, ...]) -> int | None:
    """One stride that walks every batch matrix (0: a single matrix), or None if the batch dims don't collapse."""
    batch, bstride = shape[:-2], stride[:-2]
    if prod(batch) <= 1:
        return 0
    dims = [(d, s) for d, s in zip(batch, bstride, strict=True) if d != 1]
    if all(s == 0 for _, s in dims):
        return 0
    for (_d_outer, s_outer), (d_inner, s_inner) in zip(dims, dims[1:], strict=False):
        if s_outer != s_inner * d_inner:
            return None
    return dims[-1][1]


def _strides3(buf: Any) -> tuple[int, int, int] | None:
    bs = _batch_stride(buf.shape, buf.stride)
    return None if bs is None else (bs, buf.stride[-2], buf.stride[-1])


class GemmSm90Plan(CompiledPlan):
    """A compiled gemm_sm90 kernel bound to one graph's operand positions."""

    reads_stream = True

    def __init__(self, graph: Any, facts: GemmFacts, kernel_plan: Any, positions: dict[str, int]) -> None:
        self._kernel = kernel_plan
        self._facts = facts
        order = ("a", "b", "out", "bias", "row_scale", "col_scale", "residual", "aux")
        # Launch argument order as data: which pack position feeds each slot (-1: absent).
        self._slots = tuple(positions.get(name, -1) for name in order)
        self._present = tuple(p for p in self._slots if p >= 0)
        self._name = graph.name

    def _refuse(self, bufs: dict[str, Any]) -> None:
        """Name the rule a call breaks; raises (the call path launches nothing)."""
        for role, buf in bufs.items():
            if buf is None:
                continue
            if role in ("a", "b", "out", "residual", "aux") and buf.pointer % _TMA_ALIGN:
                raise ValueError(
                    f"gemm_sm90 (graph {self._name!r}): operand {role} pointer {buf.pointer:#x} is not "
                    f"{_TMA_ALIGN}-byte aligned (TMA)"
                )
            if role in ("a", "b", "out", "residual", "aux") and _strides3(buf) is None:
                raise ValueError(
                    f"gemm_sm90 (graph {self._name!r}): operand {role} shape {list(buf.shape)} stride "
                    f"{list(buf.stride)}: its batch dims do not collapse into one stride"
                )
        raise ValueError(f"gemm_sm90 (graph {self._name!r}): the call cannot be served")

    def execute(self, graph: Any, pack: Any, ctx: ExecutionContext) -> None:
        ops = pack.operands(self._present)
        it = iter(ops)
        a, b, out, bias, rs, cs, res, aux = (next(it) if p >= 0 else None for p in self._slots)
        aligned = not ((a.pointer | b.pointer | out.pointer) % _TMA_ALIGN)
        a3, b3, c3 = _strides3(a), _strides3(b), _strides3(out)
        r3 = _strides3(res) if res is not None else (0, 0, 0)
        x3 = _strides3(aux) if aux is not None else (0, 0, 0)
        if not aligned or a3 is None or b3 is None or c3 is None or r3 is None or x3 is None:
            self._refuse({"a": a, "b": b, "out": out, "residual": res, "aux": aux})
        m, k = a.shape[-2], a.shape[-1]
        n = b.shape[-1]
        batch = prod(out.shape[:-2]) if len(out.shape) > 2 else 1
        self._kernel(
            a.pointer, b.pointer, out.pointer, m, n, k, batch, a3, b3, c3,
            bias.pointer if bias is not None else 0,
            rs.pointer if rs is not None else 0,
            cs.pointer if cs is not None else 0,
            res.pointer if res is not None else 0, r3,
            aux.pointer if aux is not None else 0, x3,
            ctx.stream or 0,
        )  # fmt: skip


class GemmSm90Engine(BaseEngine):
    name = "gemm_sm90"
    capabilities = Capabilities(
        sm_lo=90,
        sm_hi=90,
        dtypes={data_type.BFLOAT16, data_type.HALF, data_type.FLOAT},
        features=_FEATURES,
        knob_domains=KNOB_DOMAINS,
    )

    def _facts(self, graph: Any) -> GemmFacts:
        return planner_of(graph).facts_for(analyze)

    def check_support(self, graph: Any) -> None:
        facts = self._facts(graph)
        reason = chain_reason(facts) or self.capabilities.mismatch(facts)
        if reason is None and dtype_short(facts.a.data_type) not in ("bf16", "fp16"):
            reason = f"inputs must be BFLOAT16 or HALF, A is {facts.a.data_type.name}"
        if reason is None:
            reason = layout_reason(facts)
        if reason is not None:
            raise GraphNotSupportedError(f"{self.name}: {reason}")
        if importlib.util.find_spec("cutlass") is None:
            raise ImportError(f"{self.name}: needs the CuTe DSL (pip install nvidia-cutlass-dsl)")

    def build_plan(self, graph: Any, plan: PlanConfig, ctx: ExecutionContext | None) -> CompiledPlan:
        self.check_support(graph)
        facts = self._facts(graph)
        from pygraph_gemm.kernels.config import EpilogueSpec, can_implement
        from pygraph_gemm.kernels.launch import Plan

        arch_reason = _device_arch_reason()
        if arch_reason:
            raise GraphNotSupportedError(f"{self.name}: {arch_reason}")
        knobs = knobs_from_config(plan.knobs)
        spec = EpilogueSpec(**epilogue_spec_fields(facts))
        strides = {}
        for role, t in (("A", facts.a), ("B", facts.b), ("out", facts.out)):
            s3 = _strides3(_Declared(t))
            if s3 is None:
                raise GraphNotSupportedError(
                    f"{self.name}: {role} {t.name!r} dim {list(t.dim)} stride {list(t.stride)}: batch dims do not collapse"
                )
            strides[role] = s3
        batch = prod(facts.batch) if facts.batch else 1
        res = next((s.operand for s in facts.steps if s.kind == "residual"), None)
        why = can_implement(
            facts.m, facts.n, facts.k, batch,
            dtype_short(facts.a.data_type), dtype_short(facts.b.data_type), dtype_short(facts.out.data_type),
            strides["A"], strides["B"], strides["out"], knobs=knobs, spec=spec,
            residual_strides=_strides3(_Declared(res)) if res is not None else None,
            aux_strides=_strides3(_Declared(facts.aux)) if facts.aux is not None else None,
        )  # fmt: skip
        if why:
            raise GraphNotSupportedError(f"{self.name}: {why}")
        kernel_plan = Plan(
            knobs, spec, dtype_short(facts.a.data_type), dtype_short(facts.out.data_type),
            strides["A"], strides["B"], strides["out"], facts.m, facts.n, facts.k, batch,
        )  # fmt: skip
        layout = planner_of(graph).layout
        roles = {"a": facts.a, "b": facts.b, "out": facts.out, "aux": facts.aux}
        for step in facts.steps:
            if step.operand is not None:
                roles[step.kind] = step.operand
        positions = {role: layout.position(t) for role, t in roles.items() if t is not None}
        return GemmSm90Plan(graph, facts, kernel_plan, positions)


class _Declared:
    """A tensor's declared geometry, read like an OperandBuffer."""

    def __init__(self, tensor: Any) -> None:
        self.shape, self.stride = tuple(tensor.dim), tuple(tensor.stride)


def _device_arch_reason() -> str | None:
    """Why the current CUDA device cannot run SM90 kernels, or None."""
    try:
        from cuda.bindings import runtime as rt
    except ImportError:
        return None  # nothing to ask with; the compile/launch will report
    err, dev = rt.cudaGetDevice()
    if int(err):
        return f"no CUDA device (cudaGetDevice: {err})"
    err, major = rt.cudaDeviceGetAttribute(rt.cudaDeviceAttr.cudaDevAttrComputeCapabilityMajor, dev)
    err2, minor = rt.cudaDeviceGetAttribute(rt.cudaDeviceAttr.cudaDevAttrComputeCapabilityMinor, dev)
    if int(err) or int(err2):
        return None
    sm = major * 10 + minor
    return None if sm == 90 else f"requires SM90, device {dev} is SM{sm}"
