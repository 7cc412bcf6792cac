"""benchmarks.ncu_lines: the per-source-line stall table from an ncu source page."""

from __future__ import annotations

import csv

import pytest

from benchmarks import ncu_lines


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
    ncu_lines.lines(str(path), top=2)
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("100 stall samples")
    assert out[1].split()[:2] == ["11", "70.0%"] and out[1].endswith("short_sb 100%")
    assert out[2].split()[:2] == ["10", "30.0%"] and out[2].endswith("long_sb 90% short_sb 10%")
    assert len(out) == 3  # top=2


def test_a_sass_only_page_ranks_instructions_and_a_page_without_either_says_so(tmp_path, capsys):
    header = ["Address", "Source", "Warp Stall Sampling (All Samples)", "stall_wait"]
    rows = [header, ["0x10", "HGMMA.64x128x16", "5", "5"], ["0x20", "MUFU.EX2 R1, R2", "15", "0"]]
    path = tmp_path / "sass.csv"
    with path.open("w", newline="") as f:
        csv.writer(f).writerows(rows)
    ncu_lines.lines(str(path), top=5)
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "20 stall samples; per instruction: share, then its top stall reasons"
    assert out[1].split()[:3] == ["0x20", "75.0%", "MUFU.EX2"]
    empty = tmp_path / "empty.csv"
    empty.write_text("==WARNING== No lineinfo available\n")
    with pytest.raises(SystemExit, match="no source or SASS table"):
        ncu_lines.lines(str(empty), top=5)
