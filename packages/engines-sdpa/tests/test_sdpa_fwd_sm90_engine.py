"""sdpa_fwd_sm90 on the CPU: its support rules, its call path with the compiled function replaced by
a recorder (pointer order, sizes, the scale, the refusals), and real CuTe DSL compiles of its kernel
for sm_90a (no GPU needed)."""

from __future__ import annotations

import importlib.util
import math

import pytest
from sdpa_engine_calls import Recorder, pack_of, spill_frames

import pygraph
from pygraph import data_type as dt
from pygraph.engines.base import PlanConfig
from pygraph_sdpa.engines import sm90 as engine_mod
from pygraph_sdpa.engines.sm90 import SdpaFwdSm90Engine, key_for
from pygraph_sdpa.kernels.sdpa_fwd_sm90_host import SdpaFwdKey

ENGINE_ID = 20500
needs_cute = pytest.mark.skipif(
    importlib.util.find_spec("cutlass") is None, reason="CuTe DSL (nvidia-cutlass-dsl) is not installed"
)


def _graph(
    b=2,
    h=4,
    hk=4,
    s_q=200,
    s_kv=300,
    d=128,
    io=dt.BFLOAT16,
    *,
    padded=False,
    stats=True,
    q_stride=None,
    **attrs,
):
    g = pygraph.Graph(name="attn", io_data_type=io, compute_data_type=dt.FLOAT)
    q = g.tensor(name="q", dim=[b, h, s_q, d], stride=q_stride, data_type=io)
    k = g.tensor(name="k", dim=[b, hk, s_kv, d], data_type=io)
    v = g.tensor(name="v", dim=[b, hk, s_kv, d], data_type=io)
    extra = {}
    if padded:
        extra["seq_len_q"] = g.tensor(name="seq_q", dim=[b, 1, 1, 1], data_type=dt.INT32)
        extra["seq_len_kv"] = g.tensor(name="seq_kv", dim=[b, 1, 1, 1], data_type=dt.INT32)
        extra["use_padding_mask"] = True
    attrs.setdefault("attn_scale", 0.1)
    o, st = g.sdpa(q=q, k=k, v=v, generate_stats=stats, name="sdpa", **extra, **attrs)
    o.set_output(True)
    if st is not None:
        st.set_output(True).set_data_type(dt.FLOAT)
    return g


def _decline(graph) -> str:
    with pytest.raises(pygraph.GraphNotSupportedError) as err:
        SdpaFwdSm90Engine(ENGINE_ID).check_support(graph.engine_request())
    return str(err.value)


@needs_cute
def test_accepts_the_cells_it_is_built_for():
    engine = SdpaFwdSm90Engine(ENGINE_ID)
    engine.check_support(_graph(use_causal_mask=True).engine_request())
    engine.check_support(_graph(d=64, io=dt.HALF, h=8, hk=1, stats=False).engine_request())
    engine.check_support(_graph(padded=True, use_causal_mask_bottom_right=True).engine_request())
    engine.check_support(_graph(use_causal_mask=True, sliding_window_length=64).engine_request())
    engine.check_support(_graph(d=256, use_causal_mask=True).engine_request())


@pytest.mark.parametrize(
    ("kwargs", "reason"),
    [
        ({"d": 96}, "head dims qk=96, v=96: both must be one of (64, 128, 256), equal"),
        ({"attn_scale": None}, "attn_scale must be a number, it is not given"),
        ({"attn_scale": -0.5}, "attn_scale must be positive (masked scores stay -inf through it), got -0.5"),
        ({"dropout": (0.1, 1, 2)}, "features ['dropout'] not supported"),
        (
            {"q_stride": [200 * 4 * 130, 200 * 130, 130, 1]},
            "q's batch, head and row strides must be multiples of 8 (16-byte rows), got [104000, 26000, 130, 1]",
        ),
        (
            {"q_stride": [4 * 200 * 128, 200 * 128, 1, 200]},
            "q's head dim must be contiguous (stride 1)",
        ),
    ],
)
def test_declines_naming_the_rule_and_the_value(kwargs, reason):
    assert reason in _decline(_graph(**kwargs))


def test_the_p_regs_knob_picks_the_compile_and_is_checked_against_its_domain(recorder, monkeypatch):
    keys = []
    monkeypatch.setattr(engine_mod, "compiled_forward", lambda key: keys.append(key) or recorder)
    req = _graph().engine_request()
    engine = SdpaFwdSm90Engine(ENGINE_ID)
    engine.build_plan(req, PlanConfig(ENGINE_ID), None)  # no knob: P in registers (measured faster)
    engine.build_plan(req, PlanConfig(ENGINE_ID, {"P_REGS": 0}), None)
    assert [k.p_in_registers for k in keys] == [True, False]
    with pytest.raises(pygraph.GraphNotSupportedError, match=r"knob P_REGS=2 outside its domain \(0, 1\)"):
        engine.build_plan(req, PlanConfig(ENGINE_ID, {"P_REGS": 2}), None)


