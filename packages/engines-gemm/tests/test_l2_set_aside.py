"""benchmarks/l2_set_aside.py on the CPU: what it refuses and what it does without its variable.
Setting the limit needs a GPU; the device runs are scripts/device/l2_set_aside.sh (a 37.5 MB
set-aside slowed the unfused addmm-then-gelu 4%, so no plan sets one)."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def set_aside(benchmark_module):
    return benchmark_module("l2_set_aside")


def test_a_negative_size_is_refused_with_the_value(set_aside):
    with pytest.raises(ValueError, match=r"-1\.5 MB"):
        set_aside.set_aside(-1.5)


def test_nothing_happens_without_the_variable(set_aside, monkeypatch):
    monkeypatch.delenv(set_aside.ENV, raising=False)
    assert set_aside.from_env() is None


def test_the_line_names_what_is_in_force_and_the_part_s_most(set_aside):
    line = set_aside.describe(36 * 2**20, 37.5 * 2**20)
    assert "36.0 MB" in line and "37.5 MB" in line
