"""A knob assignment checked against the engine's declared domain, before anything is built.

One check serves every replay of an ``(engine_id, knobs)``: ``graph.create_execution_plan`` and a plan
cache's recorded config alike. A python engine's domain is its ``capabilities.knob_domains`` (name
and value); the backend's knobs are names with integer values (the backend itself judges the name
and the value when the config is appended); the delegating entry takes none. A knob left out is
the engine's default, so a partial assignment is accepted.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pygraph.errors import KnobError, KnobTypeError, OpInputError, UnknownEngineError, UnknownKnobError

__all__ = ["validate_knobs"]


def _knob_name(knob: Any) -> str | None:
    if isinstance(knob, str):
        return knob
    name = getattr(knob, "name", None)  # our knob_type or the backend's
    return name if isinstance(name, str) else None


def _is_int(value: Any) -> bool:
    return not isinstance(value, bool) and hasattr(value, "__index__")


def _in_domain(value: Any, domain: tuple[Any, ...]) -> bool:
    """``value`` is one of ``domain``'s points, of the point's own kind: True is not 1, 128.0 is not 128
    (the kernel would be handed another type than the one the domain promises)."""
    for point in domain:
        if isinstance(point, bool):
            if isinstance(value, bool) and value is point:
                return True
        elif isinstance(point, int):
            if _is_int(value) and int(value) == point:
                return True
        elif type(value) is type(point) and value == point:
            return True
    return False


def _items(knobs: Any, call: str, engine: str) -> list[tuple[Any, Any]]:
    if knobs is None:
        return []
    if not isinstance(knobs, Mapping):
        raise KnobTypeError(
            f"{call}: knobs for engine {engine} must be a mapping of knob name to value, got "
            f"{type(knobs).__name__} {knobs!r}",
            engine=engine,
        )
    return list(knobs.items())


def _check_domain(engine: str, domains: Mapping[str, tuple[Any, ...]], knobs: Any, call: str) -> None:
    for knob, value in _items(knobs, call, engine):
        name = _knob_name(knob)
        domain = domains.get(name) if name is not None else None
        if domain is None:
            known = ", ".join(domains) or "none"
            raise UnknownKnobError(
                f"{call}: engine {engine} has no knob {knob!r} (given the value {value!r}); its knobs: {known}",
                engine=engine,
                knob=name if name is not None else repr(knob),
            )
        if not _in_domain(value, domain):
            raise KnobError(
                f"{call}: knob {name}={value!r} is outside engine {engine}'s domain; it accepts "
                f"{', '.join(repr(v) for v in domain)}",
                engine=engine,
                knob=name,
            )


def _check_backend(engine_id: int, knobs: Any, call: str) -> None:
    """Names and integer values; which names the backend knows is its own vocabulary, judged by
    `pygraph.planning.backend.BackendPlans.append` when the config is appended."""
    engine = f"backend engine {engine_id}"
    for knob, value in _items(knobs, call, engine):
        name = _knob_name(knob)
        if name is None:
            raise UnknownKnobError(
                f"{call}: {engine}: knob {knob!r} (given the value {value!r}) is not a knob name; backend "
                "knobs are pygraph.knob_type members or their names (TILE_SIZE, STAGES, SPLIT_K_SLC, ...)",
                engine=engine,
                knob=repr(knob),
            )
        if not _is_int(value):
            raise KnobError(
                f"{call}: knob {name}={value!r} of {engine} must be an int (backend knob values are int64)",
                engine=engine,
                knob=name,
            )


def _python_engine(engine_id: int, call: str) -> Any:
    """The engine class a python id names (no instance is built), or None when its slot cannot say
    (planned, or its module cannot be imported): the planner then reports why it is not offered."""
    from pygraph.engines.manifest import engine_for_id, resolve_hook

    try:
        ref = engine_for_id(engine_id)
    except KeyError as exc:
        raise UnknownEngineError(f"{call}: {exc.args[0]}") from None
    impl = ref.family.slots[ref.engine_name].impl
    if impl is None:
        return None
    try:
        return resolve_hook(impl, what=f"family {ref.family.name!r} engine {ref.engine_name!r}")
    except ImportError:
        return None


def validate_knobs(
    engine: Any, knobs: Mapping[Any, Any] | None, *, call: str = "create_execution_plan()"
) -> None:
    """Raise unless ``knobs`` is an assignment ``engine`` accepts; returns None when it is.

    ``engine`` is a python engine (an instance or its class: anything with ``name`` and
    ``capabilities``) or an engine id (a python id is looked up in the manifest, without building the
    engine). ``call`` is what the messages name. Raises `UnknownKnobError` (a ``KeyError``) for a name
    the engine does not declare, `KnobError` (a ``ValueError``) for a value outside its domain,
    `KnobTypeError` when ``knobs`` is not a mapping, `UnknownEngineError` for an id that names no
    engine, and `OpInputError` when ``engine`` is neither an id nor an engine. An engine that
    declares no capabilities has no domain to check against.
    """
    if isinstance(engine, bool) or (not isinstance(engine, int) and not hasattr(engine, "capabilities")):
        raise OpInputError(f"{call}: expected an engine id (int) or a python engine, got {engine!r}")
    if isinstance(engine, int):
        from pygraph.engines.engine_ids import EntryKind, entry_kind

        try:
            kind = entry_kind(engine)
        except ValueError as exc:
            raise UnknownEngineError(f"{call}: {exc}") from None
        if kind is EntryKind.DELEGATING:
            if _items(knobs, call, "backend_heuristics"):
                raise UnknownKnobError(
                    f"{call}: the delegating entry ({engine}) takes no knobs (the backend chooses); got "
                    f"{dict(knobs)!r}",
                    engine="backend_heuristics",
                )
            return
        if kind is EntryKind.BACKEND:
            _check_backend(engine, knobs, call)
            return
        engine = _python_engine(engine, call)
        if engine is None:
            _items(knobs, call, "?")
            return
    caps = getattr(engine, "capabilities", None)
    name = getattr(engine, "name", None) or getattr(engine, "__name__", repr(engine))
    if caps is None:
        _items(knobs, call, name)
        return
    _check_domain(name, caps.knob_domains, knobs, call)
