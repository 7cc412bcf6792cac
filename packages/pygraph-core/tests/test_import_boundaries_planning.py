"""Planning a graph whose family is a stand-in imports no framework and no DSL (fresh interpreter)."""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys

STANDINS = pathlib.Path(__file__).parent / "dispatch" / "standins"

SCRIPT = f"""
import json, sys
sys.path.insert(0, {str(STANDINS)!r})
before = set(sys.modules)
from dispatch_helpers import matmul_graph, standin_family
from pygraph.testing import manifest_override
with manifest_override([standin_family()]):
    g, a, b, c = matmul_graph()
    g.create_execution_plans()
    g.build_plans()
    assert g.selected_engine is not None
    g.execute({{a: 0x1000, b: 0x2000, c: 0x3000}})
print(json.dumps(sorted(set(sys.modules) - before)))
"""

FORBIDDEN = ("torch", "cutlass", "nvidia_cutlass_dsl", "cuda", "numpy")


def test_planning_a_standin_family_imports_no_framework_or_dsl():
    out = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, check=True).stdout
    loaded = json.loads(out.strip().splitlines()[-1])
    bad = [m for m in loaded if m.split(".")[0] in FORBIDDEN]
    assert bad == [], f"planning imported {bad}"
