"""Torch custom ops over pygraph graphs: the plumbing every family's op shares.

A family's op (``pygraph_linear_attention.ops``, ``pygraph_sdpa.ops``) builds one graph per key
(everything the graph declares: shapes, dtypes, device, flags), plans and builds it once, and then
executes it per call with the call's tensors. `GraphCache` keeps the built graphs (a bounded LRU,
one build per key even under threads; a build that raises is not cached, so the next call asks
again, and a build asked for while torch's current stream captures a CUDA graph raises
`pygraph.errors.StreamCaptureError`), `plan_and_build` plans and builds a graph and `built` settles
what its calls read,
`declare` and `declare_output` declare a contiguous operand or output, `require_tensor` and
`require_bool` raise the typed error of a bad argument, `device_facts` gives a graph its device's
arch, and `execute` runs a built graph on torch's current stream with a 256-byte aligned workspace
from torch's allocator.

Execution launches on torch's current stream of the tensors' device (``Graph.execute(stream=)``):
nothing waits on another stream, records an event or synchronizes, and the only allocation is the
workspace, from torch's caching allocator, so a call can be captured in a CUDA graph once its graph
is built. A backend plan runs on a cuDNN handle's stream: each thread keeps one handle per device,
created when its first backend graph is built (outside any capture) and set to the call's stream.
Needs torch (imported here: only the op modules import this one).
"""

from __future__ import annotations

import collections
import dataclasses
import threading
from typing import Any

import torch

from pygraph.environment import engine_settings_key
from pygraph.errors import OpInputError, StreamCaptureError
from pygraph.ir.shapes import row_major_stride

__all__ = [
    "BuiltGraph", "GraphCache", "built", "capturing", "declare", "declare_output", "device_facts", "direct",
    "execute", "launcher", "plan_and_build", "refuse_build_in_capture", "require_bool", "require_tensor",
]  # fmt: skip

_WORKSPACE_ALIGN = 256  # the engines' plans refuse a workspace pointer off 256 bytes


@dataclasses.dataclass(frozen=True)
class BuiltGraph:
    """A planned and built graph: its ports by name (inputs and outputs), its workspace need, and
    whether its selected plan is a backend plan (which launches on a cuDNN handle's stream), all
    settled when it is built (`build`), so a call reads only its tensors."""

    graph: Any
    ports: dict[str, Any]
    workspace_bytes: int
    backend: bool = False

    @property
    def plan_name(self) -> str:
        return self.graph.selected_plan.name


