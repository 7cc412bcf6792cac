"""The linear-attention families as the manifest ships them: blocks, planned slots, planning on CPU."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import pygraph
from pygraph import data_type as dt
from pygraph import heur_mode
from pygraph.engines.base import PlanConfig
from pygraph.environment import OPT_IN_ENV
from pygraph_linear_attention.analyzer import analyze
from pygraph_linear_attention.heuristics import recommend


def _gdn_graph(t=64, h=2, d=16):
    g = pygraph.Graph(name="gdn", io_data_type=dt.BFLOAT16)
    q, k, v = (g.tensor(name=n, dim=[t, h, d], data_type=dt.BFLOAT16) for n in "qkv")
    gate = g.tensor(name="g", dim=[t, h], data_type=dt.FLOAT)
    beta = g.tensor(name="beta", dim=[t, h], data_type=dt.BFLOAT16)
    cu = g.tensor(name="cu_seqlens", dim=[2], data_type=dt.INT32)
    o, final = g.gdn(q=q, k=k, v=v, g=gate, beta=beta, cu_seqlens=cu)
    o.set_output(True)
    return g, o, final


@pytest.mark.parametrize(
    ("name", "block", "anchors"),
    [
        ("gdn", 20100, ("GDN", "GDN_BWD")),
        ("kda", 20200, ("KDA", "KDA_BWD")),
        ("gdn2", 20300, ("GDN2", "GDN2_BWD")),
    ],
)
def test_family_blocks_anchors_and_hooks(name, block, anchors):
    fam = pygraph.engines.family_by_name(name)
    assert (fam.engine_id, fam.anchors, fam.distribution) == (
        block,
        anchors,
        "pygraph-engines-linear-attention",
    )
    extra = {f"{name}_cutile_bwd": block + 2, f"{name}_sm90_bwd": block + 3}
    assert fam.ids == {f"{name}_sm90": block, f"{name}_cutile": block + 1, **extra}
    assert fam.package == "pygraph_linear_attention"
    assert fam.analyzer == ("pygraph_linear_attention.analyzer", "analyze")
    assert fam.heuristics == ("pygraph_linear_attention.heuristics", "recommend")


@pytest.mark.parametrize("name", ["kda", "gdn2"])
def test_the_hopper_engines_ship_default_on_and_the_cutile_ones_opt_in(name, monkeypatch):
    fam = pygraph.engines.family_by_name(name)
    prefix = "Gdn2" if name == "gdn2" else "Kda"
    for slot, module, cls, opt_in in (
        (f"{name}_sm90", "kda.engine_sm90", f"{prefix}Sm90Engine", False),
        (f"{name}_cutile", "kda.engine_cutile", f"{prefix}CutileEngine", True),
        (f"{name}_cutile_bwd", "kda.engine_cutile", f"{prefix}CutileBwdEngine", True),
        (f"{name}_sm90_bwd", "kda.engine_sm90", f"{prefix}Sm90BwdEngine", False),
    ):
        engine = fam.slots[slot]
        assert (engine.impl, engine.opt_in) == ((f"pygraph_linear_attention.{module}", cls), opt_in)
    monkeypatch.delenv(OPT_IN_ENV, raising=False)
    assert pygraph.engines.offered_ids(fam) == {  # the cuTile ones off until named
        f"{name}_sm90": fam.engine_id,
        f"{name}_sm90_bwd": fam.engine_id + 3,
    }
    built = pygraph.engines.instantiate(fam)
    assert [e.name for e in built.engines] == [f"{name}_sm90", f"{name}_sm90_bwd"]
    monkeypatch.setenv(OPT_IN_ENV, f"{name}_cutile,{name}_cutile_bwd")
    assert pygraph.engines.offered_ids(fam) == {
        f"{name}_sm90": fam.engine_id,
        f"{name}_cutile": fam.engine_id + 1,
        f"{name}_cutile_bwd": fam.engine_id + 2,
        f"{name}_sm90_bwd": fam.engine_id + 3,
    }


def test_gdn_ships_its_four_engines_default_on(monkeypatch):
    fam = pygraph.engines.family_by_name("gdn")
    for slot, module, cls in (
        ("gdn_sm90", "gdn.engine_sm90", "GdnSm90Engine"),
        ("gdn_cutile", "gdn.engine_cutile", "GdnCutileEngine"),
        ("gdn_cutile_bwd", "gdn.engine_cutile", "GdnCutileBwdEngine"),
        ("gdn_sm90_bwd", "gdn.engine_sm90", "GdnSm90BwdEngine"),
    ):
        assert (fam.slots[slot].impl, fam.slots[slot].opt_in) == (
            (f"pygraph_linear_attention.{module}", cls),
            False,
        )
    monkeypatch.delenv("PYGRAPH_ENABLE_OPT_IN_ENGINES", raising=False)
    assert pygraph.engines.offered_ids(fam) == {
        "gdn_sm90": 20100,
        "gdn_cutile": 20101,
        "gdn_cutile_bwd": 20102,
        "gdn_sm90_bwd": 20103,
    }
    built = pygraph.engines.instantiate(fam)
    assert [(e.name, e.engine_id) for e in built.engines] == [
        ("gdn_sm90", 20100),
        ("gdn_cutile", 20101),
        ("gdn_cutile_bwd", 20102),
        ("gdn_sm90_bwd", 20103),
    ]


def test_a_gdn_graph_names_its_family():
    g, o, final = _gdn_graph()
    assert final is None and o.dim == (64, 2, 16)
    assert pygraph.engines.family_for(g).name == "gdn"


def test_without_an_accepting_engine_the_hook_keeps_only_the_backend_block():
    g, _, _ = _gdn_graph()
    facts = analyze(g)
    assert recommend([heur_mode.A, heur_mode.FALLBACK], facts, {}, []) == []
    entries = [PlanConfig(-1), PlanConfig(5, {}, mode=heur_mode.A)]
    assert [c.engine_id for c in recommend([heur_mode.A], facts, {}, entries)] == [-1, 5, -1]


def test_planning_a_gdn_graph_raises_naming_the_backend_and_every_engines_reason(monkeypatch):
    monkeypatch.delenv("PYGRAPH_ENABLE_OPT_IN_ENGINES", raising=False)
    g, _, _ = _gdn_graph()
    with pytest.raises(pygraph.GraphNotSupportedError) as err:
        g.create_execution_plans([heur_mode.A, heur_mode.FALLBACK])
    message = str(err.value)
    assert "no plan serves graph 'gdn'" in message
    assert "python-only op(s) GDN have no backend lowering" in message
    assert "gdn_sm90: GraphNotSupportedError: gdn_sm90: head dims K=16, V=16: each must be one of" in message
    assert "gdn_cutile: GraphNotSupportedError" in message


def test_the_planning_path_imports_no_framework():
    code = (
        "import json, sys; import pygraph_linear_attention, pygraph_linear_attention.family, "
        "pygraph_linear_attention.analyzer, pygraph_linear_attention.heuristics; print(json.dumps(sorted(sys.modules)))"
    )
    loaded = json.loads(
        subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    )
    assert [m for m in loaded if m.split(".")[0] in ("torch", "cutlass", "cuda", "cudnn", "numpy")] == []
