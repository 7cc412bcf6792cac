"""The linear-attention families' declarations, as the manifest ships them."""

from __future__ import annotations

import pytest

import pygraph
from pygraph_linear_attention.engines import make_engines


@pytest.mark.parametrize(
    ("name", "block", "anchors"),
    [
        ("gdn", 20100, ("GDN", "GDN_BWD")),
        ("kda", 20200, ("KDA", "KDA_BWD")),
        ("gdn2", 20300, ("GDN2", "GDN2_BWD")),
    ],
)
def test_family_blocks_and_anchors(name, block, anchors):
    fam = pygraph.engines.family_by_name(name)
    assert (fam.engine_id, fam.anchors, fam.distribution) == (
        block,
        anchors,
        "pygraph-engines-linear-attention",
    )
    assert fam.ids == {f"{name}_sm90": block, f"{name}_cutile": block + 1}


def test_unwritten_engines_are_opt_in_and_build_nothing():
    for name in ("gdn", "kda", "gdn2"):
        fam = pygraph.engines.family_by_name(name)
        assert all(slot.opt_in for slot in fam.slots.values())
        assert make_engines(fam.ids) == []


def test_a_gdn_graph_names_its_family():
    g = pygraph.Graph(name="gdn", io_data_type=pygraph.data_type.BFLOAT16)
    t, h, d = 64, 2, 16
    q, k, v = (g.tensor(name=n, dim=[t, h, d], data_type=pygraph.data_type.BFLOAT16) for n in "qkv")
    gate = g.tensor(name="g", dim=[t, h], data_type=pygraph.data_type.FLOAT)
    beta = g.tensor(name="beta", dim=[t, h], data_type=pygraph.data_type.BFLOAT16)
    cu = g.tensor(name="cu_seqlens", dim=[2], data_type=pygraph.data_type.INT32)
    o, final = g.gdn(q=q, k=k, v=v, g=gate, beta=beta, cu_seqlens=cu)
    assert final is None and o.dim == (t, h, d)
    assert pygraph.engines.family_for(g).name == "gdn"
