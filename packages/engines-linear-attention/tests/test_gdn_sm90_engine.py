"""gdn_sm90 and gdn_sm90_bwd on the CPU: their support rules, their call paths with the compiled
function replaced by a recorder (pointer order, sizes, the spare address of absent operands, the
refusals), and real CuTe DSL compiles of their kernels for sm_90a (no GPU needed)."""

from __future__ import annotations

import importlib.util
import pathlib

import pytest
import torch  # imported here: the recorder fixture replaces importlib's find_spec

import pygraph
from pygraph import data_type as dt
from pygraph.engines.base import PlanConfig
from pygraph.execution import OperandGeometryError
from pygraph_linear_attention.common.host import search_steps
from pygraph_linear_attention.gdn import engine_sm90 as engine_mod
from pygraph_linear_attention.gdn.engine_sm90 import GdnSm90BwdEngine, GdnSm90Engine
from pygraph_linear_attention.gdn.sm90_host import Sm90BwdKey, Sm90Key, compiled_forward

ENGINE_ID = 20100


def _graph(t=130, n=3, h=2, hv=2, d=128, io=dt.BFLOAT16, *, state=False, final=False, q_stride=None, **attrs):
    g = pygraph.Graph(name="gdn", io_data_type=io)
    q = g.tensor(name="q", dim=[t, h, d], stride=q_stride, data_type=io)
    k = g.tensor(name="k", dim=[t, h, d], data_type=io)
    v = g.tensor(name="v", dim=[t, hv, d], data_type=io)
    ho = max(h, hv)
    gate = g.tensor(name="g", dim=[t, hv], data_type=dt.FLOAT)
    b = g.tensor(name="beta", dim=[t, hv], data_type=dt.FLOAT)
    cu = g.tensor(name="cu_seqlens", dim=[n + 1], data_type=dt.INT32)
    extra = {}
    if state:
        extra["initial_state"] = g.tensor(name="h0", dim=[n, ho, d, d], data_type=dt.FLOAT)
    o, fs = g.gdn(q=q, k=k, v=v, g=gate, beta=b, cu_seqlens=cu, output_final_state=final, **extra, **attrs)
    o.set_output(True)
    if fs is not None:
        fs.set_output(True).set_data_type(dt.FLOAT)
    g.outputs_for_test = (o, fs)
    return g


def _decline(graph) -> str:
    with pytest.raises(pygraph.GraphNotSupportedError) as err:
        GdnSm90Engine(ENGINE_ID).check_support(graph.engine_request())
    return str(err.value)


@pytest.mark.skipif(
    importlib.util.find_spec("cutlass") is None, reason="CuTe DSL (nvidia-cutlass-dsl) is not installed"
)
def test_accepts_the_forward_it_is_built_for():
    GdnSm90Engine(ENGINE_ID).check_support(
        _graph(state=True, final=True, use_qk_l2norm=True).engine_request()
    )
    GdnSm90Engine(ENGINE_ID).check_support(_graph(d=64, h=1, hv=4).engine_request())


@pytest.mark.parametrize(
    ("kwargs", "reason"),
    [
        ({"d": 256}, "head dims K=256, V=256: each must be one of (64, 128)"),
        ({"t": 2**20, "n": 1, "h": 16, "hv": 16}, "T x heads x head dim = 1048576 x 16 x 128 = 2147483648"),
        (
            {"q_stride": [2 * 2 * 128, 128, 1]},
            "operand q (q) must be row-major contiguous [256, 128, 1], got stride [512, 128, 1]",
        ),
    ],
)
def test_declines_naming_the_rule_and_the_value(kwargs, reason):
    assert reason in _decline(_graph(**kwargs))


class _Recorder:
    def __init__(self):
        self.calls = []

    def __call__(self, *args):
        self.calls.append(args)


@pytest.fixture
def recorder(monkeypatch):
    fn = _Recorder()
    monkeypatch.setattr(engine_mod, "compiled_forward", lambda key: fn)
    monkeypatch.setattr(engine_mod.importlib.util, "find_spec", lambda name: object())
    return fn


