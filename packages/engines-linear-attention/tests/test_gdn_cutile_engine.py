"""gdn_cutile on the CPU: its support rules, its ranking, and a gdn graph planned, built and executed
through the chosen plan with the kernels replaced by stand-ins.

The stand-ins: the kernel module (`gdn.cutile_fwd`, which imports cuTile) is replaced in
``sys.modules`` by one naming three sentinel kernels, and ``cuda.tile.launch`` by a recorder, so the
plan's real call path (operand positions, device arrays over the call's addresses, the workspace
carve, `gdn.cutile_host.launch_forward`'s grids and argument tuples) runs without cuTile or a GPU.
"""

from __future__ import annotations

import importlib.util
import re
import sys
import types

import pytest

import pygraph
from pygraph import data_type as dt
from pygraph import heur_mode
from pygraph_linear_attention.common.device_arrays import DeviceArray
from pygraph_linear_attention.common.host import CHUNK
from pygraph_linear_attention.gdn import engine_cutile as engine_mod
from pygraph_linear_attention.gdn.engine_cutile import GdnCutileBwdEngine, GdnCutileEngine
from pygraph_linear_attention.heuristics import block_v_order

ENGINE_ID = 20101
_REAL_PROBE = engine_mod.cutile_installed


@pytest.fixture(autouse=True)
def _cutile_found(monkeypatch):
    """cuTile reported installed (CI has none; its absence has its own test)."""
    monkeypatch.setattr(engine_mod, "cutile_installed", lambda: True)


def _graph(t=130, n=3, h=2, hv=2, d=128, dv=None, io=dt.BFLOAT16, beta=None, *, state=False, final=False,
           safe_gate=False, dt_bias=True, a_log=True, name="gdn", **attrs):  # fmt: skip
    dv = dv or d
    g = pygraph.Graph(name=name, io_data_type=io)
    q = g.tensor(name="q", dim=[t, h, d], data_type=io)
    k = g.tensor(name="k", dim=[t, h, d], data_type=io)
    v = g.tensor(name="v", dim=[t, hv, dv], data_type=io)
    ho = max(h, hv)
    gate = g.tensor(name="g", dim=[t, hv], data_type=dt.FLOAT)
    b = g.tensor(name="beta", dim=[t, hv], data_type=beta or io)
    cu = g.tensor(name="cu_seqlens", dim=[n + 1], data_type=dt.INT32)
    extra = {}
    if state:
        extra["initial_state"] = g.tensor(name="h0", dim=[n, ho, dv, d], data_type=dt.FLOAT)
    if safe_gate and a_log:
        extra["a_log"] = g.tensor(name="a_log", dim=[hv], data_type=dt.FLOAT)
    if safe_gate and dt_bias:
        extra["dt_bias"] = g.tensor(name="dt_bias", dim=[hv], data_type=dt.FLOAT)
    o, fs = g.gdn(q=q, k=k, v=v, g=gate, beta=b, cu_seqlens=cu, output_final_state=final, safe_gate=safe_gate,
                  **extra, **attrs)  # fmt: skip
    o.set_output(True)
    if fs is not None:  # an unassigned output takes the io dtype; the state is kept in fp32 here
        fs.set_output(True).set_data_type(dt.FLOAT)
    g.outputs_for_test = (o, fs)
    return g


def _decline(graph, engine=None) -> str:
    with pytest.raises(pygraph.GraphNotSupportedError) as err:
        (engine or GdnCutileEngine(ENGINE_ID)).check_support(graph.engine_request())
    return str(err.value)


@pytest.mark.parametrize(
    "kwargs",
    [
        {},
        {"io": dt.HALF, "beta": dt.FLOAT},
        {"d": 64},
        {"d": 256, "dv": 128},
        {"h": 1, "hv": 4},
        {"h": 4, "hv": 2},
        {
            "state": True,
            "final": True,
            "use_qk_l2norm": True,
            "use_beta_sigmoid": True,
            "allow_neg_eigval": True,
        },
        {"safe_gate": True},
        {"safe_gate": True, "dt_bias": False, "scale": 0.5},
        {"t": 1, "n": 1},
    ],
    ids=[
        "bf16",
        "fp16-fp32beta",
        "d64",
        "k256-v128",
        "gva",
        "gqa",
        "options",
        "safe-gate",
        "no-dt-bias",
        "t1",
    ],
)
def test_accepts_what_the_kernels_serve(kwargs):
    GdnCutileEngine(ENGINE_ID).check_support(_graph(**kwargs).engine_request())


