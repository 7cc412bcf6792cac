"""Every `pygraph` command against the stand-in family (through the manifest override), in process:
what each prints, that --json parses, the exit codes; bench and autotune time on a host stand-in
for the GPU session."""

from __future__ import annotations

import json

import pytest
from dispatch_helpers import BETA

from pygraph import cli
from pygraph.tuning import PlanCache, plan_cache

GEMM = ["gemm", "--shape", "16,8,32", "--dtype", "fp16"]  # the stand-ins anchor on MATMUL


class HostSession:
    """The GPU session's stand-in: bare addresses for operands, a timer reading a table."""

    device = "host stand-in"

    def __init__(self, times):
        self.times = times
        self.timer = self._time

    def _time(self, run, *, warmup, reps, plan):
        run()
        return [self.times.get(plan.name, 4.0)] * reps

    def attach(self, graph):
        self.attached = graph.name

    def operands(self, graph):
        return {t: 0x1000 * (i + 1) for i, t in enumerate(graph.engine_request().layout.tensors)}

    def workspace(self):
        return lambda nbytes: 0x9000


@pytest.fixture
def run(capsys):
    def invoke(*argv):
        code = cli.main(list(argv))
        out, err = capsys.readouterr()
        return code, out, err

    return invoke


@pytest.fixture
def host(monkeypatch, tmp_path):
    monkeypatch.setenv(plan_cache.CACHE_ENV, str(tmp_path / "plans.sqlite"))
    session = HostSession({"beta[TILE=64]": 1.0, "alpha[TILE=128]": 2.0, "eng7": 3.0})
    monkeypatch.setattr(cli, "gpu_session", lambda call: session)
    return session


def test_info_names_the_standin_family_and_its_engines(standins, run):
    code, out, _ = run("info")
    assert code == 0 and "device: no GPU" in out
    assert "standin" in out and "alpha" in out and "offered" in out and "SM80-SM120" in out
    code, out, _ = run("info", "--json")
    data = json.loads(out)
    assert data["device"] is None and data["device_reason"]
    (fam,) = data["families"]
    assert fam["name"] == "standin" and fam["block"] == [20900, 20999]
    assert [(e["name"], e["status"], e["arch"]) for e in fam["engines"]] == [
        ("alpha", "offered", "SM80-SM120"),
        ("beta", "offered", "SM80-SM120"),
        ("gamma", "offered", "SM80-SM120"),
    ]


def test_info_and_demo_say_an_engine_whose_dsl_is_absent_is_unavailable_and_how_to_install_it(
    standins, run, monkeypatch
):
    import types

    # gamma's kernels need a module this installation lacks (a DSL not installed)
    monkeypatch.setattr(
        standins.Gamma,
        "requires",
        types.MappingProxyType({"no_such_dsl.sub": "NoSuchDSL (pip install no-such-dsl)"}),
    )
    code, out, _ = run("info", "--json")
    assert code == 0
    ((*_, gamma),) = [fam["engines"] for fam in json.loads(out)["families"]]
    assert gamma == {
        "name": "gamma", "id": gamma["id"], "arch": "SM80-SM120", "status": "unavailable",
        "reason": "needs NoSuchDSL (pip install no-such-dsl)",
    }  # fmt: skip
    code, out, _ = run("info")
    assert code == 0 and "unavailable" in out and "needs NoSuchDSL (pip install no-such-dsl)" in out
    code, out, _ = run("demo")
    assert code == 0 and "engines offered: alpha=20900, beta=20901\n" in out
    assert "    unavailable here:\n      gamma: needs NoSuchDSL (pip install no-such-dsl)\n" in out


def test_info_says_which_slots_are_planned_and_which_opt_in(run, monkeypatch):
    from pygraph.engines.manifest import EngineFamily, EngineSlot
    from pygraph.environment import OPT_IN_ENV
    from pygraph.testing import manifest_override

    monkeypatch.delenv(OPT_IN_ENV, raising=False)
    slots = {
        "later": EngineSlot(0, planned="its kernels are not written yet"),
        "opted": EngineSlot(1, impl=("pygraph.engines.base", "BaseEngine"), opt_in=True),
    }
    with manifest_override([EngineFamily("slots", 29000, "pygraph", slots, ("MATMUL",))]):
        code, out, _ = run("info", "--json")
    assert code == 0
    ((later, opted),) = [fam["engines"] for fam in json.loads(out)["families"]]
    assert (later["status"], later["reason"]) == ("planned", "its kernels are not written yet")
    assert opted["status"] == "opt-in" and OPT_IN_ENV in opted["reason"]


