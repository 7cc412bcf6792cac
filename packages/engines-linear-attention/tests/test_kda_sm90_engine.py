"""kda_sm90, gdn2_sm90 and their backwards (kda_sm90_bwd, gdn2_sm90_bwd) on the CPU: that they ship
default-on, their support rules (each decline naming the rule and the value), their call paths with the
compiled function replaced by a recorder (pointer order, sizes, the spare address of absent operands),
the hook's order, and real CuTe DSL compiles of their kernels for sm_90a (no GPU needed). The device
suite is `test_kda_cutile_sm90.py`'s cases."""

from __future__ import annotations

import importlib.util

import pytest
import torch  # imported here: the recorder fixture replaces importlib's find_spec

import pygraph
from pygraph import data_type as dt
from pygraph.environment import OPT_IN_ENV
from pygraph.execution import OperandGeometryError
from pygraph_linear_attention.common.host import search_steps
from pygraph_linear_attention.kda import engine_sm90 as engine_mod
from pygraph_linear_attention.kda import sm90_host as host
from pygraph_linear_attention.kda.cutile_bwd_host import KdaCutileBwdConfig
from pygraph_linear_attention.kda.cutile_host import KdaCutileConfig
from pygraph_linear_attention.kda.engine_sm90 import Gdn2Sm90Engine, KdaSm90BwdEngine, KdaSm90Engine

_OPT_IN = "kda_sm90,gdn2_sm90"
_NEEDS_CUTE = pytest.mark.skipif(
    importlib.util.find_spec("cutlass") is None, reason="CuTe DSL (nvidia-cutlass-dsl) is not installed"
)


def _graph(op="kda", t=130, n=3, h=2, hv=2, d=128, io=dt.BFLOAT16, *, state=False, final=False, q_stride=None,
           safe=False, a_log_dtype=dt.FLOAT, sm=90, **attrs):  # fmt: skip
    g = pygraph.Graph(name=op, io_data_type=io, sm_version=sm)
    ho = max(h, hv)
    ports = {
        "q": g.tensor(name="q", dim=[t, h, d], stride=q_stride, data_type=io),
        "k": g.tensor(name="k", dim=[t, h, d], data_type=io),
        "v": g.tensor(name="v", dim=[t, hv, d], data_type=io),
        "g": g.tensor(name="g", dim=[t, hv, d], data_type=dt.FLOAT),
        "beta": g.tensor(name="beta", dim=[t, hv, d] if op == "gdn2" else [t, hv], data_type=dt.FLOAT),
        "cu_seqlens": g.tensor(name="cu_seqlens", dim=[n + 1], data_type=dt.INT32),
    }
    if op == "gdn2":
        ports["w"] = g.tensor(name="w", dim=[t, hv, d], data_type=io)
    if state:
        ports["initial_state"] = g.tensor(name="h0", dim=[n, ho, d, d], data_type=dt.FLOAT)
    if safe:
        ports["a_log"] = g.tensor(name="a_log", dim=[hv], data_type=a_log_dtype)
        ports["dt_bias"] = g.tensor(name="dt_bias", dim=[hv, d], data_type=dt.FLOAT)
        attrs["safe_gate"] = True
    o, fs = getattr(g, op)(**ports, output_final_state=final, **attrs)
    o.set_output(True)
    if fs is not None:
        fs.set_output(True).set_data_type(dt.FLOAT)
    g.outputs_for_test = (o, fs)
    return g


def _engine(op):
    return Gdn2Sm90Engine(20300) if op == "gdn2" else KdaSm90Engine(20200)


def _decline(graph, op="kda") -> str:
    with pytest.raises(pygraph.GraphNotSupportedError) as err:
        _engine(op).check_support(graph.engine_request())
    return str(err.value)


def _plan_names(g) -> list[str]:
    g.create_execution_plans()
    return [g.get_plan_name_at_index(i) for i in range(g.get_execution_plan_count())]


def test_the_forward_ships_default_on(monkeypatch):
    monkeypatch.setattr(engine_mod.importlib.util, "find_spec", lambda name: object())
    monkeypatch.delenv(OPT_IN_ENV, raising=False)
    assert _plan_names(_graph())[0] == "kda_sm90[BLOCK_V=32,STAGES=2]"
    assert _plan_names(_graph("gdn2"))[0] == "gdn2_sm90[BLOCK_V=32,STAGES=2]"


