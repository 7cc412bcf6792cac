"""Consistency rules for a set of family declarations, and the id-stability lock.

Used by the manifest generator at build time and by :func:`pygraph.testing.manifest_override`,
so a stand-in table obeys the same rules as a shipped one.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from pygraph.engines.engine_ids import FAMILY_BLOCK, PYTHON_ID_BASE
from pygraph.engines.manifest import EngineFamily
from pygraph.errors import ManifestError
from pygraph.node_types import NodeType

__all__ = ["check_against_lock", "check_families", "lock_entries"]


def check_families(families: Iterable[EngineFamily]) -> None:
    """Raise ManifestError naming the family and slot for any structural conflict."""
    families = list(families)
    seen_names: set[str] = set()
    anchor_owner: dict[str, str] = {}
    blocks: dict[int, str] = {}
    for fam in families:
        if fam.name in seen_names:
            raise ManifestError(f"family {fam.name!r} is declared twice")
        seen_names.add(fam.name)
        if fam.engine_id < PYTHON_ID_BASE or (fam.engine_id - PYTHON_ID_BASE) % FAMILY_BLOCK:
            raise ManifestError(
                f"family {fam.name!r}: engine_id {fam.engine_id} is not the start of a python block "
                f"(a multiple of {FAMILY_BLOCK} at or above {PYTHON_ID_BASE})"
            )
        if fam.engine_id in blocks:
            raise ManifestError(
                f"family {fam.name!r}: block {fam.engine_id} overlaps family {blocks[fam.engine_id]!r}'s block"
            )
        blocks[fam.engine_id] = fam.name
        slot_owner: dict[int, str] = {}
        for engine_name, slot in fam.slots.items():
            if not 0 <= slot.slot < FAMILY_BLOCK:
                raise ManifestError(
                    f"family {fam.name!r} slot {engine_name!r}: slot {slot.slot} is outside [0, {FAMILY_BLOCK})"
                )
            if slot.slot in slot_owner:
                raise ManifestError(
                    f"family {fam.name!r}: slots {slot_owner[slot.slot]!r} and {engine_name!r} "
                    f"both claim id {fam.engine_id + slot.slot}"
                )
            slot_owner[slot.slot] = engine_name
        _check_refs_inside_package(fam)
        if not fam.anchors:
            raise ManifestError(f"family {fam.name!r} names no anchor node type")
        for anchor in fam.anchors:
            if anchor not in NodeType.__members__:
                raise ManifestError(
                    f"family {fam.name!r}: anchor {anchor!r} is not a pygraph.NodeType member"
                )
            if anchor in anchor_owner:
                raise ManifestError(
                    f"families {anchor_owner[anchor]!r} and {fam.name!r} both claim anchor node type {anchor}"
                )
            anchor_owner[anchor] = fam.name


def _check_refs_inside_package(fam: EngineFamily) -> None:
    """Every module a family names lives in its package: "installed" means one import path."""
    refs = [(field, getattr(fam, field)) for field in ("analyzer", "heuristics", "validator")]
    refs += [(f"slot {name!r} impl", slot.impl) for name, slot in fam.slots.items()]
    for what, ref in refs:
        if ref is not None and ref[0] != fam.package and not ref[0].startswith(fam.package + "."):
            raise ManifestError(
                f"family {fam.name!r} {what}: module {ref[0]!r} is outside the family's package {fam.package!r}"
            )


def lock_entries(families: Iterable[EngineFamily]) -> dict[str, dict[str, Any]]:
    """The lock's view of ``families``: name -> {"block": first id, "engines": {name: id}}."""
    return {
        fam.name: {"block": fam.engine_id, "engines": dict(sorted(fam.ids.items(), key=lambda kv: kv[1]))}
        for fam in families
    }


def check_against_lock(
    families: Iterable[EngineFamily], lock: Mapping[str, Mapping[str, Any]]
) -> dict[str, dict[str, Any]]:
    """Check ``families`` against the ids ever shipped; return the merged lock (new ids added).

    A shipped id is never moved, reused or overlapped: a family's block stays where it shipped, a
    shipped engine keeps its id, no other engine takes a shipped id (even one whose engine is gone),
    and no new family's block overlaps a shipped family's.
    """
    merged = {name: {"block": e["block"], "engines": dict(e["engines"])} for name, e in lock.items()}
    shipped_owner = {
        engine_id: (fam_name, engine_name)
        for fam_name, entry in lock.items()
        for engine_name, engine_id in entry["engines"].items()
    }
    shipped_blocks = {entry["block"]: fam_name for fam_name, entry in lock.items()}
    for fam in families:
        locked = lock.get(fam.name)
        if locked is not None and locked["block"] != fam.engine_id:
            raise ManifestError(
                f"family {fam.name!r}: block moved from {locked['block']} (shipped) to {fam.engine_id}"
            )
        if locked is None and fam.engine_id in shipped_blocks:
            raise ManifestError(
                f"family {fam.name!r}: block {fam.engine_id} overlaps shipped family {shipped_blocks[fam.engine_id]!r}"
            )
        for engine_name, engine_id in fam.ids.items():
            shipped_id = locked["engines"].get(engine_name) if locked else None
            if shipped_id is not None and shipped_id != engine_id:
                raise ManifestError(
                    f"family {fam.name!r} slot {engine_name!r}: id moved from {shipped_id} (shipped) to {engine_id}"
                )
            owner = shipped_owner.get(engine_id)
            if owner is not None and owner != (fam.name, engine_name):
                raise ManifestError(
                    f"family {fam.name!r} slot {engine_name!r}: id {engine_id} reuses the shipped id of "
                    f"family {owner[0]!r} slot {owner[1]!r}"
                )
            merged.setdefault(fam.name, {"block": fam.engine_id, "engines": {}})["engines"][engine_name] = (
                engine_id
            )
    for entry in merged.values():
        entry["engines"] = dict(sorted(entry["engines"].items(), key=lambda kv: kv[1]))
    return dict(sorted(merged.items(), key=lambda kv: kv[1]["block"]))