def test_info_and_explain_say_which_engines_are_disabled(standins, run, monkeypatch):
    from pygraph.environment import DISABLE_ENV

    monkeypatch.setenv(DISABLE_ENV, "beta")
    code, out, _ = run("info")
    assert code == 0 and f"disabled engines ({DISABLE_ENV}): beta" in out
    code, out, _ = run("info", "--json")
    data = json.loads(out)
    assert data["disabled"] == {"env": DISABLE_ENV, "value": "beta"}
    ((alpha, beta, _),) = [fam["engines"] for fam in data["families"]]
    assert alpha["status"] == "offered" and beta["status"] == "disabled" and DISABLE_ENV in beta["reason"]
    code, out, _ = run("explain", *GEMM, "--json", "--all")
    data = json.loads(out)
    assert ("beta", "declines", f"disabled by {DISABLE_ENV}") in [
        (c["name"], c["verdict"], c["reason"]) for c in data["candidates"]
    ]
    assert not any(p["name"].startswith("beta[") for p in data["plans"])


def test_families_prints_the_overridden_manifest(standins, run):
    code, out, _ = run("families")
    assert code == 0 and "EngineFamily(" not in out  # a table, not reprs
    rows = [[cell.strip() for cell in line.split("│")[1:-1]] for line in out.splitlines() if "│" in line]
    assert rows[0][:5] == ["standin", "20900-20999", "alpha", "20900", "default-on"], rows
    code, out, _ = run("families", "--json")
    assert [row["name"] for row in json.loads(out)] == ["standin"]


def test_explain_shows_family_facts_candidates_backend_and_plans(standins, run):
    standins.BEHAVIOUR["gamma"] = "decline"
    code, out, _ = run("explain", *GEMM, "--head", "2")
    assert code == 0
    assert "gemm (B,M,N,K = 1,16,8,32, half): mm (matmul)" in out
    assert "family: standin" in out and "node_count" in out  # the stand-in analyzer's one fact
    assert "gamma: told to decline" in out
    assert "backend: declined:" in out
    assert "plan list: 4 entries, the first 2 (--all for all)" in out
    assert "  [0] python 20900: alpha[TILE=128]\n  [1] python 20901: beta[TILE=128]\n" in out
    code, out, _ = run("explain", *GEMM, "--json", "--all")
    data = json.loads(out)
    assert data["family"] == "standin" and data["facts"] == {"node_count": 1}
    assert [(c["name"], c["verdict"]) for c in data["candidates"]] == [
        ("alpha", "accepts"),
        ("beta", "accepts"),
        ("gamma", "declines"),
    ]
    assert data["plan_count"] == 4 and [p["name"] for p in data["plans"]][-1] == "beta[TILE=64]"


def test_explain_lists_the_backends_entries_per_mode(standins, fake_backend, run):
    fake_backend({"A": [(7, {}), (8, {})], "FALLBACK": [(10, {})]})
    code, out, _ = run("explain", *GEMM, "--json")
    backend = json.loads(out)["backend"]
    assert code == 0 and backend["declined"] is None
    assert backend["entries"] == {"A": ["eng7", "eng8"], "FALLBACK": ["eng10"]}
    fake_backend({"A": [(7, {})]})  # a fresh backend per graph: the stand-in keeps one list
    code, out, _ = run("explain", *GEMM, "--mode", "opensource", "--json")
    assert json.loads(out)["backend"]["modes"] == ["OPENSOURCE"]


def test_explain_of_a_graph_nothing_serves_says_who_declined(standins, run):
    for name in ("alpha", "beta", "gamma"):
        standins.BEHAVIOUR[name] = "decline"
    code, out, _ = run("explain", *GEMM)
    assert code == 0 and "no plan: no plan serves graph 'gemm'" in out and "alpha: told to decline" in out