def _built(g, plan_name):
    g.create_execution_plans()
    names = [g.get_plan_name_at_index(i) for i in range(g.get_execution_plan_count())]
    g.select_plan(names.index(plan_name))
    g.build_plans()
    return g


def test_a_call_passes_the_pointers_in_order_and_the_spare_for_absent_operands(recorder):
    t, n, h, d = 130, 3, 2, 128
    g = _built(
        _graph(t=t, n=n, h=h, d=d, final=True), "gdn_sm90[BLOCK_V=32,SEGMENT=0,SPLIT=0,STAGES=1,WGMMA=0]"
    )
    names = ("q", "k", "v", "g", "beta", "cu_seqlens")
    addresses = {name: 0x100000 * (i + 1) for i, name in enumerate(names)}
    tensors = {g.find_tensor(name): addr for name, addr in addresses.items()}
    o, final = g.outputs_for_test
    tensors[o], tensors[final] = 0xA00000, 0xB00000
    workspace = 0xC00000
    g.execute(tensors, workspace=workspace)
    (args,) = recorder.calls
    pointers, sizes, stream = args[:21], args[21:-1], args[-1]
    gamma, w, u = pointers[11:14]
    assert gamma == workspace and w % 256 == 0 and u % 256 == 0 and gamma < w < u
    spare = pointers[5]
    assert spare > u  # a_log, dt_bias, h0 absent, and no SPLIT (hs, vnew): the spare region, after u
    assert pointers == (
        addresses["q"], addresses["k"], addresses["v"], addresses["g"], addresses["beta"], spare, spare,
        addresses["cu_seqlens"], spare, 0xA00000, 0xB00000, gamma, w, u, spare, spare, spare, spare, spare, spare,
        spare,
    )  # fmt: skip
    assert sizes == (t, n, search_steps(n), h, h, h, h, h, 1, 1, d**-0.5)  # the 32-bit sizes, the scale
    assert stream == 0


def test_two_scales_share_one_compiled_forward(counted_compiles):
    """The compile key holds no scale: graphs differing only in it share one compile (the process
    cache's object), and each passes its own scale, after the sizes."""
    from pygraph_linear_attention.gdn import sm90_host as host

    built = counted_compiles(host, engine_mod, _Recorder)
    plan = "gdn_sm90[BLOCK_V=32,SEGMENT=0,SPLIT=0,STAGES=1,WGMMA=1]"
    graphs = [_built(_graph(t=64, n=1, h=1, scale=scale), plan) for scale in (0.5, 0.25)]
    (fn,) = built
    names = ("q", "k", "v", "g", "beta", "cu_seqlens")
    for g in graphs:
        tensors = {g.find_tensor(name): 0x10000 * (i + 1) for i, name in enumerate(names)}
        tensors[g.outputs_for_test[0]] = 0x900000
        g.execute(tensors, workspace=0xC00000)
    assert [args[-2] for args in fn.calls] == [0.5, 0.25]


def test_the_fused_warpgroup_scan_passes_tb_and_no_w_or_u(recorder):
    t, n, h, d = 130, 3, 2, 128
    g = _built(
        _graph(t=t, n=n, h=h, d=d, final=True), "gdn_sm90[BLOCK_V=32,SEGMENT=0,SPLIT=0,STAGES=1,WGMMA=1]"
    )
    names = ("q", "k", "v", "g", "beta", "cu_seqlens")
    tensors = {g.find_tensor(name): 0x100000 * (i + 1) for i, name in enumerate(names)}
    o, final = g.outputs_for_test
    tensors[o], tensors[final] = 0xA00000, 0xB00000
    workspace = 0xC00000
    g.execute(tensors, workspace=workspace)
    (args,) = recorder.calls
    pointers = args[:21]
    gamma, tb, spare = pointers[11], pointers[16], pointers[5]
    # gamma (fp32 per token and head), then one row of 64 Tb values per token and head, then the spare
    assert gamma == workspace and tb == workspace + t * h * 4 + (-(t * h * 4)) % 256 and spare > tb
    assert pointers[12:16] == (spare,) * 4  # w, u, hs, vnew
    assert g.get_workspace_size() < t * h * 2 * (d + d)  # under what w and u alone would take


