"""The environment variables pygraph reads, parsed in one place, and the once-per-process notice.

Each variable is read where it is used (so a test's ``monkeypatch.setenv`` takes effect); a value
that cannot be used is a `ConfigurationWarning` naming the variable, the value and what is accepted,
warned once per process and value, and then treated as unset: nothing is raised and execution goes
on.

- ``PYGRAPH_ENABLE_OPT_IN_ENGINES``: which opt-in engines are offered. ``1``/``true``/``yes``/
  ``on``/``all``/``*``: every one; ``0``/``false``/``no``/``off``/``none`` or unset: none; otherwise
  a comma-separated list of engine and family names (`opt_in`; read at every planning, so parsed
  once per distinct value).
- ``PYGRAPH_DISABLE_ENGINES``: engines never offered, whatever their maturity: a comma-separated
  list of engine and family names (`disabled`), e.g. to keep a default-on engine out of every graph,
  the torch ops' among them, and let the next-ranked one serve.
- ``PYGRAPH_CACHE_DIR``, ``PYGRAPH_PLAN_CACHE`` and the per-cache variables
  (``PYGRAPH_GEMM_CACHE_DIR``, ``PYGRAPH_GDN_SM90_CACHE_DIR``, ``PYGRAPH_SDPA_SM90_CACHE_DIR``):
  where the disk caches live, or ``off`` to disable them (`path_setting`; where they are used:
  `pygraph.disk_cache.cache_dir`, `pygraph.tuning.plan_cache.cache_path`).
- Switches (`switch`): ``PYGRAPH_CUTILE_TMA``, whether the cuTile kernels compile their sliced
  views' tile accesses with TMA (on unless ``0``; read when the kernel modules are imported).
- Lists of fixed names (`names`): ``PYGRAPH_REQUIRE_ARCH``, the GPU archs whose missing device fails
  the test suite instead of skipping (the repository's conftest.py).

Every ``PYGRAPH_*`` variable the packages read is listed in docs/cli.md's environment table.
"""

from __future__ import annotations

import functools
import os
import re
import threading
import warnings
from collections.abc import Callable, Hashable, Iterable
from pathlib import Path
from typing import NamedTuple

from pygraph.errors import ConfigurationWarning

__all__ = [
    "DISABLE_ENV", "OFF_VALUES", "ON_VALUES", "OPT_IN_ENV", "SWITCH_ON", "OptIn", "disabled", "engine_settings",
    "engine_settings_key", "names", "opt_in", "path_setting", "switch", "warn_once",
]  # fmt: skip

OPT_IN_ENV = "PYGRAPH_ENABLE_OPT_IN_ENGINES"
DISABLE_ENV = "PYGRAPH_DISABLE_ENGINES"
ON_VALUES = frozenset({"1", "true", "yes", "on", "all", "*"})
OFF_VALUES = frozenset({"0", "false", "no", "off", "none", "disable", "disabled"})
# a switch's "on" (ON_VALUES' "all" and "*" name every engine, not a yes)
SWITCH_ON = frozenset({"1", "true", "yes", "on"})
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


# os.environ keeps each value encoded in a plain dict (``_data``, under ``encodekey``'s key); reading
# that dict skips the Mapping machinery and the decoding: 0.09 us per call against engine_settings'
# 1.45 us (host_cost_cpu's machine), which every op call would pay. An os.environ without them (not
# CPython's) falls back to engine_settings.
try:
    _SETTINGS_KEYS = (os.environ.encodekey(OPT_IN_ENV), os.environ.encodekey(DISABLE_ENV))  # type: ignore[attr-defined]
except (AttributeError, TypeError):
    _SETTINGS_KEYS = None


def engine_settings_key() -> tuple:
    """What `engine_settings` says, as a cheap key for a per-call cache: equal exactly when the raw
    values are (the values as os.environ stores them, encoded; None where unset, which differs from
    set empty, a distinction a key may keep)."""
    data = getattr(os.environ, "_data", None)
    if _SETTINGS_KEYS is None or type(data) is not dict:
        return engine_settings()
    return data.get(_SETTINGS_KEYS[0]), data.get(_SETTINGS_KEYS[1])


def switch(env: str, default: bool) -> bool:
    """A yes/no variable: ``1``/``true``/``yes``/``on`` or ``0``/``false``/``no``/``off`` (any case,
    spaces ignored); ``default`` when unset or empty. Any other value is warned about once (per process
    and value), naming the variable, the value and what is accepted, and treated as unset."""
    raw = os.environ.get(env, "")
    value = raw.strip().lower()
    if value in SWITCH_ON:
        return True
    if value in OFF_VALUES:
        return False
    if value:
        warn_once(
            (env, raw, "switch"),
            f"{env}={raw!r}: not a switch; the value is 1 (on) or 0 (off) (also true/yes/on, false/no/off); "
            f"ignored ({env} is {'on' if default else 'off'} when unset)",
        )
    return default


def path_setting(env: str) -> tuple[Path | None, bool]:
    """(the path ``env`` names, whether it turns its cache off); (None, False) when unset or empty.

    ``off`` (``0``, ``false``, ``no``, ``none``, ``disable``) turns it off. A switch's "on" (``1``,
    ``true``, ``yes``, ``on``) names no folder: taken as a path it would put the cache in a folder of
    that name under the working directory, so it is warned about once (per process and value) and
    treated as unset. Whether the path can be used is the cache's to find out (`disk_cache.usable_dir`).
    """
    raw = os.environ.get(env, "")
    value = raw.strip()
    if not value:
        return None, False
    if value.lower() in OFF_VALUES:
        return None, True
    if value.lower() in SWITCH_ON:
        warn_once(
            (env, raw, "path"),
            f"{env}={raw!r}: not a path; the value is a folder (or, for PYGRAPH_PLAN_CACHE, a file) or 'off' "
            "(the default location is used when unset); ignored",
        )
        return None, False
    return Path(value).expanduser(), False


def names(env: str, accepted: Iterable[str]) -> frozenset[str]:
    """The names a comma-separated variable lists, each one of ``accepted``; empty when unset. A token
    that is none of them is warned about once (per process and value), naming the variable, the value
    and the accepted names, and ignored (the others still count)."""
    raw = os.environ.get(env, "")
    tokens = [token.strip() for token in raw.split(",") if token.strip()]
    allowed = frozenset(accepted)
    unknown = [token for token in tokens if token not in allowed]
    if unknown:
        warn_once(
            (env, raw, "names"),
            f"{env}={raw!r}: {', '.join(map(repr, unknown))} {'is' if len(unknown) == 1 else 'are'} not "
            f"one of {', '.join(sorted(allowed))}; the value is a comma-separated list of them; ignored",
        )
    return frozenset(token for token in tokens if token in allowed)