def test_explain_reads_a_serialized_graph_file(standins, run, tmp_path):
    from dispatch_helpers import matmul_graph

    g, *_ = matmul_graph()
    path = tmp_path / "saved.json"
    path.write_text(repr(g))  # the indented JSON the graph prints
    code, out, _ = run("explain", str(path), "--json")
    assert code == 0 and json.loads(out)["plan_count"] == 6
    assert json.loads(out)["graph"]["name"] == g.name != path.stem  # the file's graph, by its own name
    code, out, _ = run("explain", str(path))
    assert code == 0 and out.startswith(f"graph {g.name!r}: ")
    code, _, err = run("explain", str(path), "--shape", "1,2,3")
    assert code == 2 and "apply to the built-in examples" in err


def _mm_payload(change) -> bytes:
    from dispatch_helpers import matmul_graph

    from pygraph.ir import serialize

    data = json.loads(serialize.dumps(matmul_graph()[0]))
    change(data)
    return json.dumps(data, indent=2).encode()  # as repr(graph) prints it


MALFORMED = {
    "missing-port": (
        lambda: _mm_payload(lambda d: d["nodes"][0]["inputs"].pop("B")),
        "$.nodes[0]: node 'mm': matmul(): missing required port 'B'",
    ),
    "list-in-port": (
        lambda: _mm_payload(lambda d: d["nodes"][0]["inputs"].update(A=[1, 2])),
        "matmul(): port 'A' expects a pygraph.Tensor",
    ),
    "attribute-kind": (
        lambda: _mm_payload(lambda d: d["nodes"][0]["params"].update(padding=[0.0])),
        "attribute 'padding' got (0.0,)",
    ),
    "extent-int64": (
        lambda: _mm_payload(lambda d: d["tensors"][1]["dim"].__setitem__(0, 2**64)),
        "$.tensors[1].dim[0]: 18446744073709551616 does not fit int64",
    ),
    "deep-nesting": (
        lambda: b'{"format": "pygraph_ir", "nodes": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
        "nests its JSON too deeply",
    ),
    "truncated": (lambda: _mm_payload(lambda d: None)[:200], "not whole JSON"),
    "not-json": (lambda: b"\x00\x01 garbage", "is not pygraph IR"),
}


@pytest.mark.parametrize("case", list(MALFORMED))
def test_a_malformed_graph_file_is_one_line_naming_it_and_exit_2(standins, run, tmp_path, case):
    payload, says = MALFORMED[case]
    path = tmp_path / f"{case}.json"
    path.write_bytes(payload())
    code, out, err = run("explain", str(path))
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith(
        f"pygraph: error: graph file {str(path)!r}: deserialize(): "
    )
    assert says in err, err


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["explain", "nosuch"], "neither a built-in example (gemm, gemm-bias-gelu, sdpa"),
        (["explain", "gemm", "--shape", "1,2"], "--shape takes [B,]M,N,K, got 1,2"),
        (["explain", "gemm", "--shape", "a,b,c"], "is not a comma-separated list"),
        (["explain", "gemm", "--dtype", "int3"], "--dtype: 'int3' is not one of bf16"),
        (["demo", "--family", "nosuch"], "no such family; the manifest has standin"),
        (["cache", "show", "42"], "has no entry '42'"),
        (["explain"], "Missing argument 'TARGET'"),
    ],
)
def test_usage_errors_exit_2_and_say_why(standins, run, host, argv, says):
    code, out, err = run(*argv)
    assert code == 2 and says in err and out == ""


def test_bench_times_the_head_and_compares_with_the_backend(standins, fake_backend, host, run):
    fake_backend({"A": [(7, {})]})
    code, out, _ = run("bench", *GEMM, "--top", "2", "--reps", "3")
    assert code == 0 and "bench gemm (B,M,N,K = 1,16,8,32, half) on host stand-in" in out
    fake_backend({"A": [(7, {})]})  # a fresh backend per graph: the stand-in keeps one list
    code, out, _ = run("bench", *GEMM, "--top", "2", "--json")
    data = json.loads(out)
    rows = {r["name"]: r for r in data["trials"]}
    assert list(rows) == ["alpha[TILE=128]", "beta[TILE=128]", "eng7"]
    assert rows["alpha[TILE=128]"]["vs_anchor"] == pytest.approx(1.5)  # the backend's 3 ms over 2 ms
    assert rows["alpha[TILE=128]"]["tflops"] == pytest.approx(2 * 16 * 8 * 32 / 2e-3 / 1e12)
    assert data["backend_anchor"] == rows["eng7"]["index"]


