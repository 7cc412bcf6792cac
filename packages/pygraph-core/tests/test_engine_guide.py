"""The engine guide's complete example (docs/engines.md sections 2 to 6) runs on the CPU, as one module."""

from __future__ import annotations

import importlib.machinery
import re
import sys
import types
from pathlib import Path

import pytest

DOC = Path(__file__).resolve().parents[3] / "docs" / "engines.md"


def test_the_minimal_engine_of_the_guide_plans_and_computes():
    pytest.importorskip("numpy")
    text = DOC.read_text()
    example = text[text.index("\n## 2. ") :]
    blocks = re.findall(r"```python\n(.*?)```", example, flags=re.S)
    assert len(blocks) >= 5
    # the blocks are one module: the family's ("module", "name") references name it
    module = types.ModuleType("pygraph_engine_guide")
    module.__spec__ = importlib.machinery.ModuleSpec(module.__name__, None)  # found, as an installed one is
    sys.modules[module.__name__] = module
    try:
        for block in blocks:
            exec(compile(block, str(DOC), "exec"), module.__dict__)
    finally:
        del sys.modules[module.__name__]
    g = module.g
    assert g.selected_plan.engine.name == "numpy_matmul"
    assert g.get_execution_plan_count() >= 2