@_NEEDS_CUTE
@pytest.mark.parametrize("op", ["kda", "gdn2"])
def test_accepts_the_forward_it_is_built_for(op):
    _engine(op).check_support(
        _graph(op, state=True, final=True, safe=True, use_qk_l2norm=True).engine_request()
    )
    _engine(op).check_support(_graph(op, d=64, h=1, hv=4).engine_request())


@pytest.mark.parametrize(
    ("op", "kwargs", "reason"),
    [
        ("kda", {"d": 256}, "kda_sm90: head dims K=256, V=256: each must be one of (64, 128)"),
        ("gdn2", {"q_stride": [2 * 2 * 128, 128, 1]},
         "gdn2_sm90: operand q (q) must be row-major contiguous [256, 128, 1], got stride [512, 128, 1]"),
        ("kda", {"safe": True, "a_log_dtype": dt.BFLOAT16}, "kda_sm90: a_log must be FLOAT, got BFLOAT16"),
        ("kda", {"t": 2**20, "n": 1, "h": 16, "hv": 16},
         "kda_sm90: T x heads x head dim = 1048576 x 16 x 128 = 2147483648"),
        ("gdn2", {"sm": 100}, "gdn2_sm90: requires SM90..SM90, found SM100"),
    ],
)  # fmt: skip
def test_declines_naming_the_rule_and_the_value(op, kwargs, reason):
    assert reason in _decline(_graph(op, **kwargs), op)


def test_a_kda_graph_is_not_a_gdn2_one():
    assert "gdn2_sm90: serves gdn2 graphs, this is a kda graph (served by kda_cutile)" in _decline(
        _graph(), "gdn2"
    )


class _Recorder:
    def __init__(self):
        self.calls, self.keys = [], []

    def __call__(self, *args):
        self.calls.append(args)


@pytest.fixture
def recorder(monkeypatch):
    fn = _Recorder()
    monkeypatch.setattr(engine_mod, "compiled_forward", lambda key: fn.keys.append(key) or fn)
    monkeypatch.setattr(engine_mod.importlib.util, "find_spec", lambda name: object())
    monkeypatch.setenv(OPT_IN_ENV, _OPT_IN)
    return fn


def test_a_call_passes_the_pointers_in_order_and_the_spare_for_absent_operands(recorder):
    t, n, h, d = 130, 3, 2, 128
    g = _graph("gdn2", t=t, n=n, h=h, d=d, final=True)
    names = _plan_names(g)
    g.select_plan(names.index("gdn2_sm90[BLOCK_V=32,STAGES=2]"))
    g.build_plans()
    ports = ("q", "k", "v", "g", "beta", "w", "cu_seqlens")
    addresses = {name: 0x100000 * (i + 1) for i, name in enumerate(ports)}
    tensors = {g.find_tensor(name): addr for name, addr in addresses.items()}
    o, final = g.outputs_for_test
    tensors[o], tensors[final] = 0xA00000, 0xB00000
    workspace = 0xC00000
    g.execute(tensors, workspace=workspace)
    (args,) = recorder.calls
    pointers, sizes, stream = args[:20], args[20:-1], args[-1]
    regions = pointers[12:20]  # glast qd kd w u p hs vnew, in the workspace's order
    assert regions[0] == workspace and list(regions) == sorted(regions)
    assert all(r % 256 == 0 for r in regions)
    spare = pointers[6]
    assert spare > regions[-1]  # a_log, dt_bias, h0 absent: the spare region, after the last
    assert pointers[:12] == (
        addresses["q"], addresses["k"], addresses["v"], addresses["g"], addresses["beta"], addresses["w"],
        spare, spare, addresses["cu_seqlens"], spare, 0xA00000, 0xB00000,
    )  # fmt: skip
    assert sizes == (t, n, search_steps(n), h, h, h, h, h, h, h, h, d**-0.5)  # the 32-bit sizes, the scale
    assert stream == 0
    (key,) = recorder.keys
    assert key.gdn2 and key.block_v == 32 and key.stages == 2 and key.store_ht and not key.has_h0


@pytest.mark.parametrize("op", ["kda", "gdn2"])
def test_two_scales_share_one_compiled_forward(counted_compiles, op):
    """The compile key holds no scale: graphs differing only in it share one compile (the process
    cache's object), and each passes its own scale, after the sizes."""
    built = counted_compiles(host, engine_mod, _Recorder)
    graphs = [_graph(op, t=64, n=1, h=1, hv=1, scale=scale) for scale in (0.5, 0.25)]
    ports = ("q", "k", "v", "g", "beta", *(("w",) if op == "gdn2" else ()), "cu_seqlens")
    for g in graphs:
        g.select_plan(_plan_names(g).index(f"{op}_sm90[BLOCK_V=32,STAGES=1]"))
        g.build_plans()
    (fn,) = built
    for g in graphs:
        tensors = {g.find_tensor(name): 0x100000 * (i + 1) for i, name in enumerate(ports)}
        tensors[g.outputs_for_test[0]] = 0xA00000
        g.execute(tensors, workspace=0xC00000)
    assert [args[-2] for args in fn.calls] == [0.5, 0.25]


