"""The generated table is plain data that imports nothing."""

from __future__ import annotations

import subprocess
import sys

KEYS = {
    "name",
    "engine_id",
    "distribution",
    "package",
    "slots",
    "anchors",
    "analyzer",
    "heuristics",
    "validator",
}
SLOT_KEYS = {"name", "slot", "impl", "opt_in", "planned"}


def test_rows_are_plain_data():
    from pygraph_manifest import FAMILIES

    assert FAMILIES and all(set(row) == KEYS for row in FAMILIES)
    for row in FAMILIES:
        for slot in row["slots"]:
            assert set(slot) == SLOT_KEYS
            assert (
                isinstance(slot["name"], str) and 0 <= slot["slot"] < 100 and isinstance(slot["opt_in"], bool)
            )
            # a slot names its engine class as ("module", "Class") or says why it is planned
            assert (slot["impl"] is None) != (slot["planned"] is None)
            if slot["impl"] is not None:
                assert slot["impl"][0].startswith(row["package"] + ".")


def test_reading_the_table_imports_nothing_but_the_standard_library():
    code = "import sys; before = set(sys.modules); import pygraph_manifest; pygraph_manifest.FAMILIES; print(sorted(set(sys.modules) - before))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    foreign = [
        m
        for m in eval(out)
        if m.split(".")[0] not in sys.stdlib_module_names and not m.startswith("pygraph_manifest")
    ]
    assert foreign == []
