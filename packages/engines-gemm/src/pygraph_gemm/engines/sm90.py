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
import logging
import time
from math import prod
from types import MappingProxyType
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
from pygraph.execution.errors import OperandGeometryError
from pygraph.ir.dtypes import data_type
from pygraph_gemm.analyzer import GemmFacts
from pygraph_gemm.support import (
    chain_reason,
    declared_geometry,
    dtype_short,
    epilogue_spec_fields,
    layout_reason,
    strides3,
)

log = logging.getLogger(__name__)

__all__ = ["KNOB_DOMAINS", "GemmSm90Engine", "knobs_from_config"]

# Knob axes and their domains; the first point of each is the engine's default.
KNOB_DOMAINS: dict[str, tuple[Any, ...]] = {
    "TILE_M": (128, 64),
    "TILE_N": (256, 192, 128, 64, 16),
    "TILEK": (64,),
    # 4 x 1: B multicast to four 64-row tiles, where the wave rule's 64x128 grids wait on the L2
    # (200x3000x4104 bf16 bias+gelu, H200: 218 TFLOP/s against 187 in a 2x1 cluster)
    "TILE_CGA_M": (1, 2, 4),
    "TILE_CGA_N": (1, 2, 4),
    "STAGES": (0,),  # 0: as many stages as shared memory holds
    "SWAP_AB": (False, True),
    "RASTER": ("m", "n"),
    # group width (in clusters) of the raster swizzle: tiles resident together share A and B in L2;
    # 8 cut 8192^3's DRAM reads from 2.34 to 1.22 GB and ran 2-4% faster (bf16, H200)
    "SWIZZLE": (1, 2, 4, 8),
    "SPLIT_K": (1, 2),  # K slices reduced in the kernel (fp32 partials in the workspace)
    "PINGPONG": (False, True),  # consumer warpgroups on alternate tiles (epilogue under the main loop)
    # cooperative warpgroups k-blocks apart, each storing its own rows, so one's epilogue runs under
    # the other's last k-blocks (2: 0.9-1.8% fewer cycles at one clock, +0.0-0.6% sustained)
    "STAGGER": (0, 2),
    # L2 reuse across the persistent grid's rounds: every other band walks backward, and every other
    # tile loads its k-blocks last to first, so a round starts on the lines the round before it read
    # last. 8192^3 DRAM reads 1.23 -> 1.07 GB, +0.4..+1.0% sustained.
    "SERPENTINE": (False, True),
    "K_FLIP": (False, True),
    # clusters numbered GPC by GPC (2-CTA clusters only): the CTAs that share an A tile read it from
    # one GPC, where the L2 merges their requests. +0.4..+1.0% sustained on the long-K rows, +14% at
    # 1024x1024x4096 rastered along N.
    "PLACE_ORDER": (False, True),
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
        swizzle=k.get("SWIZZLE", 1),
        split_k=k.get("SPLIT_K", 1),
        pingpong=bool(k.get("PINGPONG", False)),
        stagger=k.get("STAGGER", 0),
        serpentine=bool(k.get("SERPENTINE", False)),
        k_flip=bool(k.get("K_FLIP", False)),
        place_order=bool(k.get("PLACE_ORDER", False)),
    )


def _strides3(buf: Any) -> tuple[int, int, int] | None:
    return strides3(tuple(buf.shape), tuple(buf.stride))


# Operand roles: the TMA-addressed tensors (pointer 16-byte aligned, geometry per call) and the
# epilogue vectors (pointer 4-byte aligned, read as contiguous vectors).
_TENSOR_ROLES = ("a", "b", "out", "residual", "aux")
_VECTOR_ROLES = ("bias", "row_scale", "col_scale")
# `launch.POINTER_ROLES` spells the output "c".
_POINTER_ROLE = {"a": "a", "b": "b", "out": "c", "bias": "bias", "row_scale": "row_scale",
                 "col_scale": "col_scale", "residual": "residual", "aux": "aux"}  # fmt: skip