@pytest.mark.parametrize("port", ["beta", "w"])
def test_gdn2s_beta_and_write_gate_must_be_16_byte_aligned(recorder, port):
    # GDN-2's prepare and grad_wy read them 8 channels (16 bytes) at a time: a misaligned one is refused
    # at the call that passes it, before any launch; KDA's one beta a row is read 2 bytes at a time
    g = _graph("gdn2", t=64, n=1, h=1, hv=1)
    g.create_execution_plans()
    g.build_plans()
    tensors = {g.find_tensor(name): 0x100000 * (i + 1) for i, name in enumerate(("q", "k", "v", "g", "beta", "w", "cu_seqlens"))}  # fmt: skip
    tensors[g.find_tensor(port)] += 8
    tensors[g.outputs_for_test[0]] = 0xA00000
    role = {"beta": "beta", "w": "w_gate"}[port]
    with pytest.raises(
        ValueError,
        match=rf"gdn2_sm90 \(graph 'gdn2'\): operand {role} at 0x[0-9a-f]+8 is not 16-byte aligned",
    ):
        g.execute(tensors, workspace=0xC00000)
    assert recorder.calls == []
    kda = _graph(t=64, n=1, h=1, hv=1)
    kda.create_execution_plans()
    kda.build_plans()
    tensors = {kda.find_tensor(name): 0x100000 * (i + 1) for i, name in enumerate(("q", "k", "v", "g", "beta", "cu_seqlens"))}  # fmt: skip
    tensors[kda.find_tensor("beta")] += 2
    tensors[kda.outputs_for_test[0]] = 0xA00000
    kda.execute(tensors, workspace=0xC00000)
    assert len(recorder.calls) == 1


@pytest.mark.parametrize("op", ["kda", "gdn2"])
def test_an_output_buffer_smaller_than_declared_is_refused_before_the_launch(recorder, op):
    g = _graph(op, t=64, n=1, h=1, hv=1)
    g.create_execution_plans()
    g.build_plans()
    ports = (
        ("q", "k", "v", "g", "beta", "w", "cu_seqlens")
        if op == "gdn2"
        else ("q", "k", "v", "g", "beta", "cu_seqlens")
    )
    tensors = {g.find_tensor(name): 0x100000 * (i + 1) for i, name in enumerate(ports)}
    o = g.outputs_for_test[0]
    tensors[o] = torch.empty(16, *o.dim[1:], dtype=torch.bfloat16)  # 16 of the 64 tokens' rows
    with pytest.raises(OperandGeometryError, match=rf"{op}_sm90 .*operand o is shape \[16, 1, 128\]"):
        g.execute(tensors, workspace=0xC00000)
    assert recorder.calls == []


def test_the_workspace_is_what_the_plan_carves(recorder):
    g = _graph(t=4096, n=4, h=16, hv=16)
    g.create_execution_plans()
    g.build_plans()
    assert g.selected_plan.name.startswith("kda_sm90[")
    cfg = KdaCutileConfig(op="kda", tokens=4096, sequences=4, heads_qk=16, heads_v=16, key_dim=128,
                          value_dim=128, io_dtype="bfloat16", scale=1.0)  # fmt: skip
    assert g.get_workspace_size() == host.workspace_bytes(cfg)
    names = [r.name for r in host.workspace_regions(cfg)]
    assert names == ["glast", *host.POINTERS[13:], "spare"]