@pytest.mark.parametrize(
    ("kwargs", "reason"),
    [
        ({"io": dt.FLOAT}, r"q, k and v must all be BFLOAT16 or all HALF, got \['FLOAT', 'FLOAT', 'FLOAT'\]"),
        ({"d": 96}, r"head dims K=96, V=96: each must be one of \(64, 128, 256\)"),
        ({"io": dt.HALF, "beta": dt.BFLOAT16}, "beta must be FLOAT or the io dtype HALF, got BFLOAT16"),
        ({"gate_domain": "linear"}, "gate_domain='linear' is not served"),
        ({"safe_gate": True, "a_log": False}, "safe_gate needs a_log"),
    ],
    ids=["fp32-io", "head-dim", "beta-dtype", "gate-domain", "no-a-log"],
)
def test_declines_naming_the_rule_and_the_value(kwargs, reason):
    message = _decline(_graph(**kwargs))
    assert message.startswith("gdn_cutile: ")
    assert re.search(reason, message), message


def _bwd_graph(
    t=130, n=3, h=2, hv=4, d=128, *, state=True, final=True, d_o=dt.BFLOAT16, dq=None, max_seqlen=None
):
    g = pygraph.Graph(name="gdn_bwd", io_data_type=dt.BFLOAT16)
    q, k = (g.tensor(name=x, dim=[t, h, d], data_type=dt.BFLOAT16) for x in ("q", "k"))
    v = g.tensor(name="v", dim=[t, hv, d], data_type=dt.BFLOAT16)
    grad = g.tensor(name="dO", dim=[t, max(h, hv), d], data_type=d_o)
    gate, beta = (g.tensor(name=x, dim=[t, hv], data_type=dt.FLOAT) for x in ("g", "beta"))
    cu = g.tensor(name="cu_seqlens", dim=[n + 1], data_type=dt.INT32)
    extra = {}
    if state:
        extra["initial_state"] = g.tensor(name="h0", dim=[n, max(h, hv), d, d], data_type=dt.FLOAT)
    if final:
        extra["d_final_state"] = g.tensor(name="dht", dim=[n, max(h, hv), d, d], data_type=dt.FLOAT)
    outs = g.gdn_bwd(q=q, k=k, v=v, g=gate, beta=beta, cu_seqlens=cu, dO=grad, max_seqlen=max_seqlen, **extra)
    likes = (q, k, v, gate, beta, extra.get("initial_state"))
    for out, like in zip(outs, likes):
        if out is not None:
            out.set_output(True).set_data_type(like.data_type)
    if dq is not None:
        outs[0].set_data_type(dq)
    g.outputs_for_test = outs
    return g


def test_accepts_a_gdn_bwd_graph():
    GdnCutileBwdEngine(ENGINE_ID + 1).check_support(_bwd_graph().engine_request())


@pytest.mark.parametrize(
    ("kwargs", "reason"),
    [
        ({"d_o": dt.FLOAT}, "dO must be the io dtype BFLOAT16, got FLOAT"),
        ({"dq": dt.FLOAT}, r"dQ must be one of \['BFLOAT16'\], got FLOAT"),
    ],
    ids=["dO-dtype", "dQ-dtype"],
)
def test_declines_a_gdn_bwd_graph_naming_the_rule(kwargs, reason):
    message = _decline(_bwd_graph(**kwargs), GdnCutileBwdEngine(ENGINE_ID + 1))
    assert re.search(reason, message), message


def test_each_direction_names_the_engine_of_the_other():
    assert "gdn_bwd graphs are served by gdn_cutile_bwd" in _decline(_bwd_graph())
    assert "gdn graphs are served by gdn_cutile" in _decline(_graph(), GdnCutileBwdEngine(ENGINE_ID + 1))


def test_declines_a_strided_last_dim():
    g = _graph()
    g.find_tensor("q").stride = (2 * 2 * 128, 2 * 128, 2)  # still mutable: planning has not frozen it
    assert "operand q (q) must have a contiguous last dim, got stride [512, 256, 2]" in _decline(g)


def test_declines_a_device_outside_its_arch_range():
    g = _graph()
    g.sm_version = 75
    assert "requires SM80..SM121, found SM75" in _decline(g)