def test_autotune_records_the_winner_and_cache_commands_show_it(standins, host, run):
    code, out, _ = run("autotune", *GEMM, "--top", "2")
    assert host.attached == "gemm"  # the graph got the session's handle before it was planned
    assert code == 0 and "winner: beta[TILE=64] (#4), 1.0000 ms, 2.000x the list's first plan" in out
    assert "recorded as plan cache entry 1" in out
    code, out, _ = run("autotune", *GEMM, "--json", "--no-record")
    data = json.loads(out)
    assert data["best"]["engine_id"] == BETA and data["not_recorded"] == "record=False"
    code, out, _ = run("cache", "list")
    assert code == 0 and "beta[TILE=64]" in out and "2.000x" in out
    code, out, _ = run("cache", "list", "--json")
    (entry,) = json.loads(out)["entries"]
    assert entry["knobs"] == {"TILE": 64} and entry["device"] == "no CUDA device"
    code, out, _ = run("cache", "show", str(entry["id"]), "--json")
    assert json.loads(out)["plan_name"] == "beta[TILE=64]"
    code, out, _ = run("explain", *GEMM)
    assert "plan cache: entry 1 recorded beta[TILE=64] for this graph: it leads the list" in out
    assert "  [0] python 20901: beta[TILE=64]" in out
    code, out, _ = run("cache", "clear", "--json")
    assert json.loads(out)["removed"] == 1 and PlanCache(host_cache()).entries() == []


def host_cache():
    return plan_cache.cache_path()


def test_autotune_when_nothing_builds_exits_1(standins, host, run):
    for name in ("alpha", "beta", "gamma"):
        standins.BEHAVIOUR[name] = "decline_build"
    code, _, err = run("autotune", *GEMM)
    assert code == 1 and "no plan of graph 'gemm' could be timed" in err


def test_bench_and_autotune_without_a_gpu_say_so(standins, run):
    for command in ("bench", "autotune"):
        code, out, err = run(command, *GEMM)
        assert code == 1 and out == ""
        assert f"pygraph {command} times plans on a CUDA GPU" in err and "`pygraph explain`" in err


def test_cache_commands_on_a_corrupt_file_exit_1(run, tmp_path, monkeypatch):
    path = tmp_path / "plans.sqlite"
    path.write_bytes(b"garbage" * 200)
    monkeypatch.setenv(plan_cache.CACHE_ENV, str(path))
    code, out, err = run("cache", "list")
    assert out == ""
    assert code == 1 and "not a SQLite database" in err and "remove or move the file" in err
    monkeypatch.setenv(plan_cache.CACHE_ENV, "off")
    code, _, err = run("cache", "clear")
    assert code == 1 and "the plan cache is off" in err


def test_cache_list_and_info_on_a_damaged_cache_list_what_is_readable(run, tmp_path, monkeypatch):
    import sqlite3
    import warnings

    from pygraph.tuning.graph_key import PlanKey

    path = tmp_path / "plans.sqlite"
    monkeypatch.setenv(plan_cache.CACHE_ENV, str(path))
    for name in ("damaged", "kept"):
        PlanCache(path).record(
            PlanKey(name, "g", "dev", {}, "standin", name), BETA, {"TILE": 64}, plan_name=name
        )
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE pygraph_plans SET knobs = 'not json', engine_id = 'x' WHERE key = 'damaged'")
    conn.close()
    with warnings.catch_warnings():
        warnings.simplefilter("always")  # what a user sees: the command's one warning line per row
        listed = run("cache", "list")
        as_json = run("cache", "list", "--json")
        info = run("info")
    code, out, err = listed
    assert code == 0 and "kept" in out and "damaged" not in out
    assert err.startswith(f"pygraph: warning: plan cache {path}: entry 1 (key 'damaged') is damaged: ")
    assert err.count("pygraph: warning:") == 1 and "Traceback" not in err
    code, out, err = as_json
    assert code == 0 and [e["key"] for e in json.loads(out)["entries"]] == ["kept"] and "Traceback" not in err
    code, out, err = info
    assert code == 0 and f"plan cache: {path} (1 entries)" in out and "Traceback" not in err