def test_the_segmented_scan_passes_each_chunks_contraction(recorder):
    """With SEGMENT, prepare writes each chunk's largest beta ||k||^2 (the warmup's test) into a
    [chunk slots, HO] fp32 region after the segments' transitions and states; without, con is the spare."""
    t, n, h, d = 130, 3, 2, 128
    names = ("q", "k", "v", "g", "beta", "cu_seqlens")
    passed = []
    for segment in (16, 0):
        g = _built(
            _graph(t=t, n=n, h=h, d=d, final=True),
            f"gdn_sm90[BLOCK_V=32,SEGMENT={segment},SPLIT=0,STAGES=1,WGMMA=1]",
        )
        tensors = {g.find_tensor(name): 0x100000 * (i + 1) for i, name in enumerate(names)}
        o, final = g.outputs_for_test
        tensors[o], tensors[final] = 0xA00000, 0xB00000
        g.execute(tensors, workspace=0xC00000)
        passed.append(recorder.calls[-1][:21])
    segmented, plain = passed
    seg_mb, seg_st, con, spare = segmented[18], segmented[19], segmented[20], segmented[5]
    assert seg_mb < seg_st < con < spare and con % 256 == 0
    assert plain[18:21] == (plain[5],) * 3


def test_a_misaligned_operand_is_refused_before_the_launch(recorder):
    g = _built(_graph(t=64, n=1, h=1), "gdn_sm90[BLOCK_V=32,SEGMENT=0,SPLIT=0,STAGES=1,WGMMA=0]")
    o, _ = g.outputs_for_test
    names = ("q", "k", "v", "g", "beta", "cu_seqlens")
    tensors = {g.find_tensor(name): 0x10000 * (i + 1) for i, name in enumerate(names)}
    tensors[g.find_tensor("q")] = 0x10008
    tensors[o] = 0x900000
    with pytest.raises(
        ValueError, match=r"gdn_sm90 \(graph 'gdn'\): operand q at 0x10008 is not 16-byte aligned"
    ):
        g.execute(tensors, workspace=0xC00000)
    assert recorder.calls == []


def test_an_output_buffer_smaller_than_declared_is_refused_before_the_launch(recorder):
    g = _built(_graph(t=64, n=1, h=2), "gdn_sm90[BLOCK_V=32,SEGMENT=0,SPLIT=0,STAGES=1,WGMMA=0]")
    o, _ = g.outputs_for_test
    names = ("q", "k", "v", "g", "beta", "cu_seqlens")
    tensors = {g.find_tensor(name): 0x10000 * (i + 1) for i, name in enumerate(names)}
    tensors[o] = torch.empty(16, 2, 128, dtype=torch.bfloat16)  # 16 of the 64 tokens' rows
    with pytest.raises(
        OperandGeometryError, match=r"gdn_sm90 \(graph 'gdn'\): operand o is shape \[16, 2, 128\]"
    ):
        g.execute(tensors, workspace=0xC00000)
    assert recorder.calls == []


def test_the_scan_grid_picks_gdn_sm90s_first_plan():
    # B1 T32768 H16: 32 scan CTAs at BLOCK_V 64; B4 T4096 H16: 128; 8 sequences: 256 (H100 timings
    # in heuristics.sm90_order): the two-warpgroup scan, but the one long sequence segmented
    def sm90_names(t, n):
        g = _graph(t=t, n=n, h=16, hv=16)
        g.create_execution_plans()
        names = [g.get_plan_name_at_index(i) for i in range(g.get_execution_plan_count())]
        return [name for name in names if name.startswith("gdn_sm90[")]

    long_single, batch, wide = sm90_names(32768, 1), sm90_names(16384, 4), sm90_names(32768, 8)
    assert long_single[0] == "gdn_sm90[BLOCK_V=64,SEGMENT=64,SPLIT=0,STAGES=1,WGMMA=1]"
    assert batch[0] == "gdn_sm90[BLOCK_V=64,SEGMENT=0,SPLIT=0,STAGES=2,WGMMA=4]"
    assert wide[0] == "gdn_sm90[BLOCK_V=64,SEGMENT=0,SPLIT=0,STAGES=2,WGMMA=4]"
    # the same domain, reordered: every (SPLIT, BLOCK_V, STAGES), the split ones at WGMMA 1 and 2 and
    # the fused ones at WGMMA 1 and 3, unsegmented and at each SEGMENT, and at WGMMA 4 (STAGES 2 only)
    assert sorted(long_single) == sorted(batch) == sorted(wide) and len(batch) == 56
    assert sum("WGMMA=4]" in name for name in batch) == 8
    assert all("STAGES=2" in name for name in batch if "WGMMA=4]" in name)
    # a short single sequence is not segmented
    assert sm90_names(1024, 1)[0] == "gdn_sm90[BLOCK_V=64,SEGMENT=0,SPLIT=0,STAGES=2,WGMMA=4]"