class GraphCache:
    """Built graphs by key and the engine settings (``PYGRAPH_ENABLE_OPT_IN_ENGINES``,
    ``PYGRAPH_DISABLE_ENGINES``) they were planned under, least recently used dropped past
    ``capacity``; one build per key.

    Beside the graphs it keeps the ops' prepared calls (`call`, `remember`): what a call whose
    arguments passed the op's checks settled (its graph, its outputs' shapes, a bound `launcher`),
    under a signature of everything those checks read (each tensor's shape, stride, dtype and
    device, each flag with its type), so a later call of the same signature skips the checks, the
    key's construction and the lookup. A prepared call lives as long as its graph (dropped with it,
    and by `clear`); using one counts as using its graph."""

    capacity = 128

    def __init__(self) -> None:
        self._graphs: collections.OrderedDict[tuple, BuiltGraph] = collections.OrderedDict()
        self._calls: dict[tuple, tuple[tuple, Any]] = {}  # (signature, settings) -> (graph key, call)
        self._key_of: dict[int, tuple] = {}  # id of a kept BuiltGraph -> its key
        self._lock = threading.Lock()
        self.builds = 0  # graphs built (for tests and for the curious)

    def get(self, key: tuple, build: Any, *, call: str = "", device: Any = None) -> BuiltGraph:
        """The graph of ``key``, built by ``build()`` on its first call. With a CUDA ``device``, a
        first call while torch's current stream is capturing raises `StreamCaptureError` naming
        ``call`` and the graph (``key``) instead of building inside the capture."""
        # which engines are offered (opt-in, disabled) is part of the key: a graph planned before the
        # variables changed is not reused after
        key = (key, engine_settings_key())
        found = self._graphs.get(key)
        if found is not None:
            try:
                self._graphs.move_to_end(key)
            except KeyError:  # dropped by another thread's build meanwhile: still a built graph
                pass
            return found
        if device is not None:
            refuse_build_in_capture(call, key[0], device)
        with self._lock:  # two threads' first call of one key build once
            found = self._graphs.get(key)
            if found is None:
                found = build()
                self.builds += 1
                self._graphs[key] = found
                self._key_of[id(found)] = key
                while len(self._graphs) > self.capacity:
                    _, dropped = self._graphs.popitem(last=False)
                    self._key_of.pop(id(dropped), None)
            return found

    def call(self, signature: tuple) -> Any:
        """The prepared call remembered under ``signature`` and the current engine settings, or None
        (never remembered, or its graph dropped since; an unhashable signature is none remembered)."""
        try:
            found = self._calls.get((signature, engine_settings_key()))
        except TypeError:
            return None
        if found is None:
            return None
        try:
            self._graphs.move_to_end(found[0])
        except KeyError:  # its graph was dropped: the caller's checking path builds it again
            return None
        return found[1]

    def remember(self, signature: tuple, built: BuiltGraph, prepared: Any) -> None:
        """Keep ``prepared`` (a call of ``built``, a graph this cache holds) under ``signature``, for
        `call`. Not kept where ``built`` is no graph of this cache (dropped meanwhile, or built
        elsewhere)."""
        key = self._key_of.get(id(built))
        if key is None or self._graphs.get(key) is not built:
            return
        calls = self._calls
        if len(calls) >= 4 * self.capacity:  # prepared calls of dropped graphs go first, then all
            live = self._graphs
            for stale in [k for k, (graph_key, _) in list(calls.items()) if graph_key not in live]:
                calls.pop(stale, None)
            if len(calls) >= 4 * self.capacity:
                calls.clear()
        calls[(signature, key[1])] = (key, prepared)

    def keys(self) -> list[tuple]:
        """The callers' keys of the graphs kept (under any engine settings)."""
        return [key for key, _ in self._graphs]

    def clear(self) -> None:
        """Drop every graph and prepared call (and reset the count of builds)."""
        with self._lock:
            self._graphs.clear()
            self._calls.clear()
            self._key_of.clear()
            self.builds = 0


def device_facts(device: torch.device) -> dict[str, int]:
    """sm_version and sm_count of a CUDA device, for the graph (engines judge their arch range)."""
    if device.type != "cuda":
        return {}
    major, minor = torch.cuda.get_device_capability(device)
    return {
        "sm_version": 10 * major + minor,
        "sm_count": torch.cuda.get_device_properties(device).multi_processor_count,
    }


def declare(g: Any, name: str, shape: tuple, dtype: torch.dtype) -> Any:
    """A contiguous (row-major) input of ``g``."""
    return g.tensor(name=name, dim=list(shape), stride=list(row_major_stride(shape)), data_type=dtype)


def declare_output(t: Any, shape: tuple, dtype: torch.dtype) -> None:
    """Mark ``t`` an output of ``g``, contiguous, of ``shape`` and ``dtype``."""
    t.set_output(True).set_dim(list(shape)).set_stride(list(row_major_stride(shape))).set_data_type(dtype)


def require_tensor(call: str, name: str, t: Any, optional: bool = False) -> None:
    """The `OpInputError` of ``call`` where ``t`` is not a tensor (or None, where ``optional``), or is
    no dense one (sparse, nested, MKL-DNN: no strides the graphs could read it by)."""
    if t is None and optional:
        return
    if not isinstance(t, torch.Tensor):
        kind = "a torch.Tensor or None" if optional else "a torch.Tensor"
        raise OpInputError(f"{call}: {name} must be {kind}, got {type(t).__name__}")
    if t.is_nested or t.layout is not torch.strided:  # the graphs read dense memory by shape and stride
        layout = "nested" if t.is_nested else str(t.layout)
        raise OpInputError(f"{call}: {name} must be a dense (torch.strided) tensor, got a {layout} one")


def require_bool(call: str, name: str, value: Any) -> None:
    """The `OpInputError` of ``call`` where a flag is not a bool."""
    if not isinstance(value, bool):
        raise OpInputError(f"{call}: {name} must be a bool, got {type(value).__name__} {value!r}")


def plan_and_build(g: Any) -> None:
    """Plan (the plan cache is consulted there) and build the first plan that builds; raises the
    planner's `pygraph.GraphNotSupportedError` naming every engine's reason."""
    g.create_execution_plans()  # raises GraphNotSupportedError naming every engine's reason
    g.build_plans()


