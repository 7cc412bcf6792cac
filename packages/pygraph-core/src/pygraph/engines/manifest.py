"""Engine families: the record types and the run-time accessors over the generated table.

The table itself lives in the ``pygraph_manifest`` distribution and is generated at build time
from the families' pluggy declarations. At run time nothing registers: every answer here is a
lookup in that table (or in the records a test installed with
:func:`pygraph.testing.manifest_override`).
"""

from __future__ import annotations

import dataclasses
import importlib
import logging
import os
import threading
from collections.abc import Callable, Iterable, Mapping
from types import MappingProxyType
from typing import Any, NamedTuple

from pygraph.engines.engine_ids import FAMILY_BLOCK, is_python_engine

__all__ = [
    "OPT_IN_ENV",
    "EngineFamily",
    "EngineRef",
    "EngineSlot",
    "FamilyEngines",
    "engine_for_id",
    "families",
    "family_by_name",
    "family_for",
    "instantiate",
    "offered_ids",
    "resolve_hook",
]

log = logging.getLogger(__name__)

OPT_IN_ENV = "PYGRAPH_ENABLE_OPT_IN_ENGINES"

HookRef = tuple[str, str]


@dataclasses.dataclass(frozen=True)
class EngineSlot:
    """An engine's place in its family's block: ``id = family.engine_id + slot``."""

    slot: int
    opt_in: bool = False