def test_the_wgmma_knob_is_checked_against_its_domain_and_split():
    g = _graph(t=64, n=1, h=1)
    g.create_execution_plans()
    names = [g.get_plan_name_at_index(i) for i in range(g.get_execution_plan_count())]
    assert "gdn_sm90[BLOCK_V=32,SEGMENT=0,SPLIT=1,STAGES=1,WGMMA=1]" in names
    assert "gdn_sm90[BLOCK_V=32,SEGMENT=0,SPLIT=1,STAGES=1,WGMMA=2]" in names
    assert "gdn_sm90[BLOCK_V=32,SEGMENT=0,SPLIT=0,STAGES=1,WGMMA=1]" in names  # the fused warpgroup scan
    assert not any("SPLIT=0" in n and "WGMMA=2]" in n for n in names if n.startswith("gdn_sm90["))
    engine = GdnSm90Engine(20100)
    facts = None
    for knobs, rule in (
        ({"BLOCK_V": 32, "STAGES": 1, "SPLIT": 0, "WGMMA": 2}, r"gdn_sm90: knob WGMMA=2 needs SPLIT=1"),
        ({"BLOCK_V": 32, "STAGES": 1, "SPLIT": 1, "WGMMA": 5}, r"gdn_sm90: knob WGMMA=5 outside its domain"),
        (
            {"BLOCK_V": 32, "STAGES": 1, "SPLIT": 0, "WGMMA": 4},
            r"gdn_sm90: knob WGMMA=4 \(two warpgroups.*needs STAGES=2, got STAGES=1",
        ),
        (
            {"BLOCK_V": 32, "STAGES": 2, "SPLIT": 1, "WGMMA": 4},
            r"gdn_sm90: knob WGMMA=4 is a fused warpgroup scan \(3: reading prepare's scores; 4: on two "
            r"warpgroups\) and needs SPLIT=0, got SPLIT=1",
        ),
        (
            {"BLOCK_V": 32, "STAGES": 1, "SPLIT": 1, "WGMMA": 3},
            r"gdn_sm90: knob WGMMA=3 is a fused warpgroup scan",
        ),
        (
            {"BLOCK_V": 32, "STAGES": 1, "SPLIT": 1, "WGMMA": 1, "SEGMENT": 16},
            r"gdn_sm90: knob SEGMENT=16 needs the fused warpgroup scan \(SPLIT=0, WGMMA=1\), got SPLIT=1, WGMMA=1",
        ),
    ):
        with pytest.raises(pygraph.GraphNotSupportedError, match=rule):
            engine._knobs(facts, PlanConfig(0, knobs))


def test_the_slot_search_halves_until_one_sequence_is_left():
    assert [search_steps(n) for n in (1, 2, 3, 7, 8, 1000)] == [1, 2, 2, 3, 4, 10]


