"""The one engine factory: a family's engines, built from the classes its slots name.

No family package writes a factory. A slot declares ``impl=("module", "Class")``; when a graph of
the family is planned, core imports the module, constructs ``Class(engine_id=<the slot's id>)``
and checks that the engine carries the slot's id and name. What cannot be built is a reason, not
an error: a family package that is not installed, one outside this core's contract, an engine
module whose dependency is missing (ImportError), a planned slot. Anything else an engine's
module or constructor raises is a bug and propagates.

Imports nothing from the manifest at run time, so `pygraph.engines.manifest` can build on it.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import logging
import sys
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pygraph.engines.manifest import EngineFamily

__all__ = ["FamilyEngines", "HookRef", "build_engines", "install_command", "is_installed", "resolve_hook"]

log = logging.getLogger(__name__)

HookRef = tuple[str, str]


@dataclasses.dataclass(frozen=True)
class FamilyEngines:
    """The engines built for a family's offered slots, and why any declared engine is missing.

    ``unavailable`` maps engine name -> reason for offered slots that could not be built and for
    planned slots; opt-in slots that were not asked for are absent from both.
    """

    family: EngineFamily
    engines: tuple[Any, ...]
    unavailable: Mapping[str, str]  # engine name -> reason


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


def install_command(family: EngineFamily) -> str:
    """The pip command that installs the family's package (core's extra of the family's name)."""
    extra = (family.distribution or "").removeprefix("pygraph-engines-") or family.name
    return f"pip install 'pygraph-core[{extra}]'"


def is_installed(family: EngineFamily) -> bool:
    """Whether the family's package can be imported, asked without importing it."""
    top = family.package.partition(".")[0]
    # already imported (a script that registered itself under the package's name counts too)
    return top in sys.modules or importlib.util.find_spec(top) is not None


def _absent_reason(family: EngineFamily) -> str | None:
    """Why the family's package cannot be imported at all, or None (asked without importing it)."""
    if is_installed(family):
        return None
    return (
        f"package for family {family.name!r} is not installed (no module {family.package!r}; "
        f"{install_command(family)})"
    )


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


def _build_one(family: EngineFamily, engine_name: str, engine_id: int) -> Any:
    """``Class(engine_id=...)`` for one offered slot; ImportError when its module cannot load."""
    impl = family.slots[engine_name].impl
    cls = resolve_hook(impl, what=f"family {family.name!r} engine {engine_name!r}")
    engine = cls(engine_id=engine_id)
    built_id, built_name = getattr(engine, "engine_id", None), getattr(engine, "name", None)
    if built_id != engine_id or built_name != engine_name:
        raise ValueError(
            f"family {family.name!r} slot {engine_name!r}: {impl[0]}.{impl[1]}(engine_id={engine_id}) built "
            f"an engine with id {built_id!r} and name {built_name!r}; it must carry the slot's id and name"
        )
    return engine


def build_engines(family: EngineFamily, offered: Mapping[str, int]) -> FamilyEngines:
    """One engine per offered slot (``offered``: engine name -> id, from `offered_ids`)."""
    planned = {name: f"planned: {why}" for name, why in family.planned.items()}
    if not offered:
        return FamilyEngines(family, (), planned)
    reason = _core_contract_reason(family) or _absent_reason(family)
    if reason is not None:
        log.debug("family %s unavailable: %s", family.name, reason)
        return FamilyEngines(family, (), {**dict.fromkeys(offered, reason), **planned})
    engines, unavailable = [], {}
    for engine_name, engine_id in offered.items():
        try:
            engines.append(_build_one(family, engine_name, engine_id))
        except ImportError as exc:
            log.debug("family %s engine %s unavailable: %s", family.name, engine_name, exc)
            unavailable[engine_name] = f"engine {engine_name!r} could not be imported: {exc}"
    return FamilyEngines(family, tuple(engines), {**unavailable, **planned})
