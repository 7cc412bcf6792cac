"""`pygraph demo` runs on a machine without a GPU and says what it could and could not do."""

from __future__ import annotations

import subprocess
import sys


def _demo(*args: str) -> str:
    proc = subprocess.run(
        [sys.executable, "-m", "pygraph.cli", "demo", *args], capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_demo_walks_every_family_and_reports_the_gemm_plan_list():
    out = _demo()
    for name in ("gdn", "kda", "gdn2", "gemm", "sdpa_fwd", "sdpa_bwd"):
        assert f"family {name} (block " in out
    gemm = out[out.index("family gemm") : out.index("family sdpa_fwd")]
    assert "engines offered: gemm_sm90=20400" in gemm
    assert "gemm_sm90: accepts" in gemm
    assert "[0] gemm_sm90[" in gemm
    assert "backend: declined:" in gemm  # no GPU here: the backend offers nothing and says why
    assert "execution: skipped: no CUDA device visible" in gemm


def test_families_command_prints_the_manifest():
    proc = subprocess.run([sys.executable, "-m", "pygraph.cli", "families"], capture_output=True, text=True)
    assert proc.returncode == 0
    assert "EngineFamily(gemm: block 20400..20499; gemm_sm90=20400" in proc.stdout
