"""``gdn_cutile``: the ``gdn`` family's portable engine (cuTile; SM80 and up), forward and backward.

One engine serves both node types of the family's cuTile slot: ``gdn`` (three kernels,
``kernels/gdn_cutile_fwd.py``) and ``gdn_bwd`` (the forward's table and prepare kernels and those
of ``kernels/gdn_cutile_bwd.py``, recomputing the forward). Deciding support reads the facts and
the graph's declared strides and probes for cuTile without importing it. `build_plan` imports the
kernels and binds them to the graph: operand positions, the declared geometry each call must keep,
the workspace carve and the kernels' constant arguments are settled once (`GdnCutileConfig`,
`GdnCutileBwdConfig`); a call reads the pointers, wraps them as device arrays (reused while the
pointers repeat) and enqueues the kernels on the call's stream. cuTile compiles a kernel on its first launch for the arguments' types and
keeps it (per process, and in its disk cache), so only the first call of a configuration pays it.
"""

from __future__ import annotations

import dataclasses
import importlib.util
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
from pygraph_linear_attention.analyzer import LinearAttentionFacts
from pygraph_linear_attention.gdn.cutile_bwd_host import GdnCutileBwdConfig, launch_backward
from pygraph_linear_attention.gdn.cutile_host import (
    BLOCK_V,
    HINTED_BWD,
    HINTED_FWD,
    OCCUPANCY,
    OCCUPANCY_BWD,
    SEGMENT,
    GdnCutileConfig,
    launch_forward,
)

__all__ = ["BLOCK_V", "GdnCutileBwdEngine", "GdnCutileEngine", "GdnCutilePlan", "config_for"]

HEAD_DIMS = (64, 128, 256)  # K and V the kernels are written for (tiles are powers of two)
_FEATURES = frozenset(
    {"qk_l2norm", "beta_sigmoid", "neg_eigval", "safe_gate", "initial_state", "final_state", "gva", "gqa"}
)
_IO = {data_type.BFLOAT16: "bfloat16", data_type.HALF: "float16"}
_NAMES = {
    data_type.BFLOAT16: "bfloat16",
    data_type.HALF: "float16",
    data_type.FLOAT: "float32",
    data_type.INT32: "int32",
    data_type.INT64: "int64",
}
_INSTALL = "pip install 'pygraph-engines-linear-attention[cutile]'"


def _heads(tensor: Any) -> int:
    """The head count of a per-head tensor ([T, heads] gates, [heads] parameters)."""
    return int(tensor.dim[1]) if len(tensor.dim) == 2 else int(tensor.dim[0]) if tensor.dim else 1


def facts_of(engine: str, request: EngineRequest) -> LinearAttentionFacts:
    """The request's linear-attention facts (a decline naming ``engine`` if it came with others)."""
    facts = request.facts
    if not isinstance(facts, LinearAttentionFacts):
        raise GraphNotSupportedError(
            f"{engine}: graph {request.graph.name!r} came with no linear-attention facts "
            f"(got {type(facts).__name__})"
        )
    request.refuse_contradicting_geometry(engine)
    return facts


