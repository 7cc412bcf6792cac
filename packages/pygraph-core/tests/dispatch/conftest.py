"""Dispatch suite fixtures: stand-in families through the manifest, a fake backend."""

from __future__ import annotations

import pathlib
import sys
from typing import Any

import pytest

from pygraph.testing import manifest_override

STANDINS = pathlib.Path(__file__).parent / "standins"
if str(STANDINS) not in sys.path:
    sys.path.insert(0, str(STANDINS))

import pygraph_standins  # noqa: E402
from dispatch_helpers import FakeBackend, standin_family  # noqa: E402


@pytest.fixture
def standins():
    pygraph_standins.reset()
    with manifest_override([standin_family()]):
        yield pygraph_standins
    pygraph_standins.reset()


@pytest.fixture
def fake_backend(monkeypatch):
    from pygraph.planning import backend as backend_mod

    holder: dict[str, Any] = {}

    def install(per_mode, **kw):
        fake = FakeBackend(per_mode, **kw)
        holder["fake"] = fake

        def open_backend(graph, refused=None):
            return backend_mod.BackendSource(fake, to_mode=lambda m: m), None

        monkeypatch.setattr(backend_mod, "open_backend", open_backend)
        return fake

    return install


@pytest.fixture
def no_backend(monkeypatch):
    """The backend absent whatever this machine has (a device machine has a real cuDNN runtime)."""
    from pygraph.planning import backend as backend_mod

    def open_backend(graph, refused=None):
        return None, refused or "the backend cannot lower this graph: no backend in this test"

    monkeypatch.setattr(backend_mod, "open_backend", open_backend)
