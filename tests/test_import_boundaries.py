"""`import pygraph` pulls no framework, no DSL, no backend and no family package.

Measured in a fresh interpreter against an empty one; the module count and the time delta are
printed (run with -s, or read them in the assertion message on failure).
"""

from __future__ import annotations

import json
import subprocess
import sys

FORBIDDEN = (
    "torch",
    "cutlass",
    "cuda",
    "cudnn",
    "numpy",
    "pygraph_gemm",
    "pygraph_sdpa",
    "pygraph_linear_attention",
)

_PROBE = """
import json, sys, time
before = set(sys.modules)
t0 = time.perf_counter()
{statement}
dt = time.perf_counter() - t0
print(json.dumps({{"seconds": dt, "new": sorted(set(sys.modules) - before)}}))
"""


def _probe(statement: str) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", _PROBE.format(statement=statement)], capture_output=True, text=True, check=True
    ).stdout
    return json.loads(out)


def test_import_pygraph_is_framework_free(capsys):
    empty = _probe("pass")
    loaded = _probe("import pygraph")
    offenders = [m for m in loaded["new"] if m.split(".")[0] in FORBIDDEN]
    summary = (
        f"import pygraph: +{len(loaded['new']) - len(empty['new'])} modules, "
        f"+{(loaded['seconds'] - empty['seconds']) * 1e3:.1f} ms over an empty interpreter"
    )
    with capsys.disabled():
        print(f"\n[import boundary] {summary}")
    assert not offenders, f"{summary}; forbidden modules imported: {offenders}"


def test_reading_the_manifest_imports_no_family_package():
    loaded = _probe(
        "import pygraph; pygraph.engines.families(); pygraph.engines.offered_ids(pygraph.engines.families()[0])"
    )
    offenders = [m for m in loaded["new"] if m.split(".")[0] in FORBIDDEN]
    assert not offenders, offenders
