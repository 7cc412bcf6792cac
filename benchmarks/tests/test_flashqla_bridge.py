"""The FlashQLA bridge's arithmetic: ours against FlashQLA through FLA's Triton timed in both processes."""

from __future__ import annotations

import pytest

from benchmarks.linear_attention.flashqla_bridge import bridge


def test_flashqla_over_ours_goes_through_fla_in_both_runs():
    # ours 2x faster than FLA in its run; FlashQLA 4x faster than FLA in its run: FlashQLA is 2x ours
    qla = {
        "cells": {
            "strong B4xT4096 fwd": {"flashqla": 0.25, "fla": 1.0},
            "weak B4xT4096 fwd": {"flashqla": 0.3, "fla": 1.2},
        }
    }
    strong = {"gate_mean": 0.0, "timing": [{"shape": "B4xT4096", "ms": {"ours[first]": 0.55, "fla": 1.1}}]}
    weak = {"gate_mean": 4.0, "timing": [{"shape": "B4xT4096", "ms": {"ours[first]": 0.3, "fla": 1.2}}]}
    rows = bridge(qla, [strong, weak])
    assert [(r["gates"], r["pass"]) for r in rows] == [("strong", "fwd"), ("weak", "fwd")]
    assert rows[0]["flashqla_over_ours"] == pytest.approx(0.5)
    assert rows[1]["flashqla_over_ours"] == pytest.approx(1.0)


def test_a_cell_one_run_lacks_is_left_out():
    qla = {"cells": {"strong B1xT32768 fwd": {"flashqla": 0.4, "fla": 1.4}}}
    ours = {"timing": [{"shape": "B4xT4096", "ms": {"ours[first]": 0.38, "fla": 0.52}}], "timing_bwd": []}
    assert bridge(qla, [ours]) == []
