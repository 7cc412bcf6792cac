"""The plan cache's key: what a measured winner depends on, and nothing else.

A winner is a fact about one problem on one device with one set of kernels, so the key is

- the graph's structure: each node's op, its ports wired by tensor position, its compute type and
  its attributes; each tensor's dims, strides, data type, virtual/by-value flags and scalar value;
  the graph's data types and flags (declared SM and SM count, dynamic and override shapes);
- the device: its name, SM and SM count;
- the versions: pygraph-core, the family's package, the backend (when it lowered the graph).

Names and uids are left out: two graphs that differ only in what their tensors are called are the
same problem. A graph holding a non-data attribute (a Python callable such as ``score_mod``) has
no stable key and is never cached.
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib
import json
import sys
from importlib import metadata
from typing import Any

from pygraph._version import __version__ as core_version
from pygraph.tuning.device import CudaDevice, current_device

__all__ = ["PlanKey", "plan_key", "structure", "summary"]

NO_DEVICE = "no CUDA device"
_FLAGS = (
    "sm_version",
    "sm_count",
    "is_dynamic_shape_enabled",
    "is_override_shape_enabled",
    "is_cuda_graph_replay_expected",
)
_TENSOR_FIELDS = ("dim", "stride", "data_type", "is_virtual", "is_pass_by_value", "reordering_type", "value")
_TENSOR_FIELDS += ("scalar_type", "ragged_offset_multiplier")


class Uncacheable(ValueError):
    """The graph has no stable key (the message says which attribute)."""


@dataclasses.dataclass(frozen=True)
class PlanKey:
    """One cache key: ``digest`` is what the database looks up; the rest says what it was made of."""

    digest: str
    graph: str  # the structure's own digest
    device: str
    versions: dict[str, str]
    family: str | None
    summary: str


def _remap(value: Any, position: dict[int, int]) -> Any:
    """``value`` with every encoded tensor reference (uid) replaced by the tensor's position."""
    if isinstance(value, dict):
        if "__tensor__" in value:
            return {"__tensor__": position[value["__tensor__"]]}
        if "__opaque__" in value:
            raise Uncacheable(value["__opaque__"])
        return {k: _remap(v, position) for k, v in value.items()}
    if isinstance(value, list):
        return [_remap(v, position) for v in value]
    return value


def structure(graph: Any) -> dict[str, Any]:
    """The graph as the key sees it: plain data with positions for uids and no names.

    Raises `Uncacheable` naming the attribute that has no data form.
    """
    plain = graph.inspect()
    position = {t["uid"]: i for i, t in enumerate(plain["tensors"])}
    producer = {n["name"]: i for i, n in enumerate(plain["nodes"])}

    def port(uids: Any) -> Any:
        if isinstance(uids, list):
            return [position[u] for u in uids]
        return None if uids is None else position[uids]

    tensors = []
    for t in plain["tensors"]:
        record = {field: t[field] for field in _TENSOR_FIELDS}
        record["ragged_offset"] = port(t["ragged_offset"])
        record["producer"] = producer.get(t["producer"]) if t["producer"] is not None else None
        tensors.append(record)
    nodes = []
    for n in plain["nodes"]:
        try:
            params = _remap(n["params"], position)
        except Uncacheable as exc:
            raise Uncacheable(f"node {n['name']!r} ({n['op']}) has a non-data attribute {exc}") from None
        nodes.append(
            {
                "op": n["op"],
                "compute_data_type": n["compute_data_type"],
                "inputs": {k: port(v) for k, v in sorted(n["inputs"].items())},
                "outputs": {k: port(v) for k, v in sorted(n["outputs"].items())},
                "params": params,
            }
        )
    flags = {flag: getattr(graph, flag, None) for flag in _FLAGS}
    return {"context": plain["context"], "flags": flags, "tensors": tensors, "nodes": nodes}


def _digest(data: Any) -> str:
    text = json.dumps(data, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def _package_version(family: Any) -> str:
    if family.distribution:
        try:
            return metadata.version(family.distribution)
        except metadata.PackageNotFoundError:
            pass
    top = family.package.partition(".")[0]
    try:
        module = sys.modules.get(top) or importlib.import_module(top)
    except ImportError:
        return "not installed"
    return str(getattr(module, "__version__", "unknown"))


def _backend_version(graph: Any) -> str | None:
    """The cuDNN frontend and runtime versions, when the backend lowered this graph."""
    if graph.lowered is None or "cudnn" not in sys.modules:
        return None
    cudnn = sys.modules["cudnn"]
    try:
        runtime = cudnn.backend_version()
    except Exception:  # the binding's errors are untyped; an unreadable version is "unknown"
        runtime = "unknown"
    return f"frontend {getattr(cudnn, '__version__', 'unknown')}, cuDNN {runtime}"


def summary(graph: Any, family: Any = None) -> str:
    """One line a person reads in ``pygraph cache list``: the op chain and the operands' geometry."""
    ops = " -> ".join(node.op for node in graph.nodes)
    operands = ", ".join(
        f"{t.name or t.uid}{list(t.dim)}:{t.data_type.name.lower()}"
        for t in graph.tensors
        if not t.is_virtual and t.producer is None
    )
    head = f"{family.name}: " if family is not None else ""
    return f"{head}{ops} ({operands})"


def plan_key(graph: Any, family: Any, device: CudaDevice | str | None = "current") -> PlanKey:
    """The key of ``graph`` (planned for ``family``) on ``device`` ("current": this process's).

    Raises `Uncacheable` when the graph has no stable key.
    """
    if device == "current":
        device = current_device()
    device_key = device.key if isinstance(device, CudaDevice) else NO_DEVICE
    graph_digest = _digest(structure(graph))
    versions = {"pygraph-core": core_version}
    if family is not None:
        versions[family.distribution or family.package] = _package_version(family)
    backend = _backend_version(graph)
    if backend is not None:
        versions["backend"] = backend
    digest = _digest({"graph": graph_digest, "device": device_key, "versions": versions})
    name = getattr(family, "name", None)
    return PlanKey(digest, graph_digest, device_key, versions, name, summary(graph, family))