@pytest.mark.skipif(
    importlib.util.find_spec("cutlass") is None, reason="CuTe DSL (nvidia-cutlass-dsl) is not installed"
)
@pytest.mark.parametrize("wgmma", [0, 1, 2], ids=["mma-sync", "wgmma-scan", "wgmma-scan-output"])
def test_the_kernels_compile_for_sm90a_without_a_gpu(monkeypatch, tmp_path, wgmma):
    monkeypatch.setenv("PYGRAPH_CACHE_DIR", str(tmp_path))  # a compile, not a load from an earlier run
    key = Sm90Key(
        key_dim=128, value_dim=128, block_v=32, io_dtype="bfloat16", beta_dtype="bfloat16", h0_dtype="float32",
        ht_dtype="bfloat16", cu_dtype="int64", l2norm=True, beta_sigmoid=True, neg_eigval=True, safe_gate=True,
        has_dt_bias=True, has_h0=True, store_ht=True, stages=2, split=True, wgmma=wgmma,
    )  # fmt: skip
    fn = compiled_forward(key)
    assert callable(fn)
    assert compiled_forward(key) is fn  # kept for the process


@pytest.mark.skipif(
    importlib.util.find_spec("cutlass") is None, reason="CuTe DSL (nvidia-cutlass-dsl) is not installed"
)
def test_a_compiled_forward_is_stored_and_loaded_back_from_the_disk(monkeypatch, tmp_path):
    from pygraph_linear_attention.common import sm90_compile as cache
    from pygraph_linear_attention.gdn import sm90_host as host

    monkeypatch.setattr(cache.KERNELS, "_memory", {})
    monkeypatch.delenv(cache.CACHE_ENV, raising=False)
    monkeypatch.setenv("PYGRAPH_CACHE_DIR", str(tmp_path))
    key = Sm90Key(
        key_dim=64, value_dim=64, block_v=32, io_dtype="bfloat16", beta_dtype="float32", h0_dtype="float32",
        ht_dtype="float32", cu_dtype="int32", l2norm=False, beta_sigmoid=False, neg_eigval=False, safe_gate=False,
        has_dt_bias=False, has_h0=False, store_ht=True, stages=1,
    )  # fmt: skip
    built = []
    real = host._compile
    monkeypatch.setattr(host, "_compile", lambda *a: built.append(1) or real(*a))
    assert callable(host.compiled_forward(key)) and built == [1]
    (entry,) = (tmp_path / "gdn_sm90").glob("*.o")
    assert entry.stat().st_size > 0
    cache.KERNELS.clear_memory()  # a fresh process: only the disk remembers
    assert callable(host.compiled_forward(key)) and built == [1]


@pytest.mark.skipif(
    importlib.util.find_spec("cutlass") is None, reason="CuTe DSL (nvidia-cutlass-dsl) is not installed"
)
def test_the_disk_cache_digests_every_module_the_kernels_import():
    """An edit to any module a compiled kernel is built from (gdn's and kda's kernels, what they import,
    transitively, and the compile itself) changes the disk key, so no stale object is loaded."""
    import ast

    from pygraph.kernel_cache import module_sources
    from pygraph_linear_attention.common import sm90_compile

    digested = {path.resolve() for path in module_sources(sm90_compile.KERNELS.roots).values()}
    roots = ["gdn.sm90_fwd", "gdn.sm90_bwd", "kda.sm90_fwd", "kda.sm90_bwd", "common.sm90_compile"]
    todo, seen = [f"pygraph_linear_attention.{name}" for name in roots], set()
    while todo:
        module = todo.pop()
        if module in seen:
            continue
        seen.add(module)
        path = pathlib.Path(importlib.util.find_spec(module).origin).resolve()
        assert path in digested, f"{module} ({path.name}) builds a kernel but is not in the disk key's digest"
        for node in ast.walk(ast.parse(path.read_text())):
            # what the kernels import from this package, and the shared CuTe DSL blocks of core
            if (
                isinstance(node, ast.ImportFrom)
                and node.module
                and (
                    node.module.startswith("pygraph_linear_attention.")
                    or node.module == "pygraph.engines.cute_tiles"
                )
            ):
                todo.append(node.module)
    assert "pygraph_linear_attention.common.host" in seen  # CHUNK: the hazard a hand-kept list had


# --- gdn_sm90_bwd -------------------------------------------------------------------------------------

BWD_ID = 20103


