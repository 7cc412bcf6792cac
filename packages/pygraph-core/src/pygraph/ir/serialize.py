"""The IR as plain data (`inspect()`, the JSON repr) and its JSON round trip."""

from __future__ import annotations

import enum
import json
from typing import TYPE_CHECKING, Any

from pygraph.errors import GraphStateError
from pygraph.ir import dtypes as _dtypes
from pygraph.ir.node import Node
from pygraph.ir.tensor import Tensor

if TYPE_CHECKING:
    from pygraph.graph import Graph

__all__ = ["dumps", "is_ir_payload", "loads_into", "to_plain"]

FORMAT = "pygraph_ir"
VERSION = 1
_PREFIX = '{"format": "pygraph_ir"'


def encode(value: Any) -> Any:
    if isinstance(value, enum.Enum):
        return {"__enum__": type(value).__name__, "name": value.name}
    if isinstance(value, slice):
        return {"__slice__": [value.start, value.stop, value.step]}
    if isinstance(value, Tensor):
        return {"__tensor__": value.uid}
    if isinstance(value, (list, tuple)):
        return [encode(v) for v in value]
    if isinstance(value, dict):
        return {str(k): encode(v) for k, v in value.items()}
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return {"__opaque__": repr(value)}


def decode(value: Any) -> Any:
    if isinstance(value, list):
        return tuple(decode(v) for v in value)
    if isinstance(value, dict):
        if "__enum__" in value:
            return getattr(getattr(_dtypes, value["__enum__"]), value["name"])
        if "__slice__" in value:
            return slice(*value["__slice__"])
        if "__opaque__" in value:
            raise ValueError(f"cannot deserialize the non-data parameter {value['__opaque__']}")
        return {k: decode(v) for k, v in value.items()}
    return value


def _tensor_record(t: Tensor) -> dict[str, Any]:
    return {
        "uid": t.uid,
        "uid_assigned": t.uid_assigned,
        "name": t.name,
        "dim": list(t.dim),
        "stride": list(t.stride),
        "dim_assigned": t.dim_assigned,
        "stride_assigned": t.stride_assigned,
        "data_type": t.data_type.name,
        "data_type_assigned": t.data_type_assigned,
        "inferred_data_type": t._inferred_dtype.name,
        "is_virtual": t.is_virtual,
        "is_pass_by_value": t.is_pass_by_value,
        "ragged_offset": t.ragged_offset.uid if t.ragged_offset is not None else None,
        "ragged_offset_multiplier": t.ragged_offset_multiplier,
        "reordering_type": t.reordering_type.name,
        "value": t.value,
        "scalar_type": t.scalar_type.name if t.scalar_type is not None else None,
        "producer": t.producer.name if t.producer is not None else None,
    }


def _port_record(value: Any) -> Any:
    if isinstance(value, tuple):
        return [t.uid for t in value]
    return value.uid if value is not None else None


def _node_record(node: Node) -> dict[str, Any]:
    return {
        "name": node.name,
        "op": node.op,
        "type": node.type.name,
        "lowerable": node.is_lowerable,
        "compute_data_type": node.compute_data_type.name,
        "inputs": {k: _port_record(v) for k, v in node.inputs.items()},
        "outputs": {k: _port_record(v) for k, v in node.outputs.items()},
        "params": {k: encode(v) for k, v in node.params.items()},
    }


def to_plain(graph: Graph) -> dict[str, Any]:
    return {
        "format": FORMAT,
        "version": VERSION,
        "name": graph.name,
        "state": graph.state.name,
        "context": graph.context.to_dict(),
        "tensors": [_tensor_record(t) for t in graph._ir.tensors],
        "nodes": [_node_record(n) for n in graph._ir.nodes],
    }


def dumps(graph: Graph) -> bytes:
    return json.dumps(to_plain(graph)).encode()


def is_ir_payload(payload: Any) -> bool:
    if isinstance(payload, (bytes, bytearray)):
        return bytes(payload[: len(_PREFIX)]) == _PREFIX.encode()
    return isinstance(payload, str) and payload.startswith(_PREFIX)


def loads_into(graph: Graph, payload: bytes | str) -> None:
    """Rebuild a serialized IR into ``graph`` (which must be empty)."""
    from pygraph.ops.registry import OPS

    ir = graph._ir
    if ir.tensors or ir.nodes:
        raise GraphStateError(f"deserialize(): graph {graph.name!r} is not empty")
    data = json.loads(payload)
    if data.get("version") != VERSION:
        raise ValueError(f"deserialize(): IR format version {data.get('version')!r}, expected {VERSION}")
    ctx = data["context"]
    for key in ("io_data_type", "intermediate_data_type", "compute_data_type"):
        object.__setattr__(ir.context, "_" + key.split("_")[0], _dtypes.data_type[ctx[key]])
    by_uid: dict[int, Tensor] = {}
    for rec in data["tensors"]:
        t = ir.new_tensor(name=rec["name"], uid=rec["uid"])
        raw = t._raw_set
        raw("_uid_assigned", rec["uid_assigned"])
        raw("_dim", tuple(rec["dim"]))
        raw("_stride", tuple(rec["stride"]))
        raw("_dim_assigned", rec["dim_assigned"])
        raw("_stride_assigned", rec["stride_assigned"])
        raw("_data_type", _dtypes.data_type[rec["data_type"]])
        raw("_dtype_assigned", rec["data_type_assigned"])
        raw("_inferred_dtype", _dtypes.data_type[rec["inferred_data_type"]])
        raw("_is_virtual", rec["is_virtual"])
        raw("_is_pass_by_value", rec["is_pass_by_value"])
        raw("_ragged_offset_multiplier", rec["ragged_offset_multiplier"])
        raw("_reordering_type", _dtypes.tensor_reordering[rec["reordering_type"]])
        raw("_value", rec["value"])
        if rec["scalar_type"] is not None:
            raw("_scalar_type", _dtypes.scalar_type[rec["scalar_type"]])
        by_uid[t.uid] = t
    for rec in data["tensors"]:
        if rec["ragged_offset"] is not None:
            by_uid[rec["uid"]]._raw_set("_ragged_offset", by_uid[rec["ragged_offset"]])

    def port(value: Any) -> Any:
        if isinstance(value, list):
            return tuple(by_uid[u] for u in value)
        return by_uid[value] if value is not None else None

    for rec in data["nodes"]:
        spec = OPS[rec["op"]]
        inputs = {k: port(v) for k, v in rec["inputs"].items()}
        params = {k: decode(v) for k, v in rec["params"].items()}
        name = ir.node_name(spec.name, rec["name"])
        node = Node(ir, spec, name, inputs, params, _dtypes.data_type[rec["compute_data_type"]])
        for k, v in rec["outputs"].items():
            out = port(v)
            node.outputs._data[k] = out
            if out is not None:
                out._raw_set("_producer", node)
        ir.add_node(node)