def test_the_hook_puts_the_hopper_forward_first_with_gdn_sm90s_stages_rule(monkeypatch):
    monkeypatch.setenv(OPT_IN_ENV, f"{_OPT_IN},kda_cutile,gdn2_cutile")
    monkeypatch.setattr(engine_mod.importlib.util, "find_spec", lambda name: object())
    from pygraph_linear_attention.kda import engine_cutile as kda_cutile

    monkeypatch.setattr(kda_cutile, "cutile_installed", lambda: True)
    long_single = _plan_names(_graph(t=32768, n=1, h=16, hv=16))  # 64 scan CTAs at BLOCK_V 32
    wide = _plan_names(_graph("gdn2", t=32768, n=8, h=16, hv=16))  # 512
    assert long_single[:6] == [
        "kda_sm90[BLOCK_V=32,STAGES=2]", "kda_sm90[BLOCK_V=32,STAGES=1]",
        "kda_sm90[BLOCK_V=64,STAGES=2]", "kda_sm90[BLOCK_V=64,STAGES=1]",
        "kda_sm90[BLOCK_V=16,STAGES=2]", "kda_sm90[BLOCK_V=16,STAGES=1]",
    ]  # fmt: skip
    # then the cuTile forward, BLOCK_V by gdn_cutile's rule: 32 first under half the SMs at 64 (32
    # programs), 64 first past it (256)
    assert long_single[6:] == ["kda_cutile[BLOCK_V=32]", "kda_cutile[BLOCK_V=64]"]
    assert wide[0] == "gdn2_sm90[BLOCK_V=32,STAGES=1]" and wide[6:] == [
        "gdn2_cutile[BLOCK_V=64]",
        "gdn2_cutile[BLOCK_V=32]",
    ]


def _compile_cases(kda_stages: int, gdn2_stages: int) -> list:
    """The compile tests' two configurations: KDA bf16 D128 with every option at BLOCK_V 32, GDN-2
    fp16 D64 with none at BLOCK_V 16 (the STAGES each takes)."""
    return [
        pytest.param("kda", "bfloat16", 128, kda_stages, True, 32, id="kda-bf16-d128-every-option"),
        pytest.param(
            "gdn2", "float16", 64, gdn2_stages, False, 16, id=f"gdn2-fp16-d64-stages{gdn2_stages}-block-v16"
        ),
    ]


@_NEEDS_CUTE
@pytest.mark.parametrize(("op", "io", "d", "stages", "options", "block_v"), _compile_cases(1, 2))
def test_the_kernels_compile_for_sm90a_without_a_gpu(
    monkeypatch, tmp_path, op, io, d, stages, options, block_v
):
    monkeypatch.setenv("PYGRAPH_CACHE_DIR", str(tmp_path))  # a compile, not a load from an earlier run
    flags = dict(use_qk_l2norm=options, use_beta_sigmoid=options, allow_neg_eigval=options, safe_gate=options,
                 has_a_log=options, has_dt_bias=options, has_initial_state=options, output_final_state=options)  # fmt: skip
    cfg = KdaCutileConfig(op=op, tokens=256, sequences=2, heads_qk=2, heads_v=4, key_dim=d, value_dim=d,
                          io_dtype=io, scale=0.1, block_v=block_v, **flags)  # fmt: skip
    names = {"beta": io if op == "gdn2" else "float32", "cu_seqlens": "int64" if options else "int32"}
    if options:
        names |= {"h0": "bfloat16", "ht": "float32"}
    key = host.key_for(cfg, names, stages)
    fn = host.compiled_forward(key)
    assert callable(fn)
    assert host.compiled_forward(key) is fn  # kept for the process
    assert list(tmp_path.rglob("*.o"))  # and on disk


def _bwd_graph(op="kda", t=130, n=3, h=2, hv=2, d=128, io=dt.BFLOAT16, *, state=False, d_final=False, safe=False,
               **attrs):  # fmt: skip
    """A kda_bwd / gdn2_bwd graph (every gradient an output in its input's dtype)."""
    g = pygraph.Graph(name=f"{op}-bwd", io_data_type=io, sm_version=90)
    ho = max(h, hv)
    ports = {
        "q": g.tensor(name="q", dim=[t, h, d], data_type=io),
        "k": g.tensor(name="k", dim=[t, h, d], data_type=io),
        "v": g.tensor(name="v", dim=[t, hv, d], data_type=io),
        "g": g.tensor(name="g", dim=[t, hv, d], data_type=dt.FLOAT),
        "beta": g.tensor(name="beta", dim=[t, hv, d] if op == "gdn2" else [t, hv], data_type=io),
        "cu_seqlens": g.tensor(name="cu_seqlens", dim=[n + 1], data_type=dt.INT32),
        "dO": g.tensor(name="dO", dim=[t, ho, d], data_type=io),
    }
    if op == "gdn2":
        ports["w"] = g.tensor(name="w", dim=[t, hv, d], data_type=io)
    if state:
        ports["initial_state"] = g.tensor(name="h0", dim=[n, ho, d, d], data_type=dt.FLOAT)
    if d_final:
        ports["d_final_state"] = g.tensor(name="dht", dim=[n, ho, d, d], data_type=dt.FLOAT)
    if safe:
        ports["a_log"] = g.tensor(name="a_log", dim=[hv], data_type=dt.FLOAT)
        ports["dt_bias"] = g.tensor(name="dt_bias", dim=[hv, d], data_type=dt.FLOAT)
        attrs["safe_gate"] = True
    outs = [o for o in getattr(g, f"{op}_bwd")(**ports, **attrs) if o is not None]
    for o in outs:
        o.set_output(True)
    g.outputs_for_test = outs
    return g