def test_a_missing_cutile_is_an_import_decline(monkeypatch):
    monkeypatch.setattr(engine_mod, "cutile_installed", _REAL_PROBE)  # the probe itself, cuda.* not found
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name.startswith("cuda") else real(name, *a),
    )
    with pytest.raises(
        ImportError,
        match=r"gdn_cutile: needs cuTile \(pip install 'pygraph-engines-linear-attention\[cutile\]'\)",
    ):
        GdnCutileEngine(ENGINE_ID).check_support(_graph().engine_request())


def test_the_hook_ranks_every_block_v_that_tiles_v_the_measured_fastest_first():
    # 3 sequences x 2 heads x 2 value blocks of 64: 12 programs, under half the SMs: 32 first
    assert block_v_order(_graph(n=3).engine_request().facts) == [32, 64, 128]
    # 64 x 2 x 2 = 256 programs: 64 first
    assert block_v_order(_graph(t=4096, n=64, h=2).engine_request().facts) == [64, 32, 128]
    assert block_v_order(_graph(d=64, n=128).engine_request().facts) == [64, 32]


def test_the_forward_ranks_block_v_32_at_occupancy_2_first_in_every_grid():
    # 256 scan programs at 64: the backward's hook order starts at 64, the forward's first is 32
    g = _graph(t=4096, n=64, h=2)
    g.create_execution_plans()
    every = [g.get_plan_name_at_index(i) for i in range(g.get_execution_plan_count())]
    names = [name for name in every if name.startswith("gdn_cutile[")]  # gdn_sm90's lead: below
    assert names[:3] == [
        "gdn_cutile[BLOCK_V=32,OCCUPANCY=2,SEGMENT=0]", "gdn_cutile[BLOCK_V=64,OCCUPANCY=0,SEGMENT=0]",
        "gdn_cutile[BLOCK_V=32,OCCUPANCY=0,SEGMENT=0]",
    ]  # fmt: skip
    assert "gdn_cutile[BLOCK_V=64,OCCUPANCY=2,SEGMENT=0]" in names
    assert len(every) == len(set(every))


class _Recorder:
    def __init__(self):
        self.calls = []

    def __call__(self, stream, grid, kernel, args):
        self.calls.append((stream, tuple(grid), kernel, args))


@pytest.fixture
def stand_in(monkeypatch):
    """The kernel modules and cuda.tile.launch replaced: (recorder, the sentinel kernels)."""
    names = "table prepare scan seg_table seg_offsets seg_bounds segment_scan segment_combine".split()
    kernels = {name: object() for name in names}
    module = types.ModuleType("pygraph_linear_attention.gdn.cutile_fwd")
    module.KERNELS = kernels
    module.hinted = lambda kernel, **hints: ("hinted", kernel, tuple(sorted(hints.items())))
    monkeypatch.setitem(sys.modules, module.__name__, module)
    bwd = types.ModuleType("pygraph_linear_attention.gdn.cutile_bwd")
    bwd.BWD_KERNELS = {
        name: object()
        for name in (
            "offsets states grad_scan chunk_grad_output chunk_grad_wy group_sum gate_sum param_sum "
            "segment_combine_grad"
        ).split()
    }
    kernels.update(bwd.BWD_KERNELS)
    monkeypatch.setitem(sys.modules, bwd.__name__, bwd)
    recorder = _Recorder()
    monkeypatch.setattr(engine_mod, "cutile_launch", lambda: recorder)
    return recorder, kernels