def _support_reason(facts: LinearAttentionFacts) -> str | None:
    """Why gdn_cutile cannot serve these facts (the rule and the value), or None."""
    if facts.op != "gdn":
        return f"serves gdn graphs, this is a {facts.op} graph"
    if facts.stray_nodes:
        return f"serves a lone {facts.node.op} node; the graph also has {list(facts.stray_nodes)}"
    q, k, v = facts.dtypes
    if q not in _IO or k is not q or v is not q:
        names = [getattr(d, "name", d) for d in facts.dtypes]
        return f"q, k and v must all be BFLOAT16 or all HALF, got {names}"
    if facts.beta_dtype not in (data_type.FLOAT, q):
        return f"beta must be FLOAT or the io dtype {q.name}, got {getattr(facts.beta_dtype, 'name', None)}"
    if facts.gate_dtype is not data_type.FLOAT:
        return f"g must be FLOAT, got {getattr(facts.gate_dtype, 'name', None)}"
    if facts.head_dim_k not in HEAD_DIMS or facts.head_dim_v not in HEAD_DIMS:
        return f"head dims K={facts.head_dim_k}, V={facts.head_dim_v}: each must be one of {HEAD_DIMS}"
    if facts.tokens < 1 or facts.sequences < 1:
        return f"needs at least one token and one sequence, got T={facts.tokens}, N={facts.sequences}"
    if facts.heads_out % facts.heads_qk or facts.heads_out % facts.heads_v:
        return (
            f"q/k heads {facts.heads_qk} and v heads {facts.heads_v} must both divide the output's "
            f"{facts.heads_out}"
        )
    if facts.gate_domain is not None:
        return f"gate_domain={facts.gate_domain!r} is not served (g is the log decay)"
    node = facts.node
    for port in ("g", "beta"):
        heads = _heads(node.inputs[port])
        if facts.heads_out % heads:
            return f"{port} has {heads} heads, which does not divide the output's {facts.heads_out}"
    a_log, dt_bias = node.inputs.get("a_log"), node.inputs.get("dt_bias")
    if facts.safe_gate and a_log is None:
        return "safe_gate needs a_log (the per-head log decay rate)"
    if not facts.safe_gate and (a_log is not None or dt_bias is not None):
        return "a_log and dt_bias are read only with safe_gate=True"
    for port, t in (("a_log", a_log), ("dt_bias", dt_bias)):
        if t is None:
            continue
        if t.data_type not in (data_type.FLOAT, data_type.BFLOAT16, data_type.HALF):
            return f"{port} must be FLOAT, BFLOAT16 or HALF, got {t.data_type.name}"
        size = 1
        for d in t.dim:
            size *= int(d)
        if facts.heads_out % size:
            return f"{port} has {size} values, which does not divide the output's {facts.heads_out} heads"
    if facts.backward:
        reason = _backward_reason(facts)
        if reason is not None:
            return reason
    state = node.inputs.get("d_final_state") if facts.backward else node.outputs.get("final_state")
    if (
        facts.output_final_state
        and state is not None
        and state.data_type not in (data_type.FLOAT, data_type.BFLOAT16)
    ):
        port = "d_final_state" if facts.backward else "final_state"
        return f"{port} must be FLOAT or BFLOAT16, got {state.data_type.name}"
    return _layout_reason(facts)


def _backward_reason(facts: LinearAttentionFacts) -> str | None:
    """gdn_bwd's own rules: dO and dQ, dK, dV in the io dtype; the other gradients FLOAT, BFLOAT16
    or HALF (the kernels sum them in fp32 and store them in whatever dtype the graph gives)."""
    node, io = facts.node, facts.dtypes[0]
    d_o = node.inputs["dO"]
    if d_o.data_type is not io:
        return f"dO must be the io dtype {io.name}, got {d_o.data_type.name}"
    floats = (data_type.FLOAT, data_type.BFLOAT16, data_type.HALF)
    for port in ("dQ", "dK", "dV", "dG", "dBeta", "d_initial_state", "d_a_log", "d_dt_bias"):
        out = node.outputs.get(port)
        allowed = (io,) if port in ("dQ", "dK", "dV") else floats[:2] if port == "d_initial_state" else floats
        if out is not None and out.data_type not in allowed:
            names = [d.name for d in allowed]
            return f"{port} must be one of {names}, got {out.data_type.name}"
    return None


def _operands(facts: LinearAttentionFacts) -> dict[str, Any]:
    """The node's tensors by kernel role (absent optionals left out)."""
    node = facts.node
    if facts.backward:
        roles = {
            "q": node.inputs["q"], "k": node.inputs["k"], "v": node.inputs["v"], "g": node.inputs["g"],
            "beta": node.inputs["beta"], "cu_seqlens": node.inputs["cu_seqlens"], "dO": node.inputs["dO"],
            "a_log": node.inputs.get("a_log"), "dt_bias": node.inputs.get("dt_bias"),
            "h0": node.inputs.get("initial_state"), "dht": node.inputs.get("d_final_state"),
            **{port: node.outputs.get(port) for port in ("dQ", "dK", "dV", "dG", "dBeta", "d_a_log", "d_dt_bias")},
            "dh0": node.outputs.get("d_initial_state"),
        }  # fmt: skip
        return {role: t for role, t in roles.items() if t is not None}
    roles = {
        "q": node.inputs["q"], "k": node.inputs["k"], "v": node.inputs["v"], "g": node.inputs["g"],
        "beta": node.inputs["beta"], "cu_seqlens": node.inputs["cu_seqlens"],
        "a_log": node.inputs.get("a_log"), "dt_bias": node.inputs.get("dt_bias"),
        "h0": node.inputs.get("initial_state"), "o": node.outputs["O"],
        "ht": node.outputs.get("final_state") if facts.output_final_state else None,
    }  # fmt: skip
    return {role: t for role, t in roles.items() if t is not None}


