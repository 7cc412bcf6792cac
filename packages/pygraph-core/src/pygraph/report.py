"""What ``pygraph info`` and ``pygraph explain`` print, as plain data (their ``--json``).

`info` describes the installation: versions, the device, the plan cache, every family of the
manifest and why each engine is or is not offered. `explain` plans one graph and describes the
answer: its family, the facts, every candidate engine with its verdict, the backend's entries per
mode and the head of the ranked plan list. Both return JSON-ready dicts; the CLI renders them.
"""

from __future__ import annotations

import dataclasses
import enum
import importlib.util
import os
import sys
from collections.abc import Iterable
from importlib import metadata
from typing import Any

from pygraph import engines
from pygraph._version import __version__
from pygraph.engines.engine_ids import FAMILY_BLOCK, EntryKind, entry_kind
from pygraph.engines.factory import install_command, is_installed
from pygraph.engines.manifest import DISABLE_ENV, OPT_IN_ENV
from pygraph.errors import GraphNotSupportedError

__all__ = ["explain", "info", "missing_requirements", "plain"]

# Distributions whose versions `info` reports beside pygraph's own: the DSLs, the backend, torch.
_THIRD_PARTY = ("nvidia-cutlass-dsl", "cuda-tile", "nvidia-cudnn-frontend", "torch", "numpy")


def _version(distribution: str) -> str | None:
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