def test_the_compile_key_carries_the_masks_and_requests():
    req = _graph(padded=True, use_causal_mask_bottom_right=True, sliding_window_length=32).engine_request()
    assert key_for(req.facts) == SdpaFwdKey(
        head_dim=128, io_dtype="bfloat16", bottom_right=True, window_left=32, window_right=0, padded=True,
        store_stats=True,
    )  # fmt: skip
    plain = key_for(_graph(io=dt.HALF, d=64, stats=False).engine_request().facts)
    assert (plain.io_dtype, plain.head_dim, plain.window_left, plain.window_right, plain.store_stats) == (
        "float16", 64, -1, -1, False,
    )  # fmt: skip


@pytest.fixture
def recorder(monkeypatch):
    monkeypatch.setattr(engine_mod.importlib.util, "find_spec", lambda name: object())
    fn = Recorder()
    monkeypatch.setattr(engine_mod, "compiled_forward", lambda key: fn)
    return fn


def test_a_call_passes_pointers_sizes_and_the_scale_in_order(recorder):
    from pygraph.execution.context import ExecutionContext

    graph = _graph(padded=True, use_causal_mask=True)
    req = graph.engine_request()
    plan = SdpaFwdSm90Engine(ENGINE_ID).build_plan(req, PlanConfig(ENGINE_ID), None)
    pack = pack_of(graph, base=0x10000, step=0x10000)
    plan.execute(graph, pack, ExecutionContext(handle=None, stream=7, workspace=0))
    (args,) = recorder.calls
    layout = req.layout
    node = req.facts.node
    want = [
        pack.buffers[layout.position(t)].pointer
        for t in (
            node.inputs["q"],
            node.inputs["k"],
            node.inputs["v"],
            node.outputs["O"],
            node.outputs["Stats"],
        )
    ]
    want += [pack.buffers[layout.position(node.inputs[p])].pointer for p in ("seq_len_q", "seq_len_kv")]
    assert list(args[:7]) == want
    assert args[7:11] == (0, 0, 0, 0)  # no ragged offsets
    q_strides = (4 * 200 * 128, 200 * 128, 128)
    kv_strides = (4 * 300 * 128, 300 * 128, 128)
    assert args[11:29] == (2, 4, 4, 4, 200, 300, *q_strides, *kv_strides, *kv_strides, *q_strides)
    assert math.isclose(args[29], 0.1 * math.log2(math.e)) and args[30] == 7


def _ragged_graph(
    b=3, h=4, s=256, d=128, *, padded=True, skip_offset=(), multiplier=1, cu_ports=False, stats_offset=False
):
    """A THD graph as the torch op declares it: [B, H, S, D] with the packed strides, an INT32
    ragged offset [B + 1, 1, 1, 1] per operand, the padding mask over the lengths."""
    g = pygraph.Graph(name="thd", io_data_type=dt.BFLOAT16, compute_data_type=dt.FLOAT)
    thd = [s * h * d, d, h * d, 1]
    ops = {n: g.tensor(name=n, dim=[b, h, s, d], stride=thd, data_type=dt.BFLOAT16) for n in ("q", "k", "v")}
    extra = {}
    if padded:
        extra["seq_len_q"] = g.tensor(name="seq_q", dim=[b, 1, 1, 1], data_type=dt.INT32)
        extra["seq_len_kv"] = g.tensor(name="seq_kv", dim=[b, 1, 1, 1], data_type=dt.INT32)
        extra["use_padding_mask"] = True
    o, st = g.sdpa(
        q=ops["q"], k=ops["k"], v=ops["v"], generate_stats=True, attn_scale=0.1, name="sdpa", **extra
    )
    o.set_output(True).set_stride(thd)
    st.set_output(True).set_data_type(dt.FLOAT)
    if stats_offset:
        st.set_ragged_offset(g.tensor(name="stats_offset", dim=[b + 1, 1, 1, 1], data_type=dt.INT32))
    skip = (skip_offset,) if isinstance(skip_offset, str) else skip_offset
    for n, t in (*ops.items(), ("o", o)):
        if n not in skip:
            t.set_ragged_offset(g.tensor(name=f"{n}_offset", dim=[b + 1, 1, 1, 1], data_type=dt.INT32))
            if multiplier != 1:
                t._raw_set("_ragged_offset_multiplier", multiplier)
    return g


@needs_cute
def test_a_ragged_graph_is_served_and_its_offsets_follow_the_lengths(recorder):
    from pygraph.execution.context import ExecutionContext
    from pygraph.execution.variant_pack import OperandBuffer, VariantPack

    graph = _ragged_graph()
    req = graph.engine_request()
    assert key_for(req.facts).ragged
    plan = SdpaFwdSm90Engine(ENGINE_ID).build_plan(req, PlanConfig(ENGINE_ID), None)
    layout, node = req.layout, req.facts.node
    operands = (node.inputs["q"], node.inputs["k"], node.inputs["v"], node.outputs["O"])
    # the operands bound as packed [T, H, D] buffers (T = 500 tokens), the rest as declared
    packed = {layout.position(t) for t in operands}
    buffers = [
        OperandBuffer(0x100000 * (i + 1), (500, 4, 128) if i in packed else tuple(d.shape),
                      (512, 128, 1) if i in packed else tuple(d.stride), d.dtype)
        for i, d in enumerate(layout.declared)
    ]  # fmt: skip
    pack = VariantPack(layout, buffers, device=0)
    plan.execute(graph, pack, ExecutionContext(handle=None, stream=7, workspace=0))
    (args,) = recorder.calls
    offsets = [pack.buffers[layout.position(t.ragged_offset)].pointer for t in operands]
    assert list(args[7:11]) == offsets
    assert args[11:17] == (3, 4, 4, 4, 256, 256)


