"""Engines: the id space, the manifest accessors, and (lazily) the engine contract.

Nothing here imports a family package or a DSL; a family's engines are built by core from the
("module", "Class") its slots name, when a graph of the family is planned (`instantiate`).
"""

from __future__ import annotations

from pygraph.engines.engine_ids import (
    BACKEND_HEURISTIC_ENGINE_ID,
    BACKEND_PLACEMENT_MARKER,
    FAMILY_BLOCK,
    PYTHON_ID_BASE,
    is_backend_engine,
    is_python_engine,
)
from pygraph.engines.manifest import (
    EngineFamily,
    EngineRef,
    EngineSlot,
    FamilyEngines,
    disabled_slots,
    engine_for_id,
    families,
    family_by_name,
    family_for,
    instantiate,
    offered_ids,
)

__all__ = [
    "BACKEND_HEURISTIC_ENGINE_ID",
    "BACKEND_PLACEMENT_MARKER",
    "FAMILY_BLOCK",
    "PYTHON_ID_BASE",
    "EngineFamily",
    "EngineRef",
    "EngineSlot",
    "FamilyEngines",
    "disabled_slots",
    "engine_for_id",
    "families",
    "family_by_name",
    "family_for",
    "instantiate",
    "is_backend_engine",
    "is_python_engine",
    "offered_ids",
]
