"""docs/ops.md is generated from the op specs and must be up to date."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[4]


def test_ops_doc_is_up_to_date() -> None:
    spec = importlib.util.spec_from_file_location("gen_ops_doc", ROOT / "tools" / "gen_ops_doc.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert (ROOT / "docs" / "ops.md").read_text() == module.render(), "run python tools/gen_ops_doc.py"
