"""sdpa_bwd_sm90 on the CPU: its support rules, its call path with the compiled function replaced by
a recorder (pointer order, the workspace's two regions, sizes, refusals), and real CuTe DSL compiles
of its kernels for sm_90a (no GPU needed)."""

from __future__ import annotations

import importlib.util

import pytest
from sdpa_engine_calls import Recorder, pack_of, spill_frames

import pygraph
from pygraph import data_type as dt
from pygraph.engines.base import PlanConfig
from pygraph_sdpa.engines import sm90 as engine_mod
from pygraph_sdpa.engines.sm90 import SdpaBwdSm90Engine, bwd_key_for
from pygraph_sdpa.kernels.sdpa_fwd_sm90_host import SdpaBwdKey, backward_workspace

ENGINE_ID = 20600
needs_cute = pytest.mark.skipif(
    importlib.util.find_spec("cutlass") is None, reason="CuTe DSL (nvidia-cutlass-dsl) is not installed"
)


def _graph(b=2, h=8, hk=2, s_q=200, s_kv=300, d=128, io=dt.BFLOAT16, *, do_stride=None, **attrs):
    g = pygraph.Graph(name="attn-bwd", io_data_type=io, compute_data_type=dt.FLOAT)
    q = g.tensor(name="q", dim=[b, h, s_q, d], data_type=io)
    k = g.tensor(name="k", dim=[b, hk, s_kv, d], data_type=io)
    v = g.tensor(name="v", dim=[b, hk, s_kv, d], data_type=io)
    o = g.tensor(name="o", dim=[b, h, s_q, d], data_type=io)
    d_o = g.tensor(name="dO", dim=[b, h, s_q, d], stride=do_stride, data_type=io)
    stats = g.tensor(name="stats", dim=[b, h, s_q, 1], data_type=dt.FLOAT)
    attrs.setdefault("attn_scale", 0.1)
    grads = g.sdpa_backward(q, k, v, o, d_o, stats, name="sdpa_bwd", **attrs)
    for port, like in zip(grads, (q, k, v)):
        port.set_output(True).set_dim(list(like.dim)).set_data_type(io)
    return g


def _decline(graph) -> str:
    with pytest.raises(pygraph.GraphNotSupportedError) as err:
        SdpaBwdSm90Engine(ENGINE_ID).check_support(graph.engine_request())
    return str(err.value)


@needs_cute
def test_accepts_the_cells_it_is_built_for():
    engine = SdpaBwdSm90Engine(ENGINE_ID)
    engine.check_support(_graph(use_causal_mask=True).engine_request())
    engine.check_support(_graph(d=64, io=dt.HALF, hk=1).engine_request())
    engine.check_support(_graph(use_causal_mask_bottom_right=True, sliding_window_length=64).engine_request())


@pytest.mark.parametrize(
    ("kwargs", "reason"),
    [
        ({"d": 256}, "head dims qk=256, v=256: both must be one of (64, 128), equal"),
        ({"d": 96}, "head dims qk=96, v=96: both must be one of (64, 128), equal"),
        ({"attn_scale": None}, "attn_scale must be a number, it is not given"),
        (
            {"do_stride": [8 * 200 * 136, 200 * 136, 136, 1]},
            "dO's strides [217600, 27200, 136, 1] must equal q's [204800, 25600, 128, 1]",
        ),
    ],
)
def test_declines_naming_the_rule_and_the_value(kwargs, reason):
    assert reason in _decline(_graph(**kwargs))


def test_a_deterministic_graph_takes_only_the_dq_pass(recorder):
    graph = _graph(use_deterministic_algorithm=True)
    req = graph.engine_request()
    engine = SdpaBwdSm90Engine(ENGINE_ID)
    engine.check_support(req)
    with pytest.raises(pygraph.GraphNotSupportedError, match="knob DETERMINISTIC=0 sums dQ by atomics"):
        engine.build_plan(req, PlanConfig(ENGINE_ID, {"DETERMINISTIC": 0}), None)
    with pytest.raises(
        pygraph.GraphNotSupportedError, match=r"knob DETERMINISTIC=2 outside its domain \(0, 1\)"
    ):
        engine.build_plan(req, PlanConfig(ENGINE_ID, {"DETERMINISTIC": 2}), None)
    plan = engine.build_plan(req, PlanConfig(ENGINE_ID), None)  # the default follows the graph
    assert plan.get_workspace_size() == backward_workspace(2, 8, 200, 128, deterministic=True)[1] == 12800


