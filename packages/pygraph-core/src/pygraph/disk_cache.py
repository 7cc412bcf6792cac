"""Disk caches that cannot corrupt: where they live, how an entry is written, and how it is trusted.

- Where: `cache_dir(name, env)`, the directory of one cache. ``env`` (``PYGRAPH_GEMM_CACHE_DIR``)
  relocates that cache, ``PYGRAPH_CACHE_DIR`` relocates every cache (``<it>/<name>``), and the
  default is ``<the user's cache directory>/pygraph/<name>`` (platformdirs: ``~/.cache/pygraph`` on
  Linux). Either variable set to ``off`` (``0``, ``false``, ``no``, ``none``, ``disable``) disables it.
  A directory that cannot be used (a file is in the way, it cannot be created or written) is a
  `CacheWarning` once per process and directory, and the cache is off: callers go on without it.
  Directories it creates are 0700, whatever the umask (`make_private_dirs`).
- How: `DiskCache.fetch` serializes one entry's writers with a file lock (filelock, released by the
  kernel if the holder dies), writes the entry to a temporary file in the same directory and
  publishes it with ``os.replace``, so a reader sees the whole old entry, the whole new one, or none.
  A lock that cannot be taken (a symlink, another user's file, EACCES) costs the cache, not the
  build: the object is built and not stored, with a `CacheWarning` once per lock.
- Trust: the entries of the kernel caches are native code loaded into the process, and a sha256 only
  detects corruption, so who can write is what is trusted. A directory not owned by this user, or
  writable by group or others, is not used (a `CacheWarning` once per directory saying why and how
  to fix it), and an entry or sidecar that is not a regular file of this user's, writable by no one
  else, is removed and rebuilt. Each entry ``<key><suffix>`` has a sidecar ``<key><suffix>.meta``
  (JSON: format, kind, key, size, sha256) written after it. An entry is used only when its sidecar
  is present, names this cache and key, and its size and sha256 match; anything else (torn by a
  crash, foreign, edited) is removed and rebuilt with a `CacheWarning` once per entry, never loaded.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import stat
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from pygraph.environment import path_setting, warn_once
from pygraph.errors import CacheWarning

__all__ = [
    "CACHE_ENV", "DiskCache", "cache_dir", "make_private_dirs", "setting", "untrusted", "usable_dir",
    "user_cache_root",
]  # fmt: skip

CACHE_ENV = "PYGRAPH_CACHE_DIR"
FORMAT = "pygraph-disk-cache"
VERSION = 1
# A writer holding an entry's lock longer than this (a compile takes seconds) is taken to be stuck:
# the waiting process builds its own object and leaves the entry to the holder.
LOCK_TIMEOUT_S = 600.0

T = TypeVar("T")

_usable: dict[str, bool] = {}
_usable_lock = threading.Lock()


def setting(env: str) -> tuple[Path | None, bool]:
    """(the path ``env`` names, whether it disables the cache); (None, False) when unset or empty
    (`pygraph.environment.path_setting`: a switch's "on" is warned about and treated as unset)."""
    return path_setting(env)


def user_cache_root() -> Path:
    """``<the user's cache directory>/pygraph``: every disk cache's default root."""
    try:
        import platformdirs
    except ImportError:  # a source tree run without core's dependencies (a device run): XDG's default
        return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "pygraph"
    return Path(platformdirs.user_cache_dir("pygraph"))


def cache_dir(name: str, env: str | None = None) -> Path | None:
    """The directory of cache ``name``, created and writable, or None when it is disabled or cannot
    be used (reported once). ``env`` is the cache's own variable, which wins over ``PYGRAPH_CACHE_DIR``."""
    if env is not None:
        path, off = setting(env)
        if off:
            return None
        if path is not None:
            return usable_dir(path, f"{env}={path}", env)
    root, off = setting(CACHE_ENV)
    if off:
        return None
    if root is not None:
        return usable_dir(root / name, f"{CACHE_ENV}={root}", env or CACHE_ENV)
    return usable_dir(user_cache_root() / name, "the user's cache directory", env or CACHE_ENV)


def usable_dir(path: Path, source: str, env: str = CACHE_ENV) -> Path | None:
    """``path`` created if need be (0700), when it is a directory this process can write and may
    trust; otherwise None and a `CacheWarning` (once per process and path) naming the path, where it
    came from (``source``), why, and how to fix it (``env``: the variable that moves it)."""
    key = str(path)
    with _usable_lock:
        known = _usable.get(key)
    if known is not None:
        return path if known else None
    reason = None
    fix = f"point {env} at a writable directory, or set it to 'off'"
    try:
        make_private_dirs(path)
    except FileExistsError:
        reason = "a file is in the way (it is not a directory)"
    except OSError as exc:
        reason = f"it cannot be created ({type(exc).__name__}: {exc.strerror or exc})"
    if reason is None:
        reason, fix = _distrusted_dir(path, env) or (None, fix)
    if reason is None and not os.access(path, os.W_OK | os.X_OK):
        reason = "this process cannot write to it"
    with _usable_lock:
        _usable[key] = reason is None
    if reason is not None:
        warn_once(
            ("cache-dir", key),
            f"disk cache directory {key} (from {source}) cannot be used: {reason}; going on without the "
            f"disk cache ({fix})",
            CacheWarning,
        )
        return None
    return path


# --- trust ---------------------------------------------------------------------------------------------


def make_private_dirs(path: Path) -> None:
    """Create ``path`` and its missing parents, each mode 0700 whatever the umask (one that exists is
    left as it is). ``FileExistsError`` when something that is not a directory is in the way."""
    missing = []
    at = Path(path)
    while not os.path.lexists(at) and at.parent != at:
        missing.append(at)
        at = at.parent
    for directory in reversed(missing):
        try:
            os.mkdir(directory, 0o700)
        except FileExistsError:  # made at the same moment by another process: its own mode stands
            if not directory.is_dir():
                raise
            continue
        os.chmod(directory, 0o700)  # the umask may have taken bits from mkdir's mode
    if not os.path.isdir(path):
        raise FileExistsError(f"{path} exists and is not a directory")


def untrusted(path: Path | str, *, content: bool = True) -> str | None:
    """Why the file ``path`` (a cache entry, its sidecar, its lock) cannot be trusted ("is a symlink"),
    or None: it must be a regular file (not a symlink) owned by this process's user and, when its
    ``content`` is read (an entry, a sidecar; not a lock), writable by no one else. A path that does
    not exist is None: there is nothing to distrust."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    except OSError as exc:
        return f"cannot be inspected ({type(exc).__name__}: {exc.strerror or exc})"
    if stat.S_ISLNK(st.st_mode):
        return "is a symlink"
    if not stat.S_ISREG(st.st_mode):
        return "is not a regular file"
    return _foreign_owner(st) or (_shared_write(st) if content else None)


def _distrusted_dir(path: Path, env: str) -> tuple[str, str] | None:
    """(why, how to fix it) when the directory ``path`` is not this user's alone, else None."""
    try:
        st = os.stat(path)
    except OSError as exc:
        return f"it cannot be inspected ({type(exc).__name__}: {exc.strerror or exc})", f"set {env}=off"
    why = (
        "; its entries are native code this process would load, so only a directory no one else can "
        "write is used"
    )
    owner = _foreign_owner(st)
    if owner is not None:
        return f"it {owner}{why}", f"point {env} at a directory of your own"
    shared = _shared_write(st)
    if shared is not None:
        return f"it {shared}{why}", f"chmod 700 {path}, or point {env} at a directory only you can write"
    return None


def _foreign_owner(st: os.stat_result) -> str | None:
    geteuid = getattr(os, "geteuid", None)
    if geteuid is None or st.st_uid == geteuid():  # no POSIX owners (Windows): the profile is private
        return None
    return f"is owned by uid {st.st_uid}, not by this user (uid {geteuid()})"


def _shared_write(st: os.stat_result) -> str | None:
    if not hasattr(os, "geteuid"):
        return None
    writers = [who for who, bit in (("group", stat.S_IWGRP), ("others", stat.S_IWOTH)) if st.st_mode & bit]
    if not writers:
        return None
    return f"is writable by {' and '.join(writers)} (mode {stat.S_IMODE(st.st_mode):#o})"


class DiskCache:
    """One cache directory of verified entries. ``kind`` names what the entries are (it is recorded in
    each sidecar, so another cache's file under the same name is foreign); ``suffix`` ends each
    entry's file name (``.o``). Keys are file-name-safe strings the caller derives (a digest)."""

    def __init__(self, directory: Path | str, *, kind: str, suffix: str = "") -> None:
        self.directory = Path(directory)
        self.kind = kind
        self.suffix = suffix
        self._write_failed = False

    def path(self, key: str) -> Path:
        if not key or os.sep in key or key.startswith("."):
            raise ValueError(f"DiskCache({self.kind}): key {key!r} is not a plain file name")
        return self.directory / f"{key}{self.suffix}"

    def _meta(self, entry: Path) -> Path:
        return entry.with_name(entry.name + ".meta")

    # --- reading ------------------------------------------------------------------------------------

    def lookup(self, key: str) -> Path | None:
        """The path of ``key``'s entry when it is whole and this cache's, else None. A present entry
        that fails the check is looked at again under the entry's lock (a writer may have been between
        its two renames), and removed with a notice (once per entry) if it still fails."""
        entry = self.path(key)
        problem = self._verify(entry, key)
        if problem is None:
            return entry
        if problem:
            lock = self._acquire(key)
            if lock is None:
                return None
            try:
                return self._checked(key)
            finally:
                lock.release()
        return None

    def _checked(self, key: str) -> Path | None:
        """`lookup` for a caller holding the entry's lock: a bad entry is discarded at once."""
        entry = self.path(key)
        problem = self._verify(entry, key)
        if problem is None:
            return entry
        if problem:
            self.discard(key, problem)
        return None

    def _verify(self, entry: Path, key: str) -> str | None:
        """None when ``entry`` is good; "" when there is no entry at all; otherwise what is wrong."""
        meta_path = self._meta(entry)
        has_entry, has_meta = os.path.lexists(entry), os.path.lexists(meta_path)
        if not has_entry:
            return "its sidecar has no object" if has_meta else ""
        if not has_meta:
            return "it has no sidecar (torn by a crash, or not written by this cache)"
        for subject, path in (("it", entry), ("its sidecar", meta_path)):
            distrust = untrusted(path)  # native code: only this user's own files are read
            if distrust is not None:
                return f"{subject} {distrust}"
        try:
            meta = json.loads(meta_path.read_text())
            expected = (FORMAT, VERSION, self.kind, key)
            seen = (meta.get("format"), meta.get("version"), meta.get("kind"), meta.get("key"))
            if seen != expected:
                return f"its sidecar names {seen}, not {expected}"
            data = entry.read_bytes()
        except (OSError, ValueError, AttributeError) as exc:
            return f"it cannot be read ({type(exc).__name__}: {exc})"
        if len(data) != meta.get("size"):
            return f"it has {len(data)} bytes, its sidecar says {meta.get('size')}"
        if hashlib.sha256(data).hexdigest() != meta.get("sha256"):
            return "its sha256 differs from its sidecar's"
        return None

    def discard(self, key: str, why: str) -> None:
        """Remove ``key``'s entry and sidecar, with a notice (once per entry) saying ``why``."""
        entry = self.path(key)
        warn_once(
            ("cache-entry", str(entry)),
            f"disk cache entry {entry} is not used: {why}; it is rebuilt",
            CacheWarning,
        )
        for path in (self._meta(entry), entry):
            with contextlib.suppress(OSError):
                path.unlink()

    # --- writing ------------------------------------------------------------------------------------

    def lock(self, key: str, timeout: float = LOCK_TIMEOUT_S) -> Any:
        """The file lock that serializes the writers of ``key``'s entry (across processes and threads).
        Take it through `_acquire`, which first checks the lock file is one to open."""
        from filelock import FileLock

        return FileLock(self._lock_path(key), timeout=timeout, mode=0o600)

    def _lock_path(self, key: str) -> str:
        return str(self.path(key)) + ".lock"

    def _acquire(self, key: str) -> Any | None:
        """``key``'s lock, taken; or None, with a notice once per lock, when it cannot be: a lock file
        that is a symlink or another user's (opening it could truncate what it points at), one the
        system refuses (EACCES), or one held past `LOCK_TIMEOUT_S`. The caller goes on without the
        cache for this entry."""
        from filelock import Timeout

        path = self._lock_path(key)
        why = untrusted(path, content=False)  # what a lock file holds is never read
        if why is None:
            lock = self.lock(key)
            try:
                lock.acquire()
                return lock
            except Timeout:  # a TimeoutError, hence an OSError: caught first
                why = f"stayed locked for {LOCK_TIMEOUT_S:.0f} s"
            except OSError as exc:
                why = f"cannot be taken ({type(exc).__name__}: {exc.strerror or exc})"
        warn_once(
            ("cache-lock", path),
            f"disk cache entry {self.path(key)} is not cached: its lock {path} {why}; the object is built "
            "without the cache",
            CacheWarning,
        )
        return None

    def store(self, key: str, write: Callable[[Path], None]) -> Path | None:
        """Publish ``key``'s entry: ``write(path)`` fills a temporary file in this directory, which
        then replaces the entry atomically, its sidecar after it. The caller holds `lock`. None (and
        a notice once per directory) when the directory refuses the write."""
        entry = self.path(key)
        tmp = None
        try:
            self._sweep(entry)
            # the entry's own suffix last: a writer may pick its format by it (an object file's ".o")
            fd, name = tempfile.mkstemp(
                prefix=f".{entry.name}.", suffix=f".tmp{self.suffix}", dir=self.directory
            )
            os.close(fd)
            tmp = Path(name)
            try:
                write(tmp)
            except OSError:
                raise
            except Exception as exc:  # the object's own writer failed: the cache goes without it
                raise OSError(f"writing the entry failed: {type(exc).__name__}: {exc}") from exc
            data = tmp.read_bytes()
            meta = {
                "format": FORMAT,
                "version": VERSION,
                "kind": self.kind,
                "key": key,
                "size": len(data),
                "sha256": hashlib.sha256(data).hexdigest(),
            }
            _fsync(tmp)
            os.replace(tmp, entry)
            tmp = None
            fd, name = tempfile.mkstemp(prefix=f".{entry.name}.meta.", suffix=".tmp", dir=self.directory)
            with os.fdopen(fd, "w") as f:
                json.dump(meta, f)
                f.flush()
                os.fsync(f.fileno())
            tmp = Path(name)
            os.replace(tmp, self._meta(entry))
            tmp = None
        except OSError as exc:
            if not self._write_failed:
                self._write_failed = True
                warn_once(
                    ("cache-write", str(self.directory)),
                    f"disk cache directory {self.directory} refused a write ({type(exc).__name__}: {exc}); "
                    "going on without storing to it",
                    CacheWarning,
                )
            return None
        finally:
            if tmp is not None:
                with contextlib.suppress(OSError):
                    tmp.unlink()
        return entry

    def _sweep(self, entry: Path) -> None:
        """Remove the temporary files a killed writer of ``entry`` left (the caller holds its lock,
        so no live writer owns one)."""
        for stale in self.directory.glob(f".{entry.name}.*.tmp*"):
            with contextlib.suppress(OSError):
                stale.unlink()

    # --- both ---------------------------------------------------------------------------------------

    def fetch(
        self,
        key: str,
        *,
        load: Callable[[Path], T],
        build: Callable[[], T],
        save: Callable[[T, Path], None],
    ) -> T:
        """``key``'s object: loaded from a verified entry, else built and stored.

        ``load(path)`` reads an entry back; ``build()`` makes the object; ``save(obj, path)`` writes
        it to a path. Builders of one key queue on its lock, and each re-checks the entry first, so
        concurrent processes build it once. An entry that verifies but fails to load is discarded and
        rebuilt. A lock that cannot be taken (held past `LOCK_TIMEOUT_S`, a symlink, another user's,
        EACCES), or a directory that refuses writes, costs the cache only: the object is built and
        returned.
        """
        entry = self.path(key)
        if self._verify(entry, key) is None:
            found = self._load(key, entry, load)
            if found is not None:
                return found[0]
        lock = self._acquire(key)
        if lock is None:  # a lock that cannot be taken costs the cache, never the build
            return build()
        try:
            entry = self._checked(key)
            found = None if entry is None else self._load(key, entry, load)
            if found is not None:
                return found[0]
            obj = build()
            self.store(key, lambda path: save(obj, path))
            return obj
        finally:
            lock.release()

    def _load(self, key: str, entry: Path, load: Callable[[Path], T]) -> tuple[T] | None:
        try:
            return (load(entry),)
        except Exception as exc:  # a verified file its reader refuses: rebuilt, never trusted
            self.discard(key, f"it could not be loaded ({type(exc).__name__}: {exc})")
            return None


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