_VEC_ALIGN = 4


class GemmSm90Plan(CompiledPlan):
    """A compiled gemm_sm90 kernel bound to one graph's operand positions.

    Built once: a table of which pack position feeds which kernel pointer slot, the alignment each
    pointer needs, and the sizes/strides of the graph's declared geometry already mapped into the
    kernel frame (`kernels.frame.kernel_frame`, the same mapping `kernels.plan.Plan.kernel_args`
    uses). The table is lowered into one closure of straight-line code (`_straight_line_launch`):
    per call it checks the operands' geometry and alignment, and calls the compiled function with the
    pointers, the sizes/strides as literals and the stream. A call whose operands are not in the
    declared geometry has its geometry mapped for that call; a call that breaks a rule (misaligned
    pointer, batch dims that do not collapse, a shape or layout the compiled kernel cannot express)
    goes to `_refuse`, which names the rule and raises; nothing launches.
    """

    reads_stream = True
    checks_geometry = True  # a call outside the declared geometry is mapped for it or refused (`_per_call`)

    def __init__(
        self,
        graph: Any,
        facts: GemmFacts,
        kernel_plan: Any,
        positions: dict[str, int],
        spec: Any,
        declared: dict[str, Any],
        engine: str = "gemm_sm90",
    ) -> None:
        from pygraph_gemm.kernels.frame import user_majors

        self._engine = engine  # the engine name errors are reported under
        self._kernel = kernel_plan
        self._facts = facts
        self._spec = spec
        self._name = graph.name
        self._positions = dict(positions)
        # the user-frame majors the kernel was compiled for (as kernels.plan.Plan read them)
        self._majors = user_majors(
            _strides3(declared["a"]),
            _strides3(declared["b"]),
            _strides3(declared["out"]),
            facts.m,
            facts.n,
            facts.k,
        )
        self._batch = prod(declared["out"][1][:-2])
        self._workspace = kernel_plan.workspace_bytes(facts.m, facts.n, self._batch)
        self._launch = self._lower(kernel_plan, self._positions, declared)
        # The lowered closure takes execute's own arguments: bound on the instance, a call runs it
        # with no method frame in between.
        self.execute = self._launch

    # --- build: the table, lowered into one closure -----------------------------------------------

    def _lower(self, kp: Any, positions: dict[str, int], declared: dict[str, Any]) -> Any:
        from pygraph_gemm.kernels.frame import POINTER_ROLES

        fn = kp.fn
        order = kp.pointer_order
        slot_of = {POINTER_ROLES[user]: slot for slot, user in enumerate(order)}
        tensor_rows = tuple(
            (slot_of[_POINTER_ROLE[r]], positions[r], _TMA_ALIGN - 1) for r in _TENSOR_ROLES if r in positions
        )
        vector_rows = tuple(
            (slot_of[_POINTER_ROLE[r]], positions[r], _VEC_ALIGN - 1) for r in _VECTOR_ROLES if r in positions
        )
        pointer_rows = tensor_rows + vector_rows
        # Every operand whose shape or stride the kernel depends on (the tensors, and the epilogue
        # vectors whose length is M or N): a call that keeps them all as declared needs only its
        # pointers and stream.
        checks = tuple(
            (positions[r], declared[r][1], declared[r][2])
            for r in _TENSOR_ROLES + _VECTOR_ROLES
            if r in positions
        )
        geometry = self._geometry({r: declared[r] for r in _TENSOR_ROLES if r in positions})
        if isinstance(geometry, str):  # a graph the closure cannot serve is declined, not run elsewhere
            raise GraphNotSupportedError(f"{self._engine}: the declared geometry: {geometry}")
        if kp.needs_workspace:
            return self._lower_split(kp, checks, pointer_rows, geometry)
        return _straight_line_launch(fn, self._per_call, checks, pointer_rows, len(order), geometry)

    def _lower_split(self, kp: Any, checks: tuple, pointer_rows: tuple, geometry: tuple) -> Any:
        """The closure of split-K plans: the caller's workspace takes the fp32 partials, the
        engine's per-stream semaphores (`kernels.semaphores`) the tile counts; no per-call memset
        runs. It runs only the declared geometry: any other call is refused, naming the rule it
        breaks."""
        from pygraph_gemm.kernels.semaphores import stream_semaphores

        refuse = self._refuse

        def refuse_call(bufs: Any, stream: Any) -> None:
            for pos, shape, stride in checks:
                buf = bufs[pos]
                if buf[1] != shape or buf[2] != stride:
                    refuse(
                        f"a split-K plan runs only the declared geometry; got shape {list(buf[1])} stride {list(buf[2])}"
                    )
            for _slot, pos, mask in pointer_rows:
                pointer = bufs[pos][0]
                if pointer & mask:
                    refuse(f"operand pointer {pointer:#x} is not {mask + 1}-byte aligned")

        def refuse_workspace(workspace: int) -> None:
            refuse(f"workspace pointer {workspace:#x} is not 16-byte aligned")

        words = kp.semaphore_words(self._facts.m, self._facts.n, self._batch)
        split = (stream_semaphores().address, words, refuse_workspace)
        return _straight_line_launch(
            kp.fn, refuse_call, checks, pointer_rows, len(kp.pointer_order), geometry, split
        )

    def execute(self, graph: Any, pack: Any, ctx: ExecutionContext) -> None:
        self._launch(graph, pack, ctx)  # shadowed by the instance's binding (see __init__)

    def get_workspace_size(self) -> int:
        return self._workspace

    # --- a call outside the declared geometry, and the checker ------------------------------------

    def _geometry(self, ops: dict[str, Any]) -> tuple | str:
        """The kernel-frame sizes/strides for these tensors' geometry, or the rule it breaks."""
        from pygraph_gemm.kernels.config import can_implement
        from pygraph_gemm.kernels.frame import user_majors

        kp = self._kernel
        s3 = {}
        for role, buf in ops.items():
            if len(buf[1]) < 2 or len(buf[1]) != len(buf[2]):
                return f"operand {role} shape {list(buf[1])} stride {list(buf[2])} is not a [..., rows, cols] matrix"
            s3[role] = _strides3(buf)
            if s3[role] is None:
                return (
                    f"operand {role} shape {list(buf[1])} stride {list(buf[2])}: its batch dims do not "
                    "collapse into one stride"
                )
        a, b, out = ops["a"], ops["b"], ops["out"]
        m, k = a[1][-2], a[1][-1]
        n = b[1][-1]
        batch = prod(out[1][:-2]) if len(out[1]) > 2 else 1
        want = {"a": (m, k), "b": (k, n), "out": (m, n), "residual": (m, n), "aux": (m, n)}
        for role, buf in ops.items():
            rows_cols = tuple(buf[1][-2:])
            if rows_cols != want[role]:
                return f"operand {role} is {list(rows_cols)} per batch, the GEMM needs {list(want[role])}"
            count = prod(buf[1][:-2])
            if count not in (1, batch):
                return f"operand {role} has {count} batch matrices, the output {batch}"
        if batch > 1:
            for role, bcast in (("a", kp.a_bcast), ("b", kp.b_bcast)):
                if (s3[role][0] == 0) != bcast:
                    return (
                        f"operand {role} is {'' if s3[role][0] == 0 else 'not '}broadcast over the batch; the "
                        f"kernel was compiled for {'a broadcast' if bcast else 'one matrix per batch'}"
                    )
        try:
            majors = user_majors(s3["a"], s3["b"], s3["out"], m, n, k)
        except ValueError as exc:
            return str(exc)
        if majors != self._majors:
            return (
                f"operand majors (A, B, C) {majors}: the kernel was compiled for {self._majors}; "
                "a call must keep the declared layout"
            )
        res, aux = s3.get("residual", (0, 0, 0)), s3.get("aux", (0, 0, 0))
        facts = self._facts
        why = can_implement(
            m, n, k, batch, dtype_short(facts.a.data_type), dtype_short(facts.b.data_type),
            dtype_short(facts.out.data_type), s3["a"], s3["b"], s3["out"],
            knobs=kp.knobs, spec=self._spec,
            residual_strides=res if "residual" in ops else None, aux_strides=aux if "aux" in ops else None,
        )  # fmt: skip
        if why:
            return why
        return kp.geometry(m, n, k, batch, s3["a"], s3["b"], s3["out"], res, aux)

    def _per_call(self, bufs: list[Any], stream: Any) -> None:
        """Launch a call whose geometry is not the declared one (mapped for this call), or refuse it."""
        ops = {r: bufs[p] for r, p in self._positions.items()}
        for role, buf in ops.items():
            align = _TMA_ALIGN if role in _TENSOR_ROLES else _VEC_ALIGN
            if buf[0] % align:
                self._refuse(f"operand {role} pointer {buf[0]:#x} is not {align}-byte aligned")
        geometry = self._geometry({r: ops[r] for r in _TENSOR_ROLES if r in ops})
        if isinstance(geometry, str):
            self._refuse(geometry)
        a_shape, b_shape = ops["a"][1], ops["b"][1]
        lengths = {"bias": b_shape[-1], "col_scale": b_shape[-1], "row_scale": a_shape[-2]}
        for role in _VECTOR_ROLES:
            if role in ops:
                why = _vector_reason(ops[role], lengths[role])
                if why:
                    self._refuse(f"operand {role}: {why}")
        kp = self._kernel
        from pygraph_gemm.kernels.frame import POINTER_ROLES

        user = {_POINTER_ROLE[r]: buf[0] for r, buf in ops.items()}
        pointers = tuple(user.get(POINTER_ROLES[i], 0) for i in kp.pointer_order)
        kp.fn(*pointers, *geometry, stream or 0)

    def _refuse(self, rule: str) -> None:
        """Raise naming the rule the call breaks (the call path launches nothing)."""
        raise OperandGeometryError(f"{self._engine} (graph {self._name!r}): {rule}", tensor=None)


