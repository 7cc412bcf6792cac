"""The `pygraph` command against the installed families, as a user runs it (a fresh process, no
GPU): the demo, info, explain of every example, --json, exit codes, a closed pipe and Ctrl-C.
The stand-in family's run of every command is packages/pygraph-core/tests/dispatch/test_cli_standins.py."""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys

import pytest

from pygraph.examples import EXAMPLES

ENV = {**os.environ, "PYGRAPH_PLAN_CACHE": "off", "PYTHONWARNINGS": "error"}


def _pygraph(*args: str, code: int = 0) -> subprocess.CompletedProcess:
    proc = subprocess.run(
        [sys.executable, "-m", "pygraph", *args], capture_output=True, text=True, timeout=300, env=ENV
    )
    assert proc.returncode == code, (proc.returncode, proc.stderr[-3000:])
    assert "Traceback" not in proc.stderr
    return proc


def test_demo_walks_every_family_and_reports_the_gemm_plan_list():
    out = _pygraph("demo").stdout
    for name in ("gdn", "kda", "gdn2", "gemm", "sdpa_fwd", "sdpa_bwd"):
        assert f"family {name} (block " in out
    gemm = out[out.index("family gemm") : out.index("family sdpa_fwd")]
    assert "engines offered: gemm_sm90=20400" in gemm
    assert "example graph gemm-bias-gelu (B,M,N,K = 1,256,512,128, bfloat16): family_for -> gemm" in gemm
    assert "gemm_sm90: accepts" in gemm
    assert "[0] gemm_sm90[" in gemm
    assert "backend: declined:" in gemm  # no GPU here: the backend offers nothing and says why
    assert "execution: skipped: no CUDA device visible" in gemm
    assert "example graph sdpa-bwd (B,H,S,D = 2,8,1024,128, bfloat16): family_for -> sdpa_bwd" in out


def test_demo_of_an_unknown_family_lists_the_known_ones():
    err = _pygraph("demo", "--family", "nosuch", code=2).stderr
    assert "--family nosuch: no such family; the manifest has gdn, kda, gdn2, gemm, sdpa_fwd, sdpa_bwd" in err


def test_a_malformed_graph_file_is_one_line_and_exit_2(tmp_path):
    """A process's stderr: no traceback for a missing port (a KeyError once) or 100k-deep JSON (the
    parser's RecursionError once)."""
    graph = EXAMPLES["gdn"].graph((64, 2, 64, 2))
    data = json.loads(repr(graph))
    del data["nodes"][0]["inputs"]["v"]
    files = {
        "missing-port": (json.dumps(data, indent=1), "gdn(): missing required port 'v'"),
        "deep": ('{"format": "pygraph_ir", "x": ' + "[" * 100_000 + "]" * 100_000 + "}", "too deeply"),
    }
    for name, (text, says) in files.items():
        path = tmp_path / f"{name}.json"
        path.write_text(text)
        err = _pygraph("explain", str(path), code=2).stderr
        assert err.count("\n") == 1 and f"graph file {str(path)!r}: deserialize(): " in err and says in err, (
            err
        )


def test_families_command_prints_the_manifest():
    out = _pygraph("families").stdout
    assert "EngineFamily(" not in out  # a table, not reprs
    rows = [[cell.strip() for cell in line.split("│")[1:-1]] for line in out.splitlines() if "│" in line]
    gemm = next(i for i, row in enumerate(rows) if row[0] == "gemm")
    assert rows[gemm][:5] == ["gemm", "20400-20499", "gemm_sm90", "20400", "default-on"], rows
    assert rows[gemm + 1][:5] == ["", "", "gemm_sm80", "20401", "opt-in"], rows


def test_version_and_the_console_script_agree():
    import pygraph

    assert _pygraph("--version").stdout.strip() == f"pygraph {pygraph.__version__}"


def test_info_without_a_gpu_says_so_and_lists_every_family():
    data = json.loads(_pygraph("info", "--json").stdout)
    assert data["device"] is None and data["device_reason"]
    assert data["packages"]["pygraph-core"] == data["pygraph"]
    assert data["plan_cache"] == {"path": None, "enabled": False}
    families = {f["name"]: f for f in data["families"]}
    assert set(families) == {"gdn", "kda", "gdn2", "gemm", "sdpa_fwd", "sdpa_bwd"}
    gemm = {e["name"]: e for e in families["gemm"]["engines"]}
    assert gemm["gemm_sm90"]["status"] == "offered" and gemm["gemm_sm90"]["arch"] == "SM90-SM90"
    assert gemm["gemm_sm80"]["status"] == "opt-in"
    if importlib.util.find_spec("cutlass") is not None:
        assert families["sdpa_fwd"]["engines"][0]["status"] == "offered"
    assert [(e["name"], e["status"]) for e in families["kda"]["engines"]] == [
        ("kda_sm90", "offered"), ("kda_cutile", "opt-in"), ("kda_cutile_bwd", "opt-in"),
        ("kda_sm90_bwd", "offered"),
    ]  # fmt: skip
    gdn = {e["name"]: e for e in families["gdn"]["engines"]}
    if not _has_cutile():  # the cuTile engines cannot build without cuTile: unavailable, and the install
        assert gdn["gdn_cutile"]["status"] == "unavailable", gdn
        assert (
            gdn["gdn_cutile"]["reason"]
            == "needs cuTile (pip install 'pygraph-engines-linear-attention[cutile]')"
        )
    if importlib.util.find_spec("cutlass") is None:
        assert families["sdpa_fwd"]["engines"][0]["status"] == "unavailable"
    text = _pygraph("info").stdout
    assert "device: no GPU" in text and "gemm_sm90" in text and "plan cache: off" in text


