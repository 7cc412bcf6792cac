"""Torch custom ops over pygraph graphs: the plumbing every family's op shares.

A family's op (``pygraph_linear_attention.ops``, ``pygraph_sdpa.ops``) builds one graph per key
(everything the graph declares: shapes, dtypes, device, flags), plans and builds it once, and then
executes it per call with the call's tensors. `GraphCache` keeps the built graphs (a bounded LRU,
one build per key even under threads; a build that raises is not cached, so the next call asks
again), `declare` and `declare_output` declare a contiguous operand or output, `require_tensor` and
`require_bool` raise the typed error of a bad argument, `device_facts` gives a graph its device's arch, and
`execute` runs a built graph ordered on torch's current stream with a 256-byte aligned workspace
from torch's allocator.

Execution enqueues on the device's default stream, which the engines' plans run on when no backend
handle is given; when torch's current stream is another one, the default stream first waits for it
and it then waits for the default stream, so the call is ordered as if it ran on the current stream.
Needs torch (imported here: only the op modules import this one).
"""

from __future__ import annotations

import collections
import dataclasses
import threading
from typing import Any

import torch

from pygraph.environment import engine_settings
from pygraph.errors import OpInputError
from pygraph.ir.shapes import row_major_stride

__all__ = [
    "BuiltGraph", "GraphCache", "declare", "declare_output", "device_facts", "execute", "plan_and_build",
    "require_bool", "require_tensor",
]  # fmt: skip

_WORKSPACE_ALIGN = 256  # the engines' plans refuse a workspace pointer off 256 bytes


@dataclasses.dataclass(frozen=True)
class BuiltGraph:
    """A planned and built graph: its ports by name (inputs and outputs) and its workspace need."""

    graph: Any
    ports: dict[str, Any]
    workspace_bytes: int

    @property
    def plan_name(self) -> str:
        return self.graph.selected_plan.name


class GraphCache:
    """Built graphs by key and the engine settings (``PYGRAPH_ENABLE_OPT_IN_ENGINES``,
    ``PYGRAPH_DISABLE_ENGINES``) they were planned under, least recently used dropped past
    ``capacity``; one build per key."""

    capacity = 128

    def __init__(self) -> None:
        self._graphs: collections.OrderedDict[tuple, BuiltGraph] = collections.OrderedDict()
        self._lock = threading.Lock()
        self.builds = 0  # graphs built (for tests and for the curious)

    def get(self, key: tuple, build: Any) -> BuiltGraph:
        # which engines are offered (opt-in, disabled) is part of the key: a graph planned before the
        # variables changed is not reused after
        key = (key, engine_settings())
        found = self._graphs.get(key)
        if found is not None:
            try:
                self._graphs.move_to_end(key)
            except KeyError:  # dropped by another thread's build meanwhile: still a built graph
                pass
            return found
        with self._lock:  # two threads' first call of one key build once
            found = self._graphs.get(key)
            if found is None:
                found = build()
                self.builds += 1
                self._graphs[key] = found
                while len(self._graphs) > self.capacity:
                    self._graphs.popitem(last=False)
            return found

    def keys(self) -> list[tuple]:
        """The callers' keys of the graphs kept (under any engine settings)."""
        return [key for key, _ in self._graphs]

    def clear(self) -> None:
        """Drop every graph (and reset the count of builds)."""
        with self._lock:
            self._graphs.clear()
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
    """The `OpInputError` of ``call`` where ``t`` is not a tensor (or None, where ``optional``)."""
    if t is None and optional:
        return
    if not isinstance(t, torch.Tensor):
        kind = "a torch.Tensor or None" if optional else "a torch.Tensor"
        raise OpInputError(f"{call}: {name} must be {kind}, got {type(t).__name__}")


def require_bool(call: str, name: str, value: Any) -> None:
    """The `OpInputError` of ``call`` where a flag is not a bool."""
    if not isinstance(value, bool):
        raise OpInputError(f"{call}: {name} must be a bool, got {type(value).__name__} {value!r}")


def plan_and_build(g: Any) -> None:
    """Plan (the plan cache is consulted there) and build the first plan that builds; raises the
    planner's `pygraph.GraphNotSupportedError` naming every engine's reason."""
    g.create_execution_plans()  # raises GraphNotSupportedError naming every engine's reason
    g.build_plans()


def execute(built: BuiltGraph, tensors: dict[str, torch.Tensor], device: torch.device) -> None:
    """Run ``built`` on ``tensors`` (by port name, every port given): a 256-byte aligned workspace
    from torch's allocator, ordered on torch's current stream (module docstring)."""
    ports = built.ports
    pack = {ports[name]: t for name, t in tensors.items()}
    workspace = None
    if built.workspace_bytes:
        raw = torch.empty(built.workspace_bytes + _WORKSPACE_ALIGN, dtype=torch.uint8, device=device)
        workspace = raw[(-raw.data_ptr()) % _WORKSPACE_ALIGN :][: built.workspace_bytes]
    if device.type != "cuda":
        built.graph.execute(pack, workspace=workspace)
        return
    current, default = torch.cuda.current_stream(device), torch.cuda.default_stream(device)
    with torch.cuda.device(device):
        if current.cuda_stream == default.cuda_stream:
            built.graph.execute(pack, workspace=workspace)
            return
        default.wait_stream(current)
        built.graph.execute(pack, workspace=workspace)
        current.wait_stream(default)