@pytest.fixture
def bwd_recorder(monkeypatch):
    fn = _Recorder()
    monkeypatch.setattr(engine_mod, "compiled_backward", lambda key: fn.keys.append(key) or fn)
    monkeypatch.setattr(engine_mod.importlib.util, "find_spec", lambda name: object())
    monkeypatch.setenv(OPT_IN_ENV, "kda_sm90_bwd,gdn2_sm90_bwd")
    return fn


def test_the_backward_ships_default_on_and_declines_a_forward_graph(monkeypatch):
    monkeypatch.setattr(engine_mod.importlib.util, "find_spec", lambda name: object())
    monkeypatch.delenv(OPT_IN_ENV, raising=False)
    assert _plan_names(_bwd_graph())[0] == "kda_sm90_bwd[BLOCK_V=32,STAGES=2]"  # no opt-in needed
    with pytest.raises(pygraph.GraphNotSupportedError) as err:
        KdaSm90BwdEngine(20203).check_support(_graph().engine_request())
    assert "kda_sm90_bwd: serves kda_bwd graphs, this is a kda graph" in str(err.value)


def test_a_backward_call_passes_the_pointers_in_order(bwd_recorder):
    t, n, h, d = 130, 3, 2, 128
    g = _bwd_graph("gdn2", t=t, n=n, h=h, d=d, d_final=True)
    names = _plan_names(g)
    assert names[0] == "gdn2_sm90_bwd[BLOCK_V=32,STAGES=2]"
    g.select_plan(0)
    g.build_plans()
    ports = ("q", "k", "v", "g", "beta", "w", "cu_seqlens", "dO", "d_final_state")
    addresses = {name: 0x100000 * (i + 1) for i, name in enumerate(ports)}
    tensors = {
        g.find_tensor({"d_final_state": "dht"}.get(name, name)): addr for name, addr in addresses.items()
    }
    grads = {o.name: 0x1000000 * (i + 1) for i, o in enumerate(g.outputs_for_test)}
    tensors |= {o: grads[o.name] for o in g.outputs_for_test}
    workspace = 0x40000000
    g.execute(tensors, workspace=workspace)
    (args,) = bwd_recorder.calls
    count = len(host.BWD_POINTERS)
    pointers, sizes, stream = args[:count], args[count:-1], args[-1]
    regions = pointers[21:]  # glast .. pb, in the workspace's order
    assert regions[0] == workspace and list(regions) == sorted(regions)
    assert all(r % 256 == 0 for r in regions)
    spare = pointers[6]  # a_log absent
    assert spare > regions[-1]
    by_role = dict(zip(host.BWD_POINTERS, pointers))
    for role in ("q", "k", "v", "g", "beta", "cu_seqlens", "dO"):
        assert by_role[role] == addresses[role]
    assert by_role["w_gate"] == addresses["w"] and by_role["dht"] == addresses["d_final_state"]
    assert by_role["h0"] == by_role["dh0"] == by_role["d_a_log"] == spare
    assert sorted(by_role[r] for r in ("dQ", "dK", "dV", "dG", "dBeta", "dW")) == sorted(grads.values())
    assert sizes == (t, n, search_steps(n), h, h, h, h, h, h, h, h, d**-0.5)
    assert stream == 0
    (key,) = bwd_recorder.keys
    assert key.gdn2 and key.has_dht and not key.has_h0 and key.direct_qk and key.direct_v
    # one head per output head everywhere: the gates' gradients are written without head sums
    assert key.direct_g and key.direct_beta and key.direct_w