def built(g: Any, ports: dict[str, Any], device: torch.device) -> BuiltGraph:
    """``g``, planned and built (`plan_and_build`), with what its calls read settled: the workspace
    size and whether its plan launches through a cuDNN handle (this thread's handle for ``device``
    is created now, before any capture could need it)."""
    backend = g.selected_plan.kind == "backend"
    if backend and device.type == "cuda":
        _thread_handle(device.index)
    return BuiltGraph(g, ports, g.get_workspace_size(), backend)


# --- torch's dispatcher -------------------------------------------------------------------------------

# A custom op's call through torch's dispatcher costs 10-13 us on the host (host_cost_cpu's machine:
# the autograd kernel's redispatch, the Python kernel's wrappers, the outputs' aliasing check) before
# the op's body runs. Where nothing the dispatcher serves is in play (no autograd to record, no mode,
# transform, tracer or compiler, no profiler to name the op for, plain tensors), the body's result
# is the same without it, so the ops' Python functions run a remembered call directly (`direct`).
_C = torch._C
_TENSOR = torch.Tensor
_dispatch_modes = getattr(_C, "_len_torch_dispatch_stack", None)
_function_modes = getattr(_C, "_len_torch_function_stack", None)
_transforms = getattr(_C, "_are_functorch_transforms_active", None)
_tracing = getattr(_C, "_get_tracing_state", None)
_profiling = getattr(getattr(_C, "_autograd", None), "_profiler_enabled", None)
_grad_enabled = _C.is_grad_enabled
_compiling = torch.compiler.is_compiling
_DIRECT = None not in (_dispatch_modes, _function_modes, _transforms, _tracing, _profiling)


def direct(tensors: tuple) -> bool:
    """Whether an op's call with ``tensors`` (None where absent) may skip torch's dispatcher: every
    tensor a plain torch.Tensor (no subclass: fake, functional, DTensor, Parameter), none needing a
    gradient where grad mode is on, and no torch.compile / export trace, dispatch or function mode,
    functorch transform (vmap, grad, functionalize), jit trace or profiler active (a torch without
    the calls asked here: never)."""
    if not _DIRECT or _compiling():
        return False
    if _dispatch_modes() or _function_modes() or _transforms() or _tracing() is not None or _profiling():
        return False
    grad = _grad_enabled()
    for t in tensors:
        if t is not None and (type(t) is not _TENSOR or (grad and t.requires_grad)):
            return False
    return True


# --- CUDA-graph capture -----------------------------------------------------------------------------


def capturing(device: torch.device) -> bool:
    """Whether torch's current stream (of the current device) is capturing a CUDA graph; False off
    CUDA (a CPU-only torch has no capture to ask about)."""
    return device.type == "cuda" and torch.cuda.is_current_stream_capturing()


def refuse_build_in_capture(call: str, what: Any, device: torch.device) -> None:
    """The `StreamCaptureError` of a graph build (``what``: the graph's key) asked for while torch's
    current stream captures a CUDA graph: planning compiles, allocates and synchronizes, which a
    capture forbids (and a failed capture poisons the process), so it is refused before it starts."""
    if capturing(device):
        raise StreamCaptureError(
            f"{call}: the first call of graph {what!r} builds it (plans, compiles, allocates), which "
            "cannot run while torch's current stream is capturing a CUDA graph; run the op once eagerly "
            "with the same shapes, dtypes and flags (forward and backward) before the capture"
        )


# --- execution ----------------------------------------------------------------------------------------

# torch's current stream as a raw cudaStream_t without building a torch.cuda.Stream (a few us each);
# older torch lacks the private getter, and the public call serves
_raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None) or (
    lambda index: torch.cuda.current_stream(index).cuda_stream
)
_handles = threading.local()  # each thread's cuDNN handle per device index (a handle is one thread's)


def current_stream(device: torch.device) -> int:
    """torch's current stream on the CUDA ``device`` as an int ``cudaStream_t``."""
    return _raw_stream(device.index)