def declared_operands(engine: str, request: EngineRequest, operands: dict[str, Any]) -> tuple[dict, dict]:
    """The operands' (by role) pack positions and declared tensors; an operand whose dtype no
    kernel takes is declined naming ``engine``, the role and the dtype."""
    layout = request.layout
    positions = {role: layout.position(t) for role, t in operands.items()}
    declared = {role: layout.declared[p] for role, p in positions.items()}
    for role, d in declared.items():
        if d.dtype not in _NAMES:
            raise GraphNotSupportedError(f"{engine}: operand {role} has dtype {d.dtype.name}, not served")
    return positions, declared


def _layout_reason(facts: LinearAttentionFacts) -> str | None:
    """The kernels read rows: every operand's last dim must be contiguous (stride 1)."""
    for role, t in _operands(facts).items():
        stride = tuple(t.stride or ())
        if stride and stride[-1] != 1 and t.dim[-1] != 1:
            return f"operand {role} ({t.name}) must have a contiguous last dim, got stride {list(stride)}"
    return None


def config_for(facts: LinearAttentionFacts, block_v: int, segment: int = 0) -> GdnCutileConfig:
    """The kernels' view of a supported gdn or gdn_bwd graph (a `GdnCutileBwdConfig` for the
    backward), for ``block_v`` value rows per scan program and ``segment`` chunks per segment of
    the split scans (0: none)."""
    node = facts.node
    a_log, dt_bias = node.inputs.get("a_log"), node.inputs.get("dt_bias")

    def count(t: Any) -> int:
        size = 1
        for d in t.dim:
            size *= int(d)
        return size

    extra = {"has_d_final_state": facts.output_final_state} if facts.backward else {}
    return (GdnCutileBwdConfig if facts.backward else GdnCutileConfig)(
        tokens=facts.tokens, sequences=facts.sequences, heads_qk=facts.heads_qk, heads_v=facts.heads_v,
        heads_g=_heads(node.inputs["g"]), heads_beta=_heads(node.inputs["beta"]),
        heads_a_log=count(a_log) if a_log is not None else 1,
        heads_dt_bias=count(dt_bias) if dt_bias is not None else 1,
        key_dim=facts.head_dim_k, value_dim=facts.head_dim_v, io_dtype=_IO[facts.dtypes[0]],
        scale=facts.scale if facts.scale is not None else facts.head_dim_k**-0.5,
        use_qk_l2norm=facts.use_qk_l2norm, use_beta_sigmoid=facts.use_beta_sigmoid,
        allow_neg_eigval=facts.allow_neg_eigval, safe_gate=facts.safe_gate,
        has_dt_bias=facts.safe_gate and dt_bias is not None, has_initial_state=facts.initial_state,
        output_final_state=facts.output_final_state and not facts.backward, block_v=block_v, segment=segment,
        **extra,
    )  # fmt: skip


def block_v_reason(facts: LinearAttentionFacts, block_v: Any) -> str | None:
    """Why BLOCK_V=``block_v`` cannot tile this graph's value dim, or None."""
    if block_v not in BLOCK_V:
        return f"knob BLOCK_V={block_v!r} outside its domain {BLOCK_V}"
    if facts.head_dim_v % block_v:
        return f"BLOCK_V={block_v} does not divide the value head dim {facts.head_dim_v}"
    return None


def segment_reason(facts: LinearAttentionFacts, block_v: int, segment: Any) -> str | None:
    """Why SEGMENT=``segment`` cannot split this graph's scan at ``block_v``, or None."""
    if segment not in SEGMENT:
        return f"knob SEGMENT={segment!r} outside its domain {SEGMENT}"
    if segment and facts.head_dim_k % block_v:
        return f"SEGMENT={segment} needs BLOCK_V={block_v} to divide the key head dim {facts.head_dim_k}"
    return None


