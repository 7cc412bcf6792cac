"""The IR as plain data (`inspect()`, the JSON repr) and its JSON round trip.

Reading back checks the whole payload's fields before anything is built (`check_payload`), naming
the first bad field by its path (``$.tensors[2].dim[0]``); then each node is rebuilt through the
builders' own rules (`pygraph.ops.build.restore_node`: required ports, ranks, dtypes, attribute
kinds, the op's check), into a fresh IR the graph swaps in, so a refused payload leaves the graph
untouched. Every function here reads or builds the IR it is handed, never the graph object.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from pygraph.errors import DeserializationError, GraphStateError, OpInputError
from pygraph.ir import dtypes as _dtypes
from pygraph.ir.node import Node
from pygraph.ir.shapes import INT64_END, INT64_MAX
from pygraph.ir.tensor import Tensor

if TYPE_CHECKING:
    from pygraph.ir.container import GraphIR
    from pygraph.ir.node import Node

__all__ = [
    "check_payload",
    "describe_payload",
    "deserialize_payload",
    "dumps",
    "is_ir_payload",
    "loads_into",
    "parse_ir",
    "to_plain",
]

FORMAT = "pygraph_ir"
VERSION = 1
_PREFIX = '{"format": "pygraph_ir"'
# how deep a parameter's value may nest (a list of slices is 3 levels): past it a payload is refused
# by its path rather than recursed into
MAX_PARAM_DEPTH = 16


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


def decode(value: Any, tensors: Mapping[int, Tensor] | None = None) -> Any:
    """`encode`'s inverse; ``tensors`` (uid -> Tensor) resolves the tensors a parameter holds."""
    if isinstance(value, list):
        return tuple(decode(v, tensors) for v in value)
    if isinstance(value, dict):
        if "__enum__" in value:
            return getattr(getattr(_dtypes, value["__enum__"]), value["name"])
        if "__slice__" in value:
            return slice(*value["__slice__"])
        if "__tensor__" in value and tensors is not None:
            return tensors[value["__tensor__"]]
        if "__opaque__" in value:
            raise DeserializationError(
                f"deserialize(): the non-data parameter {value['__opaque__']} cannot be read"
            )
        return {k: decode(v, tensors) for k, v in value.items()}
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


def to_plain(ir: GraphIR) -> dict[str, Any]:
    """``ir`` as plain data; anything reading like an IR (name, state, context, tensors, nodes)
    will do, a `pygraph.Graph` too."""
    return {
        "format": FORMAT,
        "version": VERSION,
        "name": ir.name,
        "state": ir.state.name,
        "context": ir.context.to_dict(),
        "tensors": [_tensor_record(t) for t in ir.tensors],
        "nodes": [_node_record(n) for n in ir.nodes],
    }


def dumps(ir: GraphIR) -> bytes:
    return json.dumps(to_plain(ir)).encode()


def is_ir_payload(payload: Any) -> bool:
    """True for what `dumps` writes (its exact opening), as bytes or str."""
    if isinstance(payload, (bytes, bytearray, memoryview)):
        return bytes(payload[: len(_PREFIX)]) == _PREFIX.encode()
    return isinstance(payload, str) and payload.startswith(_PREFIX)


def parse_ir(payload: Any) -> dict[str, Any] | None:
    """The IR payload's data when ``payload`` is pygraph IR; None when it is some other payload (the
    backend's). A payload that opens like IR but is not whole JSON raises `DeserializationError`."""
    if isinstance(payload, (bytes, bytearray, memoryview)):
        raw = bytes(payload)
        try:
            text = raw.decode()
        except UnicodeDecodeError as exc:
            if raw.startswith(_PREFIX.encode()):
                raise DeserializationError(
                    f"deserialize(): the pygraph IR payload is not UTF-8 at byte {exc.start}"
                ) from None
            return None
    elif isinstance(payload, str):
        text = payload
    else:
        return None
    opening = text.lstrip()
    if not opening.startswith("{"):
        return None
    try:
        data = json.loads(text)
    except RecursionError:
        # the parser recurses per level: a deep payload is refused here, not by the interpreter
        if is_ir_payload(opening) or '"pygraph_ir"' in opening[:200]:
            raise DeserializationError(
                "deserialize(): the pygraph IR payload nests its JSON too deeply to be read (what "
                "serialize() writes nests a few levels)"
            ) from None
        return None
    except ValueError as exc:
        if is_ir_payload(opening) or '"pygraph_ir"' in opening[:200]:
            raise DeserializationError(
                f"deserialize(): the pygraph IR payload is not whole JSON ({exc}); it is truncated or "
                "corrupted"
            ) from None
        return None
    if isinstance(data, dict) and data.get("format") == FORMAT:
        return data
    return None


