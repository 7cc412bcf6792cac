"""scripts/device/cluster_placement.py on the CPU: the recorder compiles for sm_90a, and SMs seen
together in clusters group into GPCs. Recording needs the H200, where it showed
the CTAs sharing an A tile start together but sit on different GPCs."""

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


def test_the_report_names_each_shared_panel(placement):
    from pygraph_gemm.knob_labels import parse_knob_label

    # 256x256 in 64x128 tiles, 2x1 clusters: 2 cluster rows x 2 columns, 4 clusters of 2 CTAs;
    # raster M: clusters 0, 1 share B column 0 and clusters 0, 2 share A rows 0
    kn = parse_knob_label("64x128c21")
    rec = [(2 * c + r, 100 * c) for c in range(4) for r in range(2)]
    groups = {sm: sm // 4 for sm in range(8)}
    lines = placement.report(kn, 256, 256, rec, groups, resident=66)
    assert lines[0].startswith("4 clusters of 2x1")
    panels = {
        " ".join(line.split()[:3]): line.split()[3:]
        for line in lines
        if line.startswith(("A rows", "B cols"))
    }
    assert panels["B cols 0"] == ["2", "1", "100"]  # clusters 0, 1: SMs 0-3, one group, 100 ns apart
    assert panels["A rows 0"] == ["2", "2", "200"]  # clusters 0, 2: SMs 0-1 and 4-5, two groups


def test_records_of_another_grid_are_refused(placement):
    from pygraph_gemm.knob_labels import parse_knob_label

    with pytest.raises(ValueError, match="2 CTA records for 4 clusters"):
        placement.report(parse_knob_label("64x128c21"), 256, 256, [(0, 0), (1, 0)], {}, resident=66)