def _has_cutile() -> bool:
    try:
        return importlib.util.find_spec("cuda.tile") is not None
    except ModuleNotFoundError:  # no `cuda` namespace at all
        return False


@pytest.mark.parametrize("name", list(EXAMPLES))
def test_explain_every_example(name):
    data = json.loads(_pygraph("explain", name, "--json", "--head", "3").stdout)
    assert data["family"] == EXAMPLES[name].family
    assert data["candidates"] and data["backend"]["declined"]  # no cuDNN runtime on this machine
    if name.startswith("gemm"):
        assert data["no_plan"] is None and data["plans"][0]["name"].startswith("gemm_sm90[")
        assert [c["verdict"] for c in data["candidates"]] == ["accepts", "opt-in"]
    elif name == "gdn" and _has_cutile():  # cuTile installed here: its engine serves the forward
        assert data["no_plan"] is None and data["plans"][0]["name"].startswith("gdn_cutile[")
    elif name == "gdn" and importlib.util.find_spec("cutlass") is not None:  # CuTe DSL only: gdn_sm90
        assert data["no_plan"] is None and data["plans"][0]["name"].startswith("gdn_sm90[")
    elif name in ("kda", "gdn2") and importlib.util.find_spec("cutlass") is not None:  # kda_sm90 / gdn2_sm90
        assert data["no_plan"] is None and data["plans"][0]["name"].startswith(f"{name}_sm90[")
    elif name.startswith("sdpa") and importlib.util.find_spec("cutlass") is not None:  # the CuTe DSL engines
        engine = "sdpa_bwd_sm90[" if name == "sdpa-bwd" else "sdpa_fwd_sm90["
        assert data["no_plan"] is None and data["plans"][0]["name"].startswith(engine)
    else:  # nothing serves these without the backend or a shipped engine: explain says who declined
        assert data["no_plan"].startswith(f"no plan serves graph '{name.replace('-', '_')}'")


def test_explain_text_names_the_shape_and_the_list():
    out = _pygraph("explain", "gemm", "--shape", "2,128,256,64", "--dtype", "fp16").stdout
    assert out.startswith("gemm (B,M,N,K = 2,128,256,64, half): mm (matmul)\nfamily: gemm\n")
    assert "(--all for all)" in out and "  [0] python 20400: gemm_sm90[" in out


def test_bench_and_autotune_without_a_gpu_exit_1_saying_why():
    for command in ("bench", "autotune"):
        err = _pygraph(command, "gemm", code=1).stderr
        assert f"pygraph {command} times plans on a CUDA GPU" in err


@pytest.mark.parametrize("json_output", [False, True], ids=["text", "json"])
def test_a_closed_pipe_ends_quietly_with_141(json_output):
    proc = subprocess.Popen(
        [sys.executable, "-m", "pygraph", "explain", "gemm", "--all", *(["--json"] if json_output else [])],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=ENV,
    )
    first = proc.stdout.readline()
    proc.stdout.close()  # `| head -1`
    _, err = proc.communicate(timeout=300)
    assert first.startswith(b"{" if json_output else b"gemm (B,M,N,K")
    assert proc.returncode == 141 and err == b"", (proc.returncode, err[-3000:])


def test_ctrl_c_ends_quietly_with_130():
    # Ctrl-C as a terminal delivers it: a child inherits an ignored SIGINT from a parent that ignores
    # it (a shell's background job), and Python then installs no KeyboardInterrupt handler, so the
    # child puts the default one back before running `python -m pygraph`
    run = (
        "import runpy, signal; signal.signal(signal.SIGINT, signal.default_int_handler); "
        "runpy.run_module('pygraph', run_name='__main__', alter_sys=True)"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", run, "explain", "gemm", "--all"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        # the interrupt may land inside the import system, whose abandoned .pyc handle then warns
        # (ResourceWarning) at finalization: under "error" that prints as an ignored exception
        env={**ENV, "PYTHONWARNINGS": "error,ignore::ResourceWarning"},
    )
    proc.stdout.readline()  # started; it blocks on the full pipe until read
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=300)
    text = err.decode()
    assert proc.returncode == 130 and "Traceback" not in text, (proc.returncode, text[-3000:])
    assert text.strip().endswith("pygraph: interrupted"), text[-3000:]


def test_import_pygraph_loads_no_cli_library():
    probe = (
        "import sys, pygraph; pygraph.Graph; print(sorted(m for m in sys.modules if m in ('click', 'rich')))"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_a_corrupt_plan_cache_is_one_warning_line_and_explain_goes_on(tmp_path):
    bad = tmp_path / "plans.sqlite"
    bad.write_bytes(b"not a database " * 100)
    env = {**os.environ, "PYGRAPH_PLAN_CACHE": str(bad)}
    proc = subprocess.run(
        [sys.executable, "-m", "pygraph", "explain", "gemm", "--head", "1"],
        capture_output=True, text=True, timeout=300, env=env,
    )  # fmt: skip
    assert proc.returncode == 0 and "  [0] python 20400: gemm_sm90[" in proc.stdout
    assert proc.stderr == (
        f"pygraph: warning: plan cache {bad}: not a SQLite database (or a damaged one); the plan cache is "
        "not used (set PYGRAPH_PLAN_CACHE to another path, or PYGRAPH_PLAN_CACHE=off)\n"
    )
