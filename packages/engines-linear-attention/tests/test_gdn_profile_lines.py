"""scripts/device/gdn_profile.py's ``lines``: the per-source-line stall table from an ncu source page."""

from __future__ import annotations

import csv
import importlib.util
import pathlib

SCRIPT = pathlib.Path(__file__).resolve().parents[3] / "scripts" / "device" / "gdn_profile.py"


def _module():
    spec = importlib.util.spec_from_file_location("gdn_profile", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_lines_with_most_samples_come_first_with_their_reasons(tmp_path, capsys):
    header = ["Line No", "Source", "Address", "Source", "Warp Stall Sampling (All Samples)", "stall_long_sb",
              "stall_short_sb", "stall_long_sb (Not Issued)"]  # fmt: skip
    rows = [
        ["File Name", "/x/gdn_cutile_fwd.py"],
        header,
        ["10", "kt = ct.load(k)", "-", "-", "30", "27", "3", "20"],
        ["", "", "0x10", "LDG.E R1", "30", "27", "3", "20"],  # a SASS row under its line: not counted
        ["11", "w = ct.mma(t, kw)", "-", "-", "70", "0", "70", "0"],
        ["12", "pass", "-", "-", "0", "0", "0", "0"],
    ]
    path = tmp_path / "source.csv"
    with path.open("w", newline="") as f:
        csv.writer(f).writerows(rows)
    _module().lines(str(path), top=2)
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("100 stall samples")
    assert out[1].split()[:2] == ["11", "70.0%"] and out[1].endswith("short_sb 100%")
    assert out[2].split()[:2] == ["10", "30.0%"] and out[2].endswith("long_sb 90% short_sb 10%")
    assert len(out) == 3  # top=2