def test_the_forward_engine_declines_a_backward_graph_and_back():
    from pygraph_sdpa.engines.sm90 import SdpaFwdSm90Engine

    with pytest.raises(pygraph.GraphNotSupportedError, match="SDPA_BWD graphs are sdpa_bwd_sm90's"):
        SdpaFwdSm90Engine(20500).check_support(_graph().engine_request())


def test_the_compile_key_and_the_workspace():
    req = _graph(use_causal_mask_bottom_right=True, sliding_window_length=32).engine_request()
    assert bwd_key_for(req.facts) == SdpaBwdKey(128, "bfloat16", True, 32, 0, False, deterministic=True)
    assert not bwd_key_for(req.facts, deterministic=False).deterministic
    delta, total = backward_workspace(2, 8, 200, 128)
    assert delta == 12800 and total == 12800 + 2 * 8 * 200 * 128 * 4
    engine = SdpaBwdSm90Engine(ENGINE_ID)
    assert engine.get_workspace_size(req, PlanConfig(ENGINE_ID, {"DETERMINISTIC": 0})) == total
    # no knob: dQ by its own pass (measured the faster), so no accumulator
    assert engine.get_workspace_size(req, PlanConfig(ENGINE_ID)) == delta


@pytest.fixture
def recorder(monkeypatch):
    monkeypatch.setattr(engine_mod.importlib.util, "find_spec", lambda name: object())
    fn = Recorder()
    monkeypatch.setattr(engine_mod, "compiled_backward", lambda key: fn)
    return fn


def test_a_call_passes_pointers_the_workspace_regions_and_sizes_in_order(recorder):
    from pygraph.execution.context import ExecutionContext

    graph = _graph(use_causal_mask=True)
    req = graph.engine_request()
    plan = SdpaBwdSm90Engine(ENGINE_ID).build_plan(req, PlanConfig(ENGINE_ID, {"DETERMINISTIC": 0}), None)
    pack = pack_of(graph)
    workspace = 0x7000000
    plan.execute(graph, pack, ExecutionContext(handle=None, stream=5, workspace=workspace))
    (args,) = recorder.calls
    node, layout = req.facts.node, req.layout
    ports = [node.inputs[p] for p in ("q", "k", "v", "o", "dO", "stats")]
    ports += [node.outputs[p] for p in ("dQ", "dK", "dV")]
    assert list(args[:9]) == [pack.buffers[layout.position(t)].pointer for t in ports]
    # no padding, no ragged offsets; then delta and dQ's sums in the workspace
    assert args[9:21] == (0,) * 10 + (workspace, workspace + 12800)
    q, k = (8 * 200 * 128, 200 * 128, 128), (2 * 300 * 128, 300 * 128, 128)
    assert args[21:35] == (2, 8, 2, 200, 300, *q, *k, *q)
    assert args[35] == pytest.approx(0.1) and args[36] == 5


def test_a_call_without_its_workspace_is_refused(recorder):
    from pygraph.execution.context import ExecutionContext

    graph = _graph()
    plan = SdpaBwdSm90Engine(ENGINE_ID).build_plan(graph.engine_request(), PlanConfig(ENGINE_ID), None)
    with pytest.raises(ValueError, match="needs a workspace of"):
        plan.execute(graph, pack_of(graph), ExecutionContext(handle=None, stream=None, workspace=0))
    assert recorder.calls == []


@needs_cute
@pytest.mark.parametrize(
    "key",
    [
        SdpaBwdKey(128, "bfloat16", False, -1, 0, True),
        SdpaBwdKey(64, "float16", True, 64, 0, False),
        SdpaBwdKey(128, "bfloat16", False, -1, 0, True, deterministic=True),
    ],
    ids=["d128-causal-padded", "d64-fp16-window", "d128-deterministic"],
)
def test_the_kernels_compile_for_sm90a_without_a_gpu(monkeypatch, tmp_path, key):
    from pygraph_sdpa.kernels import sdpa_fwd_sm90_host as host

    monkeypatch.setenv(host.CACHE_ENV, str(tmp_path))
    assert callable(host.compiled_backward(key))
    assert list(tmp_path.rglob("*.o")), "the compiled object is kept on disk"
    frames = spill_frames(tmp_path)  # no kernel spills (ptxas spills silently)
    assert frames and all(f == 0 for f in frames.values()), frames