def _bwd_graph(t=130, n=3, h=2, hv=4, d=128, *, state=True, final=True):
    g = pygraph.Graph(name="gdn_bwd", io_data_type=dt.BFLOAT16)
    q, k = (g.tensor(name=x, dim=[t, h, d], data_type=dt.BFLOAT16) for x in ("q", "k"))
    v = g.tensor(name="v", dim=[t, hv, d], data_type=dt.BFLOAT16)
    grad = g.tensor(name="dO", dim=[t, max(h, hv), d], data_type=dt.BFLOAT16)
    gate, beta = (g.tensor(name=x, dim=[t, hv], data_type=dt.FLOAT) for x in ("g", "beta"))
    cu = g.tensor(name="cu_seqlens", dim=[n + 1], data_type=dt.INT32)
    extra = {}
    if state:
        extra["initial_state"] = g.tensor(name="h0", dim=[n, max(h, hv), d, d], data_type=dt.FLOAT)
    if final:
        extra["d_final_state"] = g.tensor(name="dht", dim=[n, max(h, hv), d, d], data_type=dt.FLOAT)
    outs = g.gdn_bwd(q=q, k=k, v=v, g=gate, beta=beta, cu_seqlens=cu, dO=grad, **extra)
    for out, like in zip(outs, (q, k, v, gate, beta, extra.get("initial_state"))):
        if out is not None:
            out.set_output(True).set_data_type(like.data_type)
    g.outputs_for_test = outs
    return g


def test_each_engine_serves_one_direction_and_names_the_other():
    with pytest.raises(
        pygraph.GraphNotSupportedError,
        match="gdn_sm90: serves gdn graphs; gdn_bwd graphs are served by gdn_sm90_bwd",
    ):
        GdnSm90Engine(ENGINE_ID).check_support(_bwd_graph().engine_request())
    with pytest.raises(
        pygraph.GraphNotSupportedError,
        match="gdn_sm90_bwd: serves gdn_bwd graphs; gdn graphs are served by gdn_sm90",
    ):
        GdnSm90BwdEngine(BWD_ID).check_support(_graph().engine_request())
    with pytest.raises(pygraph.GraphNotSupportedError, match=r"gdn_sm90_bwd: head dims K=256, V=256"):
        GdnSm90BwdEngine(BWD_ID).check_support(_bwd_graph(d=256).engine_request())


@pytest.fixture
def bwd_recorder(monkeypatch):
    fn = _Recorder()
    monkeypatch.setattr(engine_mod, "compiled_backward", lambda key: fn.keys.append(key) or fn)
    monkeypatch.setattr(engine_mod.importlib.util, "find_spec", lambda name: object())
    fn.keys = []
    return fn


def test_a_backward_call_passes_its_pointers_in_order(bwd_recorder):
    t, n, h, hv, d = 130, 3, 2, 4, 128
    g = _built(_bwd_graph(t=t, n=n, h=h, hv=hv, d=d), "gdn_sm90_bwd[BLOCK_V=32,STAGES=1,WGMMA=0]")
    (key,) = bwd_recorder.keys
    # GVA (2 q/k heads, 4 output heads): dQ and dK go through the head sums, dV is written directly
    assert (key.direct_qk, key.direct_v, key.has_h0, key.has_dht) == (False, True, True, True)
    names = ("q", "k", "v", "g", "beta", "cu_seqlens", "dO", "h0", "dht")
    addresses = {name: 0x100000 * (i + 1) for i, name in enumerate(names)}
    tensors = {g.find_tensor(name): addr for name, addr in addresses.items()}
    outs = [o for o in g.outputs_for_test if o is not None]  # dQ dK dV dG dBeta d_initial_state
    for i, out in enumerate(outs):
        tensors[out] = 0x1000000 * (i + 1)
    workspace = 0x8000000
    g.execute(tensors, workspace=workspace)
    (args,) = bwd_recorder.calls
    pointers, sizes = args[:35], args[35:-1]
    spare = pointers[5]  # a_log, dt_bias, d_a_log, d_dt_bias absent
    assert pointers[:19] == (
        addresses["q"], addresses["k"], addresses["v"], addresses["g"], addresses["beta"], spare, spare,
        addresses["cu_seqlens"], addresses["h0"], addresses["dO"], addresses["dht"],
        *(0x1000000 * (i + 1) for i in range(5)), 0x6000000, spare, spare,
    )  # fmt: skip
    ws = pointers[19:]  # gamma first, every region 256-byte aligned, in order, the spare last
    assert ws[0] == workspace and all(p % 256 == 0 for p in ws) and list(ws) == sorted(ws) and spare > ws[-1]
    assert sizes == (t, n, search_steps(n), h, hv, hv, hv, hv, 1, 1, d**-0.5)