class GemmSm90Engine(BaseEngine):
    name = "gemm_sm90"
    requires = MappingProxyType({"cutlass": "the CuTe DSL (pip install nvidia-cutlass-dsl)"})
    capabilities = Capabilities(
        sm_lo=90,
        sm_hi=90,
        dtypes={data_type.BFLOAT16, data_type.HALF, data_type.FLOAT},
        features=_FEATURES,
        knob_domains=KNOB_DOMAINS,
    )

    def _facts(self, request: EngineRequest) -> GemmFacts:
        facts = request.facts
        if not isinstance(facts, GemmFacts):
            raise GraphNotSupportedError(
                f"{self.name}: graph {request.graph.name!r} came with no gemm facts (got {type(facts).__name__}); "
                "it is not planned as a gemm graph"
            )
        request.refuse_contradicting_geometry(self.name)
        return facts

    def check_support(self, request: EngineRequest) -> None:
        facts = self._facts(request)
        reason = chain_reason(facts) or self.capabilities.mismatch(facts, device=request.device)
        if reason is None and dtype_short(facts.a.data_type) not in ("bf16", "fp16"):
            reason = f"inputs must be BFLOAT16 or HALF, A is {facts.a.data_type.name}"
        if reason is None:
            reason = layout_reason(facts)
        if reason is not None:
            raise GraphNotSupportedError(f"{self.name}: {reason}")
        if importlib.util.find_spec("cutlass") is None:
            raise ImportError(f"{self.name}: needs the CuTe DSL (pip install nvidia-cutlass-dsl)")

    def get_workspace_size(self, request: EngineRequest, plan: PlanConfig) -> int:
        """The fp32 partials of split-K (their semaphores are engine-owned); 0 for every other config."""
        from pygraph_gemm.kernels.config import workspace_bytes

        facts = self._facts(request)
        batch = prod(facts.batch) if facts.batch else 1
        return workspace_bytes(facts.m, facts.n, batch, knobs_from_config(plan.knobs))

    def build_plan(
        self, request: EngineRequest, plan: PlanConfig, ctx: ExecutionContext | None
    ) -> CompiledPlan:
        self.check_support(request)
        facts = self._facts(request)
        from pygraph_gemm.kernels.config import EpilogueSpec
        from pygraph_gemm.kernels.plan import Plan
        from pygraph_gemm.knob_labels import knob_label

        arch_reason = self._arch_reason()
        if arch_reason:
            raise GraphNotSupportedError(f"{self.name}: {arch_reason}")
        knobs = knobs_from_config(plan.knobs)
        why = layout_reason(facts, knobs)
        if why:
            raise GraphNotSupportedError(f"{self.name}: {why}")
        spec = EpilogueSpec(**epilogue_spec_fields(facts))
        strides = declared_geometry(facts)
        batch = prod(facts.batch) if facts.batch else 1
        in_dt, out_dt = dtype_short(facts.a.data_type), dtype_short(facts.out.data_type)
        started = time.perf_counter()
        kernel_plan = Plan(
            knobs, spec, in_dt, out_dt, strides["A"], strides["B"], strides["out"],
            facts.m, facts.n, facts.k, batch, **self._kernel_args(),
            sm_count=request.device.sm_count,  # the persistent grid of the card planned for
        )  # fmt: skip
        # compiling takes 0.5-3 s a kernel (a cached one loads in milliseconds): say which and how long
        log.info(
            "%s: kernel %s (%s -> %s, %s) for %dx%dx%d ready in %.2f s",
            self.name, knob_label(knobs), in_dt, out_dt,
            spec.activation if spec.activation != "none" else "no activation", facts.m, facts.n, facts.k,
            time.perf_counter() - started,
        )  # fmt: skip
        layout = request.layout
        roles = {"a": facts.a, "b": facts.b, "out": facts.out, "aux": facts.aux}
        for step in facts.steps:
            if step.operand is not None:
                roles[step.kind] = step.operand
        positions = {role: layout.position(t) for role, t in roles.items() if t is not None}
        declared = {role: layout.declared[p] for role, p in positions.items()}
        return GemmSm90Plan(request.graph, facts, kernel_plan, positions, spec, declared, self.name)

    # --- what the SM80 slot (engines/sm80.py) overrides --------------------------------------------

    def _arch_reason(self) -> str | None:
        return _device_arch_reason()

    def _kernel_args(self) -> dict[str, Any]:
        """Which kernel `kernels.plan.Plan` builds, and for which arch (default: SM90's)."""
        return {}