class GdnCutilePlan(CompiledPlan):
    """The kernels bound to one graph (forward or backward): positions, geometry and workspace settled at build.

    A call whose operands keep the declared geometry launches; any other is refused by `_refuse`,
    naming the operand and the rule, before anything is enqueued (the kernels' constants were
    compiled for the declared shapes).
    """

    reads_stream = True
    checks_geometry = True  # every operand held to its declared shape and stride in `execute`

    def __init__(
        self,
        name: str,
        cfg: GdnCutileConfig,
        positions: dict[str, int],
        declared: dict[str, Any],
        launch: Any,
        kernels: Any,
        run: Any,
        engine: str = "gdn_cutile",
    ) -> None:
        from pygraph_linear_attention.common.device_arrays import DeviceArray

        # engine: the name refusals carry (kda_cutile and gdn2_cutile bind their kernels with this plan)
        self._name, self._cfg, self._launch_kernel, self._engine = name, cfg, launch, engine
        self._array = DeviceArray
        # (role, pack position, declared shape, declared stride, dtype name)
        self._rows = tuple(
            (
                role,
                pos,
                tuple(declared[role].shape),
                tuple(declared[role].stride),
                _NAMES[declared[role].dtype],
            )
            for role, pos in positions.items()
        )
        self._regions = cfg.workspace_regions()
        self._spare_offset = next(r.offset for r in self._regions if r.name == "spare")
        self._workspace_bytes = cfg.workspace_bytes
        self._cache: dict[tuple, Any] = {}  # (role, pointer, device) -> DeviceArray
        self._kernels, self._run = kernels, run  # launch_forward or launch_backward

    def get_workspace_size(self) -> int:
        return self._workspace_bytes

    def _view(self, key: tuple, pointer: int, shape: tuple, stride: tuple, dtype: str, device: int) -> Any:
        found = self._cache.get(key)
        if found is None:
            if len(self._cache) > 256:  # a caller cycling through many buffers: keep the table small
                self._cache.clear()
            found = self._cache[key] = self._array(pointer, shape, stride, dtype, device)
        return found

    def execute(self, graph: Any, pack: Any, ctx: ExecutionContext) -> None:
        bufs = pack.buffers
        device = pack.device if pack.device >= 0 else 0  # a bare address: the current device's
        arrays = {}
        for role, pos, shape, stride, dtype in self._rows:
            buf = bufs[pos]
            if buf.shape != shape or buf.stride != stride:
                self._refuse(
                    f"operand {role} is shape {list(buf.shape)} stride {list(buf.stride)}; the plan is "
                    f"compiled for the declared shape {list(shape)} stride {list(stride)}"
                )
            arrays[role] = self._view((role, buf.pointer, device), buf.pointer, shape, stride, dtype, device)
        workspace = ctx.workspace or 0
        if not workspace:
            self._refuse(f"needs a workspace of {self._workspace_bytes} bytes, got none")
        if workspace % 256:
            self._refuse(f"workspace pointer {workspace:#x} is not 256-byte aligned")
        for region in self._regions:
            strides = _row_major(region.shape)
            arrays[region.name] = self._view(
                (region.name, workspace, device), workspace + region.offset, region.shape, strides,
                region.dtype, device,
            )  # fmt: skip
        spare = self._spare_offset  # the stand-ins of absent operands (rank 2 and 4), never read
        for rank in (2, 4):
            arrays[f"spare{rank}"] = self._view(
                (f"spare{rank}", workspace, device),
                workspace + spare,
                (1,) * rank,
                (1,) * rank,
                "float32",
                device,
            )
        stream = ctx.stream or 0
        launch = self._launch_kernel
        self._run(
            lambda grid, kernel, args: launch(stream, grid, kernel, args), self._kernels, self._cfg, arrays
        )

    def _refuse(self, rule: str) -> None:
        """Raise naming the rule the call breaks (nothing is enqueued)."""
        raise OperandGeometryError(f"{self._engine} (graph {self._name!r}): {rule}", tensor=None)


def _row_major(shape: tuple) -> tuple:
    stride, acc = [], 1
    for d in reversed(shape):
        stride.append(acc)
        acc *= d
    return tuple(reversed(stride))


