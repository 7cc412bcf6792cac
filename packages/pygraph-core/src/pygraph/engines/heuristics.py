"""Ranking: from a graph's candidates and the backend's entries to the ONE plan list.

The family's heuristics hook decides, in one call, which configs to try and where the backend's
entries go::

    recommend(modes, facts, offered, backend_entries, *, device) -> [PlanConfig, ...]

``facts`` come from the family's analyzer (parsed once per graph), ``offered`` is
{engine name: id} of the candidates that accepted the graph, ``backend_entries`` the backend's
PlanConfigs, each tagged with the mode whose query produced it (the delegating entry, id -1,
untagged), ``device`` the `DeviceInfo` the graph is planned for (``request.device``: a rule sized
by the SM count states its threshold as a fraction of ``device.sms``). What the hook returns IS
the plan list: core only drops repeats of an ``(engine_id, knobs)`` (first position wins) and
rejects an id the family did not offer.

Most hooks build their list with `assemble`, which walks the modes and splices the backend's
block for each mode where the hook's proposals put the `PLACE_BACKEND` marker.

A hook names a long tail (the rest of a knob domain) as a `Deferred` block: the planner builds the
entries before the first such block at once and the rest when something reads past them
(`pygraph.engines.plan_list`). The whole list, and every index of it, is the same either way.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from pygraph.engines.base import DECLINE_TYPES, BaseEngine, DeviceInfo, EngineRequest, PlanConfig
from pygraph.engines.engine_ids import BACKEND_PLACEMENT_MARKER, EntryKind, entry_kind
from pygraph.engines.plan_list import Deferred, PlanList, PlanSequence, dedup, expand, parts_of
from pygraph.ir.dtypes import convert_enum, heur_mode

__all__ = [
    "PLACE_BACKEND",
    "Deferred",
    "PlanList",
    "PlanSequence",
    "assemble",
    "decline_reasons",
    "dedup",
    "default_modes",
    "normalize_modes",
    "rank",
    "splice",
]

log = logging.getLogger(__name__)

PLACE_BACKEND = PlanConfig(BACKEND_PLACEMENT_MARKER)
"""Put this in a proposal list where the backend's block for the mode belongs."""


def default_modes() -> list[Any]:
    """The modes assumed when the caller names none (the backend's own default)."""
    return [heur_mode.A, heur_mode.FALLBACK]


def normalize_modes(modes: Iterable[Any] | None) -> list[Any]:
    """Our `heur_mode` members for ``modes`` (ours, the backend's, or names); default when None/empty."""
    if not modes:
        return default_modes()
    return [convert_enum(m, heur_mode) for m in modes]


def decline_reasons(
    engines: Iterable[BaseEngine], request: EngineRequest
) -> tuple[list[BaseEngine], dict[str, str]]:
    """(the engines that accept ``request.graph``, {engine name: reason} for those that decline).

    Only the decline types count; any other exception is the engine's bug and propagates.
    """
    accepted, declined = [], {}
    for engine in engines:
        try:
            engine.check_support(request)
        except DECLINE_TYPES as exc:
            declined[engine.name] = f"{type(exc).__name__}: {exc}"
            log.debug("engine %s declined the graph: %s", engine.name, exc)
        else:
            accepted.append(engine)
    return accepted, declined


# --- helpers for hooks ------------------------------------------------------------------------------


def splice(proposals: Sequence[Any], block: Sequence[PlanConfig]) -> list[Any]:
    """``proposals`` with ``block`` at the first `PLACE_BACKEND` marker (at the end when there is none).

    A repeated marker is dropped: one block per mode.
    """
    if not any(p.engine_id == BACKEND_PLACEMENT_MARKER for p in proposals):
        return [*proposals, *block]
    out: list[PlanConfig] = []
    placed = False
    for p in proposals:
        if p.engine_id != BACKEND_PLACEMENT_MARKER:
            out.append(p)
        elif not placed:
            out.extend(block)
            placed = True
    return out


def assemble(
    modes: Sequence[Any],
    propose: Callable[[Any], Sequence[Any]],
    backend_entries: Sequence[PlanConfig],
) -> list[PlanConfig] | PlanSequence:
    """The plan list, mode block by mode block in the caller's order.

    ``propose(kind)`` gives the family's configs for ``heur_mode.A`` (candidates worth timing, best
    first; B asks the same) or ``heur_mode.FALLBACK`` (the configs expected to build), optionally
    with a `PLACE_BACKEND` marker and `Deferred` blocks. The result is a list, or a `PlanSequence`
    (which reads as the same whole list) when a proposal holds a deferred block.

    - A / B / FALLBACK: the proposals with the backend's block for that mode spliced at the marker.
      The block is led by the delegating entry, because the backend tries it before its own configs.
    - OPENSOURCE: mode A without the backend's recommendation: the python proposals (the marker
      dropped), then the delegating entry, never ahead of ours (if the backend's open-source engine
      declines, that entry falls through to native configs).
    - The delegating entry once more at the end, so one the backend earned is never lost.
    """
    delegating = [c for c in backend_entries if entry_kind(c.engine_id) is EntryKind.DELEGATING]
    out: list[PlanConfig] = []
    for mode in normalize_modes(modes):
        if mode is heur_mode.OPENSOURCE:
            out += [p for p in propose(heur_mode.A) if p.engine_id != BACKEND_PLACEMENT_MARKER]
            out += delegating
            continue
        kind = heur_mode.FALLBACK if mode is heur_mode.FALLBACK else heur_mode.A
        block = delegating + [c for c in backend_entries if c.mode is mode]
        out += splice(list(propose(kind)), block)
    out += delegating
    if any(isinstance(p, Deferred) for p in out):
        return PlanSequence(out)
    return out


