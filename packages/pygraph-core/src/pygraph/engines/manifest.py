"""Engine families: the declaration records and the run-time accessors over the generated table.

A family package declares `EngineFamily` records (its ``family.py``); the manifest's build hook
turns them into the ``pygraph_manifest`` table. At run time nothing registers: every answer here
is a lookup in that table (or in the records a test installed with
:func:`pygraph.testing.manifest_override`), and `instantiate` builds a family's engines from the
classes its slots name.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import Any, NamedTuple

from pygraph.engines.engine_ids import FAMILY_BLOCK, is_python_engine
from pygraph.engines.factory import FamilyEngines, HookRef, build_engines, resolve_hook
from pygraph.environment import DISABLE_ENV, OPT_IN_ENV, disabled, opt_in
from pygraph.errors import NotFoundError, OpInputError, UnknownEngineError

__all__ = [
    "OPT_IN_ENV",
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
    "offered_ids",
    "resolve_hook",
]


def _check_ref(ref: Any, what: str) -> HookRef:
    """``ref`` as a ("module", "attribute") tuple, or TypeError naming ``what`` and the value."""
    if not isinstance(ref, (tuple, list)) or len(ref) != 2 or not all(isinstance(p, str) and p for p in ref):
        raise TypeError(f"{what} must be a ('module', 'callable') pair of strings, got {ref!r}")
    return (ref[0], ref[1])


@dataclasses.dataclass(frozen=True)
class EngineSlot:
    """An engine's place in its family's block (``id = family.engine_id + slot``) and what fills it.

    Exactly one of:

    - ``impl``: the engine class as ("module", "Class"). Core imports it when a graph of the family
      is planned and the slot is offered, and constructs it with the slot's id
      (``Class(engine_id=...)``); the engine's ``name`` is the slot's name.
    - ``planned``: why no engine fills the slot yet, in words a user reads (the planner's declines,
      ``pygraph families``). A planned slot holds its id in the lock and is never offered.

    ``opt_in`` slots ship but are offered only when ``PYGRAPH_ENABLE_OPT_IN_ENGINES`` names them.
    """

    slot: int
    impl: HookRef | None = None
    opt_in: bool = False
    planned: str | None = None

    def __post_init__(self) -> None:
        if (self.impl is None) == (self.planned is None):
            raise TypeError(
                f"EngineSlot({self.slot}): give exactly one of impl=('module', 'Class') or planned='why not "
                f"yet'; got impl={self.impl!r}, planned={self.planned!r}"
            )
        if self.impl is not None:
            object.__setattr__(self, "impl", _check_ref(self.impl, f"EngineSlot({self.slot}) impl"))
        elif not isinstance(self.planned, str) or not self.planned.strip():
            raise TypeError(f"EngineSlot({self.slot}): planned must say why, got {self.planned!r}")
        elif self.opt_in:
            raise TypeError(
                f"EngineSlot({self.slot}): a planned slot is never offered, so opt_in=True means nothing; "
                "mark the engine opt-in when it ships"
            )

    @property
    def is_planned(self) -> bool:
        return self.planned is not None

    def describe(self) -> str:
        """`` (opt-in)``, `` (planned: why)`` or nothing: how the slot reads in a family's repr."""
        if self.planned is not None:
            return f" (planned: {self.planned})"
        return " (opt-in)" if self.opt_in else ""

    def to_row(self, name: str) -> dict[str, Any]:
        return {
            "name": name,
            "slot": self.slot,
            "impl": self.impl,
            "opt_in": self.opt_in,
            "planned": self.planned,
        }


