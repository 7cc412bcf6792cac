"""The persistent plan cache: an autotune winner, recorded once, replayed by every later process.

An entry is ``(engine_id, knobs)`` under a `PlanKey` (the graph's structure, the device, the
versions; see `pygraph.tuning.graph_key`). ``graph.autotune()`` records its winner; planning
(``create_execution_plans``) looks the graph up and puts the recorded config first, so a new
process builds the winner first and pays no tuning. A family's torch op uses it the same way: it
plans its graph (which replays) and may call ``graph.autotune()`` (which records).

One SQLite file (Python's ``sqlite3``): atomic transactions, and concurrent writers are serialized
by the database's own lock. Where it lives: ``PYGRAPH_PLAN_CACHE=<path>`` (a file, or a folder to
hold ``plans.sqlite``), else ``plans.sqlite`` in ``PYGRAPH_CACHE_DIR`` (the root of every pygraph
disk cache), else in the user's cache folder (platformdirs: ``~/.cache/pygraph`` on Linux); either
variable set to ``off`` disables it. The cache is never a reason to fail: a file that is not a database,
or a database of another program or of another schema version, or a path that is not a regular file
(a device, a directory), is reported once per process (a `PlanCacheWarning`) and ignored, and nothing
is created beside it; a row that does not hold an entry (bad JSON, a value of the wrong type) is
skipped with a warning naming it; an entry whose engine id or knobs no longer exist is dropped with a
warning that says why. A writer killed mid-transaction leaves a hot journal: readers open the file
read-write (never creating it), so the next one rolls the journal back and the cache goes on.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import json
import logging
import os
import sqlite3
import stat
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from pygraph.disk_cache import CACHE_ENV as ROOT_ENV
from pygraph.disk_cache import make_private_dirs, setting, user_cache_root
from pygraph.engines.base import DECLINE_TYPES, PlanConfig, knobs_key
from pygraph.engines.engine_ids import EntryKind, entry_kind
from pygraph.engines.plan_list import PlanList
from pygraph.environment import warn_once
from pygraph.errors import KnobError, PlanCacheWarning, UnknownEngineError
from pygraph.tuning.graph_key import PlanKey, Uncacheable, plan_key

__all__ = [
    "CACHE_ENV",
    "CacheEntry",
    "PlanCache",
    "PlanCacheWarning",
    "active_cache",
    "cache_path",
    "lookup",
    "record",
    "recorded_first",
]

log = logging.getLogger(__name__)

CACHE_ENV = "PYGRAPH_PLAN_CACHE"
FILE_NAME = "plans.sqlite"
SCHEMA = "pygraph.plan_cache"
SCHEMA_VERSION = 1
# How long a writer waits for another process's transaction before giving up (seconds).
_BUSY_TIMEOUT_S = 30.0

_TABLES = (
    "CREATE TABLE pygraph_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
    "CREATE TABLE pygraph_plans (id INTEGER PRIMARY KEY, key TEXT NOT NULL UNIQUE, graph TEXT NOT NULL, "
    "family TEXT, summary TEXT NOT NULL, device TEXT NOT NULL, versions TEXT NOT NULL, "
    "engine_id INTEGER NOT NULL, knobs TEXT NOT NULL, plan_name TEXT NOT NULL, time_ms REAL, first_ms REAL, "
    "first_name TEXT, reps INTEGER, recorded_at TEXT NOT NULL)",
)
_COLUMNS = (
    "id, key, graph, family, summary, device, versions, engine_id, knobs, plan_name, time_ms, "
    "first_ms, first_name, reps, recorded_at"
)


class _Unusable(Exception):
    """The file at the cache's path is not a plan cache this pygraph can read."""


class _DamagedRow(Exception):
    """A row of the plans table that holds no entry: bad JSON, or a value of the wrong type."""