@dataclasses.dataclass(frozen=True)
class EngineFamily:
    """One kind of graph and the engines that compete to serve it.

    ``module``/``factory`` name the callable that builds the engines; ``analyzer``,
    ``heuristics`` and ``validator`` are ("module", "callable") pairs, kept as strings so that
    reading the table imports nothing. ``anchors`` are `NodeType` member names.
    """

    name: str
    engine_id: int
    module: str
    factory: str
    slots: Mapping[str, EngineSlot]
    anchors: tuple[str, ...]
    analyzer: HookRef | None = None
    heuristics: HookRef | None = None
    validator: HookRef | None = None
    distribution: str | None = None  # filled in by the generator from the declaring pyproject

    def __post_init__(self) -> None:
        object.__setattr__(self, "slots", MappingProxyType(dict(self.slots)))
        object.__setattr__(self, "anchors", tuple(self.anchors))
        for field in ("analyzer", "heuristics", "validator"):
            ref = getattr(self, field)
            if ref is not None:
                if len(ref) != 2 or not all(isinstance(part, str) for part in ref):
                    raise TypeError(
                        f"family {self.name!r}: {field} must be a ('module', 'callable') pair of strings, got {ref!r}"
                    )
                object.__setattr__(self, field, tuple(ref))

    def __hash__(self) -> int:
        return hash((self.name, self.engine_id))

    def __repr__(self) -> str:
        slots = ", ".join(
            f"{n}={self.engine_id + s.slot}{' (opt-in)' if s.opt_in else ''}"
            for n, s in sorted(self.slots.items(), key=lambda kv: kv[1].slot)
        )
        return (
            f"EngineFamily({self.name}: block {self.engine_id}..{self.engine_id + FAMILY_BLOCK - 1}; {slots})"
        )

    @property
    def block(self) -> range:
        return range(self.engine_id, self.engine_id + FAMILY_BLOCK)

    def id_of(self, engine_name: str) -> int:
        try:
            return self.engine_id + self.slots[engine_name].slot
        except KeyError:
            raise KeyError(
                f"family {self.name!r} has no engine {engine_name!r}; it has {sorted(self.slots)}"
            ) from None

    @property
    def ids(self) -> dict[str, int]:
        """Every declared engine name -> id, opt-in ones included."""
        return {name: self.engine_id + s.slot for name, s in self.slots.items()}

    def to_row(self) -> dict[str, Any]:
        """Plain data, as the generated table stores it."""
        return {
            "name": self.name,
            "engine_id": self.engine_id,
            "distribution": self.distribution,
            "module": self.module,
            "factory": self.factory,
            "slots": tuple(
                (n, s.slot, s.opt_in) for n, s in sorted(self.slots.items(), key=lambda kv: kv[1].slot)
            ),
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
            module=row["module"],
            factory=row["factory"],
            slots={n: EngineSlot(slot, opt_in) for n, slot, opt_in in row["slots"]},
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


@dataclasses.dataclass(frozen=True)
class FamilyEngines:
    """The engines a family's factory built for its offered slots, and why any are missing."""

    family: EngineFamily
    engines: tuple[Any, ...]
    unavailable: Mapping[str, str]  # engine name -> reason


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
    raise KeyError(f"no engine family named {name!r}; the manifest has {[f.name for f in families()]}")


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


def _opt_in_enabled(family: EngineFamily, engine_name: str) -> bool:
    raw = os.environ.get(OPT_IN_ENV, "").strip()
    if raw.lower() in ("1", "true", "yes", "all", "*"):
        return True
    wanted = {part.strip() for part in raw.split(",") if part.strip()}
    return engine_name in wanted or family.name in wanted


def offered_ids(family: EngineFamily) -> dict[str, int]:
    """Engine name -> id for the slots this process may use.

    Opt-in slots are offered only when ``PYGRAPH_ENABLE_OPT_IN_ENGINES`` is ``1``/``all`` or lists
    the engine's (or the family's) name, comma-separated.
    """
    return {
        name: family.engine_id + slot.slot
        for name, slot in sorted(family.slots.items(), key=lambda kv: kv[1].slot)
        if not slot.opt_in or _opt_in_enabled(family, name)
    }


def engine_for_id(engine_id: int) -> EngineRef:
    """Decode a python engine id to (family, slot, engine name) from the table alone."""
    if not isinstance(engine_id, int) or isinstance(engine_id, bool):
        raise TypeError(f"engine id must be an int, got {type(engine_id).__name__} {engine_id!r}")
    if not is_python_engine(engine_id):
        raise ValueError(f"engine id {engine_id} is a backend id, not a python engine id")
    for fam in families():
        if engine_id in fam.block:
            for name, slot in fam.slots.items():
                if fam.engine_id + slot.slot == engine_id:
                    return EngineRef(fam, slot.slot, name)
            raise KeyError(
                f"engine id {engine_id} is in family {fam.name!r}'s block but names no declared slot"
            )
    raise KeyError(f"engine id {engine_id} belongs to no family in the manifest")


# --- lazy loading ------------------------------------------------------------------------------------


def resolve_hook(ref: HookRef, *, what: str = "hook") -> Callable[..., Any]:
    """Import ``module`` and return its ``callable`` (ImportError propagates: a missing package)."""
    module_name, attr = ref
    module = importlib.import_module(module_name)
    try:
        return getattr(module, attr)
    except AttributeError:
        raise ImportError(
            f"{what} {module_name}:{attr} does not exist (module {module_name!r} has no {attr!r})"
        ) from None


def _core_contract_reason(family: EngineFamily) -> str | None:
    """Why the installed family package is outside this core's contract, or None."""
    if not family.distribution:
        return None
    from importlib import metadata

    from packaging.requirements import Requirement

    from pygraph._version import __version__ as core_version

    try:
        requires = metadata.requires(family.distribution) or []
    except metadata.PackageNotFoundError:
        return None  # source tree on sys.path (tests, device runs): nothing to compare
    for line in requires:
        req = Requirement(line)
        if (
            req.name == "pygraph-core"
            and req.marker is None
            and not req.specifier.contains(core_version, prereleases=True)
        ):
            return f"{family.distribution} requires pygraph-core{req.specifier}, this is {core_version}"
    return None


def instantiate(family: EngineFamily) -> FamilyEngines:
    """Build the family's engines for its offered slots, importing its package lazily.

    A family whose package is absent (or outside this core's contract) offers nothing and says why.
    Each engine carries the id it was handed; a factory that returns an engine with an id it was
    not handed is a bug and raises.
    """
    offered = offered_ids(family)
    key = (family.name, tuple(offered.items()))
    with _lock:
        cached = _instances.get(key)
    if cached is not None:
        return cached
    result = _build_engines(family, offered)
    with _lock:
        _instances[key] = result
    return result


def _build_engines(family: EngineFamily, offered: dict[str, int]) -> FamilyEngines:
    if not offered:
        return FamilyEngines(family, (), {})
    reason = _core_contract_reason(family)
    if reason is None:
        try:
            factory = resolve_hook((family.module, family.factory), what=f"family {family.name!r} factory")
        except ImportError as exc:
            log.debug("family %s unavailable: %s", family.name, exc)
            reason = f"package for family {family.name!r} is not installed ({exc})"
    if reason is not None:
        return FamilyEngines(family, (), dict.fromkeys(offered, reason))
    engines = tuple(factory(dict(offered)))
    handed = set(offered.values())
    built = {}
    for engine in engines:
        engine_id = getattr(engine, "engine_id", None)
        if engine_id not in handed:
            raise ValueError(
                f"family {family.name!r} factory returned engine {getattr(engine, 'name', engine)!r} "
                f"with id {engine_id!r}; it was handed {sorted(handed)}"
            )
        built[engine_id] = engine
    unavailable = {
        name: f"family {family.name!r} ships no engine for slot {name!r} yet"
        for name, engine_id in offered.items()
        if engine_id not in built
    }
    return FamilyEngines(family, engines, unavailable)