def test_gdn_sm90_leads_the_forward_and_the_backward_where_its_scans_measured_faster(stand_in):
    # timings in heuristics.py: gdn_sm90 (its fused warpgroup scan) first on every forward; gdn_sm90_bwd
    # first on every backward, its chunk gradients fused (WGMMA 2): segmented where the forward segments,
    # else STAGES 2 where its scans' grid is under the SMs, STAGES 1 elsewhere
    def first(t, n, backward=False):
        g = _bwd_graph(t=t, n=n, h=16, hv=16) if backward else _graph(t=t, n=n, h=16, hv=16)
        g.create_execution_plans()
        return g.get_plan_name_at_index(0)

    assert first(32768, 1) == "gdn_sm90[BLOCK_V=64,SEGMENT=64,SPLIT=0,STAGES=1,WGMMA=1]"
    assert first(1024, 1) == "gdn_sm90[BLOCK_V=64,SEGMENT=0,SPLIT=0,STAGES=2,WGMMA=4]"
    assert (
        first(16384, 4) == "gdn_sm90[BLOCK_V=64,SEGMENT=0,SPLIT=0,STAGES=2,WGMMA=4]"
    )  # 128 CTAs at BLOCK_V 64
    assert first(32768, 8) == "gdn_sm90[BLOCK_V=64,SEGMENT=0,SPLIT=0,STAGES=2,WGMMA=4]"  # 256
    assert first(32768, 8, backward=True) == "gdn_sm90_bwd[BLOCK_V=32,SEGMENT=0,STAGES=1,WGMMA=2]"
    assert first(16384, 4, backward=True) == "gdn_sm90_bwd[BLOCK_V=32,SEGMENT=0,STAGES=1,WGMMA=2]"
    assert first(32768, 1, backward=True) == "gdn_sm90_bwd[BLOCK_V=64,SEGMENT=64,STAGES=1,WGMMA=2]"
    assert first(8192, 1, backward=True) == "gdn_sm90_bwd[BLOCK_V=64,SEGMENT=64,STAGES=1,WGMMA=2]"
    assert (
        first(4096, 1, backward=True) == "gdn_sm90_bwd[BLOCK_V=32,SEGMENT=0,STAGES=2,WGMMA=2]"
    )  # one segment


def test_max_seqlen_segments_the_backward_of_a_batch_whose_longest_sequence_outlasts_the_rest(stand_in):
    # heuristics._segments_first, by_longest (the backward's): varlen8 (32768 tokens in 8 sequences,
    # the longest 8192) measured faster segmented at BLOCK_V 64; equal lengths (B4 T4096) and a hint
    # under two segments do not
    def first(t, n, max_seqlen):
        g = _bwd_graph(t=t, n=n, h=16, hv=16, max_seqlen=max_seqlen)
        g.create_execution_plans()
        return g.get_plan_name_at_index(0)

    segmented = "gdn_sm90_bwd[BLOCK_V=64,SEGMENT=64,STAGES=1,WGMMA=2]"
    unsegmented = "gdn_sm90_bwd[BLOCK_V=32,SEGMENT=0,STAGES=1,WGMMA=2]"
    assert first(32768, 8, None) == unsegmented  # no hint: the mean length alone
    assert first(32768, 8, 8192) == segmented
    assert first(32768, 8, 10**6) == segmented  # taken as T
    assert first(16384, 4, 4096) == unsegmented  # every sequence the mean
    assert first(32768, 8, 6144) == unsegmented  # under two segments
    assert first(32768, 4, 8192) == unsegmented  # the mean: 8192


