"""The disk cache: where it lives, atomic publication under a file lock, and entries verified before
use. A writer killed mid-write and two processes writing one entry are real subprocesses. Who may
write is what is trusted: a directory, entry or lock that is another user's, shared or a symlink is
not used, and the directories it creates are 0700."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import signal
import stat
import subprocess
import sys
import textwrap
import time
import warnings
from pathlib import Path

import pytest

from pygraph import disk_cache
from pygraph.disk_cache import CACHE_ENV, DiskCache, cache_dir
from pygraph.errors import CacheWarning

OWN_ENV = "PYGRAPH_TEST_CACHE_DIR"


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch, tmp_path):
    monkeypatch.delenv(CACHE_ENV, raising=False)
    monkeypatch.delenv(OWN_ENV, raising=False)
    import platformdirs

    monkeypatch.setattr(platformdirs, "user_cache_dir", lambda app: str(tmp_path / "user-cache" / app))


def _cache(tmp_path: Path, kind: str = "test-object") -> DiskCache:
    return DiskCache(tmp_path / "entries", kind=kind, suffix=".bin")


def _fetch(cache: DiskCache, key: str, payload: bytes, builds: list[bytes]) -> bytes:
    def build() -> bytes:
        builds.append(payload)
        return payload

    return cache.fetch(key, load=Path.read_bytes, build=build, save=lambda obj, path: path.write_bytes(obj))


# --- where -------------------------------------------------------------------------------------------


def test_the_default_is_under_the_users_cache_directory(tmp_path):
    assert cache_dir("kernels", OWN_ENV) == tmp_path / "user-cache" / "pygraph" / "kernels"
    assert (tmp_path / "user-cache" / "pygraph" / "kernels").is_dir()


def test_the_variables_relocate_and_disable_it(tmp_path, monkeypatch):
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "root"))
    assert cache_dir("kernels", OWN_ENV) == tmp_path / "root" / "kernels"
    monkeypatch.setenv(OWN_ENV, str(tmp_path / "own"))
    assert cache_dir("kernels", OWN_ENV) == tmp_path / "own"  # the cache's own variable wins
    for off in ("off", "0", "false", "NO", "none"):
        monkeypatch.setenv(OWN_ENV, off)
        assert cache_dir("kernels", OWN_ENV) is None
    monkeypatch.delenv(OWN_ENV)
    monkeypatch.setenv(CACHE_ENV, "off")
    assert cache_dir("kernels", OWN_ENV) is None


def test_a_directory_that_cannot_be_used_is_reported_once_and_the_cache_is_off(tmp_path, monkeypatch):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    for target, reason in ((blocker, "a file is in the way"), (blocker / "below", "cannot be created")):
        monkeypatch.setenv(OWN_ENV, str(target))
        with pytest.warns(CacheWarning) as caught:
            assert cache_dir("kernels", OWN_ENV) is None
        (message,) = [str(w.message) for w in caught]
        assert str(target) in message and OWN_ENV in message and reason in message
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            assert cache_dir("kernels", OWN_ENV) is None  # reported once per process


# --- trust -------------------------------------------------------------------------------------------


def test_an_entry_is_built_once_then_loaded_with_its_sidecar(tmp_path):
    cache, builds = _cache(tmp_path), []
    assert _fetch(cache, "k1", b"object-bytes", builds) == b"object-bytes"
    assert _fetch(cache, "k1", b"never-built", builds) == b"object-bytes"
    assert builds == [b"object-bytes"]
    meta = json.loads((tmp_path / "entries" / "k1.bin.meta").read_text())
    assert meta["kind"] == "test-object" and meta["key"] == "k1" and meta["size"] == 12
    assert not list((tmp_path / "entries").glob(".*.tmp*"))


@pytest.mark.parametrize(
    ("damage", "why"),
    [
        (lambda entry, meta: entry.write_bytes(entry.read_bytes()[:5]), "it has 5 bytes"),
        (lambda entry, meta: entry.write_bytes(b"X" * 12), "sha256 differs"),
        (lambda entry, meta: meta.unlink(), "no sidecar"),
        (lambda entry, meta: meta.write_text("{not json"), "cannot be read"),
        (lambda entry, meta: entry.unlink(), "sidecar has no object"),
    ],
    ids=["truncated", "overwritten", "no-sidecar", "bad-sidecar", "no-object"],
)
def test_a_torn_or_edited_entry_is_rebuilt_with_one_notice_never_loaded(tmp_path, damage, why):
    cache, builds = _cache(tmp_path), []
    _fetch(cache, "k1", b"object-bytes", builds)
    entry = tmp_path / "entries" / "k1.bin"
    damage(entry, entry.with_name("k1.bin.meta"))
    with pytest.warns(CacheWarning, match=why) as caught:
        assert _fetch(cache, "k1", b"object-bytes", builds) == b"object-bytes"
    assert len(caught) == 1 and str(entry) in str(caught[0].message)
    assert builds == [b"object-bytes"] * 2
    assert cache.lookup("k1") == entry  # rebuilt whole


def test_a_foreign_file_under_an_entrys_name_is_not_loaded(tmp_path):
    ours, theirs, builds = _cache(tmp_path), _cache(tmp_path, kind="another-cache"), []
    _fetch(theirs, "k1", b"their-bytes!", builds)
    with pytest.warns(CacheWarning, match="another-cache"):
        assert _fetch(ours, "k1", b"our-bytes", builds) == b"our-bytes"


def test_an_entry_its_reader_refuses_is_rebuilt(tmp_path):
    cache, builds = _cache(tmp_path), []
    _fetch(cache, "k1", b"object-bytes", builds)

    def refuse(path: Path) -> bytes:
        raise RuntimeError("not a loadable object")

    with pytest.warns(CacheWarning, match="could not be loaded .*not a loadable object"):
        got = cache.fetch(
            "k1", load=refuse, build=lambda: b"rebuilt", save=lambda obj, path: path.write_bytes(obj)
        )
    assert got == b"rebuilt" and (tmp_path / "entries" / "k1.bin").read_bytes() == b"rebuilt"


def test_a_failing_save_costs_the_cache_only(tmp_path):
    cache = _cache(tmp_path)

    def save(obj: bytes, path: Path) -> None:
        raise RuntimeError("export failed")

    with pytest.warns(CacheWarning, match="refused a write .*export failed"):
        assert cache.fetch("k1", load=Path.read_bytes, build=lambda: b"obj", save=save) == b"obj"
    assert cache.lookup("k1") is None and not list((tmp_path / "entries").glob(".*.tmp*"))


# --- two processes, and a writer killed mid-write --------------------------------------------------------

WRITER = textwrap.dedent(
    """
    import os, sys, time
    from pathlib import Path
    from pygraph.disk_cache import DiskCache

    directory, key, mode, log = sys.argv[1:5]
    cache = DiskCache(directory, kind="test-object", suffix=".bin")
    go = Path(directory) / "go"
    while not go.exists():  # a barrier across processes: everyone starts when the file appears
        time.sleep(0.001)

    def build():
        with open(log, "a") as f:
            f.write(f"build {os.getpid()}\\n")
        time.sleep(0.3)  # long enough for the other process to reach the entry's lock
        return f"payload of {os.getpid()}".encode() * 1000

    def save(obj, path):
        if mode == "die":
            with open(path, "wb") as f:
                f.write(obj[: len(obj) // 2])
                f.flush()
            (Path(directory) / "half-written").touch()
            time.sleep(60)  # killed here, with half an object in the temporary file
        path.write_bytes(obj)

    obj = cache.fetch(key, load=Path.read_bytes, build=build, save=save)
    sys.stdout.write(obj[:40].decode())
    """
)


def _writer(tmp_path: Path, mode: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", WRITER, str(tmp_path / "entries"), "k1", mode, str(tmp_path / "log")],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_two_processes_writing_one_entry_build_it_once_and_agree(tmp_path):
    (tmp_path / "entries").mkdir()
    procs = [_writer(tmp_path, "ok") for _ in range(2)]
    time.sleep(0.2)
    (tmp_path / "entries" / "go").touch()
    outs = [p.communicate(timeout=60) for p in procs]
    assert all(p.returncode == 0 for p in procs), [err for _out, err in outs]
    builds = (tmp_path / "log").read_text().splitlines()
    assert len(builds) == 1, builds  # the second waited on the lock and loaded the first's entry
    assert outs[0][0] == outs[1][0] and outs[0][0].startswith("payload of ")
    assert _cache(tmp_path).lookup("k1") is not None


def test_a_writer_killed_mid_write_leaves_no_entry_and_no_lock(tmp_path):
    (tmp_path / "entries").mkdir()
    (tmp_path / "entries" / "go").touch()
    proc = _writer(tmp_path, "die")
    deadline = time.monotonic() + 60
    while not (tmp_path / "entries" / "half-written").exists():
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.01)
    os.kill(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    cache = _cache(tmp_path)
    assert cache.lookup("k1") is None  # the half-written temporary file was never published
    assert list((tmp_path / "entries").glob(".k1.bin.*.tmp*"))
    builds: list[bytes] = []
    assert _fetch(cache, "k1", b"whole", builds) == b"whole"  # the dead writer's lock is gone
    assert builds == [b"whole"] and cache.lookup("k1") is not None
    assert not list((tmp_path / "entries").glob(".k1.bin.*.tmp*"))  # its leftovers are swept


def test_keys_are_plain_file_names(tmp_path):
    with pytest.raises(ValueError, match="not a plain file name"):
        _cache(tmp_path).path("../escape")
    assert disk_cache.FORMAT == "pygraph-disk-cache"


# --- trust: who may write ----------------------------------------------------------------------------


@contextlib.contextmanager
def owned_by_another_user(*paths: Path):
    """``os.stat``/``os.lstat`` report ``paths`` as another uid's (a chown needs root); yields the uid."""
    other = os.geteuid() + 4242
    targets = {os.fspath(p) for p in paths}
    with pytest.MonkeyPatch.context() as mp:
        for name in ("stat", "lstat"):
            real = getattr(os, name)

            def fake(path, *args, _real=real, **kwargs):
                st = _real(path, *args, **kwargs)
                if isinstance(path, (str, os.PathLike)) and os.fspath(path) in targets:
                    fields = list(st)
                    fields[4] = other  # st_uid
                    return os.stat_result(fields)
                return st

            mp.setattr(os, name, fake)
        yield other


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_directories_it_creates_are_0700_whatever_the_umask(tmp_path, monkeypatch):
    monkeypatch.setenv(OWN_ENV, str(tmp_path / "a" / "b" / "kernels"))
    old = os.umask(0)
    try:
        assert cache_dir("kernels", OWN_ENV) == tmp_path / "a" / "b" / "kernels"
        monkeypatch.delenv(OWN_ENV)
        assert cache_dir("kernels", OWN_ENV) == tmp_path / "user-cache" / "pygraph" / "kernels"
    finally:
        os.umask(old)
    created = [tmp_path / "a", tmp_path / "a" / "b", tmp_path / "a" / "b" / "kernels"]
    created += [
        tmp_path / "user-cache",
        tmp_path / "user-cache" / "pygraph",
        tmp_path / "user-cache" / "pygraph" / "kernels",
    ]
    assert {str(p.relative_to(tmp_path)): oct(_mode(p)) for p in created} == {
        str(p.relative_to(tmp_path)): "0o700" for p in created
    }


@pytest.mark.parametrize(
    ("mode", "says"),
    [(0o777, "writable by group and others (mode 0o777)"), (0o770, "writable by group (mode 0o770)")],
    ids=["world-writable", "group-writable"],
)
def test_a_directory_others_can_write_is_not_used(tmp_path, monkeypatch, mode, says):
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(mode)
    monkeypatch.setenv(OWN_ENV, str(shared))
    with pytest.warns(CacheWarning) as caught:
        assert cache_dir("kernels", OWN_ENV) is None
    (message,) = [str(w.message) for w in caught]
    assert str(shared) in message and says in message and "native code" in message
    assert f"chmod 700 {shared}, or point {OWN_ENV} at a directory only you can write" in message
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert cache_dir("kernels", OWN_ENV) is None  # once per process
    assert _mode(shared) == mode  # left as it is: what is in it may already be someone else's


def test_a_directory_of_another_user_is_not_used(tmp_path, monkeypatch):
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    monkeypatch.setenv(OWN_ENV, str(theirs))
    with owned_by_another_user(theirs) as uid, pytest.warns(CacheWarning) as caught:
        assert cache_dir("kernels", OWN_ENV) is None
    (message,) = [str(w.message) for w in caught]
    assert f"{theirs} (from {OWN_ENV}={theirs}) cannot be used: it is owned by uid {uid}" in message
    assert f"not by this user (uid {os.geteuid()})" in message
    assert f"point {OWN_ENV} at a directory of your own" in message


def _symlinked(entry: Path, tmp_path: Path) -> None:
    """``entry`` replaced by a symlink to a copy of itself outside the cache."""
    elsewhere = tmp_path / "elsewhere.bin"
    elsewhere.write_bytes(entry.read_bytes())
    entry.unlink()
    entry.symlink_to(elsewhere)


@pytest.mark.parametrize(
    ("damage", "says"),
    [
        (lambda entry, tmp_path: _symlinked(entry, tmp_path), "it is a symlink"),
        (lambda entry, tmp_path: entry.chmod(0o666), "it is writable by group and others (mode 0o666)"),
        (
            lambda entry, tmp_path: entry.with_name("k1.bin.meta").chmod(0o620),
            "its sidecar is writable by group (mode 0o620)",
        ),
    ],
    ids=["symlink", "shared-entry", "shared-sidecar"],
)
def test_an_entry_someone_else_could_have_written_is_rebuilt_not_loaded(tmp_path, damage, says):
    cache, builds = _cache(tmp_path), []
    _fetch(cache, "k1", b"object-bytes", builds)
    entry = tmp_path / "entries" / "k1.bin"
    damage(entry, tmp_path)
    with pytest.warns(CacheWarning, match=re.escape(says)) as caught:
        assert _fetch(cache, "k1", b"object-bytes", builds) == b"object-bytes"
    assert len(caught) == 1 and str(entry) in str(caught[0].message)
    assert builds == [b"object-bytes"] * 2
    assert not entry.is_symlink() and _mode(entry) == 0o600 and cache.lookup("k1") == entry  # rebuilt, ours


def test_an_entry_of_another_user_is_rebuilt_not_loaded(tmp_path):
    cache, builds = _cache(tmp_path), []
    _fetch(cache, "k1", b"object-bytes", builds)
    entry = tmp_path / "entries" / "k1.bin"
    with owned_by_another_user(entry) as uid, pytest.warns(CacheWarning, match=f"it is owned by uid {uid}"):
        assert _fetch(cache, "k1", b"object-bytes", builds) == b"object-bytes"
    assert builds == [b"object-bytes"] * 2 and cache.lookup("k1") == entry


class _RefusingLock:
    """A FileLock whose acquire the system refuses, as open(2) does a lock file this user may not open."""

    def __init__(self, path, **kwargs):
        self.path = path

    def acquire(self):
        raise PermissionError(errno.EACCES, "Permission denied", self.path)


def _symlinked_lock(lock: Path, monkeypatch) -> contextlib.AbstractContextManager:
    lock.symlink_to(lock.parent.parent / "precious.txt")
    return contextlib.nullcontext()


def _foreign_lock(lock: Path, monkeypatch) -> contextlib.AbstractContextManager:
    lock.write_text("")
    lock.chmod(0o600)
    return owned_by_another_user(lock)


def _refused_lock(lock: Path, monkeypatch) -> contextlib.AbstractContextManager:
    import filelock

    monkeypatch.setattr(filelock, "FileLock", _RefusingLock)
    return contextlib.nullcontext()


@pytest.mark.parametrize(
    ("make", "says"),
    [
        (_symlinked_lock, "is a symlink"),
        (_foreign_lock, "is owned by uid"),
        (_refused_lock, "cannot be taken (PermissionError: Permission denied)"),
    ],
    ids=["symlink", "another-users", "eacces"],
)
def test_a_lock_that_cannot_be_taken_costs_the_cache_not_the_build(tmp_path, monkeypatch, make, says):
    precious = tmp_path / "precious.txt"
    precious.write_text("the user's own file")
    cache, builds = _cache(tmp_path), []
    cache.directory.mkdir()
    lock = tmp_path / "entries" / "k1.bin.lock"
    with make(lock, monkeypatch):
        with pytest.warns(CacheWarning) as caught:
            assert _fetch(cache, "k1", b"object-bytes", builds) == b"object-bytes"
        (message,) = [str(w.message) for w in caught]
        assert f"its lock {lock} {says}" in message and "built without the cache" in message
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            assert _fetch(cache, "k1", b"object-bytes", builds) == b"object-bytes"  # once per lock
    assert builds == [b"object-bytes"] * 2  # built each time: nothing stored past a lock not taken
    assert not (tmp_path / "entries" / "k1.bin").exists()
    assert precious.read_text() == "the user's own file"  # a symlinked lock truncated nothing


def test_a_lock_of_this_users_that_others_can_write_is_taken(tmp_path):
    cache, builds = _cache(tmp_path), []
    cache.directory.mkdir()
    lock = cache.directory / "k1.bin.lock"
    lock.write_text("")
    lock.chmod(0o666)  # an older filelock under umask 0; what a lock file holds is never read
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert _fetch(cache, "k1", b"object-bytes", builds) == b"object-bytes"
        assert _fetch(cache, "k1", b"never-built", builds) == b"object-bytes"
    assert builds == [b"object-bytes"] and cache.lookup("k1") is not None
