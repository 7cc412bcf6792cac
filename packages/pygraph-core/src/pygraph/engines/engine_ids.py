"""The flat engine-id space.

backend ``[0, 10000)``, C++ OSS ``[10000, 20000)``, python ``[20000, ...)`` in blocks of
``FAMILY_BLOCK``. Two negative ids are reserved: the delegating backend entry and the placement
marker a heuristics hook uses to say where the backend's block goes.

`entry_kind` is the one table from a plan-list entry's id to the kind of plan that serves it;
code that needs to know which side an entry is asks it (or the planner's `PlanKinds`, built on it)
rather than comparing ids.
"""

from __future__ import annotations

import enum

__all__ = [
    "BACKEND_HEURISTIC_ENGINE_ID",
    "BACKEND_ID_END",
    "BACKEND_PLACEMENT_MARKER",
    "FAMILY_BLOCK",
    "OSS_ID_END",
    "PYTHON_ID_BASE",
    "EntryKind",
    "block_of",
    "entry_kind",
    "is_backend_engine",
    "is_python_engine",
]

BACKEND_ID_END = 10_000
OSS_ID_END = 20_000
PYTHON_ID_BASE = 20_000
FAMILY_BLOCK = 100

# The backend picks among candidates it does not expose as plans; carries no mode.
BACKEND_HEURISTIC_ENGINE_ID = -1
# Where a family's hook wants the backend's entries spliced; never reaches the plan list.
BACKEND_PLACEMENT_MARKER = -2


class EntryKind(enum.Enum):
    """Which kind of plan serves a plan-list entry."""

    PYTHON = "python"  # a python engine's config (ids the manifest hands out)
    BACKEND = "backend"  # one of the backend's (or a C++ OSS engine's) concrete configs
    DELEGATING = "delegating"  # the backend's own pick among candidates it does not expose


def entry_kind(engine_id: int) -> EntryKind:
    """The kind of plan that serves an entry with ``engine_id``; ValueError for an id no entry has."""
    if engine_id == BACKEND_HEURISTIC_ENGINE_ID:
        return EntryKind.DELEGATING
    if engine_id >= PYTHON_ID_BASE:
        return EntryKind.PYTHON
    if 0 <= engine_id < OSS_ID_END:
        return EntryKind.BACKEND
    raise ValueError(
        f"engine id {engine_id} names no plan kind: backend ids are [0, {BACKEND_ID_END}), C++ OSS "
        f"[{BACKEND_ID_END}, {OSS_ID_END}), python from {PYTHON_ID_BASE}, {BACKEND_HEURISTIC_ENGINE_ID} the "
        "delegating entry"
    )


def is_python_engine(engine_id: int) -> bool:
    """True for ids handed out by the manifest to python engines."""
    return engine_id >= PYTHON_ID_BASE


def is_backend_engine(engine_id: int) -> bool:
    """True for backend and C++ OSS engine ids, and for the delegating entry (-1)."""
    return engine_id == BACKEND_HEURISTIC_ENGINE_ID or 0 <= engine_id < OSS_ID_END


def block_of(engine_id: int) -> int:
    """The first id of the family block holding a python ``engine_id``."""
    if not is_python_engine(engine_id):
        raise ValueError(f"engine id {engine_id} is not a python engine id (those start at {PYTHON_ID_BASE})")
    return engine_id - (engine_id - PYTHON_ID_BASE) % FAMILY_BLOCK