@pytest.mark.parametrize("target", ["device", "directory"])
def test_cache_commands_on_a_path_that_is_not_a_file_exit_1_and_create_nothing(
    run, tmp_path, monkeypatch, target
):
    import os

    if target == "device":
        path, kind = os.devnull, "a character device"
        monkeypatch.setenv(plan_cache.CACHE_ENV, path)
    else:  # the folder PYGRAPH_PLAN_CACHE names holds a directory where plans.sqlite would be
        path, kind = tmp_path / "cache" / "plans.sqlite", "a directory"
        path.mkdir(parents=True)
        monkeypatch.setenv(plan_cache.CACHE_ENV, str(path.parent))
    code, out, err = run("cache", "list")
    assert (code, out) == (1, "") and f"plan cache {path}: is not a regular file (it is {kind})" in err
    assert "point PYGRAPH_PLAN_CACHE at a file, or at a folder to hold plans.sqlite" in err
    code, out, err = run("info")
    assert code == 0 and f"not usable: is not a regular file (it is {kind})" in out and "Traceback" not in err
    code, out, err = run("cache", "clear")
    assert code == 1 and "is not a regular file" in err
    assert not os.path.lexists(f"{path}-journal")


def test_demo_walks_the_standin_family(standins, run):
    code, out, _ = run("demo")
    assert code == 0
    assert out.startswith("family standin (block 20900, anchors MATMUL)\n    engines offered: alpha=20900")
    assert "no example graph for this family yet" in out  # the demo's examples are the real families'
    code, out, _ = run("demo", "--json")
    assert [r["family"] for r in json.loads(out)] == ["standin"]


def test_version_and_help(run):
    code, out, _ = run("--version")
    assert code == 0 and out.strip() == f"pygraph {cli.__version__}"
    code, out, _ = run("--help")
    assert code == 0 and all(c in out for c in ("info", "explain", "bench", "autotune", "cache", "demo"))
    code, out, _ = run("explain", "--help")
    assert code == 0 and "gdn2 (T,H,D[,N])" in " ".join(out.split())


def _dumping_cudnn(monkeypatch) -> str:
    """cuDNN on a machine without a GPU, as the planner meets it: every query a 44-line dump."""
    from dispatch_helpers import FakeBackend

    from pygraph.errors import GraphNotSupportedError
    from pygraph.planning import backend as backend_mod
    from pygraph.tuning import device

    dump = "\n".join(
        f"engine {i}: CUDNN_STATUS_NOT_SUPPORTED_RUNTIME_PREREQUISITE_MISSING" for i in range(44)
    )

    class Dumping(FakeBackend):
        def create_execution_plans(self, modes):
            raise GraphNotSupportedError(dump)

    monkeypatch.setattr(device, "no_device_reason", lambda: "no CUDA driver (libcuda.so.1: not found)")
    monkeypatch.setattr(
        backend_mod,
        "open_backend",
        lambda graph, refused=None: (
            backend_mod.BackendSource(Dumping({}), lambda m: m, is_cudnn=True),
            None,
        ),
    )
    return "backend: declined: cuDNN backend unavailable: no CUDA driver (libcuda.so.1: not found)\n"


def test_explain_prints_cudnns_refusal_in_one_line_and_whole_on_verbose(standins, run, monkeypatch):
    line = _dumping_cudnn(monkeypatch)
    code, out, _ = run("explain", *GEMM)
    assert code == 0 and line in out and "CUDNN_STATUS" not in out
    code, out, _ = run("explain", *GEMM, "--verbose")
    assert code == 0 and out.count("CUDNN_STATUS_NOT_SUPPORTED_RUNTIME_PREREQUISITE_MISSING") == 44
    code, out, _ = run("explain", *GEMM, "--json")
    backend = json.loads(out)["backend"]
    assert backend["declined"] == line.removeprefix("backend: declined: ").strip()
    assert backend["detail"].count("CUDNN_STATUS") == 44


def test_demo_prints_cudnns_refusal_in_one_line_and_whole_on_verbose(run, monkeypatch):
    line = _dumping_cudnn(monkeypatch)
    code, out, _ = run("demo", "--family", "sdpa_fwd")
    assert code == 0 and "    " + line in out and "CUDNN_STATUS" not in out
    code, out, _ = run("demo", "--family", "sdpa_fwd", "-v")
    assert code == 0 and out.count("CUDNN_STATUS_NOT_SUPPORTED_RUNTIME_PREREQUISITE_MISSING") == 44