@dataclasses.dataclass(frozen=True)
class EngineFamily:
    """One kind of graph and the engines that compete to serve it.

    ``package`` is the family's import package (one distribution may ship several families);
    ``slots`` map engine name -> `EngineSlot`, each naming its engine class or saying it is planned.
    ``analyzer``, ``heuristics`` and ``validator`` are ("module", "callable") pairs inside the
    package, kept as strings so that reading the table imports nothing. ``anchors`` are `NodeType`
    member names.
    """

    name: str
    engine_id: int
    package: str
    slots: Mapping[str, EngineSlot]
    anchors: tuple[str, ...]
    analyzer: HookRef | None = None
    heuristics: HookRef | None = None
    validator: HookRef | None = None
    distribution: str | None = None  # filled in by the generator from the declaring pyproject

    def __post_init__(self) -> None:
        object.__setattr__(self, "slots", MappingProxyType(dict(self.slots)))
        object.__setattr__(self, "anchors", tuple(self.anchors))
        if not isinstance(self.package, str) or not self.package:
            raise TypeError(
                f"family {self.name!r}: package must be the family's import package, got {self.package!r}"
            )
        for engine_name, slot in self.slots.items():
            if not isinstance(slot, EngineSlot):
                raise TypeError(
                    f"family {self.name!r} slot {engine_name!r}: expected an EngineSlot, got {slot!r}"
                )
        for field in ("analyzer", "heuristics", "validator"):
            ref = getattr(self, field)
            if ref is not None:
                object.__setattr__(self, field, _check_ref(ref, f"family {self.name!r}: {field}"))

    def __hash__(self) -> int:
        return hash((self.name, self.engine_id))

    def __repr__(self) -> str:
        slots = ", ".join(f"{n}={self.engine_id + s.slot}{s.describe()}" for n, s in self.slots_in_order())
        return (
            f"EngineFamily({self.name}: block {self.engine_id}..{self.engine_id + FAMILY_BLOCK - 1}; {slots})"
        )

    def slots_in_order(self) -> list[tuple[str, EngineSlot]]:
        """(engine name, slot) pairs in slot order (so in id order)."""
        return sorted(self.slots.items(), key=lambda kv: kv[1].slot)

    @property
    def block(self) -> range:
        return range(self.engine_id, self.engine_id + FAMILY_BLOCK)

    def id_of(self, engine_name: str) -> int:
        try:
            return self.engine_id + self.slots[engine_name].slot
        except KeyError:
            raise NotFoundError(
                f"family {self.name!r} has no engine {engine_name!r}; it has {sorted(self.slots)}"
            ) from None

    @property
    def ids(self) -> dict[str, int]:
        """Every declared engine name -> id, opt-in and planned ones included."""
        return {name: self.engine_id + s.slot for name, s in self.slots.items()}

    @property
    def planned(self) -> dict[str, str]:
        """Engine name -> why it is not shipped yet, for the planned slots."""
        return {name: s.planned for name, s in self.slots_in_order() if s.planned is not None}

    def to_row(self) -> dict[str, Any]:
        """Plain data, as the generated table stores it."""
        return {
            "name": self.name,
            "engine_id": self.engine_id,
            "distribution": self.distribution,
            "package": self.package,
            "slots": tuple(s.to_row(n) for n, s in self.slots_in_order()),
            "anchors": tuple(self.anchors),
            "analyzer": self.analyzer,
            "heuristics": self.heuristics,
            "validator": self.validator,
        }

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> EngineFamily:
        return cls(
            name=row["name"],
            engine_id=row["engine_id"],
            package=row["package"],
            slots={
                s["name"]: EngineSlot(s["slot"], impl=s["impl"], opt_in=s["opt_in"], planned=s["planned"])
                for s in row["slots"]
            },
            anchors=tuple(row["anchors"]),
            analyzer=row.get("analyzer"),
            heuristics=row.get("heuristics"),
            validator=row.get("validator"),
            distribution=row.get("distribution"),
        )


class EngineRef(NamedTuple):
    """What an engine id decodes to, from the table alone."""

    family: EngineFamily
    slot: int
    engine_name: str


# --- the table in use ---------------------------------------------------------------------------

_lock = threading.RLock()
_override: tuple[EngineFamily, ...] | None = None
_generated: tuple[EngineFamily, ...] | None = None
_instances: dict[tuple[str, tuple[tuple[str, int], ...]], FamilyEngines] = {}


def _load_generated() -> tuple[EngineFamily, ...]:
    global _generated
    if _generated is None:
        from pygraph_manifest import FAMILIES

        _generated = tuple(EngineFamily.from_row(row) for row in FAMILIES)
    return _generated


def families() -> tuple[EngineFamily, ...]:
    """Every family in the table in use, ordered by id block."""
    with _lock:
        table = _override if _override is not None else _load_generated()
    return table


def _set_override(table: Iterable[EngineFamily] | None) -> tuple[EngineFamily, ...] | None:
    """Install ``table`` as the manifest (None restores the generated one); returns the previous."""
    global _override
    with _lock:
        previous = _override
        _override = None if table is None else tuple(table)
        _instances.clear()
        _anchor_map.cache_clear()
    return previous


def family_by_name(name: str) -> EngineFamily:
    for fam in families():
        if fam.name == name:
            return fam
    raise NotFoundError(f"no engine family named {name!r}; the manifest has {[f.name for f in families()]}")


# --- classification -------------------------------------------------------------------------------


class _AnchorCache:
    """Memoizes the anchor -> family map per table object (cleared when the table changes)."""

    def __init__(self) -> None:
        self._key: object = None
        self._map: dict[str, EngineFamily] = {}

    def __call__(self) -> dict[str, EngineFamily]:
        table = families()
        if self._key is not table:
            self._map = {anchor: fam for fam in table for anchor in fam.anchors}
            self._key = table
        return self._map

    def cache_clear(self) -> None:
        self._key = None


