"""Backend methods the façade does not define are forwarded after lowering (classic parity)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

import pygraph


def test_unknown_attribute_before_lowering_names_it_and_why():
    g = pygraph.Graph("fwd")
    with pytest.raises(AttributeError, match="'get_behavior_notes'; the graph is not lowered"):
        g.get_behavior_notes()


def test_backend_method_is_forwarded_once_lowered():
    g = pygraph.Graph("fwd")
    calls = []
    g._lowered = SimpleNamespace(backend=SimpleNamespace(get_behavior_notes=lambda: calls.append(1) or ["n"]))
    assert g.get_behavior_notes() == ["n"] and calls == [1]
    with pytest.raises(AttributeError, match="'no_such_method'; nor does its lowered backend graph"):
        g.no_such_method  # noqa: B018
    with pytest.raises(AttributeError):
        g._private_thing  # noqa: B018