@pytest.mark.skipif(
    importlib.util.find_spec("cutlass") is None, reason="CuTe DSL (nvidia-cutlass-dsl) is not installed"
)
@pytest.mark.parametrize(
    ("wgmma", "stages"), [(False, 1), (True, 1), (True, 2)], ids=["mma-sync", "wgmma", "wgmma-prefetch"]
)
def test_the_backward_compiles_for_sm90a_and_is_loaded_back_from_the_disk(
    monkeypatch, tmp_path, wgmma, stages
):
    from pygraph_linear_attention.common import sm90_compile as cache
    from pygraph_linear_attention.gdn import sm90_host as host

    monkeypatch.setattr(cache.KERNELS, "_memory", {})
    monkeypatch.delenv(cache.CACHE_ENV, raising=False)
    monkeypatch.setenv("PYGRAPH_CACHE_DIR", str(tmp_path))
    key = Sm90BwdKey(
        key_dim=128, value_dim=128, block_v=32, io_dtype="bfloat16", beta_dtype="bfloat16", h0_dtype="float32",
        dh0_dtype="bfloat16", dht_dtype="float32", cu_dtype="int64", dg_dtype="float32", dbeta_dtype="bfloat16",
        da_log_dtype="float32", ddt_bias_dtype="float32", l2norm=True, beta_sigmoid=True, neg_eigval=True,
        safe_gate=True, has_dt_bias=True, has_h0=True, has_dht=True, direct_qk=False, direct_v=False, wgmma=wgmma,
        stages=stages,
    )  # fmt: skip
    built = []
    real = host._compile
    monkeypatch.setattr(host, "_compile", lambda *a: built.append(1) or real(*a))
    assert callable(host.compiled_backward(key)) and built == [1]
    cache.KERNELS.clear_memory()
    assert callable(host.compiled_backward(key)) and built == [1]


def test_per_chunk_states_past_32_bit_offsets_are_declined_where_they_are_stored(recorder):
    # 2^19 tokens x 16 heads x 128: the operands fit 32-bit offsets (2^30), the per-chunk states not
    big = {"t": 2**19, "n": 1, "h": 16, "hv": 16}
    reason = "the per-chunk states hold (T // 64 + N + 1) x heads x V x K = 8194 x 16 x 128 x 128"
    with pytest.raises(
        pygraph.GraphNotSupportedError, match=r"gdn_sm90_bwd: the per-chunk states hold"
    ) as err:
        GdnSm90BwdEngine(BWD_ID).check_support(_bwd_graph(**big).engine_request())
    assert reason in str(err.value)
    g = _graph(**big)
    GdnSm90Engine(ENGINE_ID).check_support(g.engine_request())  # the fused forward stores none
    with pytest.raises(pygraph.GraphNotSupportedError, match=r"gdn_sm90: SPLIT=1: the per-chunk states hold"):
        GdnSm90Engine(ENGINE_ID).build_plan(
            g.engine_request(), pygraph.engines.base.PlanConfig(ENGINE_ID, {"SPLIT": 1}), None
        )


def test_a_plan_label_names_its_knobs_and_head_dims():
    cfg = type("Cfg", (), {"key_dim": 128, "value_dim": 64})()
    assert engine_mod.plan_label(PlanConfig(20100, {"STAGES": 2, "BLOCK_V": 32}), cfg) == (
        "K=128 V=64 [BLOCK_V=32,STAGES=2]"
    )
    assert engine_mod.plan_label(PlanConfig(20100, None), cfg) == "K=128 V=64"