_anchor_map = _AnchorCache()


def family_for(graph: Any) -> EngineFamily | None:
    """The one family whose anchor node types the graph names, or None.

    A pure function of the graph's node types: no device, no environment. Node types that anchor
    no family (pointwise, reductions, ...) are ignored; a graph naming two families belongs to
    neither and goes to the backend.
    """
    anchors = _anchor_map()
    named = {anchors[node.type.name] for node in graph.nodes if node.type.name in anchors}
    return named.pop() if len(named) == 1 else None


# --- availability -----------------------------------------------------------------------------------


def _known_names() -> list[str]:
    """Every family and engine name an opt-in list may name: the table in use and, under a test's
    override, the generated one too (a user's setting names real engines)."""
    tables = [families()]
    if _override is not None:
        try:
            tables.append(_load_generated())
        except ImportError:
            pass
    return [name for table in tables for fam in table for name in (fam.name, *fam.slots)]


def offered_ids(family: EngineFamily) -> dict[str, int]:
    """Engine name -> id for the slots this process may use.

    Planned slots are never offered. Opt-in slots are offered only when
    ``PYGRAPH_ENABLE_OPT_IN_ENGINES`` is ``1``/``all`` or lists the engine's (or the family's) name,
    comma-separated (`pygraph.environment.opt_in`: a name that is no engine or family, or a value
    that cannot be parsed, is warned about once and ignored). A slot that ``PYGRAPH_DISABLE_ENGINES``
    names (or whose family it names) is never offered (`pygraph.environment.disabled`).
    """
    return _offered_ids(family, disabled_slots(family))


def _offered_ids(family: EngineFamily, kept_out: tuple[str, ...]) -> dict[str, int]:
    """`offered_ids` with the disabled slots already read (`instantiate` reads them once for both)."""
    wanted = None
    if any(s.opt_in for s in family.slots.values()):
        wanted = opt_in(lambda: [*_known_names(), family.name, *family.slots])
    return {
        name: family.engine_id + slot.slot
        for name, slot in family.slots_in_order()
        if not slot.is_planned
        and (not slot.opt_in or wanted.enables(family.name, name))
        and name not in kept_out
    }


def disabled_slots(family: EngineFamily) -> tuple[str, ...]:
    """The family's slots ``PYGRAPH_DISABLE_ENGINES`` keeps out (it names them or the family)."""
    kept_out = disabled(lambda: [*_known_names(), family.name, *family.slots])
    return tuple(name for name in family.slots if kept_out.enables(family.name, name))


def engine_for_id(engine_id: int) -> EngineRef:
    """Decode a python engine id to (family, slot, engine name) from the table alone."""
    if not isinstance(engine_id, int) or isinstance(engine_id, bool):
        raise OpInputError(f"engine id must be an int, got {type(engine_id).__name__} {engine_id!r}")
    if not is_python_engine(engine_id):
        raise OpInputError(
            f"engine id {engine_id} is a backend id, not a python engine id (those start at 20000)"
        )
    for fam in families():
        if engine_id in fam.block:
            for name, slot in fam.slots.items():
                if fam.engine_id + slot.slot == engine_id:
                    return EngineRef(fam, slot.slot, name)
            raise UnknownEngineError(
                f"engine id {engine_id} is in the block of family {fam.name!r} but names no declared slot "
                f"(its engines: {fam.ids})"
            )
    raise UnknownEngineError(
        f"engine id {engine_id} belongs to no family in the manifest (blocks: "
        f"{', '.join(f'{f.name} {f.engine_id}' for f in families())})"
    )


# --- engines ------------------------------------------------------------------------------------------


def instantiate(family: EngineFamily) -> FamilyEngines:
    """The family's engines for its offered slots (built once per offered set), and why any are missing.

    Core builds them from the slots' ``impl`` classes (`pygraph.engines.factory.build_engines`),
    importing the family's package only here. A family whose package is absent (or outside this
    core's contract) offers nothing and says why; a planned slot says it is planned.
    """
    kept_out = disabled_slots(family)
    offered = _offered_ids(family, kept_out)
    key = (family.name, tuple(offered.items()), kept_out)
    with _lock:
        cached = _instances.get(key)
    if cached is not None:
        return cached
    result = build_engines(family, offered)
    if kept_out:  # the planner's reasons then say why a disabled engine did not serve
        reasons = {name: f"disabled by {DISABLE_ENV}" for name in kept_out}
        result = dataclasses.replace(result, unavailable={**result.unavailable, **reasons})
    with _lock:
        _instances[key] = result
    return result
