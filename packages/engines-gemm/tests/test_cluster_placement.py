"""scripts/device/cluster_placement.py on the CPU: the recorder compiles for sm_90a, and SMs seen
together in clusters group into GPCs. Recording needs the H200 (kernels/NOTES.md v26)."""

from __future__ import annotations

import importlib.util
import os

import pytest

_PATH = os.path.join(os.path.dirname(__file__), "..", "..", "..", "scripts", "device", "cluster_placement.py")


@pytest.fixture(scope="module")
def placement():
    spec = importlib.util.spec_from_file_location("cluster_placement", _PATH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_clusters_that_share_an_sm_join_one_group(placement):
    # two launches of 2-CTA clusters: {0,1} {2,3} then {1,2} {4,5}: 0-3 are one group, 4-5 another
    first = [(0, 0), (1, 5), (2, 0), (3, 9)]
    second = [(1, 0), (2, 3), (4, 0), (5, 1)]
    groups = placement.gpc_groups([first, second], size=2)
    assert len({groups[sm] for sm in (0, 1, 2, 3)}) == 1
    assert groups[4] == groups[5] != groups[0]


def test_a_launch_of_partial_clusters_is_named(placement):
    with pytest.raises(ValueError, match="3 CTAs"):
        placement.gpc_groups([[(0, 0), (1, 0), (2, 0)]], size=2)


def test_the_recorder_compiles_without_a_gpu(placement):
    pytest.importorskip("cutlass.cute")
    pytest.importorskip("torch")
    assert placement.build(2, 1, 4) is not None