def _straight_line_launch(
    fn: Any,
    per_call: Any,
    checks: tuple,
    pointer_rows: tuple,
    n_pointers: int,
    geometry: tuple,
    split: tuple | None = None,
) -> Any:
    """The per-call closure, lowered to straight-line Python (no loops, no argument list to copy).

    ``checks``: (pack position, declared shape, declared stride) of every operand whose geometry the
    kernel depends on; ``pointer_rows``: (kernel pointer slot, pack position, alignment mask). A call
    whose operands all keep their declared geometry and alignment launches ``fn`` with its pointers,
    the declared sizes/strides (literals) and the stream; any other goes to ``per_call``. Split-K
    (``split`` = (semaphore lookup, semaphore words, workspace refusal)): the workspace (16-byte
    aligned, else refused) and the stream's semaphores go before the stream. The generated source is
    kept on the function (``launch.source``) for inspection.

    Every rule here is a rule on one operand buffer alone, and an `OperandBuffer` is immutable: the
    buffer a position passed with last time (``V<pos>``, kept per position) passes again, so a call
    whose buffers are those same objects (normalize hands back the buffer it accepted before when a
    tensor reads the same) skips the comparisons. Threads racing on ``V<pos>`` can only store
    buffers that passed.
    """
    env: dict[str, Any] = {"fn": fn, "per_call": per_call}
    used = sorted({pos for pos, _, _ in checks} | {pos for _, pos, _ in pointer_rows})
    env.update({f"V{pos}": None for pos in used})
    lines = [
        "def launch(graph, pack, ctx):",
        f"    global {', '.join(f'V{pos}' for pos in used)}",
        "    b = pack.buffers",
    ]
    lines += [f"    o{pos} = b[{pos}]" for pos in used]
    slots = ["0"] * n_pointers
    by_mask: dict[int, list[str]] = {}
    for slot, pos, mask in pointer_rows:
        lines.append(f"    p{slot} = o{pos}[0]")
        slots[slot] = f"p{slot}"
        by_mask.setdefault(mask, []).append(f"p{slot}")
    lines.append(f"    if {' or '.join(f'o{pos} is not V{pos}' for pos in used)}:")
    same = []
    for i, (pos, shape, stride) in enumerate(checks):
        env[f"S{i}"], env[f"T{i}"] = tuple(shape), tuple(stride)
        same.append(f"o{pos}[1] != S{i} or o{pos}[2] != T{i}")
    misaligned = " or ".join(f"({' | '.join(names)}) & {mask}" for mask, names in by_mask.items())
    lines += [
        f"        if {' or '.join(same)}:",
        "            return per_call(b, ctx.stream)",
        f"        if {misaligned}:",
        "            return per_call(b, ctx.stream)",
        f"        {', '.join(f'V{pos}' for pos in used)} = {', '.join(f'o{pos}' for pos in used)}",
    ]
    args = [*slots, *(str(int(g)) for g in geometry)]
    if split is None:
        args.append("ctx.stream or 0")
    else:
        env["semaphores"], words, env["refuse_workspace"] = split
        lines += [
            "    workspace = ctx.workspace",
            "    if workspace & 15:",
            "        return refuse_workspace(workspace)",
            "    s = ctx.stream or 0",
        ]
        args += ["workspace", f"semaphores(pack.device, s, {int(words)})", "s"]
    lines.append(f"    fn({', '.join(args)})")
    source = "\n".join(lines) + "\n"
    exec(compile(source, "<gemm launch>", "exec"), env)
    launch = env["launch"]
    launch.source = source
    return launch


