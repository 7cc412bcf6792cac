"""Deserialization checks the whole payload before it touches the graph: a refusal is a
DeserializationError naming the first bad field by its path, and the graph is left as it was (a retry
with a good payload works). Truncated and fuzzed payloads raise nothing else."""

from __future__ import annotations

import copy
import json
import random

import pytest

import pygraph
from pygraph.errors import BackendPayloadError, DeserializationError, GraphStateError
from pygraph.lifecycle import GraphState

from .conftest import build_op


@pytest.fixture(scope="module")
def payload() -> bytes:
    g, (o, _final) = build_op("gdn")
    g.nodes[0].params["scale"] = 0.25
    g.relu(o).set_output(True)
    return g.serialize()


def _untouched(g: pygraph.Graph, good: bytes) -> None:
    assert not g.tensors and not g.nodes and g.state is GraphState.BUILDING
    g.deserialize(good)  # a retry into the same graph works: nothing was half-built
    assert len(g.nodes) == 2


def _edit(payload: bytes, change) -> bytes:
    data = json.loads(payload)
    change(data)
    return json.dumps(data).encode()


def _tensor_of(data, name_end: str) -> dict:
    return next(t for t in data["tensors"] if t["name"].endswith(name_end))


BAD_FIELDS = {
    "unknown-dtype": (
        lambda d: d["tensors"][0].update(data_type="FLOAT128"),
        "$.tensors[0].data_type",
        "'FLOAT128' is not a data_type",
    ),
    "unknown-op": (lambda d: d["nodes"][1].update(op="relux"), "$.nodes[1].op", "'relux' is no op"),
    "dangling-input-uid": (
        lambda d: d["nodes"][1]["inputs"].update(input=999),
        "$.nodes[1].inputs.input",
        "uid 999 names no tensor",
    ),
    "dangling-ragged-offset": (
        lambda d: d["tensors"][0].update(ragged_offset=998),
        "$.tensors[0].ragged_offset",
        "uid 998 names no tensor",
    ),
    "duplicate-uid": (
        lambda d: d["tensors"][1].update(uid=d["tensors"][0]["uid"]),
        "$.tensors[1].uid",
        "uids are unique",
    ),
    "negative-dim": (
        lambda d: d["tensors"][0]["dim"].__setitem__(1, -4),
        "$.tensors[0].dim[1]",
        "-4 is below 1",
    ),
    "zero-dim": (lambda d: d["tensors"][0]["dim"].__setitem__(0, 0), "$.tensors[0].dim[0]", "0 is below 1"),
    "negative-stride": (
        lambda d: d["tensors"][0]["stride"].__setitem__(0, -1),
        "$.tensors[0].stride[0]",
        "-1 is below 0",
    ),
    "stride-rank": (lambda d: d["tensors"][0]["stride"].pop(), "$.tensors[0].stride", "rank"),
    "dim-beyond-int64": (
        lambda d: d["tensors"][0]["dim"].__setitem__(0, 2**63),
        "$.tensors[0].dim[0]",
        "9223372036854775808 does not fit int64",
    ),
    "stride-beyond-int64": (
        lambda d: d["tensors"][0]["stride"].__setitem__(0, 2**64),
        "$.tensors[0].stride[0]",
        "18446744073709551616 does not fit int64",
    ),
    "dim-not-ints": (lambda d: d["tensors"][0].update(dim="64"), "$.tensors[0].dim", "expected list"),
    "bool-uid": (lambda d: d["tensors"][0].update(uid=True), "$.tensors[0].uid", "expected int"),
    "missing-field": (lambda d: d["tensors"][2].pop("is_virtual"), "$.tensors[2].is_virtual", "missing"),
    "unknown-port": (
        lambda d: d["nodes"][1]["inputs"].update(X=d["tensors"][0]["uid"]),
        "$.nodes[1].inputs.X",
        "no input port 'X'",
    ),
    "unknown-attribute": (
        lambda d: d["nodes"][0]["params"].update(scal=1.0),
        "$.nodes[0].params.scal",
        "no attribute",
    ),
    "bad-enum-param": (
        lambda d: d["nodes"][1]["params"].update(mode={"__enum__": "heur_mode", "name": "Z"}),
        "$.nodes[1].params.mode.name",
        "'Z' is not a heur_mode",
    ),
    "two-producers": (
        lambda d: d["nodes"][1]["outputs"].update(OUT_0=next(iter(d["nodes"][0]["outputs"].values()))),
        "$.nodes[1].outputs.OUT_0",
        "also an output of node",
    ),
    "repeated-node-name": (
        lambda d: d["nodes"][1].update(name=d["nodes"][0]["name"]),
        "$.nodes[1].name",
        "repeats",
    ),
    "bad-context": (
        lambda d: d["context"].update(io_data_type="half"),
        "$.context.io_data_type",
        "'half' is not a data_type",
    ),
    "version": (lambda d: d.update(version=7), "$.version", "version 7, expected 1"),
    "not-a-list": (lambda d: d.update(nodes={}), "$.nodes", "expected list"),
}


