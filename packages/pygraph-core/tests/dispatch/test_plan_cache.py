"""The persistent plan cache: write, replay in a fresh process, a corrupt file, a foreign schema, two
processes writing at once, a writer killed mid-transaction, a damaged row, a path that is not a
regular file, a stale engine id or knob, an engine not offered here, off."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import sqlite3
import stat
import subprocess
import sys
import time
import warnings
from pathlib import Path

import pytest
from dispatch_helpers import ALPHA, BETA, BLOCK, GAMMA, RANKED, matmul_graph, standin_family

from pygraph.engines.manifest import EngineSlot
from pygraph.testing import manifest_override
from pygraph.tuning import PlanCache, PlanCacheWarning, plan_cache
from pygraph.tuning.graph_key import PlanKey, Uncacheable, plan_key, structure

STANDINS = Path(__file__).parent / "standins"


@pytest.fixture
def cache_file(tmp_path, monkeypatch):
    path = tmp_path / "cache" / "plans.sqlite"
    monkeypatch.setenv(plan_cache.CACHE_ENV, str(path))  # a path of its own: "reported once" is per path
    return path


def planned_names(**kw):
    g, *_ = matmul_graph(**kw)
    g.create_execution_plans()
    return [g.get_plan_name_at_index(i) for i in range(g.get_execution_plan_count())]


def record_for_graph(engine_id, knobs, plan_name="recorded"):
    """Record ``(engine_id, knobs)`` as the winner of `matmul_graph`'s graph."""
    g, *_ = matmul_graph()
    g.create_execution_plans()
    family = g._planner.prepare().family
    entry, why = plan_cache.record(g, family, engine_id, knobs, plan_name=plan_name, time_ms=1.0)
    assert why is None, why
    return entry


def test_a_recorded_winner_leads_the_next_plan_list(standins, cache_file):
    assert planned_names() == RANKED and not cache_file.exists()  # planning never creates the file
    entry = record_for_graph(BETA, {"TILE": 64}, "beta[TILE=64]")
    assert (entry.id, entry.family, entry.engine_id, dict(entry.knobs)) == (1, "standin", BETA, {"TILE": 64})
    assert entry.summary == "standin: matmul (A[1, 16, 32]:half, B[1, 32, 8]:half)"
    names = planned_names()
    assert names[0] == "beta[TILE=64]" and sorted(names) == sorted(RANKED)  # moved, nothing added or lost
    assert planned_names(name="renamed")[0] == "beta[TILE=64]"  # names are not part of the key


