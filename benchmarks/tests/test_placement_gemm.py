"""benchmarks.gemm.placement_gemm labels each cell the way `heuristics.recommend` keys
``_BACKEND_LEADS``: the graph it builds for a cell has those majors, that bucket and that epilogue
(no GPU: descriptors and facts only)."""

from __future__ import annotations

import pytest

from pygraph_gemm.analyzer import analyze
from pygraph_gemm.heuristics import shape_bucket
from pygraph_gemm.support import dtype_short


@pytest.fixture(scope="module")
def placement():
    from benchmarks.gemm import placement_gemm

    return placement_gemm


def test_every_cell_builds_a_graph_with_the_cell_it_is_named(placement):
    assert len(placement.cells()) == 2 * 4 * 4 * 2
    for cell in placement.cells():
        g, roles = placement.graph_of(cell)
        facts = analyze(g)
        epilogue = "fused" if facts.steps else "plain"
        key = (
            dtype_short(facts.a.data_type),
            f"{facts.a_major}{facts.b_major}",
            shape_bucket(facts),
            epilogue,
        )
        assert key == cell
        assert set(roles) == {"a", "b", "out"} | ({"bias"} if epilogue == "fused" else set())


def test_a_bucket_can_be_timed_at_another_shape_of_its_own(placement, monkeypatch):
    monkeypatch.setattr(placement, "BUCKETS", dict(placement.BUCKETS))
    assert placement.set_shape("small=768x4096x4096") == (768, 4096, 4096)
    g, _roles = placement.graph_of(("fp16", "mn", "small", "fused"))
    facts = analyze(g)
    assert (facts.m, facts.n, facts.k, shape_bucket(facts)) == (768, 4096, 4096, "small")
    assert [c for c in placement.selected("small,fp16") if c[0] == "bf16" and c[2] != "small"] == []


@pytest.mark.parametrize(
    ("spec", "fragment"),
    [
        ("small=4096x4096x4096", "falls in bucket 'large', not 'small'"),
        ("tiny=16x16x16", "bucket 'tiny' is not one of"),
        ("small=768x4096", "want BUCKET=MxNxK"),
        ("narrow=0x4096x4096", "M, N and K must be positive"),
    ],
)
def test_a_shape_outside_its_bucket_is_refused_with_the_reason(placement, monkeypatch, spec, fragment):
    monkeypatch.setattr(placement, "BUCKETS", dict(placement.BUCKETS))
    before = dict(placement.BUCKETS)
    with pytest.raises(placement.ShapeError, match=fragment):
        placement.set_shape(spec)
    assert placement.BUCKETS == before