# --- the frame ----------------------------------------------------------------------------------------


def _unranked(
    modes: Sequence[Any], candidates: Sequence[BaseEngine], backend_entries: Sequence[PlanConfig]
) -> list:
    """A family with no hook: each accepting engine's default config, then the backend's entries."""
    ours = [PlanConfig(e.engine_id, e.default_knobs()) for e in candidates]
    return assemble(modes, lambda kind: ours, backend_entries)


def rank(
    graph: Any,
    candidates: Sequence[BaseEngine],
    backend_entries: Sequence[PlanConfig],
    modes: Sequence[Any] | None = None,
    *,
    family: Any = None,
    hook: Callable[..., Sequence[PlanConfig]] | None = None,
    facts: Any = None,
    analyzed: bool = True,
    device: DeviceInfo | None = None,
) -> PlanList:
    """The plan list for ``graph``, each ``(engine_id, knobs)`` at its first position.

    ``candidates`` are the family's engines that accepted the graph; ``hook`` the family's
    ``recommend`` (None: `_unranked`); ``facts`` the analyzer's parse; ``device`` what the graph is
    planned for (None: nothing known, `DeviceInfo()`, whose rules read the reference card's SM
    count). ``analyzed`` False means the family's analyzer could not express the graph: nothing to
    recommend on, the backend serves it. A hook's configs are checked here, except those of its
    `Deferred` blocks, which are checked when the list is built past its ranked prefix.
    """
    modes = normalize_modes(modes)
    if not analyzed or family is None:
        return PlanList(assemble(modes, lambda kind: [], backend_entries))
    if hook is None:
        return PlanList(_unranked(modes, candidates, backend_entries))
    offered = {e.name: e.engine_id for e in candidates}
    device = device if device is not None else DeviceInfo()
    parts = parts_of(hook(modes, facts, dict(offered), list(backend_entries), device=device))
    if not any(isinstance(p, Deferred) for p in parts):
        _check_hook_result(family, parts, offered, candidates)
        return PlanList(parts)
    named = [p for p in parts if not isinstance(p, Deferred)]
    foreign = [p for p in parts if isinstance(p, Deferred) and p.engine_id not in offered.values()]
    try:
        _check_hook_result(family, named, offered, candidates)
        problem = None
    except (TypeError, ValueError) as exc:
        problem = exc
    if problem is not None or foreign:
        # the first refusal at its position in the whole list (building the blocks: a hook's bug)
        _check_hook_result(family, list(expand(parts)), offered, candidates)
        if problem is not None:
            raise problem
    return PlanList(parts, finish=lambda configs: _check_hook_result(family, configs, offered, candidates))


def _check_hook_result(
    family: Any, plans: Sequence[Any], offered: Mapping[str, int], candidates: Sequence[BaseEngine]
) -> None:
    name = getattr(family, "name", family)
    by_id = {e.engine_id: e for e in candidates}
    for i, cfg in enumerate(plans):
        if not isinstance(cfg, PlanConfig):
            raise TypeError(
                f"heuristics hook of family {name!r} returned {cfg!r} at position {i}, not a PlanConfig"
            )
        if cfg.engine_id == BACKEND_PLACEMENT_MARKER:
            raise ValueError(
                f"heuristics hook of family {name!r} left the placement marker at position {i}; "
                "splice the backend block with pygraph.engines.heuristics.splice/assemble"
            )
        try:
            kind = entry_kind(cfg.engine_id)
        except ValueError as exc:
            raise ValueError(
                f"heuristics hook of family {name!r} returned {cfg!r} at position {i}: {exc}"
            ) from None
        if kind is EntryKind.PYTHON:
            engine = by_id.get(cfg.engine_id)
            if engine is None:
                raise ValueError(
                    f"heuristics hook of family {name!r} returned python engine id {cfg.engine_id} at position "
                    f"{i}, which the family did not offer for this graph (offered: {dict(offered)})"
                )
            caps = engine.capabilities
            if caps is not None:
                knobs = {getattr(k, "name", k): v for k, v in (cfg.knobs or {}).items()}
                vague = [axis for axis in caps.knob_domains if knobs.get(axis) is None]
                if vague:
                    raise ValueError(
                        f"heuristics hook of family {name!r}: {engine.name} at position {i} leaves knob(s) "
                        f"{vague} unset; a recommendation names a concrete config"
                    )