class GdnCutileEngine(BaseEngine):
    name = "gdn_cutile"
    capabilities = Capabilities(
        sm_lo=80,
        sm_hi=121,
        dtypes={data_type.BFLOAT16, data_type.HALF},
        features=_FEATURES,
        knob_domains={"BLOCK_V": BLOCK_V, "OCCUPANCY": OCCUPANCY, "SEGMENT": SEGMENT},
    )

    def _facts(self, request: EngineRequest) -> LinearAttentionFacts:
        return facts_of(self.name, request)

    # which direction this engine serves (the backward is its own slot, gdn_cutile_bwd)
    serves_backward = False

    def check_support(self, request: EngineRequest) -> None:
        facts = self._facts(request)
        if facts.backward != self.serves_backward:
            other = "gdn_cutile_bwd" if facts.backward else "gdn_cutile"
            raise GraphNotSupportedError(
                f"{self.name}: serves {'gdn_bwd' if self.serves_backward else 'gdn'} graphs; "
                f"{'gdn_bwd' if facts.backward else 'gdn'} graphs are served by {other}"
            )
        reason = _support_reason(facts) or self.capabilities.mismatch(facts, device=request.device)
        if reason is not None:
            raise GraphNotSupportedError(f"{self.name}: {reason}")
        if not _cutile_installed():
            raise ImportError(f"{self.name}: needs cuTile ({_INSTALL})")

    def get_workspace_size(self, request: EngineRequest, plan: PlanConfig) -> int:
        facts = self._facts(request)
        knobs = {getattr(k, "name", k): v for k, v in (plan.knobs or {}).items()}
        block_v, segment = knobs.get("BLOCK_V", BLOCK_V[0]), knobs.get("SEGMENT", SEGMENT[0])
        if block_v_reason(facts, block_v):
            block_v = BLOCK_V[0]
        if segment_reason(facts, block_v, segment):
            segment = SEGMENT[0]
        return config_for(facts, block_v, segment).workspace_bytes

    def build_plan(
        self, request: EngineRequest, plan: PlanConfig, ctx: ExecutionContext | None
    ) -> CompiledPlan:
        self.check_support(request)
        facts = self._facts(request)
        knobs = {getattr(k, "name", k): v for k, v in (plan.knobs or {}).items()}
        block_v, segment = knobs.get("BLOCK_V", BLOCK_V[0]), knobs.get("SEGMENT", SEGMENT[0])
        reason = (
            block_v_reason(facts, block_v)
            or self.capabilities.mismatch(facts, knobs, device=request.device)
            or segment_reason(facts, block_v, segment)
        )
        if reason is not None:
            raise GraphNotSupportedError(f"{self.name}: {reason}")
        launch = _cutile_launch()
        positions, declared = declared_operands(self.name, request, _operands(facts))
        from pygraph_linear_attention.gdn.cutile_fwd import KERNELS

        occupancy = knobs.get("OCCUPANCY", OCCUPANCY[0])
        kernels, run, hinted_names = KERNELS, launch_forward, HINTED_FWD.get(occupancy, ())
        if facts.backward:
            from pygraph_linear_attention.gdn.cutile_bwd import BWD_KERNELS

            kernels, run, hinted_names = {**KERNELS, **BWD_KERNELS}, launch_backward, HINTED_BWD
        if occupancy:
            from pygraph_linear_attention.gdn.cutile_fwd import hinted

            kernels = kernels | {n: hinted(kernels[n], occupancy=occupancy) for n in hinted_names}
        cfg = config_for(facts, block_v, segment)
        return GdnCutilePlan(request.graph.name, cfg, positions, declared, launch, kernels, run)


class GdnCutileBwdEngine(GdnCutileEngine):
    """``gdn_cutile_bwd``: the same kernels' backward (gdn_bwd graphs)."""

    name = "gdn_cutile_bwd"
    serves_backward = True
    capabilities = dataclasses.replace(
        GdnCutileEngine.capabilities,
        knob_domains={"BLOCK_V": BLOCK_V, "OCCUPANCY": OCCUPANCY_BWD, "SEGMENT": SEGMENT},
    )


def _cutile_installed() -> bool:
    """Whether cuda.tile can be imported, probed without importing it (``cuda`` is a namespace)."""
    return importlib.util.find_spec("cuda") is not None and importlib.util.find_spec("cuda.tile") is not None


def _cutile_launch() -> Any:
    """``cuda.tile.launch``, after checking that cuTile's compiler can be found (a decline if not)."""
    try:
        import cuda.tile as ct
    except ImportError as exc:
        raise ImportError(f"gdn_cutile: needs cuTile ({_INSTALL}): {exc}") from exc
    try:
        from cuda.tile._compile import _find_compiler_bin  # the lookup cuTile's JIT runs on first launch
    except ImportError:  # another cuTile release: its first launch reports a missing compiler itself
        return ct.launch
    try:
        _find_compiler_bin()
    except FileNotFoundError as exc:
        raise ImportError(f"gdn_cutile: cuTile's compiler is not available: {exc}") from exc
    return ct.launch
