"""Test helpers. The only way tests inject stand-in engines is through the manifest table."""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator

from pygraph.engines import manifest as _manifest
from pygraph.engines.manifest import EngineFamily
from pygraph.engines.manifest_rules import check_families

__all__ = ["manifest_override"]


@contextlib.contextmanager
def manifest_override(families: Iterable[EngineFamily]) -> Iterator[tuple[EngineFamily, ...]]:
    """Make ``families`` the manifest table for the duration of the block.

    The records obey the same rules as a generated table (blocks, slots, anchors). Engine
    instances and classification caches are dropped on entry and on exit.
    """
    table = tuple(families)
    check_families(table)
    previous = _manifest._set_override(table)
    try:
        yield table
    finally:
        _manifest._set_override(previous)