def test_replay_in_a_fresh_process(standins, cache_file):
    record_for_graph(ALPHA, {"TILE": 64}, "alpha[TILE=64]")
    code = (
        "import json\n"
        "from dispatch_helpers import matmul_graph, standin_family\n"
        "from pygraph.testing import manifest_override\n"
        "with manifest_override([standin_family()]):\n"
        "    g, *_ = matmul_graph()\n"
        "    g.create_execution_plans()\n"
        "    print(json.dumps([g.get_plan_name_at_index(i) for i in range(3)]))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(STANDINS), plan_cache.CACHE_ENV: str(cache_file)}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == ["alpha[TILE=64]", "alpha[TILE=128]", "beta[TILE=128]"]


def test_autotune_records_and_a_new_graph_replays(standins, cache_file):
    g, a, b, c = matmul_graph()
    fastest = {"gamma[TILE=64]": 0.5}
    result = g.autotune(
        {a: 1, b: 2, c: 3}, 0x9000, timer=lambda run, *, warmup, reps, plan: [fastest.get(plan.name, 2.0)]
    )
    assert result.best.name == "gamma[TILE=64]" and result.recorded.first_name == "alpha[TILE=128]"
    assert (result.recorded.time_ms, result.recorded.first_ms, result.recorded.reps) == (0.5, 2.0, 20)
    assert planned_names()[0] == "gamma[TILE=64]"


def test_a_corrupt_file_is_reported_once_and_ignored(standins, cache_file):
    cache_file.parent.mkdir(parents=True)
    garbage = b"this is not a database " * 100
    cache_file.write_bytes(garbage)
    with pytest.warns(PlanCacheWarning, match="not a SQLite database") as seen:
        assert planned_names() == RANKED
        assert planned_names() == RANKED
        g, *_ = matmul_graph()
        g.create_execution_plans()
        entry, why = plan_cache.record(g, g._planner.prepare().family, ALPHA, {"TILE": 64}, plan_name="x")
    assert len(seen) == 1 and str(cache_file) in str(seen[0].message)
    assert entry is None and "cannot be written" in why
    assert cache_file.read_bytes() == garbage  # never overwritten
    assert "not a SQLite database" in PlanCache(cache_file).problem()


def _foreign(path: Path, statements: list[str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with sqlite3.connect(path) as conn:
        for statement in statements:
            conn.execute(statement)
    conn.close()


@pytest.mark.parametrize(
    ("statements", "says"),
    [
        (
            ["CREATE TABLE users (name TEXT)", "INSERT INTO users VALUES ('ada')"],
            "a database of another program",
        ),
        (
            [
                "CREATE TABLE pygraph_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
                "CREATE TABLE pygraph_plans (id INTEGER PRIMARY KEY, key TEXT)",
                "INSERT INTO pygraph_meta VALUES ('schema', 'pygraph.plan_cache'), ('version', '2')",
            ],
            "schema version 2; this pygraph reads version 1",
        ),
    ],
    ids=["another-program", "newer-schema"],
)
def test_a_foreign_file_is_reported_once_and_left_alone(standins, cache_file, statements, says):
    _foreign(cache_file, statements)
    before = cache_file.read_bytes()
    with pytest.warns(PlanCacheWarning, match=says) as seen:
        assert planned_names() == RANKED
        g, *_ = matmul_graph()
        g.create_execution_plans()
        assert plan_cache.record(g, g._planner.prepare().family, ALPHA, None, plan_name="x")[0] is None
        assert PlanCache(cache_file).entries() == []
    assert len(seen) == 1
    assert cache_file.read_bytes() == before


_WRITER = """
import os, sys, time
from pygraph.tuning.graph_key import PlanKey
from pygraph.tuning.plan_cache import PlanCache
cache, me, start = PlanCache(sys.argv[1]), sys.argv[2], sys.argv[3]
open(start + "." + me, "w").close()  # ready
while not os.path.exists(start):  # every writer starts at once
    time.sleep(0.002)
for i in range(40):
    key = PlanKey(f"{me}-{i}", "g", "dev", {"pygraph-core": "0"}, "standin", f"writer {me} graph {i}")
    assert cache.record(key, 20900, {"TILE": 64}, plan_name=f"{me}/{i}") is not None
    shared = PlanKey("shared", "g", "dev", {}, "standin", "every writer's graph")
    assert cache.record(shared, 20900, {"TILE": 128}, plan_name=f"{me}/shared/{i}") is not None
    assert cache.lookup(key).plan_name == f"{me}/{i}"
"""


def test_processes_writing_at_once_lose_nothing(tmp_path):
    path, start = tmp_path / "plans.sqlite", tmp_path / "start"
    writers = [
        subprocess.Popen(
            [sys.executable, "-W", "error", "-c", _WRITER, str(path), f"w{n}", str(start)],
            stderr=subprocess.PIPE,
        )
        for n in range(4)
    ]
    deadline = time.monotonic() + 60
    while not all(Path(f"{start}.w{n}").exists() for n in range(4)) and time.monotonic() < deadline:
        time.sleep(0.01)
    start.touch()  # the file does not exist yet: the first writers race to create its tables
    for proc in writers:
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err.decode()
    entries = PlanCache(path).entries()
    assert {e.key for e in entries} == {f"w{n}-{i}" for n in range(4) for i in range(40)} | {"shared"}
    assert len(entries) == 161  # the shared key is one entry, replaced in place
    assert next(e for e in entries if e.key == "shared").plan_name.endswith("/shared/39")


# A writer that begins its transaction on the cache, writes (spilling pages into the file itself, so
# only the journal can undo them) and is SIGKILLed before it commits: it leaves a hot journal.
_KILLED_WRITER = """
import sys, time
from pygraph.tuning.plan_cache import PlanCache
with PlanCache(sys.argv[1])._open(write=True) as conn:
    conn.execute("PRAGMA cache_size = 1")
    conn.execute("UPDATE pygraph_plans SET plan_name = 'torn', knobs = 'torn'")
    for i in range(300):
        conn.execute(
            "INSERT INTO pygraph_plans (key, graph, summary, device, versions, engine_id, knobs, plan_name, "
            "recorded_at) VALUES (?, ?, 's', 'd', '{}', 1, '[]', 'p', 'now')",
            (f"killed-{i}", "x" * 4000),
        )
    open(sys.argv[2], "w").close()
    time.sleep(600)
"""

_READER = """
import json, sys
from pygraph.tuning.graph_key import PlanKey
from pygraph.tuning.plan_cache import PlanCache
cache = PlanCache(sys.argv[1])
found = cache.lookup("before")
key = PlanKey("after", "g", "dev", {}, "standin", "recorded after the kill")
recorded = cache.record(key, 20901, {"TILE": 64}, plan_name="after")
print(json.dumps([found.plan_name, dict(found.knobs), recorded.plan_name, [e.key for e in cache.entries()]]))
"""


def test_a_writer_killed_mid_commit_leaves_the_cache_usable(tmp_path):
    path, ready = tmp_path / "plans.sqlite", tmp_path / "ready"
    before = PlanKey("before", "g", "dev", {}, "standin", "recorded before the kill")
    assert PlanCache(path).record(before, 20900, {"TILE": 128}, plan_name="before") is not None
    writer = subprocess.Popen(
        [sys.executable, "-c", _KILLED_WRITER, str(path), str(ready)], stderr=subprocess.PIPE
    )
    deadline = time.monotonic() + 60
    while not ready.exists():
        assert writer.poll() is None and time.monotonic() < deadline, writer.communicate()
        time.sleep(0.01)
    os.kill(writer.pid, signal.SIGKILL)
    writer.communicate(timeout=30)
    assert writer.returncode == -signal.SIGKILL
    journal = tmp_path / "plans.sqlite-journal"
    assert journal.stat().st_size > 0
    read_only = contextlib.closing(sqlite3.connect(f"{path.as_uri()}?mode=ro", uri=True))
    with read_only as conn, pytest.raises(sqlite3.OperationalError) as hot:  # the journal is hot:
        conn.execute("SELECT count(*) FROM pygraph_plans")  # a read-only open cannot roll it back
    assert hot.value.sqlite_errorname == "SQLITE_READONLY_ROLLBACK"
    reader = subprocess.run(
        [sys.executable, "-W", "error", "-c", _READER, str(path)], capture_output=True, text=True, timeout=120
    )  # a fresh process, in which any warning is an error
    assert reader.returncode == 0, reader.stderr
    assert json.loads(reader.stdout) == ["before", {"TILE": 128}, "after", ["before", "after"]]
    assert not journal.exists()  # rolled back: nothing the killed writer wrote survives


def _damage(path: Path, assignment: str) -> None:
    with contextlib.closing(sqlite3.connect(path)) as conn, conn:
        conn.execute(f"UPDATE pygraph_plans SET {assignment} WHERE id = 1")


@pytest.mark.parametrize(
    ("assignment", "says"),
    [
        ("""knobs = '[["TILE", 64'""", "knobs is not JSON"),
        ("versions = 'pygraph-core 0.1'", "versions is not JSON"),
        ("""knobs = '{"TILE": 64}'""", """knobs is dict {'TILE': 64}, not a list of [name, value] pairs"""),
        ("""knobs = '[["TILE", [64]]]'""", "not a list of [name, value] pairs"),
        ("versions = '[1]'", "versions is list [1], not an object of version strings"),
        ("engine_id = 'beta'", "engine_id is str 'beta', not an integer"),
        ("time_ms = 'fast'", "time_ms is str 'fast', not a number or NULL"),
        ("first_name = x'41'", "first_name is bytes b'A', not text or NULL"),
        ("knobs = x'00ff'", "knobs is bytes b'\\x00\\xff', not text"),
    ],
    ids=[
        "knobs-json", "versions-json", "knobs-object", "knob-value-list", "versions-list", "engine-id-text",
        "time-text", "name-blob", "knobs-blob",
    ],
)  # fmt: skip
def test_a_damaged_row_is_skipped_with_one_warning_naming_it(standins, cache_file, assignment, says):
    record_for_graph(BETA, {"TILE": 64}, "beta[TILE=64]")  # entry 1: this graph's
    other = PlanKey("other", "g", "dev", {}, "standin", "another graph")
    PlanCache(cache_file).record(other, ALPHA, {"TILE": 64}, plan_name="kept")  # entry 2
    _damage(cache_file, assignment)
    with pytest.warns(PlanCacheWarning) as seen:
        assert planned_names() == RANKED  # the damaged winner is not replayed, and planning goes on
        assert planned_names() == RANKED
        assert [e.plan_name for e in PlanCache(cache_file).entries()] == ["kept"]  # what is readable
    (message,) = [str(w.message) for w in seen]
    assert message.startswith(f"plan cache {cache_file}: entry 1 (key '")
    assert re.search(re.escape(says), message) and "is skipped" in message
    record_for_graph(GAMMA, {"TILE": 64}, "gamma[TILE=64]")  # recording the graph again mends the row
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert planned_names()[0] == "gamma[TILE=64]"
        assert [e.plan_name for e in PlanCache(cache_file).entries()] == ["gamma[TILE=64]", "kept"]


def _listing(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


def test_dev_null_is_not_used_and_nothing_is_created_beside_it(standins, monkeypatch):
    monkeypatch.setenv(plan_cache.CACHE_ENV, os.devnull)
    beside = lambda: [n for n in _listing(Path(os.devnull).parent) if n.startswith(Path(os.devnull).name)]  # noqa: E731
    before = beside()
    g, a, b, c = matmul_graph()
    with pytest.warns(PlanCacheWarning) as seen:
        result = g.autotune({a: 1, b: 2, c: 3}, 0x9000, timer=lambda run, **kw: [1.0])
        assert planned_names() == RANKED
    (message,) = [str(w.message) for w in seen]
    assert f"plan cache {os.devnull}: is not a regular file (it is a character device)" in message
    assert result.recorded is None and "is not a regular file" in result.not_recorded
    assert PlanCache(os.devnull).problem() == "is not a regular file (it is a character device)"
    assert beside() == before == ["null"]  # no journal beside the device


def test_a_directory_where_the_file_would_be_is_not_used_and_nothing_is_created(
    standins, tmp_path, monkeypatch
):
    folder = tmp_path / "cache"
    (folder / "plans.sqlite").mkdir(parents=True)  # PYGRAPH_PLAN_CACHE=<folder>: <folder>/plans.sqlite
    monkeypatch.setenv(plan_cache.CACHE_ENV, str(folder))
    g, a, b, c = matmul_graph()
    with pytest.warns(PlanCacheWarning, match=r"is not a regular file \(it is a directory\)") as seen:
        result = g.autotune({a: 1, b: 2, c: 3}, 0x9000, timer=lambda run, **kw: [1.0])
    assert len(seen) == 1 and result.recorded is None
    assert _listing(tmp_path) == ["cache"] and _listing(folder) == ["plans.sqlite"]
    assert _listing(folder / "plans.sqlite") == []
    assert PlanCache(folder / "plans.sqlite").problem() == "is not a regular file (it is a directory)"


def test_the_folders_it_creates_are_0700_whatever_the_umask(standins, tmp_path, monkeypatch):
    path = tmp_path / "a" / "b" / "plans.sqlite"
    monkeypatch.setenv(plan_cache.CACHE_ENV, str(path))
    old = os.umask(0)
    try:
        record_for_graph(BETA, {"TILE": 64})
    finally:
        os.umask(old)
    assert [oct(stat.S_IMODE(p.stat().st_mode)) for p in (tmp_path / "a", tmp_path / "a" / "b")] == [
        "0o700"
    ] * 2


@pytest.mark.parametrize(
    ("engine_id", "knobs", "says"),
    [
        (BLOCK + 50, {"TILE": 64}, "names no declared slot"),
        (ALPHA, {"TILE": 999}, "knob TILE=999 is outside engine alpha's domain"),
        (ALPHA, {"WARPS": 4}, "engine alpha has no knob 'WARPS'"),
        (-7, {}, "engine id -7 names no plan kind"),
    ],
    ids=["no-such-slot", "knob-value-gone", "knob-name-gone", "no-such-id"],
)
def test_an_entry_that_names_no_plan_is_dropped_with_a_notice(standins, cache_file, engine_id, knobs, says):
    entry = record_for_graph(engine_id, knobs)
    with pytest.warns(PlanCacheWarning, match=f"dropped entry {entry.id} .*{says}"):
        assert planned_names() == RANKED
    assert PlanCache(cache_file).entries() == []
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert planned_names() == RANKED  # gone: no second notice


def test_a_recorded_config_ranking_did_not_list_is_replayed_first(cache_file):
    with manifest_override([standin_family(heuristics=False)]):  # unranked: each engine's default
        assert planned_names() == ["alpha[TILE=128]", "beta[TILE=128]", "gamma[TILE=128]"]
        record_for_graph(BETA, {"TILE": 64})
        assert planned_names() == ["beta[TILE=64]", "alpha[TILE=128]", "beta[TILE=128]", "gamma[TILE=128]"]
        g, *_ = matmul_graph()
        g.deselect_engines(["beta"])
        g.create_execution_plans()
        assert g.get_plan_name_at_index(0) == "alpha[TILE=128]"  # a deselected engine stays out


def test_an_engine_not_offered_here_or_disabled_keeps_its_entry(cache_file, monkeypatch):
    family = standin_family(
        alpha=EngineSlot(0, impl=("pygraph_standins", "Alpha")),
        beta=EngineSlot(1, impl=("pygraph_standins", "Beta"), opt_in=True),
    )
    with manifest_override([family]):
        monkeypatch.setenv("PYGRAPH_ENABLE_OPT_IN_ENGINES", "beta")
        record_for_graph(BETA, {"TILE": 64})
        assert planned_names()[0] == "beta[TILE=64]"
        monkeypatch.delenv("PYGRAPH_ENABLE_OPT_IN_ENGINES")
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            assert planned_names() == ["alpha[TILE=128]", "alpha[TILE=64]"]
        assert len(PlanCache(cache_file).entries()) == 1  # kept: the engine still exists
        monkeypatch.setenv("PYGRAPH_ENABLE_OPT_IN_ENGINES", "beta")
        monkeypatch.setenv("PYGRAPH_DISABLE_ENGINES", "beta")  # disabled: as if not offered
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            assert planned_names() == ["alpha[TILE=128]", "alpha[TILE=64]"]
        assert len(PlanCache(cache_file).entries()) == 1


def test_off_records_nothing_and_reads_nothing(standins, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv(plan_cache.CACHE_ENV, "OFF")
    assert plan_cache.cache_path() is None and plan_cache.active_cache() is None
    g, a, b, c = matmul_graph()
    result = g.autotune({a: 1, b: 2, c: 3}, 0x9000, timer=lambda run, **kw: [1.0])
    assert result.recorded is None and "the plan cache is off" in result.not_recorded
    assert list(tmp_path.iterdir()) == []


def test_where_the_cache_lives(tmp_path, monkeypatch):
    monkeypatch.setenv(plan_cache.CACHE_ENV, str(tmp_path))
    assert plan_cache.cache_path() == tmp_path / "plans.sqlite"  # a folder holds plans.sqlite
    monkeypatch.setenv(plan_cache.CACHE_ENV, str(tmp_path / "mine.db"))
    assert plan_cache.cache_path() == tmp_path / "mine.db"
    monkeypatch.setenv(plan_cache.CACHE_ENV, "")
    monkeypatch.setenv("PYGRAPH_CACHE_DIR", str(tmp_path / "root"))
    assert plan_cache.cache_path() == tmp_path / "root" / "plans.sqlite"  # every disk cache's root
    monkeypatch.setenv("PYGRAPH_CACHE_DIR", "off")
    assert plan_cache.cache_path() is None
    monkeypatch.delenv("PYGRAPH_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert plan_cache.cache_path() == tmp_path / "xdg" / "pygraph" / "plans.sqlite"  # platformdirs


def test_entries_are_listed_found_and_cleared(tmp_path):
    cache = PlanCache(tmp_path / "plans.sqlite")
    assert cache.entries() == [] and cache.clear() == 0 and not cache.path.exists()
    key = PlanKey(
        "ab" * 32, "g", "NVIDIA H200|sm90|132 SMs", {"pygraph-core": "0.1.0"}, "gemm", "gemm: matmul"
    )
    entry = cache.record(
        key, 20400, {"TILE_M": 128, "SWAP_AB": False, "RASTER": "m"}, plan_name="p", time_ms=2.5
    )
    assert dict(entry.knobs) == {"RASTER": "m", "SWAP_AB": False, "TILE_M": 128}  # types survive
    assert cache.get(entry.id) == entry == cache.get("abab" * 3) == cache.lookup(key)
    assert cache.get(99) is None and cache.problem() is None
    assert entry.to_dict()["versions"] == {"pygraph-core": "0.1.0"}
    assert cache.clear() == 1 and cache.entries() == []


# --- the key -----------------------------------------------------------------------------------------


def _key(graph):
    graph.create_execution_plans()
    return plan_key(graph, graph._planner.prepare().family, device=None)


def test_the_key_is_the_problem_not_the_names(standins):
    from pygraph.ir.dtypes import data_type

    base = _key(matmul_graph()[0])
    assert _key(matmul_graph(name="other")[0]).digest == base.digest
    assert base.device == "no CUDA device" and base.versions["pygraph-core"]
    assert base.family == "standin"

    from pygraph.graph import Graph

    def variant(dim_b=(1, 32, 8), stride_b=(256, 8, 1), dtype=data_type.HALF):
        g = Graph(name="mm", io_data_type=data_type.HALF, compute_data_type=data_type.FLOAT)
        a = g.tensor(name="A", dim=[1, 16, 32], stride=[512, 32, 1], data_type=data_type.HALF)
        b = g.tensor(name="B", dim=list(dim_b), stride=list(stride_b), data_type=dtype)
        g.matmul(a, b, name="mm").set_output(True).set_data_type(data_type.HALF)
        return _key(g).digest

    assert variant() == base.digest
    assert variant(dim_b=(1, 32, 16), stride_b=(512, 16, 1)) != base.digest  # shape
    assert variant(stride_b=(256, 1, 32)) != base.digest  # strides
    assert variant(dtype=data_type.BFLOAT16) != base.digest  # dtype


def test_the_key_holds_the_device_and_the_versions(standins):
    from pygraph.tuning.device import CudaDevice

    g = matmul_graph()[0]
    g.create_execution_plans()
    family = g._planner.prepare().family
    h200 = plan_key(g, family, device=CudaDevice("NVIDIA H200", 90, 132))
    other = plan_key(g, family, device=CudaDevice("NVIDIA H100", 90, 132))
    assert h200.device == "NVIDIA H200|sm90|132 SMs" and h200.digest != other.digest
    assert h200.graph == other.graph  # the same problem
    assert set(h200.versions) == {"pygraph-core", "pygraph_standins"}


def test_a_graph_with_a_callable_attribute_has_no_key():
    from pygraph.graph import Graph
    from pygraph.ir.dtypes import data_type

    g = Graph(name="attn", io_data_type=data_type.HALF, compute_data_type=data_type.FLOAT)
    q, k, v = (g.tensor(name=n, dim=[1, 2, 64, 64], data_type=data_type.HALF) for n in "qkv")
    o, _ = g.sdpa(q=q, k=k, v=v, attn_scale=0.125, generate_stats=False, score_mod=lambda *a: a, name="attn")
    o.set_output(True)
    with pytest.raises(Uncacheable, match="node 'attn' \\(sdpa\\) has a non-data attribute"):
        structure(g)


def test_knobs_json_cannot_hold_are_not_recorded(standins, cache_file):
    g, *_ = matmul_graph()
    g.create_execution_plans()
    entry, why = plan_cache.record(g, g._planner.prepare().family, ALPHA, {"TILE": object()}, plan_name="x")
    assert entry is None and "are not plain data" in why
    assert PlanCache(cache_file).entries() == []
