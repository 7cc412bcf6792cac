"""PYGRAPH_CUTILE_TMA, read when `common/cutile_blocks` (the cuTile kernels' shared blocks) is imported: ``0`` compiles the tile accesses
without TMA, unset or ``1`` with it, and anything else is one ConfigurationWarning naming the variable
and the value, then TMA as if unset. The module's source runs with a stand-in for cuTile (the read
needs none), so this runs on any machine."""

from __future__ import annotations

import pathlib
import warnings
from unittest import mock

import pytest

from pygraph import environment
from pygraph.errors import ConfigurationWarning
from pygraph_linear_attention import common

SOURCE = (pathlib.Path(common.__file__).parent / "cutile_blocks.py").read_text()


def _tma_at_import() -> bool:
    code = SOURCE.replace("import cuda.tile as ct\n", "")
    namespace = {"ct": mock.MagicMock(), "__name__": "cutile_blocks_read"}
    exec(compile(code, "cutile_blocks.py", "exec"), namespace)
    return namespace["TMA"]


@pytest.mark.parametrize(("value", "tma"), [(None, True), ("1", True), ("0", False), ("off", False)])
def test_the_switch_decides_tma(monkeypatch, value, tma):
    if value is None:
        monkeypatch.delenv("PYGRAPH_CUTILE_TMA", raising=False)
    else:
        monkeypatch.setenv("PYGRAPH_CUTILE_TMA", value)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert _tma_at_import() is tma


def test_garbage_is_warned_once_and_tma_stays_on(monkeypatch):
    monkeypatch.setattr(environment, "_warned", set())
    monkeypatch.setenv("PYGRAPH_CUTILE_TMA", "banana")
    with pytest.warns(ConfigurationWarning) as caught:
        assert _tma_at_import() is True
    (message,) = [str(w.message) for w in caught]
    assert message.startswith("PYGRAPH_CUTILE_TMA='banana': not a switch; the value is 1 (on) or 0 (off)")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert _tma_at_import() is True  # once per process and value