def plain(value: Any, depth: int = 0) -> Any:
    """``value`` as JSON-ready data: tensors and nodes by name and geometry, enums by name."""
    from pygraph.ir.node import Node
    from pygraph.ir.tensor import Tensor

    if isinstance(value, Tensor):
        return (
            f"{value.name or value.uid} {list(value.dim)} stride {list(value.stride)} {value.data_type.name}"
        )
    if isinstance(value, Node):
        return f"{value.name} ({value.op})"
    if isinstance(value, enum.Enum):
        return value.name
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if depth > 4:
        return repr(value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: plain(getattr(value, f.name), depth + 1) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        return {str(k): plain(v, depth + 1) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [plain(v, depth + 1) for v in value]
    return repr(value)


# --- info ---------------------------------------------------------------------------------------------


def _cudnn_runtime() -> tuple[str | None, str | None]:
    """(the cuDNN runtime's version, None) or (None, why it cannot be read)."""
    if importlib.util.find_spec("cudnn") is None:
        return None, "nvidia-cudnn-frontend is not installed (pip install 'pygraph-core[backend]')"
    try:
        import cudnn

        return str(cudnn.backend_version()), None
    except Exception as exc:  # the binding raises untyped errors when the runtime library is absent
        return None, f"{type(exc).__name__}: {exc}"


def _engine_rows(family: Any, device: Any) -> list[dict[str, Any]]:
    offered = engines.offered_ids(family)
    built = engines.instantiate(family) if offered else None
    by_name = {e.name: e for e in (built.engines if built is not None else ())}
    kept_out = engines.disabled_slots(family)
    rows = []
    for name, slot in family.slots_in_order():
        row: dict[str, Any] = {"name": name, "id": family.engine_id + slot.slot, "arch": None}
        engine = by_name.get(name)
        if slot.is_planned:
            row.update(status="planned", reason=slot.planned)
        elif name in kept_out:
            row.update(status="disabled", reason=f"disabled: {DISABLE_ENV} names it (or its family)")
        elif name not in offered:
            row.update(status="opt-in", reason=f"opt-in: offered when {OPT_IN_ENV} names it (or is 1)")
        elif engine is None:
            row.update(status="unavailable", reason=built.unavailable.get(name, "not built"))
        else:
            caps = engine.capabilities
            row.update(status="offered", reason=None)
            if caps is not None:
                row["arch"] = f"SM{caps.sm_lo}-SM{caps.sm_hi}"
            missing = _missing_requirement(engine)
            if missing is not None:  # its DSL is absent: no graph can build here
                row.update(status="unavailable", reason=missing)
            elif caps is not None:
                if device is not None and not caps.sm_lo <= device.sm <= caps.sm_hi:
                    row.update(
                        status="other arch", reason=f"runs on {row['arch']}; this device is SM{device.sm}"
                    )
        rows.append(row)
    return rows


def _missing_requirement(engine: Any) -> str | None:
    """Why ``engine`` cannot build a plan on this installation (a module of its ``requires`` is
    absent: "needs cuTile (pip install ...)"), or None."""
    probe = getattr(engine, "missing_requirement", None)
    return probe() if callable(probe) else None


def missing_requirements(engines_: Iterable[Any]) -> dict[str, str]:
    """Engine name -> why it cannot build here (its DSL is absent), for the engines that cannot."""
    return {e.name: why for e in engines_ if (why := _missing_requirement(e)) is not None}


def _family_row(family: Any, device: Any) -> dict[str, Any]:
    installed = is_installed(family)
    return {
        "name": family.name,
        "block": [family.engine_id, family.engine_id + FAMILY_BLOCK - 1],
        "anchors": list(family.anchors),
        "distribution": family.distribution,
        "package": family.package,
        "installed": installed,
        "version": _version(family.distribution) if family.distribution else None,
        "install": None if installed else install_command(family),
        "engines": _engine_rows(family, device) if installed else [],
    }


def info() -> dict[str, Any]:
    """The installation: versions, the device, the plan cache and every family's engines."""
    from pygraph.tuning.device import current_device, no_device_reason
    from pygraph.tuning.plan_cache import PlanCache, cache_path

    device = current_device()
    path = cache_path()
    cache = None if path is None else PlanCache(path)
    runtime, runtime_reason = _cudnn_runtime()
    own = ["pygraph-core", "pygraph-manifest"]
    own += sorted({f.distribution for f in engines.families() if f.distribution})
    cache_row: dict[str, Any] = {
        "path": None if path is None else str(path),
        "enabled": cache is not None,
    }
    if cache is not None:
        problem = cache.problem()
        cache_row.update(problem=problem, entries=None if problem else len(cache.entries()))
    return {
        "pygraph": __version__,
        "python": sys.version.split()[0],
        "packages": {name: _version(name) for name in (*own, *_THIRD_PARTY)},
        "cudnn_runtime": runtime,
        "cudnn_runtime_reason": runtime_reason,
        "device": None if device is None else dataclasses.asdict(device),
        "device_reason": no_device_reason(),
        "opt_in": {"env": OPT_IN_ENV, "value": os.environ.get(OPT_IN_ENV)},
        "disabled": {"env": DISABLE_ENV, "value": os.environ.get(DISABLE_ENV)},
        "plan_cache": cache_row,
        "families": [_family_row(f, device) for f in engines.families()],
    }


# --- explain ------------------------------------------------------------------------------------------


def _entry(planner: Any, index: int) -> dict[str, Any]:
    cfg = planner.plans[index]
    kind = planner.kind_of(cfg)
    return {
        "index": index,
        "name": kind.name(cfg),
        "engine_id": cfg.engine_id,
        "knobs": {str(k): plain(v) for k, v in dict(cfg.knobs or {}).items()},
        "kind": kind.label,
        "mode": getattr(cfg.mode, "name", cfg.mode),
    }


def _candidates(planner: Any, family: Any) -> list[dict[str, Any]]:
    if family is None:
        return []
    accepted = {e.name for e in planner.engines} - set(planner.declines)
    offered = engines.offered_ids(family)
    rows = []
    for name, slot in family.slots_in_order():
        row = {"name": name, "id": family.engine_id + slot.slot}
        if name in accepted:
            row.update(verdict="accepts", reason=None)
        elif name in planner.declines:
            verdict = "planned" if slot.is_planned else "declines"
            row.update(verdict=verdict, reason=planner.declines[name])
        elif name not in offered:
            row.update(verdict="opt-in", reason=f"not offered: opt-in ({OPT_IN_ENV} names it to offer it)")
        else:
            row.update(verdict="declines", reason="not built")
        rows.append(row)
    return rows


def _backend(planner: Any, modes: Iterable[Any]) -> dict[str, Any]:
    prep = planner.prepare()
    declined = prep.backend.declined
    per_mode: dict[str, list[str]] = {}
    for cfg in prep.backend.entries or []:
        kind = planner.kind_of(cfg)
        delegating = entry_kind(cfg.engine_id) is EntryKind.DELEGATING
        mode = "delegating" if delegating else getattr(cfg.mode, "name", "untagged")
        per_mode.setdefault(mode, []).append(kind.name(cfg))
    return {
        "declined": declined,  # one line
        "detail": prep.backend.detail,  # the refusal's whole text, as cuDNN gave it
        "modes": [getattr(m, "name", str(m)) for m in modes],
        "entries": per_mode,
    }


def explain(graph: Any, *, modes: Iterable[Any] | None = None, head: int | None = 10) -> dict[str, Any]:
    """Plan ``graph`` (if not yet) and describe it; ``head`` plan-list entries (None: all).

    A graph no plan serves is described all the same: ``no_plan`` says why, the candidates and the
    backend say who declined.
    """
    from pygraph.engines.heuristics import normalize_modes
    from pygraph.tuning import plan_cache

    modes = normalize_modes(modes)
    no_plan = None
    if not graph.state.planned:
        try:
            graph.create_execution_plans(modes)
        except GraphNotSupportedError as exc:
            no_plan = str(exc)
    planner = graph.planner
    prep = planner.prepare()
    family = prep.family
    count = len(planner.plans)
    shown = count if head is None else min(head, count)
    recorded = plan_cache.lookup(graph, family) if no_plan is None else None
    return {
        "graph": {
            "name": graph.name,
            "ops": [f"{n.name} ({n.op})" for n in graph.nodes],
            "operands": [plain(t) for t in planner.layout.tensors],
        },
        "family": None if family is None else family.name,
        "facts": plain(prep.facts),
        "candidates": _candidates(planner, family),
        "backend": _backend(planner, modes),
        "no_plan": no_plan,
        "plan_count": count,
        "plans": [_entry(planner, i) for i in range(shown)],
        "recorded": None if recorded is None else recorded.to_dict(),
    }
