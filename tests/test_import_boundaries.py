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


_WITHOUT_TORCH = """
import sys
sys.modules["torch"] = None  # as if torch were not installed: `import torch` fails, find_spec finds nothing
try:
    {statement}
except ImportError as exc:
    print(type(exc).__name__, exc, sep=": ")
"""


def _without_torch(statement: str) -> str:
    return subprocess.run(
        [sys.executable, "-c", _WITHOUT_TORCH.format(statement=statement)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()


def test_importing_a_torch_op_without_torch_names_the_extra_that_brings_it():
    la = "pip install 'pygraph-engines-linear-attention[torch]'"
    for statement, module in {
        "from pygraph_linear_attention.ops import gated_delta_net": "pygraph_linear_attention.ops",
        "import pygraph_linear_attention.gdn.op": "pygraph_linear_attention.gdn.op",
        "from pygraph_linear_attention import kimi_delta_attention": "pygraph_linear_attention.kda.op",
        "from pygraph_linear_attention.reference import gated_delta_net_reference": "pygraph_linear_attention.reference",
    }.items():
        assert _without_torch(statement) == (
            f"MissingExtraError: import {module}: it needs torch, which is not installed; {la}"
        ), statement
    sdpa = "pip install 'pygraph-engines-sdpa[torch]'"
    for statement, module in {
        "from pygraph_sdpa.ops import sdpa": "pygraph_sdpa.ops",
        "import pygraph_sdpa; pygraph_sdpa.sdpa": "pygraph_sdpa.ops",
    }.items():
        assert _without_torch(statement) == (
            f"MissingExtraError: import {module}: it needs torch, which is not installed; {sdpa}"
        ), statement
    # the packages themselves, their families and the engines need no torch
    assert _without_torch("import pygraph_sdpa, pygraph_linear_attention.family; print('ok')") == "ok"


def test_with_torch_the_op_modules_import_as_before():
    out = subprocess.run(
        [sys.executable, "-c", "from pygraph_linear_attention.ops import gated_delta_net; print(gated_delta_net.__name__)"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    assert out.strip() == "gated_delta_net"