@dataclasses.dataclass(frozen=True)
class CacheEntry:
    """One recorded winner. ``first_ms``/``first_name``: the plan list's default first plan, timed in
    the same run, so ``first_ms / time_ms`` is what tuning gained."""

    id: int
    key: str
    graph: str
    family: str | None
    summary: str
    device: str
    versions: Mapping[str, str]
    engine_id: int
    knobs: Mapping[str, Any]
    plan_name: str
    time_ms: float | None
    first_ms: float | None
    first_name: str | None
    reps: int | None
    recorded_at: str

    @classmethod
    def _from_row(cls, row: Sequence[Any]) -> CacheEntry:
        """The entry a row holds; `_DamagedRow` naming the first column that holds none (SQLite
        stores whatever a damaged or hand-edited file put there, whatever the column's type)."""
        fields = dict(zip(_COLUMNS.split(", "), row))
        for column, kinds, expected in _ROW_TYPES:
            value = fields[column]
            if not isinstance(value, kinds) or isinstance(value, bool):
                raise _DamagedRow(f"{column} is {_shown(value)}, not {expected}")
        for column in ("versions", "knobs"):
            try:
                fields[column] = json.loads(fields[column])
            except ValueError as exc:
                raise _DamagedRow(f"{column} is not JSON ({exc}): {_shown(fields[column])}") from None
        versions, knobs = fields["versions"], fields["knobs"]
        if not isinstance(versions, dict) or not all(isinstance(v, str) for v in versions.values()):
            raise _DamagedRow(f"versions is {_shown(versions)}, not an object of version strings")
        if not isinstance(knobs, list) or not all(
            isinstance(pair, list) and len(pair) == 2 and isinstance(pair[0], str) and _is_scalar(pair[1])
            for pair in knobs
        ):
            raise _DamagedRow(f"knobs is {_shown(knobs)}, not a list of [name, value] pairs")
        fields["knobs"] = dict(knobs)
        return cls(**fields)

    def to_dict(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "versions": dict(self.versions), "knobs": dict(self.knobs)}


# (column, the Python types SQLite may hand back for a whole row, what the message says is expected)
_ROW_TYPES = (
    *((c, str, "text") for c in ("key", "graph", "summary", "device", "versions", "knobs", "plan_name")),
    ("recorded_at", str, "text"),
    *((c, (str, type(None)), "text or NULL") for c in ("family", "first_name")),
    *((c, int, "an integer") for c in ("id", "engine_id")),
    ("reps", (int, type(None)), "an integer or NULL"),
    *((c, (int, float, type(None)), "a number or NULL") for c in ("time_ms", "first_ms")),
)


def _is_scalar(value: Any) -> bool:
    """A knob value a plan can hold: what JSON reads back for a bool, a number or a string."""
    return value is None or isinstance(value, (bool, int, float, str))


def _shown(value: Any) -> str:
    text = repr(value)
    return f"{type(value).__name__} {text if len(text) <= 60 else text[:57] + '...'}"


# --- where it lives -------------------------------------------------------------------------------


def cache_path() -> Path | None:
    """The cache file this process uses, or None when it is off.

    ``PYGRAPH_PLAN_CACHE`` (a file, or a folder to hold ``plans.sqlite``) wins; else
    ``PYGRAPH_CACHE_DIR`` (every disk cache's root: ``<it>/plans.sqlite``); else the user's cache
    folder. Either set to ``off`` disables the plan cache.
    """
    path, off = setting(CACHE_ENV)
    if off:
        return None
    if path is not None:
        return path / FILE_NAME if path.is_dir() else path
    root, off = setting(ROOT_ENV)
    if off:
        return None
    return (root if root is not None else user_cache_root()) / FILE_NAME


def active_cache() -> PlanCache | None:
    """The cache at `cache_path`, or None when it is off."""
    path = cache_path()
    return None if path is None else PlanCache(path)


# --- the database ---------------------------------------------------------------------------------


def _report_once(path: Path, problem: str) -> None:
    """Warn about ``problem`` with the file at ``path`` once per process."""
    warn_once(
        ("plan cache", str(path), problem),
        f"plan cache {path}: {problem}; the plan cache is not used (set {CACHE_ENV} to another path, or "
        f"{CACHE_ENV}=off)",
        PlanCacheWarning,
    )


def _is_unreadable(exc: sqlite3.DatabaseError) -> bool:
    """True when SQLite says the file is no database (or a damaged one), not merely busy."""
    return getattr(exc, "sqlite_errorname", "") in ("SQLITE_NOTADB", "SQLITE_CORRUPT") or (
        "not a database" in str(exc) or "malformed" in str(exc)
    )


def _check_schema(conn: sqlite3.Connection) -> bool:
    """True when the file holds our tables, False when it is empty; `_Unusable` when it is another's."""
    tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    if not tables:
        return False
    if "pygraph_meta" not in tables or "pygraph_plans" not in tables:
        raise _Unusable(f"a database of another program (tables {sorted(tables)}, no pygraph plan tables)")
    meta = dict(conn.execute("SELECT key, value FROM pygraph_meta"))
    if meta.get("schema") != SCHEMA:
        raise _Unusable(f"a database of another program (schema {meta.get('schema')!r}, not {SCHEMA!r})")
    if meta.get("version") != str(SCHEMA_VERSION):
        raise _Unusable(
            f"a plan cache of schema version {meta.get('version')}; this pygraph reads version {SCHEMA_VERSION}"
        )
    return True


