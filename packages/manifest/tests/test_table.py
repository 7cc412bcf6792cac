"""The generated table is plain data that imports nothing."""

from __future__ import annotations

import subprocess
import sys

KEYS = {
    "name",
    "engine_id",
    "distribution",
    "module",
    "factory",
    "slots",
    "anchors",
    "analyzer",
    "heuristics",
    "validator",
}


def test_rows_are_plain_data():
    from pygraph_manifest import FAMILIES

    assert FAMILIES and all(set(row) == KEYS for row in FAMILIES)
    for row in FAMILIES:
        for engine_name, slot, opt_in in row["slots"]:
            assert isinstance(engine_name, str) and 0 <= slot < 100 and isinstance(opt_in, bool)


def test_reading_the_table_imports_nothing_but_the_standard_library():
    code = "import sys; before = set(sys.modules); import pygraph_manifest; pygraph_manifest.FAMILIES; print(sorted(set(sys.modules) - before))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    foreign = [
        m
        for m in eval(out)
        if m.split(".")[0] not in sys.stdlib_module_names and not m.startswith("pygraph_manifest")
    ]
    assert foreign == []