@pytest.mark.parametrize("case", list(BAD_FIELDS))
def test_the_first_bad_field_is_named_by_its_path(payload, case):
    change, path, fragment = BAD_FIELDS[case]
    g = pygraph.Graph("restored")
    with pytest.raises(DeserializationError) as info:
        g.deserialize(_edit(payload, change))
    assert info.value.path == path, str(info.value)
    assert str(info.value).startswith(f"deserialize(): {path}: ") and fragment in str(info.value)
    assert isinstance(info.value, ValueError) and isinstance(info.value, TypeError)
    _untouched(g, payload)


def test_a_payload_whose_nodes_form_a_cycle_is_refused(payload):
    def close_the_loop(d):
        gdn, relu = d["nodes"]
        relu_out = next(iter(relu["outputs"].values()))
        _tensor_of(d, relu["name"] + "::" + next(iter(relu["outputs"])))["producer"] = relu["name"]
        gdn["inputs"]["q"] = relu_out

    g = pygraph.Graph("restored")
    with pytest.raises(
        DeserializationError, match=r"\$\.nodes: the nodes form a cycle: '.*' -> '.*' -> '.*'"
    ):
        g.deserialize(_edit(payload, close_the_loop))
    _untouched(g, payload)


@pytest.mark.parametrize(
    ("bad", "error", "fragment"),
    [
        (b"", DeserializationError, "the payload is empty"),
        ("", DeserializationError, "the payload is empty"),
        (None, DeserializationError, "expected the payload as bytes"),
        (12, DeserializationError, "got int 12"),
        (b"garbage", BackendPayloadError, "is not pygraph IR"),
    ],
)
def test_empty_or_garbage_payloads_raise_the_documented_errors(payload, bad, error, fragment):
    g = pygraph.Graph("restored")
    with pytest.raises(error, match=fragment):
        g.deserialize(bad)
    _untouched(g, payload)


def test_garbage_without_the_backend_is_also_an_import_error():
    with pytest.raises(ImportError):
        pygraph.Graph("r").deserialize(b"\x00\x01garbage")


def test_a_truncated_payload_is_refused_at_every_cut(payload):
    g = pygraph.Graph("restored")
    for cut in sorted({*range(1, 64), *range(64, len(payload), 97)}):
        with pytest.raises(DeserializationError):
            g.deserialize(payload[:cut])
        assert not g.tensors and not g.nodes
    _untouched(g, payload)


def test_fuzzed_payloads_raise_only_documented_errors_and_never_half_build(payload):
    rng = random.Random(28)
    documented = (DeserializationError, BackendPayloadError)
    restored = 0
    for _trial in range(400):
        data = bytearray(payload)
        for _ in range(rng.randint(1, 4)):
            data[rng.randrange(len(data))] = rng.randrange(32, 127)
        g = pygraph.Graph("fuzzed")
        try:
            g.deserialize(bytes(data))
        except documented:
            assert not g.tensors and not g.nodes and g.state is GraphState.BUILDING
        else:
            restored += 1  # a mutation can land on a value that is still valid (a name, a float)
    assert restored < 400


def test_a_round_trip_keeps_everything_and_the_target_must_be_empty(payload):
    g = pygraph.Graph("restored")
    g.deserialize(payload)
    again = pygraph.Graph("again")
    again.deserialize(g.serialize())
    assert again.inspect()["tensors"] == g.inspect()["tensors"]
    assert again.inspect()["nodes"] == g.inspect()["nodes"]
    with pytest.raises(GraphStateError, match="not empty"):
        g.deserialize(payload)
    reformatted = json.dumps(json.loads(payload), indent=1).encode()  # not dumps' exact opening
    pygraph.Graph("pretty").deserialize(reformatted)


def test_a_cycle_made_after_building_is_refused_by_validate():
    g = pygraph.Graph("loop", io_data_type=pygraph.data_type.HALF)
    a = g.tensor([4, 4], name="a")
    r = g.relu(a)
    e = g.exp(r).set_output(True)
    g.nodes[0].inputs["input"] = e  # relu now reads exp's output, which reads relu's
    with pytest.raises(
        pygraph.errors.InvalidGraphError, match=r"has a cycle: node 'exp_1' -> 'relu_0' -> 'exp_1'"
    ):
        g.validate()
    assert copy.copy(g.state) is GraphState.BUILDING