class PlanCache:
    """The plan cache in one SQLite file. Every call opens the file, runs one transaction and closes
    it, so threads and processes share it safely; reading never creates the file."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)

    def __repr__(self) -> str:
        return f"PlanCache({str(self.path)!r})"

    @contextlib.contextmanager
    def _open(self, *, write: bool) -> Iterator[sqlite3.Connection | None]:
        """A connection inside one transaction (None when a read finds no file or no tables).

        A write creates the file and its tables (and its missing folders, 0700); a path that is not a
        regular file, a file that is not our plan cache, or one SQLite cannot open, raises `_Unusable`.
        A read opens the file read-write without creating it: a writer killed mid-transaction left a
        hot journal, which only a connection that may write can roll back (SQLite falls back to
        read-only by itself when the file is write-protected).
        """
        not_regular = _not_regular(self.path)
        if not_regular is not None:  # SQLite would put its journal beside a device or a folder
            raise _Unusable(f"is not a regular file (it is {not_regular})")
        if not write and not self.path.is_file():
            yield None
            return
        try:
            if write:
                make_private_dirs(self.path.parent)
                conn = sqlite3.connect(self.path, timeout=_BUSY_TIMEOUT_S, isolation_level=None)
            else:
                uri = self.path.resolve().as_uri() + "?mode=rw"
                conn = sqlite3.connect(uri, uri=True, timeout=_BUSY_TIMEOUT_S, isolation_level=None)
        except (OSError, sqlite3.Error) as exc:
            raise _Unusable(f"cannot be opened ({type(exc).__name__}: {exc})") from exc
        try:
            # IMMEDIATE takes the write lock up front: two writers queue on the database's lock
            # instead of both reading an empty file and racing to create its tables.
            conn.execute("BEGIN IMMEDIATE" if write else "BEGIN")
            ours = _check_schema(conn)
            if write and not ours:
                for statement in _TABLES:
                    conn.execute(statement)
                conn.execute("INSERT INTO pygraph_meta (key, value) VALUES ('schema', ?)", (SCHEMA,))
                conn.execute(
                    "INSERT INTO pygraph_meta (key, value) VALUES ('version', ?)", (str(SCHEMA_VERSION),)
                )
                ours = True
            yield conn if ours else None
            conn.execute("COMMIT")
        except sqlite3.DatabaseError as exc:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            if _is_unreadable(exc):
                raise _Unusable("not a SQLite database (or a damaged one)") from exc
            raise
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        finally:
            conn.close()

    def _run(self, what: str, write: bool, body: Callable[[sqlite3.Connection], Any], default: Any) -> Any:
        """``body(conn)`` in one transaction; an unusable file is reported once and gives ``default``."""
        try:
            with self._open(write=write) as conn:
                return default if conn is None else body(conn)
        except _Unusable as exc:
            _report_once(self.path, str(exc))
        except sqlite3.Error as exc:  # busy past the timeout, read-only, disk full, a damaged table
            _report_once(self.path, f"{what} failed ({_sqlite_problem(exc)})")
        return default

    def problem(self) -> str | None:
        """Why this file cannot be used as a plan cache, or None (a missing file is fine)."""
        try:
            with self._open(write=False):
                return None
        except _Unusable as exc:
            return str(exc)
        except sqlite3.Error as exc:
            return f"cannot be read ({_sqlite_problem(exc)})"

    def _entries(self, rows: list[Sequence[Any]]) -> list[CacheEntry]:
        """The entries ``rows`` hold; a row that holds none is skipped with a `PlanCacheWarning` naming
        it (once per process and row). Called after the transaction: a warning turned into an error
        (``-W error``) leaves the file as it was."""
        entries = []
        for row in rows:
            try:
                entries.append(CacheEntry._from_row(row))
            except _DamagedRow as exc:
                rowid, key = row[0], row[1]
                warn_once(
                    ("plan cache row", str(self.path), rowid, str(exc)),
                    f"plan cache {self.path}: entry {rowid} (key {key!r}) is damaged: {exc}; it is skipped "
                    "(recording its graph again replaces it; `pygraph cache clear` removes every entry)",
                    PlanCacheWarning,
                )
        return entries

    # --- entries ------------------------------------------------------------------------------

    def lookup(self, key: PlanKey | str) -> CacheEntry | None:
        digest = key.digest if isinstance(key, PlanKey) else key

        def body(conn: sqlite3.Connection) -> list[Sequence[Any]]:
            return conn.execute(f"SELECT {_COLUMNS} FROM pygraph_plans WHERE key = ?", (digest,)).fetchall()

        found = self._entries(self._run("lookup", False, body, []))
        return found[0] if found else None

    def record(
        self,
        key: PlanKey,
        engine_id: int,
        knobs: Mapping[Any, Any] | None,
        *,
        plan_name: str,
        time_ms: float | None = None,
        first_ms: float | None = None,
        first_name: str | None = None,
        reps: int | None = None,
    ) -> CacheEntry | None:
        """Store (or replace) the winner under ``key``; the stored entry, or None when the file
        cannot be used (reported once)."""
        knobs_json = json.dumps([list(pair) for pair in knobs_key(knobs)])
        now = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
        values = (
            key.digest, key.graph, key.family, key.summary, key.device, json.dumps(key.versions, sort_keys=True),
            int(engine_id), knobs_json, plan_name, time_ms, first_ms, first_name, reps, now,
        )  # fmt: skip

        def body(conn: sqlite3.Connection) -> CacheEntry:
            conn.execute(
                "INSERT INTO pygraph_plans (key, graph, family, summary, device, versions, engine_id, knobs, "
                "plan_name, time_ms, first_ms, first_name, reps, recorded_at) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
                # every column: recording a graph again also mends a row a damaged file left
                f"ON CONFLICT(key) DO UPDATE SET {_UPDATE_ALL}",
                values,
            )
            return conn.execute(
                f"SELECT {_COLUMNS} FROM pygraph_plans WHERE key = ?", (key.digest,)
            ).fetchall()

        found = self._entries(self._run("recording", True, body, []))
        return found[0] if found else None

    def entries(self) -> list[CacheEntry]:
        """Every entry the file holds, in the order recorded; a damaged row is skipped with a warning."""

        def body(conn: sqlite3.Connection) -> list[Sequence[Any]]:
            return conn.execute(f"SELECT {_COLUMNS} FROM pygraph_plans ORDER BY id").fetchall()

        return self._entries(self._run("listing", False, body, []))

    def get(self, ref: int | str) -> CacheEntry | None:
        """The entry with id ``ref`` (an int, or digits) or whose key starts with ``ref``."""
        text = str(ref)
        for entry in self.entries():
            if (text.isdigit() and entry.id == int(text)) or (len(text) >= 6 and entry.key.startswith(text)):
                return entry
        return None

    def drop(self, key: str) -> bool:
        """Delete the entry under ``key`` (a digest); True when there was one."""
        return bool(self._run("dropping", True, lambda c: c.execute(_DELETE, (key,)).rowcount, 0))

    def clear(self) -> int:
        """Delete every entry; how many there were."""
        if not self.path.is_file():
            return 0
        return int(self._run("clearing", True, lambda c: c.execute("DELETE FROM pygraph_plans").rowcount, 0))


_DELETE = "DELETE FROM pygraph_plans WHERE key = ?"
_UPDATE_ALL = ", ".join(f"{c} = excluded.{c}" for c in _COLUMNS.split(", ")[2:])


def _not_regular(path: Path) -> str | None:
    """What ``path`` is when it exists and is not a regular file (following symlinks), else None."""
    try:
        mode = os.stat(path).st_mode
    except OSError:  # missing (a write creates it), or unreachable (opening it says why)
        return None
    if stat.S_ISREG(mode):
        return None
    kinds = ((stat.S_ISDIR, "a directory"), (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
             (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"))  # fmt: skip
    return next((name for test, name in kinds if test(mode)), f"of mode {mode:#o}")


def _sqlite_problem(exc: sqlite3.Error) -> str:
    if getattr(exc, "sqlite_errorname", "") == "SQLITE_READONLY_ROLLBACK":
        return (
            "a writer was killed mid-transaction and its journal cannot be rolled back by a process that "
            "cannot write the file"
        )
    return f"{type(exc).__name__}: {exc}"


# --- what planning and autotuning call ----------------------------------------------------------------


def _key_or_none(graph: Any, family: Any, device: Any) -> PlanKey | None:
    try:
        return plan_key(graph, family, device)
    except Uncacheable as exc:
        log.debug("graph %r is not cached: %s", getattr(graph, "name", ""), exc)
        return None


def lookup(graph: Any, family: Any, *, device: Any = "current") -> CacheEntry | None:
    """The recorded winner for ``graph`` (planned for ``family``) on ``device``, or None (also when
    the cache is off, has no file yet, or cannot be used)."""
    cache = active_cache()
    if cache is None or not cache.path.is_file():
        return None
    key = _key_or_none(graph, family, device)
    return None if key is None else cache.lookup(key)


def record(
    graph: Any,
    family: Any,
    engine_id: int,
    knobs: Mapping[Any, Any] | None,
    *,
    device: Any = "current",
    **info: Any,
) -> tuple[CacheEntry | None, str | None]:
    """Record ``(engine_id, knobs)`` as ``graph``'s winner: (the entry, None) or (None, why not).

    ``info``: ``plan_name`` (required), ``time_ms``, ``first_ms``, ``first_name``, ``reps``.
    """
    cache = active_cache()
    if cache is None:
        return None, f"the plan cache is off ({CACHE_ENV}={os.environ.get(CACHE_ENV)})"
    try:
        key = plan_key(graph, family, device)
    except Uncacheable as exc:
        return None, f"graph {getattr(graph, 'name', '')!r} has no stable key: {exc}"
    try:
        entry = cache.record(key, engine_id, knobs, **info)
    except TypeError as exc:  # a knob value JSON cannot hold: nothing a later process could replay
        return None, f"knobs {dict(knobs or {})!r} are not plain data ({exc})"
    if entry is None:
        return (
            None,
            f"the plan cache at {cache.path} cannot be written: {cache.problem() or 'see the warning'}",
        )
    return entry, None


def stale_reason(engine_id: int, knobs: Mapping[str, Any]) -> str | None:
    """Why a recorded ``(engine_id, knobs)`` names no plan any more, or None when it may still.

    Only what is certain counts: an id that names no engine (`UnknownEngineError`), a slot that is
    planned again, knob names or values the engine no longer declares (`KnobError`, from the same
    `validate_knobs` that ``create_execution_plan`` runs). A backend id's engine is left to the
    backend: its replay declines when the engine is gone.
    """
    from pygraph.engines.knobs import validate_knobs
    from pygraph.engines.manifest import engine_for_id

    try:
        validate_knobs(engine_id, knobs, call="plan cache replay")
    except (UnknownEngineError, KnobError) as exc:
        return str(exc)
    if entry_kind(engine_id) is EntryKind.PYTHON:
        ref = engine_for_id(engine_id)
        if ref.family.slots[ref.engine_name].is_planned:
            return f"engine {ref.engine_name} ({engine_id}) is a planned slot, not a shipped engine"
    return None


def recorded_first(
    graph: Any,
    family: Any,
    plans: PlanList,
    replay: Callable[[int, Mapping[str, Any]], PlanConfig],
) -> PlanList:
    """``plans`` with the recorded winner for ``graph`` first.

    A winner the list names outright moves to the front; any other is replayed through
    ``replay(engine_id, knobs)`` (the planner's, ``create_execution_plan``'s path) and put in front,
    and the list keeps it at that first position only (one inside a deferred block is not built to
    be found: the list it gives is the same). A winner that no longer names a plan is dropped from
    the cache with a `PlanCacheWarning`; one that merely declines here (an opt-in engine not
    enabled, a backend that is absent) is left in the cache and the list is returned as ranked.
    """
    cache = active_cache()
    if cache is None or not cache.path.is_file():
        return plans
    key = _key_or_none(graph, family, "current")
    entry = None if key is None else cache.lookup(key)
    if entry is None:
        return plans
    found = plans.find(PlanConfig(entry.engine_id, entry.knobs).key)
    if found is not None:
        plans.put_first(found)
        return plans
    stale = stale_reason(entry.engine_id, entry.knobs)
    if stale is not None:
        cache.drop(entry.key)
        warnings.warn(
            f"plan cache {cache.path}: dropped entry {entry.id} ({entry.plan_name}) for graph "
            f"{getattr(graph, 'name', '')!r}: {stale}",
            PlanCacheWarning,
            stacklevel=4,
        )
        return plans
    if entry_kind(entry.engine_id) is EntryKind.BACKEND and not any(
        entry_kind(p.engine_id) is EntryKind.BACKEND for p in plans.named()
    ):
        return plans  # the backend offers no concrete config in these modes (OPENSOURCE) or declined
    try:
        cfg = replay(entry.engine_id, entry.knobs)
    except DECLINE_TYPES as exc:
        log.debug("recorded plan %s does not serve graph %r here: %s", entry.plan_name, graph.name, exc)
        return plans
    plans.put_first(cfg)
    return plans
