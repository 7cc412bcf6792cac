"""The environment variables pygraph reads, parsed in one place, and the once-per-process notice.

Each variable is read where it is used (so a test's ``monkeypatch.setenv`` takes effect) and parsed
once per distinct value; a value that cannot be used is a `ConfigurationWarning` naming the
variable, the value and what is accepted, warned once per process and value, and then treated as
unset: nothing is raised and execution goes on.

- ``PYGRAPH_ENABLE_OPT_IN_ENGINES``: which opt-in engines are offered. ``1``/``true``/``yes``/
  ``on``/``all``/``*``: every one; ``0``/``false``/``no``/``off``/``none`` or unset: none; otherwise
  a comma-separated list of engine and family names (`opt_in`).
- ``PYGRAPH_DISABLE_ENGINES``: engines never offered, whatever their maturity: a comma-separated
  list of engine and family names (`disabled`), e.g. to keep a default-on engine out of every graph,
  the torch ops' among them, and let the next-ranked one serve.
- ``PYGRAPH_CACHE_DIR`` and the per-cache variables (``PYGRAPH_GEMM_CACHE_DIR``, ``PYGRAPH_GDN_SM90_CACHE_DIR``): where the disk
  caches live, or ``off`` to disable them (`pygraph.disk_cache.cache_dir`).
"""

from __future__ import annotations

import functools
import os
import re
import threading
import warnings
from collections.abc import Callable, Hashable, Iterable
from typing import NamedTuple

from pygraph.errors import ConfigurationWarning

__all__ = [
    "DISABLE_ENV", "OFF_VALUES", "ON_VALUES", "OPT_IN_ENV", "OptIn", "disabled", "engine_settings", "opt_in",
    "warn_once",
]  # fmt: skip

OPT_IN_ENV = "PYGRAPH_ENABLE_OPT_IN_ENGINES"
DISABLE_ENV = "PYGRAPH_DISABLE_ENGINES"
ON_VALUES = frozenset({"1", "true", "yes", "on", "all", "*"})
OFF_VALUES = frozenset({"0", "false", "no", "off", "none", "disable", "disabled"})
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")

_warned: set[Hashable] = set()
_warned_lock = threading.Lock()


def warn_once(key: Hashable, message: str, category: type[Warning] = ConfigurationWarning) -> bool:
    """Warn ``message`` unless ``key`` was warned about before in this process; True when it warned."""
    with _warned_lock:
        if key in _warned:
            return False
        _warned.add(key)
    warnings.warn(message, category, stacklevel=3)
    return True


class OptIn(NamedTuple):
    """``PYGRAPH_ENABLE_OPT_IN_ENGINES`` parsed: every opt-in engine, or the names listed."""

    every: bool
    names: frozenset[str]

    def enables(self, family: str, engine: str) -> bool:
        return self.every or engine in self.names or family in self.names


@functools.lru_cache(maxsize=32)
def _parse_opt_in(raw: str) -> tuple[OptIn, tuple[str, ...]]:
    """(what ``raw`` enables, its tokens that are not names at all)."""
    value = raw.strip()
    if value.lower() in ON_VALUES:
        return OptIn(True, frozenset()), ()
    if not value or value.lower() in OFF_VALUES:
        return OptIn(False, frozenset()), ()
    names, bad = set(), []
    for token in (part.strip() for part in value.split(",")):
        if not token:
            continue
        if _NAME.match(token):
            names.add(token)
        else:
            bad.append(token)
    return OptIn(False, frozenset(names)), tuple(bad)


def _engine_list(env: str, usage: str, known: Callable[[], Iterable[str]] | None) -> tuple[str, OptIn]:
    """(the raw value, the parse) of an engine-list variable; a token that is not a name and (given
    ``known``) a name that is no engine or family warned about once per process and value, naming the
    variable, the value and ``usage`` (what the value may be)."""
    raw = os.environ.get(env, "")
    parsed, bad = _parse_opt_in(raw)
    if bad:
        warn_once(
            (env, raw, "unparsable"),
            f"{env}={raw!r}: {', '.join(map(repr, bad))} cannot be an engine or family name; {usage}; ignored",
        )
    if parsed.names and known is not None:
        names = set(known())
        unknown = sorted(parsed.names - names)
        if unknown:
            warn_once(
                (env, raw, "unknown"),
                f"{env}={raw!r}: {', '.join(map(repr, unknown))} names no engine or family of the "
                f"manifest (engines and families: {', '.join(sorted(names))}); ignored",
            )
    return raw, parsed


def opt_in(known: Callable[[], Iterable[str]] | None = None) -> OptIn:
    """What ``PYGRAPH_ENABLE_OPT_IN_ENGINES`` enables now.

    ``known`` gives the engine and family names a listed name may be; a name that is none of them,
    and a token that is not a name, are warned about once (per process and value) and ignored.
    """
    usage = (
        "the value is 1 (every opt-in engine), 0, or a comma-separated list of engine and family names "
        "(e.g. gemm_sm80,gemm)"
    )
    return _engine_list(OPT_IN_ENV, usage, known)[1]


def disabled(known: Callable[[], Iterable[str]] | None = None) -> OptIn:
    """The engines and families ``PYGRAPH_DISABLE_ENGINES`` keeps out (``every`` is always False).

    Parsed as the opt-in list, and warned about alike; ``1``/``all`` would disable every engine, so
    it is warned about and ignored too.
    """
    usage = "the value is 0 or a comma-separated list of engine and family names (e.g. kda_sm90,kda_sm90_bwd)"
    raw, parsed = _engine_list(DISABLE_ENV, usage, known)
    if parsed.every:
        warn_once(
            (DISABLE_ENV, raw, "every"),
            f"{DISABLE_ENV}={raw!r}: would disable every engine; {usage}; ignored",
        )
        return OptIn(False, frozenset())
    return parsed


def engine_settings() -> tuple[str, str]:
    """The raw values of the variables that decide which engines are offered (opt-in, disabled): part
    of the key of anything built once per process from a plan, so a change takes effect."""
    return os.environ.get(OPT_IN_ENV, ""), os.environ.get(DISABLE_ENV, "")