def _thread_handle(index: int) -> Any:
    """This thread's cuDNN handle on device ``index``, created on its first use: creating one
    allocates, so one first asked for inside a capture raises `StreamCaptureError`."""
    by_device = getattr(_handles, "by_device", None)
    if by_device is None:
        by_device = _handles.by_device = {}
    handle = by_device.get(index)
    if handle is None:
        device = torch.device("cuda", index)
        refuse_build_in_capture(
            "pygraph.op_support", f"the cuDNN handle of cuda:{index} for this thread", device
        )
        import cudnn

        with torch.cuda.device(index):
            handle = by_device[index] = cudnn.create_handle()
    return handle


def execute(built: BuiltGraph, tensors: dict[str, torch.Tensor], device: torch.device) -> None:
    """Run ``built`` on ``tensors`` (by port name, every port given) on torch's current stream of
    ``device``, with a 256-byte aligned workspace from torch's allocator (module docstring). Per call
    it reads the stream, allocates the workspace and hands the graph its tensors; a host ``device``
    (the CPU tests' stand-ins) runs with no stream. A repeated call is `launcher`'s (binding one
    here would cost 1.5 us per call, host_cost_cpu)."""
    ports = built.ports
    pack = {ports[name]: t for name, t in tensors.items()}
    workspace = _workspace(built.workspace_bytes, device) if built.workspace_bytes else None
    if device.type != "cuda":
        built.graph.execute(pack, workspace)
        return
    index = device.index
    handle = _thread_handle(index) if built.backend else None
    stream = _raw_stream(index)
    if torch.cuda.current_device() == index:
        built.graph.execute(pack, workspace, handle, stream=stream)
        return
    with torch.cuda.device(index):  # the tensors' device, where the plan's kernels are loaded
        built.graph.execute(pack, workspace, handle, stream=stream)


def launcher(built: BuiltGraph, names: tuple[str, ...], device: torch.device, run: Any = None) -> Any:
    """``launch(*tensors)``: `execute` of ``built`` with the tensors of ports ``names``, in that
    order, with everything a call does not change settled here (the ports, the workspace size,
    whether the plan takes a cuDNN handle, the plan's per-call path), so a call reads only its
    tensors' pointers and sizes, the stream and the current device. ``run``: the execute the op
    calls, where it is not this module's (the CPU tests' stand-ins replace it): called with the
    tensors by name."""
    if run is not None and run is not execute:
        by_name = run

        def launch_by_name(*tensors: torch.Tensor) -> None:
            by_name(built, dict(zip(names, tensors)), device)

        return launch_by_name
    ports = tuple(built.ports[name] for name in names)
    graph = built.graph
    # the selected plan's per-call path (`planning.runner`) called directly, one frame less than
    # Graph.execute; read per call (a graph planned again runs its new plan), Graph.execute where
    # there is none yet (or no planner: a stand-in graph)
    planner = getattr(graph, "planner", None) or _NoPlanner
    graph_execute = graph.execute
    nbytes = built.workspace_bytes

    if device.type != "cuda":

        def launch_host(*tensors: torch.Tensor) -> None:
            workspace = _workspace(nbytes, device) if nbytes else None
            (planner.run or graph_execute)(dict(zip(ports, tensors)), workspace, None, stream=None)

        return launch_host
    index = device.index
    backend = built.backend

    def launch(*tensors: torch.Tensor) -> None:
        pack = dict(zip(ports, tensors))
        workspace = _workspace(nbytes, device) if nbytes else None
        handle = _thread_handle(index) if backend else None
        stream = _raw_stream(index)
        if torch.cuda.current_device() == index:
            (planner.run or graph_execute)(pack, workspace, handle, stream=stream)
            return
        with torch.cuda.device(index):  # the tensors' device, where the plan's kernels are loaded
            (planner.run or graph_execute)(pack, workspace, handle, stream=stream)

    return launch


class _NoPlanner:
    """A graph without a planner (a test's stand-in): no per-call path but its execute."""

    run = None


def _workspace(nbytes: int, device: torch.device) -> torch.Tensor:
    """``nbytes`` of torch's caching allocator starting on a 256-byte boundary (the engines refuse
    another): its blocks are 512-byte aligned, so the first allocation is; a margin only if not."""
    raw = torch.empty(nbytes, dtype=torch.uint8, device=device)
    if raw.data_ptr() % _WORKSPACE_ALIGN == 0:
        return raw
    raw = torch.empty(nbytes + _WORKSPACE_ALIGN, dtype=torch.uint8, device=device)
    return raw[(-raw.data_ptr()) % _WORKSPACE_ALIGN :][:nbytes]