@pytest.mark.parametrize("port", ["beta", "w"])
def test_gdn2s_backward_also_refuses_a_misaligned_beta_or_write_gate(bwd_recorder, port):
    g = _bwd_graph("gdn2", t=130, n=3, h=2, d=128, d_final=True)
    _plan_names(g)
    g.select_plan(0)
    g.build_plans()
    ports = ("q", "k", "v", "g", "beta", "w", "cu_seqlens", "dO", "d_final_state")
    tensors = {
        g.find_tensor({"d_final_state": "dht"}.get(n, n)): 0x100000 * (i + 1) for i, n in enumerate(ports)
    }
    tensors |= {o: 0x1000000 * (i + 1) for i, o in enumerate(g.outputs_for_test)}
    tensors[g.find_tensor(port)] += 8
    with pytest.raises(
        ValueError, match=r"gdn2_sm90_bwd \(graph .*\): operand (beta|w_gate) at .* not 16-byte aligned"
    ):
        g.execute(tensors, workspace=0x40000000)
    assert bwd_recorder.calls == []


def test_the_backward_workspace_is_what_the_plan_carves(bwd_recorder):
    g = _bwd_graph(t=4096, n=4, h=16, hv=16)
    g.create_execution_plans()
    g.build_plans()
    assert g.selected_plan.name.startswith("kda_sm90_bwd[")
    cfg = KdaCutileBwdConfig(op="kda", tokens=4096, sequences=4, heads_qk=16, heads_v=16, key_dim=128,
                             value_dim=128, io_dtype="bfloat16", scale=1.0)  # fmt: skip
    last = host.backward_regions(cfg)[-1]
    assert g.get_workspace_size() == last.offset + last.nbytes
    assert [r.name for r in host.backward_regions(cfg)] == [*host.BWD_POINTERS[21:], "spare"]


def test_the_hook_puts_the_cute_backward_before_the_cutile_one(monkeypatch):
    monkeypatch.setenv(OPT_IN_ENV, "kda_sm90_bwd,kda_cutile_bwd")
    monkeypatch.setattr(engine_mod.importlib.util, "find_spec", lambda name: object())
    from pygraph_linear_attention.kda import engine_cutile as kda_cutile

    monkeypatch.setattr(kda_cutile, "cutile_installed", lambda: True)
    names = _plan_names(_bwd_graph(t=32768, n=1, h=16, hv=16))
    assert names[:6] == [
        "kda_sm90_bwd[BLOCK_V=32,STAGES=2]", "kda_sm90_bwd[BLOCK_V=32,STAGES=1]",
        "kda_sm90_bwd[BLOCK_V=64,STAGES=2]", "kda_sm90_bwd[BLOCK_V=64,STAGES=1]",
        "kda_sm90_bwd[BLOCK_V=16,STAGES=2]", "kda_sm90_bwd[BLOCK_V=16,STAGES=1]",
    ]  # fmt: skip
    assert names[6:8] == ["kda_cutile_bwd[BLOCK_V=32]", "kda_cutile_bwd[BLOCK_V=64]"]


@_NEEDS_CUTE
@pytest.mark.parametrize(("op", "io", "d", "stages", "options", "block_v"), _compile_cases(2, 1))
def test_the_backward_kernels_compile_for_sm90a_without_a_gpu(
    monkeypatch, tmp_path, op, io, d, stages, options, block_v
):
    monkeypatch.setenv("PYGRAPH_CACHE_DIR", str(tmp_path))
    flags = dict(use_qk_l2norm=options, use_beta_sigmoid=options, allow_neg_eigval=options, safe_gate=options,
                 has_a_log=options, has_dt_bias=options, has_initial_state=options, has_d_final_state=options)  # fmt: skip
    # GDN-2's g shared by two output heads: its gradient through the head sum, beta's and w's written
    # directly (both paths compiled)
    cfg = KdaCutileBwdConfig(op=op, tokens=256, sequences=2, heads_qk=2, heads_v=4, key_dim=d, value_dim=d,
                             io_dtype=io, scale=0.1, block_v=block_v, heads_g=2 if op == "gdn2" else 0, **flags)  # fmt: skip
    names = {"beta": io, "cu_seqlens": "int32", "dG": "float32", "dBeta": io}
    if options:
        names |= {
            "h0": "float32",
            "dh0": "float32",
            "dht": "float32",
            "d_a_log": "float32",
            "d_dt_bias": "float32",
        }
    if op == "gdn2":
        names["dW"] = io
    key = host.bwd_key_for(cfg, names, stages)
    assert (key.direct_g, key.direct_beta, key.direct_w) == (
        (False, True, True) if op == "gdn2" else (True, False, False)
    )
    fn = host.compiled_backward(key)
    assert callable(fn)
    assert host.compiled_backward(key) is fn
    assert list(tmp_path.rglob("*.o"))