def loads_into(ir: GraphIR, payload: bytes | str | dict[str, Any]) -> GraphIR:
    """A fresh IR rebuilt from a serialized one, to replace ``ir`` (which must be empty).

    The whole payload is checked first (`check_payload`: every field's type and value, every uid a
    port names, no cycle), and the IR is built only from a payload that passed, each node through
    the builders' rules. The new IR has ``ir``'s owner, name and lifecycle; ``ir`` is left as it was,
    so a refused payload leaves the graph untouched.
    """
    if ir.tensors or ir.nodes:
        raise GraphStateError(f"deserialize(): graph {ir.name!r} is not empty")
    data = payload if isinstance(payload, dict) else parse_ir(payload)
    if data is None:
        raise DeserializationError("deserialize(): the payload is not pygraph IR")
    check_payload(data)
    return _build(ir, data)


def deserialize_payload(args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> Any:
    """The payload of a ``deserialize()`` call (classic overloads: ``(data)``, ``(handle, data, ...)``
    and ``pyobj=``), refused with a `DeserializationError` unless it is bytes, str or a list of byte
    values, and not empty."""
    payload = (
        kwargs["pyobj"] if "pyobj" in kwargs else (args[1] if len(args) >= 2 else args[0] if args else None)
    )
    if not isinstance(payload, (bytes, bytearray, memoryview, str, list, tuple)):
        raise DeserializationError(
            "deserialize(): expected the payload as bytes, str or a list of byte values (what "
            f"serialize() returns), got {type(payload).__name__} {payload!r}"[:300]
        )
    if len(payload) == 0:
        raise DeserializationError(
            f"deserialize(): the payload is empty ({type(payload).__name__} of length 0)"
        )
    return payload


def describe_payload(payload: Any) -> str:
    """The payload's type, length and first bytes, for an error naming it."""
    head = bytes(payload[:16]) if isinstance(payload, (bytes, bytearray, memoryview)) else payload[:16]
    return f"{type(payload).__name__} of length {len(payload)} starting {head!r}"


# --- checking: every field, before anything is built ----------------------------------------------

_TENSOR_FIELDS: dict[str, tuple[type, ...]] = {
    "uid": (int,),
    "uid_assigned": (bool,),
    "name": (str,),
    "dim": (list,),
    "stride": (list,),
    "dim_assigned": (bool,),
    "stride_assigned": (bool,),
    "data_type": (str,),
    "data_type_assigned": (bool,),
    "inferred_data_type": (str,),
    "is_virtual": (bool,),
    "is_pass_by_value": (bool,),
    "ragged_offset": (int, type(None)),
    "ragged_offset_multiplier": (int,),
    "reordering_type": (str,),
    "value": (int, float, type(None)),
    "scalar_type": (str, type(None)),
    "producer": (str, type(None)),
}
_NODE_FIELDS: dict[str, tuple[type, ...]] = {
    "name": (str,),
    "op": (str,),
    "compute_data_type": (str,),
    "inputs": (dict,),
    "outputs": (dict,),
    "params": (dict,),
}


def _shown(value: Any) -> str:
    """A value as a message shows it: its repr, cut where a payload holds something huge."""
    text = repr(value)
    return text if len(text) <= 80 else f"{text[:72]}... ({len(text)} characters)"


def _fail(path: str, message: str) -> DeserializationError:
    return DeserializationError(f"deserialize(): {path}: {message}", path=path)


def _field(record: dict[str, Any], key: str, kinds: tuple[type, ...], path: str) -> Any:
    if key not in record:
        raise _fail(f"{path}.{key}", "missing")
    value = record[key]
    # JSON true is a Python bool, which isinstance counts as an int: a field of ints takes no bool
    ok = bool in kinds if isinstance(value, bool) else isinstance(value, kinds)
    if not ok:
        want = " or ".join("null" if k is type(None) else k.__name__ for k in kinds)
        raise _fail(f"{path}.{key}", f"expected {want}, got {type(value).__name__} {_shown(value)}")
    return value


def _records(records: list[Any], path: str, fields: dict[str, tuple[type, ...]]) -> Iterator[tuple[str, Any]]:
    """(its path, the record) for each record of a payload list, once the record is an object whose
    ``fields`` have their types; one at a time, so the first bad field is the first one reported."""
    for i, rec in enumerate(records):
        at = f"{path}[{i}]"
        if not isinstance(rec, dict):
            raise _fail(at, f"expected an object, got {type(rec).__name__}")
        for key, kinds in fields.items():
            _field(rec, key, kinds, at)
        yield at, rec


def _member(enum_cls: Any, name: Any, path: str) -> Any:
    if not isinstance(name, str) or name not in enum_cls.__members__:
        raise _fail(
            path, f"{_shown(name)} is not a {enum_cls.__name__} (one of {', '.join(enum_cls.__members__)})"
        )
    return enum_cls[name]


def _ints(values: list[Any], path: str, least: int) -> None:
    for i, v in enumerate(values):
        if isinstance(v, bool) or not isinstance(v, int):
            raise _fail(f"{path}[{i}]", f"expected an int, got {type(v).__name__} {_shown(v)}")
        if v < least:
            raise _fail(f"{path}[{i}]", f"{v} is below {least}")
        if v >= INT64_END:
            raise _fail(f"{path}[{i}]", f"{v} does not fit int64 (dims and strides are < 2**63)")


def check_payload(data: Any) -> None:
    """Raise `DeserializationError` naming the first bad field of an IR payload by its path."""
    from pygraph.ops.registry import OPS

    if not isinstance(data, dict):
        raise _fail("$", f"expected a JSON object, got {type(data).__name__}")
    if data.get("format") != FORMAT:
        raise _fail("$.format", f"{_shown(data.get('format'))} is not {FORMAT!r}")
    version = data.get("version")
    if type(version) is not int or version != VERSION:  # JSON true and 1.0 equal 1 in Python
        raise _fail("$.version", f"IR format version {_shown(version)}, expected {VERSION}")
    ctx = _field(data, "context", (dict,), "$")
    for key in ("io_data_type", "intermediate_data_type", "compute_data_type"):
        _member(_dtypes.data_type, _field(ctx, key, (str,), "$.context"), f"$.context.{key}")
    tensors = _field(data, "tensors", (list,), "$")
    uids: dict[int, str] = {}
    for path, rec in _records(tensors, "$.tensors", _TENSOR_FIELDS):
        uid = rec["uid"]
        if not 0 < uid <= INT64_MAX:
            raise _fail(f"{path}.uid", f"{uid} is not a positive int64")
        if uid in uids:
            raise _fail(f"{path}.uid", f"uid {uid} is also tensor {uids[uid]!r}'s; uids are unique")
        uids[uid] = rec["name"]
        _ints(rec["dim"], f"{path}.dim", 1)
        _ints(rec["stride"], f"{path}.stride", 0)
        count = 1
        for extent in rec["dim"]:
            count *= extent
            if count > INT64_MAX:  # stopped here: a long list of large extents is no huge product
                raise _fail(f"{path}.dim", f"{_shown(rec['dim'])} holds more than 2**63 - 1 elements")
        if rec["dim"] and rec["stride"] and len(rec["dim"]) != len(rec["stride"]):
            raise _fail(
                f"{path}.stride", f"rank {len(rec['stride'])}, dim {rec['dim']} has rank {len(rec['dim'])}"
            )
        for key in ("data_type", "inferred_data_type"):
            _member(_dtypes.data_type, rec[key], f"{path}.{key}")
        _member(_dtypes.tensor_reordering, rec["reordering_type"], f"{path}.reordering_type")
        if rec["scalar_type"] is not None:
            _member(_dtypes.scalar_type, rec["scalar_type"], f"{path}.scalar_type")
        if rec["ragged_offset_multiplier"] < 1:
            raise _fail(f"{path}.ragged_offset_multiplier", f"{rec['ragged_offset_multiplier']} is below 1")
    for i, rec in enumerate(tensors):
        ragged = rec["ragged_offset"]
        if ragged is not None and ragged not in uids:
            raise _fail(f"$.tensors[{i}].ragged_offset", f"uid {ragged} names no tensor of the payload")
    nodes = _field(data, "nodes", (list,), "$")
    names: set[str] = set()
    producers: dict[int, str] = {}
    reads: list[tuple[str, list[int]]] = []
    for path, rec in _records(nodes, "$.nodes", _NODE_FIELDS):
        spec = OPS.get(rec["op"])
        if spec is None:
            raise _fail(f"{path}.op", f"{_shown(rec['op'])} is no op of this pygraph")
        if rec["name"] in names:
            raise _fail(f"{path}.name", f"node name {rec['name']!r} repeats")
        names.add(rec["name"])
        _member(_dtypes.data_type, rec["compute_data_type"], f"{path}.compute_data_type")
        ports = {p.name for p in spec.inputs} | {a.name for a in spec.attrs if a.tensor_ok}
        read: list[int] = []
        for port, value in rec["inputs"].items():
            where = f"{path}.inputs.{port}"
            if port not in ports:
                raise _fail(
                    where, f"op {spec.name} has no input port {port!r} (ports: {', '.join(sorted(ports))})"
                )
            read += _port_uids(value, uids, where)
        outs = {o.name for o in spec.outputs}
        for port, value in rec["outputs"].items():
            where = f"{path}.outputs.{port}"
            if port not in outs:
                raise _fail(
                    where, f"op {spec.name} has no output {port!r} (outputs: {', '.join(sorted(outs))})"
                )
            if isinstance(value, list):
                raise _fail(where, "an output is one tensor uid or null")
            for uid in _port_uids(value, uids, where):
                if uid in producers:
                    raise _fail(where, f"tensor uid {uid} is also an output of node {producers[uid]!r}")
                producers[uid] = rec["name"]
        attrs = {a.name for a in spec.attrs} | {"mode"}
        for key, value in rec["params"].items():
            where = f"{path}.params.{key}"
            if key not in attrs:
                raise _fail(where, f"op {spec.name} has no attribute {key!r}")
            read += _check_encoded(value, uids, where)
        reads.append((rec["name"], read))
    for i, rec in enumerate(tensors):
        producer = producers.get(rec["uid"])
        if rec["producer"] != producer:
            raise _fail(f"$.tensors[{i}].producer", f"{rec['producer']!r}, but the nodes say {producer!r}")
    _check_acyclic(reads, producers)


def _port_uids(value: Any, uids: dict[int, str], where: str) -> list[int]:
    items = value if isinstance(value, list) else [value]
    out = []
    for k, uid in enumerate(items):
        at = f"{where}[{k}]" if isinstance(value, list) else where
        if uid is None and not isinstance(value, list):
            continue
        if isinstance(uid, bool) or not isinstance(uid, int):
            raise _fail(at, f"expected a tensor uid, got {type(uid).__name__} {_shown(uid)}")
        if uid not in uids:
            raise _fail(at, f"uid {uid} names no tensor of the payload")
        out.append(uid)
    return out


def _check_encoded(value: Any, uids: dict[int, str], where: str, depth: int = 0) -> list[int]:
    """What `decode` would refuse, refused here by path; returns the tensor uids the value holds."""
    if depth > MAX_PARAM_DEPTH:
        raise _fail(where, f"a parameter value nested deeper than {MAX_PARAM_DEPTH} levels")
    if isinstance(value, list):
        return [u for k, v in enumerate(value) for u in _check_encoded(v, uids, f"{where}[{k}]", depth + 1)]
    if not isinstance(value, dict):
        if value is not None and not isinstance(value, (bool, int, float, str)):
            raise _fail(where, f"{type(value).__name__} is no parameter value")
        return []
    if "__enum__" in value:
        enum_cls = getattr(_dtypes, str(value["__enum__"]), None)
        if not isinstance(enum_cls, type) or not issubclass(enum_cls, enum.Enum):
            raise _fail(where, f"{_shown(value['__enum__'])} is no pygraph enum")
        _member(enum_cls, value.get("name"), f"{where}.name")
        return []
    if "__slice__" in value:
        bounds = value["__slice__"]
        if (
            not isinstance(bounds, list)
            or len(bounds) != 3
            or not all(b is None or (isinstance(b, int) and not isinstance(b, bool)) for b in bounds)
        ):
            raise _fail(where, f"a slice is [start, stop, step] of ints or nulls, got {_shown(bounds)}")
        return []
    if "__tensor__" in value:
        return _port_uids(value["__tensor__"], uids, f"{where}.__tensor__")
    if "__opaque__" in value:
        raise _fail(where, f"the non-data parameter {value['__opaque__']} cannot be deserialized")
    return [u for k, v in value.items() for u in _check_encoded(v, uids, f"{where}.{k}", depth + 1)]


def _check_acyclic(reads: list[tuple[str, list[int]]], producers: dict[int, str]) -> None:
    from pygraph.ir.validate import find_cycle

    class _Rec:
        __slots__ = ("name", "reads")

        def __init__(self, name: str, read: list[int]) -> None:
            self.name, self.reads = name, read

        def input_tensors(self) -> list[Any]:
            return [_Uid(u) for u in self.reads]

    class _Uid:
        __slots__ = ("uid",)

        def __init__(self, uid: int) -> None:
            self.uid = uid

    recs = {name: _Rec(name, read) for name, read in reads}
    cycle = find_cycle(list(recs.values()), {uid: recs[name] for uid, name in producers.items()})
    if cycle is not None:
        loop = " -> ".join(repr(r.name) for r in cycle)
        raise _fail("$.nodes", f"the nodes form a cycle: {loop} (each reads an output of the one before)")


# --- building: from a payload that passed ----------------------------------------------------------


def _build(old: GraphIR, data: dict[str, Any]) -> GraphIR:
    from pygraph.ir.container import GraphContext, GraphIR
    from pygraph.ops.build import restore_node
    from pygraph.ops.registry import OPS

    dt = _dtypes.data_type
    ctx = data["context"]
    context = GraphContext(dt.NOT_SET, dt.NOT_SET, dt.NOT_SET)
    for key in ("io_data_type", "intermediate_data_type", "compute_data_type"):
        object.__setattr__(context, "_" + key.split("_")[0], dt[ctx[key]])
    ir = GraphIR(old.owner, old.name, context, old.lifecycle)
    by_uid: dict[int, Tensor] = {}
    for rec in data["tensors"]:
        t = ir.new_tensor(name=rec["name"], uid=rec["uid"])
        raw = t._raw_set
        raw("_uid_assigned", rec["uid_assigned"])
        raw("_dim", tuple(rec["dim"]))
        raw("_stride", tuple(rec["stride"]))
        raw("_dim_assigned", rec["dim_assigned"])
        raw("_stride_assigned", rec["stride_assigned"])
        raw("_data_type", dt[rec["data_type"]])
        raw("_dtype_assigned", rec["data_type_assigned"])
        raw("_inferred_dtype", dt[rec["inferred_data_type"]])
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

    for i, rec in enumerate(data["nodes"]):
        at = f"$.nodes[{i}]"
        spec = OPS[rec["op"]]
        recorded = {k: port(v) for k, v in rec["inputs"].items()}
        params = {k: decode(v, by_uid) for k, v in rec["params"].items()}
        if spec.mode is not None:  # a pointwise op's mode is its name: the builder sets it
            mode = params.pop("mode", spec.mode)
            if mode != spec.mode:
                raise _fail(f"{at}.params.mode", f"{_shown(mode)}, but the node's op is {spec.name!r}")
        for key, value in params.items():
            if key in recorded:
                raise _fail(
                    f"{at}.params.{key}", f"{key!r} is also an input of the node; it is one or the other"
                )
            recorded[key] = value
        name = ir.node_name(spec.name, rec["name"])
        try:
            node = restore_node(ir, spec, name, recorded, dt[rec["compute_data_type"]])
        except OpInputError as exc:
            raise _fail(at, f"node {rec['name']!r}: {exc}") from None
        _wire_outputs(node, rec["outputs"], port, at)
        ir.add_node(node)
    return ir


def _wire_outputs(node: Node, outputs: dict[str, Any], port: Any, at: str) -> None:
    """Every output of the op, as the builder leaves them: the recorded tensor, or None where the
    payload has none; an output the op always writes must be there."""
    for out in node.spec.outputs:
        t = port(outputs.get(out.name))
        if t is None and out.when is None and not out.from_kwarg:
            raise _fail(
                f"{at}.outputs.{out.name}",
                f"missing: op {node.op} always writes output {out.name!r} (node {node.name!r})",
            )
        node.outputs._data[out.name] = t
        if t is not None:
            t._raw_set("_producer", node)
