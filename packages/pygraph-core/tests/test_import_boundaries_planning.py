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


# --- the engine contract's boundary: engines get what they need from the request ----------------

PACKAGES = pathlib.Path(__file__).resolve().parents[2]


def _planning_imports(path: pathlib.Path) -> list[str]:
    """``module:line`` for every import of ``pygraph.planning`` (or a module under it) in ``path``."""
    import ast

    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
        else:
            continue
        if any(n == "pygraph.planning" or n.startswith("pygraph.planning.") for n in names):
            found.append(f"{path.relative_to(PACKAGES)}:{node.lineno}")
    return found


def test_no_family_package_imports_the_planner():
    sources = sorted(PACKAGES.glob("engines-*/src/**/*.py"))
    assert any(p.name == "sm90.py" for p in sources), "the gemm engines were not found"
    offenders = [hit for path in sources for hit in _planning_imports(path)]
    assert offenders == [], f"engines reach into pygraph.planning: {offenders}"


def test_importing_the_gemm_engines_loads_no_planning_module():
    script = (
        "import json, sys\n"
        "import pygraph_gemm.engines.sm90, pygraph_gemm.engines.sm80\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.startswith('pygraph.planning'))))\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout
    assert json.loads(out.strip().splitlines()[-1]) == []