def test_planning_builds_and_executes_the_chosen_plan_through_the_stand_in(stand_in):
    recorder, kernels = stand_in
    t, n, h, d = 130, 3, 2, 128
    g = _graph(t=t, n=n, h=h, d=d, state=True, final=True, use_qk_l2norm=True)
    g.create_execution_plans([heur_mode.A, heur_mode.FALLBACK])
    names = [g.get_plan_name_at_index(i) for i in range(g.get_execution_plan_count())]
    # gdn_sm90's 56 plans first (the fused warpgroup scan leading; test_gdn_sm90_engine.py holds their order), then
    # gdn_cutile's: 12 scan programs at 64: 32 is the hook's BLOCK_V; first at the measured occupancy
    # 2, then every BLOCK_V at the compiler's (32, then the others ascending), the others at 2, then
    # the other hint, then the first with each split-scan SEGMENT
    assert names[0] == "gdn_sm90[BLOCK_V=64,SEGMENT=0,SPLIT=0,STAGES=2,WGMMA=4]"
    assert all(name.startswith("gdn_sm90[") for name in names[:56])
    assert names[56:] == [
        "gdn_cutile[BLOCK_V=32,OCCUPANCY=2,SEGMENT=0]", "gdn_cutile[BLOCK_V=32,OCCUPANCY=0,SEGMENT=0]",
        "gdn_cutile[BLOCK_V=64,OCCUPANCY=0,SEGMENT=0]", "gdn_cutile[BLOCK_V=128,OCCUPANCY=0,SEGMENT=0]",
        "gdn_cutile[BLOCK_V=64,OCCUPANCY=2,SEGMENT=0]", "gdn_cutile[BLOCK_V=128,OCCUPANCY=2,SEGMENT=0]",
        "gdn_cutile[BLOCK_V=32,OCCUPANCY=4,SEGMENT=0]", "gdn_cutile[BLOCK_V=32,OCCUPANCY=2,SEGMENT=32]",
        "gdn_cutile[BLOCK_V=32,OCCUPANCY=2,SEGMENT=16]",
    ]  # fmt: skip
    g.select_plan(names.index("gdn_cutile[BLOCK_V=64,OCCUPANCY=0,SEGMENT=0]"))
    g.build_plans()
    plan = g.selected_plan
    assert (plan.name, plan.kind, plan.engine.name) == (
        "gdn_cutile[BLOCK_V=64,OCCUPANCY=0,SEGMENT=0]",
        "python",
        "gdn_cutile",
    )
    workspace_bytes = g.get_workspace_size()
    slots = -(-t // CHUNK) + n
    assert workspace_bytes >= slots * 2 * 4 + t * h * 4 + 2 * t * h * d * 2

    names = ("q", "k", "v", "g", "beta", "cu_seqlens", "h0")
    addresses = {name: 0x100000 * (i + 1) for i, name in enumerate(names)}
    tensors = {g.find_tensor(name): addr for name, addr in addresses.items()}
    o, final = g.outputs_for_test
    tensors[o], tensors[final] = 0xA00000, 0xB00000
    workspace = 0xC00000
    g.execute(tensors, workspace=workspace)

    assert [(grid, kernel) for _, grid, kernel, _ in recorder.calls] == [
        ((-(-slots // 128),), kernels["table"]),
        ((slots, h), kernels["prepare"]),
        ((n, h, d // 64), kernels["scan"]),
    ]
    assert all(stream == 0 for stream, *_ in recorder.calls)
    table_args, prepare_args, scan_args = (args for *_, args in recorder.calls)

    def described(x):
        return (x.pointer, x.shape, x.dtype) if isinstance(x, DeviceArray) else x

    cu, table = table_args[:2]
    assert described(cu) == (addresses["cu_seqlens"], (n + 1,), "int32")
    assert described(table) == (workspace, (slots, 2), "int32")
    assert table_args[2:] == (n, CHUNK, 128, 64)
    assert described(prepare_args[0]) == (addresses["k"], (t, h, d), "bfloat16")
    assert described(prepare_args[2]) == (addresses["g"], (t, h), "float32")
    assert prepare_args[7] is table
    # head groups of k, v, g, beta, then a_log and dt_bias (absent: one value for all h heads)
    assert described(prepare_args[11]) == (
        prepare_args[4].pointer,
        (1, 1, 1, 1),
        "float32",
    )  # no T: the spare
    assert prepare_args[12:] == (
        1,
        1,
        1,
        1,
        h,
        h,
        1,
        0,
        0,
        0,
        0,
        0,
        d,
        d,
        CHUNK,
    )  # then the flags, dims, chunk
    assert described(scan_args[0]) == (addresses["q"], (t, h, d), "bfloat16")
    assert described(scan_args[6]) == (addresses["h0"], (n, h, d, d), "float32")
    assert described(scan_args[7]) == (0xA00000, (t, h, d), "bfloat16")
    assert described(scan_args[8]) == (0xB00000, (n, h, d, d), "float32")
    assert scan_args[9:] == (1, 1, 1, 1, d, 64, CHUNK, pytest.approx(d**-0.5))
    regions = {described(x)[0] - workspace for x in prepare_args[8:11]}
    assert all(offset % 256 == 0 for offset in regions)

    g.execute(tensors, workspace=workspace)  # the same buffers: the same device arrays
    assert recorder.calls[3][3][0] is recorder.calls[0][3][0]


def test_an_occupancy_knob_launches_the_prepare_kernel_with_that_hint(stand_in):
    recorder, kernels = stand_in
    g = _graph(t=130, n=3, h=2)
    g.create_execution_plans()
    names = [g.get_plan_name_at_index(i) for i in range(g.get_execution_plan_count())]
    g.select_plan(names.index("gdn_cutile[BLOCK_V=32,OCCUPANCY=2,SEGMENT=0]"))
    g.build_plans()
    o, _ = g.outputs_for_test
    tensors = {
        g.find_tensor(n): 0x10000 * (i + 1) for i, n in enumerate(("q", "k", "v", "g", "beta", "cu_seqlens"))
    }
    tensors[o] = 0x900000
    g.execute(tensors, workspace=0x4000000)
    launched = [kernel for _, _, kernel, _ in recorder.calls]
    assert launched == [  # at 2, the scan takes the hint too (HINTED_FWD)
        kernels["table"],
        ("hinted", kernels["prepare"], (("occupancy", 2),)),
        ("hinted", kernels["scan"], (("occupancy", 2),)),
    ]


def test_a_segment_knob_launches_the_split_scan_over_segments(stand_in):
    """SEGMENT=16 (1024 tokens): a 2100-token and a 64-token sequence make 3 + 1 segments in
    cdiv(2164, 1024) + 2 = 5 slots; the scan then runs over the slots, from their states."""
    recorder, kernels = stand_in
    t, n, h, d = 2164, 2, 2, 128
    g = _graph(t=t, n=n, h=h, d=d, state=True, final=True)
    g.create_execution_plans()
    names = [g.get_plan_name_at_index(i) for i in range(g.get_execution_plan_count())]
    g.select_plan(names.index("gdn_cutile[BLOCK_V=32,OCCUPANCY=2,SEGMENT=16]"))
    g.build_plans()
    slots = -(-t // 1024) + n
    assert g.get_workspace_size() >= slots * h * d * d * 4 * 3  # N, M and each segment's entering state
    o, final = g.outputs_for_test
    names = ("q", "k", "v", "g", "beta", "cu_seqlens", "h0")
    tensors = {g.find_tensor(name): 0x100000 * (i + 1) for i, name in enumerate(names)}
    tensors[o], tensors[final] = 0x9000000, 0xA000000
    g.execute(tensors, workspace=0x40000000)
    order = "table prepare seg_table seg_offsets seg_bounds segment_scan segment_combine scan".split()
    launched = [kernel for _, _, kernel, _ in recorder.calls]
    want = [kernels[name] for name in order[2:-1]] + [("hinted", kernels["scan"], (("occupancy", 2),))]
    assert launched[0] == kernels["table"] and launched[2:] == want
    grids = dict(zip(order, (grid for _, grid, _, _ in recorder.calls)))
    assert grids["segment_scan"] == (slots, h, d // 32 + d // 32)  # N's value blocks, then M's key blocks
    assert grids["segment_combine"] == (n, h, d // 32)
    assert grids["scan"] == (slots, h, d // 32)
    scan_args = recorder.calls[-1][3]
    assert scan_args[11:13] == (1, 0)  # HAS_H0 (the segment's entering state), no final state there
    combine_args = recorder.calls[-2][3]
    assert combine_args[7:9] == (1, 1)  # HAS_H0, STORE_HT: the final state comes from the combine


def test_a_segment_knob_that_cannot_tile_the_key_dim_is_declined():
    from pygraph_linear_attention.gdn.engine_cutile import segment_reason

    facts = types.SimpleNamespace(head_dim_k=64)
    assert segment_reason(facts, 128, 16) == "SEGMENT=16 needs BLOCK_V=128 to divide the key head dim 64"
    assert segment_reason(facts, 32, 8) == "knob SEGMENT=8 outside its domain (0, 32, 16)"
    assert segment_reason(facts, 32, 16) is None


def test_a_call_with_a_misaligned_workspace_is_refused_and_launches_nothing(stand_in):
    recorder, _ = stand_in
    g = _graph(t=64, n=1, h=1)
    g.create_execution_plans()
    plans = [g.get_plan_name_at_index(i) for i in range(g.get_execution_plan_count())]
    g.select_plan(next(i for i, name in enumerate(plans) if name.startswith("gdn_cutile[")))
    g.build_plans()
    o, _ = g.outputs_for_test
    names = ("q", "k", "v", "g", "beta", "cu_seqlens")
    tensors = {g.find_tensor(name): 0x10000 * (i + 1) for i, name in enumerate(names)}
    tensors[o] = 0x900000
    with pytest.raises(
        ValueError, match=r"gdn_cutile \(graph 'gdn'\): workspace pointer 0xc00010 is not 256-byte aligned"
    ):
        g.execute(tensors, workspace=0xC00010)
    assert recorder.calls == []


def _execute_bwd(g, spacing, workspace):
    """execute() a built gdn_bwd graph of `_bwd_graph` on fake addresses, ``spacing`` apart."""
    names = ("q", "k", "v", "dO", "g", "beta", "cu_seqlens", "h0", "dht")
    tensors = {g.find_tensor(name): spacing * (i + 1) for i, name in enumerate(names)}
    for i, out in enumerate(o for o in g.outputs_for_test if o is not None):
        tensors[out] = 0x10000000 * (i + 1)
    g.execute(tensors, workspace=workspace)


def test_planning_a_gdn_bwd_graph_launches_the_backward_in_order(stand_in):
    """The backward's plan: the forward's table and prepare, then the offsets, the two scans, the
    per-chunk gradient and the head-group sums, with GVA's grids (q/k 2 heads, v 4)."""
    recorder, kernels = stand_in
    t, n, h, hv, d = 130, 3, 2, 4, 128
    g = _bwd_graph(t=t, n=n, h=h, hv=hv, d=d)
    g.create_execution_plans()
    names = [g.get_plan_name_at_index(i) for i in range(g.get_execution_plan_count())]

    # gdn_sm90_bwd first (24 scan CTAs, under the SMs): warpgroup MMAs at STAGES 2, then 1, then
    # mma.sync, then segmented (each SEGMENT at STAGES 1 and 2, BLOCK_V 32 and 64; these sequences
    # are short), each warpgroup set first with its chunk gradients fused (WGMMA 2); then
    # gdn_cutile_bwd's: 24 programs at 64: BLOCK_V 32, first with the per-chunk kernels' occupancy
    # hint 2; the split scans last
    def fused_first(knobs):
        return [f"gdn_sm90_bwd[{knobs},WGMMA={w}]" for w in (2, 1)]

    segmented = [
        name
        for s in (16, 32, 64)
        for st in (1, 2)
        for b in (32, 64)
        for name in fused_first(f"BLOCK_V={b},SEGMENT={s},STAGES={st}")
    ]
    assert names == [
        *fused_first("BLOCK_V=32,SEGMENT=0,STAGES=2"), *fused_first("BLOCK_V=64,SEGMENT=0,STAGES=2"),
        *fused_first("BLOCK_V=32,SEGMENT=0,STAGES=1"), *fused_first("BLOCK_V=64,SEGMENT=0,STAGES=1"),
        "gdn_sm90_bwd[BLOCK_V=32,SEGMENT=0,STAGES=1,WGMMA=0]", "gdn_sm90_bwd[BLOCK_V=64,SEGMENT=0,STAGES=1,WGMMA=0]",
        *segmented,
        "gdn_cutile_bwd[BLOCK_V=32,OCCUPANCY=2,SEGMENT=0]", "gdn_cutile_bwd[BLOCK_V=32,OCCUPANCY=0,SEGMENT=0]",
        "gdn_cutile_bwd[BLOCK_V=64,OCCUPANCY=0,SEGMENT=0]", "gdn_cutile_bwd[BLOCK_V=128,OCCUPANCY=0,SEGMENT=0]",
        "gdn_cutile_bwd[BLOCK_V=32,OCCUPANCY=2,SEGMENT=32]", "gdn_cutile_bwd[BLOCK_V=32,OCCUPANCY=2,SEGMENT=16]",
    ]  # fmt: skip
    g.select_plan(names.index("gdn_cutile_bwd[BLOCK_V=32,OCCUPANCY=0,SEGMENT=0]"))  # the hint: the next test
    g.build_plans()
    slots = -(-t // CHUNK) + n
    # at least the per-chunk states and their gradients (bf16) and the fp32 per-head dq, dk, dv
    assert g.get_workspace_size() >= 2 * slots * hv * d * d * 2 + 3 * t * hv * d * 4
    _execute_bwd(g, spacing=0x100000, workspace=0xC000000)
    order = ["table", "offsets", "prepare", "states", "grad_scan", "chunk_grad_output", "chunk_grad_wy"]
    order += ["group_sum"] * 2 + ["gate_sum"] * 2  # dQ, dK summed over GVA's groups; dV written directly
    assert [kernel for _, _, kernel, _ in recorder.calls] == [kernels[name] for name in order]
    grids = [grid for _, grid, _, _ in recorder.calls]
    assert grids[3] == grids[4] == (n, hv, d // 32)
    assert grids[5] == (slots, hv, 2)  # key blocks of min(64, K / 2)
    assert grids[6] == (slots, hv)
    assert grids[7:] == [(3, h), (3, h), (3, hv), (3, hv)]
    grad_scan_args = recorder.calls[4][3]
    assert grad_scan_args[11:15] == (hv // h, 0, 1, 1)  # K_GROUP, L2NORM, HAS_DHT, HAS_H0


def test_a_segment_knob_splits_the_backwards_scans(stand_in):
    """SEGMENT=16 on gdn_bwd: the forward's segment launches, the state scan over the segments,
    grad_scan from zero over each (no per-chunk stores), the reverse walk, grad_scan over them."""
    recorder, kernels = stand_in
    t, n, h, d = 2164, 2, 2, 128
    g = _bwd_graph(t=t, n=n, h=h, hv=h, d=d)
    g.create_execution_plans()
    names = [g.get_plan_name_at_index(i) for i in range(g.get_execution_plan_count())]
    g.select_plan(names.index("gdn_cutile_bwd[BLOCK_V=32,OCCUPANCY=2,SEGMENT=16]"))
    g.build_plans()
    _execute_bwd(g, spacing=0x1000000, workspace=0x40000000)
    order = "table offsets prepare seg_table seg_offsets seg_bounds offsets segment_scan segment_combine"
    order += " states grad_scan segment_combine_grad grad_scan chunk_grad_output chunk_grad_wy"
    launched = [kernel for _, _, kernel, _ in recorder.calls][: len(order.split())]
    want = [kernels[name] for name in order.split()]
    want[2] = ("hinted", kernels["prepare"], (("occupancy", 2),))
    want[-2:] = [("hinted", kernels[name], (("occupancy", 2),)) for name in order.split()[-2:]]
    assert launched == want
    slots = -(-t // 1024) + n
    grids = [grid for _, grid, _, _ in recorder.calls]
    assert grids[9] == grids[10] == grids[12] == (slots, h, d // 32)  # the scans over the segments
    assert grids[11] == (n, h, d // 32)  # the reverse walk, per sequence
    g_pass, final_pass = recorder.calls[10][3], recorder.calls[12][3]
    assert g_pass[13:16] == (0, 1, 0)  # from zero, its last state (G) stored, no per-chunk stores
    assert final_pass[13:16] == (1, 0, 1)  # from the gradient leaving the segment, chunks stored


def test_the_backward_occupancy_knob_hints_its_per_chunk_kernels_only(stand_in):
    recorder, kernels = stand_in
    g = _bwd_graph(t=130, n=3, h=2, hv=4, d=128)
    g.create_execution_plans()
    names = [g.get_plan_name_at_index(i) for i in range(g.get_execution_plan_count())]
    g.select_plan(names.index("gdn_cutile_bwd[BLOCK_V=32,OCCUPANCY=2,SEGMENT=0]"))
    g.build_plans()
    _execute_bwd(g, spacing=0x100000, workspace=0xC000000)
    launched = [kernel for _, _, kernel, _ in recorder.calls]

    def hinted(name):
        return ("hinted", kernels[name], (("occupancy", 2),))

    assert launched[:7] == [
        kernels["table"], kernels["offsets"], hinted("prepare"), kernels["states"], kernels["grad_scan"],
        hinted("chunk_grad_output"), hinted("chunk_grad_wy"),
    ]  # fmt: skip
    assert all(not isinstance(k, tuple) for k in launched[7:])  # the head sums: no hint


@pytest.mark.parametrize(
    ("h", "hv", "l2norm", "sums"),
    [
        (2, 2, False, []),
        (2, 2, True, ["dQ", "dK"]),  # the l2 norm's backward runs in the head sums
        (1, 4, False, ["dQ", "dK"]),  # GVA: q/k gradients summed over the v heads they serve
        (4, 2, False, ["dV"]),  # GQA
    ],
    ids=["plain", "l2norm", "gva", "gqa"],
)
def test_a_gradient_skips_its_head_sum_where_the_chunk_kernels_write_it(h, hv, l2norm, sums):
    from pygraph_linear_attention.gdn.cutile_bwd_host import GdnCutileBwdConfig

    cfg = GdnCutileBwdConfig(
        tokens=100, sequences=2, heads_qk=h, heads_v=hv, heads_g=max(h, hv), heads_beta=max(h, hv),
        heads_a_log=1, heads_dt_bias=1, key_dim=64, value_dim=64, io_dtype="bfloat16", scale=0.125,
        use_qk_l2norm=l2norm,
    )  # fmt: skip
    launched = cfg.launches()
    assert [n for n in launched if n in ("dQ", "dK", "dV")] == sums
    assert launched[-2:] == ("dG", "dBeta")