def _vector_reason(buf: Any, length: int) -> str | None:
    """Why ``buf`` cannot be read as a contiguous vector of ``length`` elements, or None."""
    shape, stride = tuple(buf[1]), tuple(buf[2])
    if prod(shape) != length:
        return f"shape {list(shape)} holds {prod(shape)} elements, the GEMM needs {length}"
    inner = [st for d, st in zip(shape, stride) if d != 1]
    if inner and inner != [1]:
        return f"shape {list(shape)} stride {list(stride)} is not one contiguous vector"
    return None


def device_sm() -> tuple[int, int] | str | None:
    """(device ordinal, SM version) of the current CUDA device; a reason string when there is none;
    None when it cannot be asked (no CUDA bindings: the compile/launch will report)."""
    try:
        from cuda.bindings import runtime as rt
    except ImportError:
        return None
    err, dev = rt.cudaGetDevice()
    if int(err):
        return f"no CUDA device (cudaGetDevice: {err})"
    err, major = rt.cudaDeviceGetAttribute(rt.cudaDeviceAttr.cudaDevAttrComputeCapabilityMajor, dev)
    err2, minor = rt.cudaDeviceGetAttribute(rt.cudaDeviceAttr.cudaDevAttrComputeCapabilityMinor, dev)
    if int(err) or int(err2):
        return None
    return dev, major * 10 + minor


def _device_arch_reason() -> str | None:
    """Why the current CUDA device cannot run SM90 kernels, or None."""
    found = device_sm()
    if found is None or isinstance(found, str):
        return found
    dev, sm = found
    return None if sm == 90 else f"requires SM90, device {dev} is SM{sm}"
