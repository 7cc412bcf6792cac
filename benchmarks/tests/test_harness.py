"""benchmarks.harness on the CPU: the round order, the ratio table and the host-cost burst timing
(the device timings need a GPU)."""

from __future__ import annotations

import itertools

import pytest

from benchmarks import harness


def test_every_column_takes_every_place_in_turn():
    names = ["a", "b", "c"]
    orders = [harness.rotated(names, r) for r in range(3)]
    assert orders == [["a", "b", "c"], ["b", "c", "a"], ["c", "a", "b"]]
    assert harness.rotated(names, 4) == orders[1]


def test_the_ratio_table_reads_per_round_ratios_against_each_anchor():
    # ours is twice as fast as the anchor in every round, whatever the drift between rounds
    rounds = [{"ours": 1.0 * d, "anchor": 2.0 * d} for d in (1.0, 1.1, 0.9, 1.05, 0.95)]
    lines = harness.ratio_lines(rounds, ["anchor"], (1024, 1024, 1024), width=6)
    ours, anchor = lines
    assert ours.split() == ["ours", f"{harness.tflops(1024, 1024, 1024, 1.0):.1f}", "2.000", "2.000", "2.000"]
    assert anchor.split()[0] == "anchor" and anchor.split()[2:] == ["1.000"] * 3
    assert harness.tflops(1000, 1000, 500, 1.0) == pytest.approx(1.0)


def test_the_timing_table_gives_each_anchors_time_over_every_other_column():
    lines = harness.time_lines({"ours": 0.5, "fla": 1.0, "cudnn": 0.25}, tokens=10_000)
    ours, fla, cudnn = (line.split() for line in lines)
    assert ours == ["ours", "0.500", "ms", "20.00", "Mtok/s", "fla/ours", "2.00x", "cudnn/ours", "0.50x"]
    assert fla == ["fla", "1.000", "ms", "10.00", "Mtok/s"] and cudnn[0] == "cudnn" and len(cudnn) == 5


def test_the_timing_table_prints_each_rounds_ratio_and_their_median():
    per_round = {"ours": [0.5, 0.4, None], "fla": [1.0, 1.0, 1.2]}  # a broken round is left out
    (ours, _) = harness.time_lines({"ours": 0.45, "fla": 1.0}, tokens=1000, per_round=per_round)
    assert "fla/ours 2.22x (rounds 2.00 2.50; median 2.25x)" in ours


def test_interleaved_keeps_each_rounds_times(monkeypatch):
    monkeypatch.setattr(harness, "device_time", lambda fn: fn())
    per_round = {}
    clock = iter([1.0, 2.0, 3.0, 4.0])
    medians = harness.interleaved({"a": lambda: next(clock), "b": lambda: next(clock)}, 2, [], per_round)
    # round 0 runs a then b; round 1 (rotated) b then a
    assert per_round == {"a": [1.0, 4.0], "b": [2.0, 3.0]} and medians == {"a": 2.5, "b": 2.5}


def test_quartiles_are_the_middle_half():
    assert harness.quartiles([1, 2, 3, 4, 5, 6, 7]) == (2, 4, 6)


def test_burst_cost_is_the_best_burst_per_call_after_draining():
    ticks = itertools.count()
    syncs = []
    cost = harness.burst_cost(lambda: next(ticks), 8, reps=5, sync=lambda: syncs.append(1))
    assert next(ticks) == 8 * 5  # five bursts of eight calls, no warm-up asked for
    assert len(syncs) == 5 + 1  # the queue drained before every burst and once after
    assert 0 < cost < 1000  # microseconds per call of a trivial function
