"""Structured fuzzing of deserialize: serialized graphs of every kind of op (matmul with a pointwise
epilogue, SDPA forward and backward, a linear-attention gdn), each field mutated deterministically
(dropped, of another type, a list for a scalar, an int past int64, negative, nested 100k deep, an
unknown op or port, another tensor in a port). Whatever the mutation, ``deserialize`` then
``validate()`` then ``create_execution_plans()`` either succeed or raise one of pygraph's typed
errors, never a bare KeyError/TypeError/ValueError/AttributeError/RecursionError, and a refused
payload leaves the graph empty."""

from __future__ import annotations

import copy
import inspect
import json
import random
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import pygraph
from pygraph import errors as core_errors
from pygraph.errors import DeserializationError
from pygraph.examples import EXAMPLES
from pygraph.execution import errors as execution_errors
from pygraph.ir import serialize

# pygraph's error types; its warnings are left out, so one raised (filterwarnings = error) fails
TYPED = tuple(
    obj
    for module in (core_errors, execution_errors)
    for obj in (getattr(module, name) for name in module.__all__)
    if inspect.isclass(obj) and issubclass(obj, Exception) and not issubclass(obj, Warning)
)

SIZES = {
    "gemm-bias-gelu": (1, 16, 8, 32),
    "sdpa": (1, 2, 64, 64),
    "sdpa-bwd": (1, 2, 64, 64),
    "gdn": (64, 2, 64, 2),
}
# values a field is replaced by: other JSON types, a list for a scalar, past int64, negative, zero
VALUES = (None, "x", [], {}, [1], [[1]], 2**70, -(2**70), -1, 0, True, 1.5, {"a": 1})
DEEP = 100_000
PER_GRAPH = 200  # mutations drawn per graph (from a few thousand; planning a gemm takes milliseconds)


def _paths(value: Any, at: tuple = ()) -> Iterator[tuple]:
    yield at
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _paths(item, (*at, key))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from _paths(item, (*at, i))


def _set(data: dict, path: tuple, value: Any, drop: bool = False) -> None:
    holder = data
    for key in path[:-1]:
        holder = holder[key]
    if drop:
        del holder[path[-1]]
    else:
        holder[path[-1]] = value


def _mutations(data: dict) -> Iterator[tuple[str, Callable[[dict], Any]]]:
    """(label, change) for every field: dropped, or replaced by each of VALUES; plus each node's op
    by every op, and each port by every tensor uid."""
    for path in _paths(data):
        if not path:
            continue
        yield f"drop {path}", lambda d, p=path: _set(d, p, None, drop=True)
        for value in VALUES:
            yield f"{path} = {value!r}", lambda d, p=path, v=value: _set(d, p, copy.deepcopy(v))
    uids = [t["uid"] for t in data["tensors"]]
    for i, node in enumerate(data["nodes"]):
        for op in pygraph.ops.OPS:
            yield f"nodes[{i}].op = {op}", lambda d, i=i, op=op: d["nodes"][i].update(op=op)
        for port in node["inputs"]:
            for uid in uids:
                yield (
                    f"nodes[{i}].inputs.{port} = {uid}",
                    lambda d, i=i, port=port, uid=uid: d["nodes"][i]["inputs"].update({port: uid}),
                )


def _deep(payload: str, field: str) -> str:
    """The payload with a key nested DEEP lists down beside ``field``'s first occurrence (as text:
    json cannot write it)."""
    start = payload.index(f'"{field}": ')
    return payload[:start] + '"deep": ' + "[" * DEEP + "]" * DEEP + ", " + payload[start:]


def _cases(name: str) -> Iterator[tuple[str, bytes]]:
    graph = EXAMPLES[name].graph(SIZES[name])
    text = serialize.dumps(graph).decode()
    base = json.loads(text)
    drawn = list(_mutations(base))
    for label, change in random.Random(name).sample(drawn, min(PER_GRAPH, len(drawn))):
        data = copy.deepcopy(base)
        change(data)
        yield label, json.dumps(data).encode()
    for field in ("dim", "inputs", "params", "context"):
        yield f"{field} nested {DEEP} deep", _deep(text, field).encode()


@pytest.fixture
def no_planning_backend(monkeypatch):
    """Planning without the cuDNN backend, the same on every machine (validate() lowers to the
    recording stand-in of `fake_backend`)."""
    from pygraph.planning import backend as backend_mod

    monkeypatch.setattr(
        backend_mod, "open_backend", lambda graph, refused=None: (None, "no backend in this test")
    )


@pytest.mark.parametrize("name", list(SIZES))
def test_a_mutated_payload_plans_or_raises_a_typed_error(name, fake_backend, no_planning_backend):
    refused = accepted = 0
    for label, payload in _cases(name):
        g = pygraph.Graph("fuzzed")
        try:
            g.deserialize(payload)
        except DeserializationError:
            assert not g.tensors and not g.nodes, label
            refused += 1
            continue
        except Exception as exc:  # the point: nothing untyped escapes
            pytest.fail(f"{name}: {label}: deserialize raised {type(exc).__name__}: {exc}")
        accepted += 1
        for step in (g.validate, g.create_execution_plans):
            try:
                step()
            except TYPED:
                break
            except Exception as exc:
                pytest.fail(f"{name}: {label}: {step.__name__}() raised {type(exc).__name__}: {exc}")
    # both outcomes occur: a mutation can land on a value that is still valid (a name, a flag)
    assert refused and accepted, (refused, accepted)


def test_every_required_port_dropped_is_refused_naming_the_port():
    for name in SIZES:
        data = json.loads(serialize.dumps(EXAMPLES[name].graph(SIZES[name])))
        for i, node in enumerate(data["nodes"]):
            spec = pygraph.ops.OPS[node["op"]]
            for port in (p.name for p in spec.inputs if p.required):
                changed = copy.deepcopy(data)
                del changed["nodes"][i]["inputs"][port]
                with pytest.raises(DeserializationError) as info:
                    pygraph.Graph("r").deserialize(json.dumps(changed))
                assert info.value.path == f"$.nodes[{i}]"
                assert f"{spec.name}(): missing required port {port!r}" in str(info.value)