@pytest.mark.parametrize(
    ("kwargs", "reason"),
    [
        ({"skip_offset": "v"}, "ragged: every operand needs ragged offsets, v has none"),
        ({"padded": False}, "ragged operands need the padding mask"),
        ({"multiplier": 2}, "ragged: q's ragged offset multiplier must be 1 (element offsets), got 2"),
    ],
    ids=["an-operand-without-offsets", "no-padding-mask", "a-multiplier"],
)
def test_a_ragged_graph_it_cannot_read_is_declined_naming_the_rule(kwargs, reason):
    with pytest.raises(pygraph.GraphNotSupportedError) as err:
        SdpaFwdSm90Engine(ENGINE_ID).check_support(_ragged_graph(**kwargs).engine_request())
    assert reason in str(err.value)


def test_a_misaligned_operand_is_refused_before_the_launch(recorder):
    from pygraph.execution.context import ExecutionContext

    graph = _graph()
    plan = SdpaFwdSm90Engine(ENGINE_ID).build_plan(graph.engine_request(), PlanConfig(ENGINE_ID), None)
    with pytest.raises(ValueError, match="is not 16-byte aligned"):
        plan.execute(
            graph,
            pack_of(graph, base=0x10008, step=0x10000),
            ExecutionContext(handle=None, stream=None, workspace=0),
        )
    assert recorder.calls == []


def test_an_output_buffer_smaller_than_declared_is_refused_before_the_launch(recorder):
    from pygraph.execution import OperandGeometryError
    from pygraph.execution.context import ExecutionContext

    graph = _graph()
    plan = SdpaFwdSm90Engine(ENGINE_ID).build_plan(graph.engine_request(), PlanConfig(ENGINE_ID), None)
    pack = pack_of(graph, base=0x10000, step=0x10000)
    o = pack.index_of(graph.get_node("sdpa").outputs["O"])
    buf = pack.buffers[o]
    half = (buf.shape[0], buf.shape[1], buf.shape[2] // 2, buf.shape[3])  # half the query rows
    pack.buffers[o] = buf._replace(shape=half)
    with pytest.raises(OperandGeometryError, match=r"sdpa_fwd_sm90 .*operand o is shape"):
        plan.execute(graph, pack, ExecutionContext(handle=None, stream=None, workspace=0))
    assert recorder.calls == []


@needs_cute
@pytest.mark.parametrize(
    "key",
    [
        SdpaFwdKey(128, "bfloat16", False, -1, 0, True, True),  # causal, padded, stats
        SdpaFwdKey(64, "float16", True, 64, 0, False, False),  # bottom-right causal window, no stats
        SdpaFwdKey(128, "bfloat16", False, -1, -1, False, True, p_in_registers=True),  # P in registers
        SdpaFwdKey(64, "float16", False, -1, 0, True, True, p_in_registers=True),
        SdpaFwdKey(256, "bfloat16", False, -1, 0, False, True),  # 64-key blocks
        SdpaFwdKey(256, "bfloat16", True, 128, 0, True, True, p_in_registers=True),
    ],
    ids=["d128-causal-padded", "d64-fp16-window", "d128-p-regs", "d64-fp16-p-regs", "d256", "d256-p-regs"],
)
def test_the_kernel_compiles_for_sm90a_without_a_gpu(monkeypatch, tmp_path, key):
    from pygraph_sdpa.kernels import sdpa_fwd_sm90_host as host

    monkeypatch.setenv(host.CACHE_ENV, str(tmp_path))
    fn = host.compiled_forward(key)
    assert callable(fn)
    assert list(tmp_path.rglob("*.o")), "the compiled object is kept on disk"
    frames = spill_frames(tmp_path)  # no kernel spills (ptxas spills silently)
    assert frames and all(f == 0 for f in frames.values()), frames


def test_a_ragged_offset_on_o_alone_or_on_the_stats_is_declined():
    g = _ragged_graph(skip_offset=("q", "k", "v"))  # q, k, v dense, O still ragged
    assert "['o'] carry ragged offsets but q, k and v do not" in _decline(g)
    g = _ragged_graph(stats_offset=True)
    assert "Stats has a ragged offset: the kernels write it dense" in _decline(g)


def test_a_ragged_operand_is_not_held_to_a_span_through_its_unused_batch_stride():
    # 64 sequences of one 32768-token bucket, H16 D128: [B, H, S, D] would span about 4.3e9 elements
    SdpaFwdSm90Engine(ENGINE_ID).check_support(_ragged_graph(b=64, h=16, s=32768).engine_request())
