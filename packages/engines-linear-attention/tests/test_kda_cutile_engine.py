"""kda_cutile and gdn2_cutile on the CPU: their support rules (each decline naming the rule and the
value), that they ship opt-in, and a kda and a gdn2 graph planned, built and executed through the
graph API with the kernels' own source run on the numpy stand-in of cuTile (the emulator of
`test_gdn_cutile_emulated.py`, whose launch stand-in reads the plan's device arrays from host
memory), outputs poisoned first, against the float64 references."""

from __future__ import annotations

import sys

import pytest

torch = pytest.importorskip("torch")

import pygraph  # noqa: E402
from pygraph.environment import OPT_IN_ENV  # noqa: E402
from pygraph_linear_attention.kda import engine_cutile as engine_mod  # noqa: E402
from pygraph_linear_attention.reference import (  # noqa: E402
    gated_delta_net_v2_reference,
    kimi_delta_attention_reference,
)

T_LENGTHS, H, D = (37, 0, 90), 2, 64


def _inputs(op: str, seed: int = 0, safe_gate: bool = False) -> dict:
    gen = torch.Generator().manual_seed(seed)
    t = sum(T_LENGTHS)

    def rand(*shape):
        return torch.randn(*shape, generator=gen)

    x = {
        "q": rand(t, H, D).bfloat16(),
        "k": torch.nn.functional.normalize(rand(t, H, D), dim=-1).bfloat16(),
        "v": rand(t, H, D).bfloat16(),
        "g": rand(t, H, D) if safe_gate else -torch.rand(t, H, D, generator=gen) * 0.5,
        "beta": torch.rand(t, H, *((D,) if op == "gdn2" else ()), generator=gen),
        "cu_seqlens": torch.tensor([0, *T_LENGTHS]).cumsum(0).to(torch.int32),
        "initial_state": rand(len(T_LENGTHS), H, D, D) * 0.3,
    }
    if op == "gdn2":
        x["w"] = torch.rand(t, H, D, generator=gen).bfloat16()
    if safe_gate:
        x["a_log"], x["dt_bias"] = rand(H) * 0.5, rand(H, D) * 0.5
    return x


def _graph(op: str, x: dict, **attrs):
    g = pygraph.Graph(name=f"{op}-emulated", io_data_type=x["q"].dtype)
    ports = {
        n: g.tensor(name=n, dim=list(t.shape), stride=list(t.stride()), data_type=t.dtype)
        for n, t in x.items()
    }
    o, final = getattr(g, op)(**ports, output_final_state=True, **attrs)
    o.set_output(True)
    final.set_output(True).set_data_type(torch.float32)
    return g, ports, o, final


@pytest.fixture
def emulated(monkeypatch, no_cute_dsl_kda):
    import importlib.util
    import pathlib

    here = pathlib.Path(__file__)
    spec = importlib.util.spec_from_file_location(
        "kda_emulation", here.with_name("test_kda_cutile_emulated.py")
    )
    emulation = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(emulation)
    launcher = sys.modules.get("gdn_cutile_emulation") or emulation.EMULATION
    spec = importlib.util.spec_from_file_location(
        "kda_bwd_emulation", here.with_name("test_kda_cutile_bwd_emulated.py")
    )
    backward = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(backward)
    monkeypatch.setitem(sys.modules, "pygraph_linear_attention.kda.cutile_fwd", emulation.KDA)
    # built on the launcher's stand-in: each program reads its block index from the one that launches it
    bwd_kernels = backward.emulated_module(launcher.EMU)
    monkeypatch.setitem(sys.modules, "pygraph_linear_attention.kda.cutile_bwd", bwd_kernels)
    monkeypatch.setattr(engine_mod, "cutile_launch", launcher._EmulatedLaunch)
    monkeypatch.setattr(engine_mod, "cutile_installed", lambda: True)
    monkeypatch.setenv(OPT_IN_ENV, "kda_cutile,gdn2_cutile,kda_cutile_bwd,gdn2_cutile_bwd")


@pytest.mark.parametrize("op", ["kda", "gdn2"])
@pytest.mark.parametrize("safe_gate", [False, True], ids=["gates-as-given", "safe-gate"])
def test_a_graph_runs_end_to_end_on_the_emulated_kernels(emulated, op, safe_gate):
    x = _inputs(op, safe_gate=safe_gate)
    attrs = {"safe_gate": True, "gate_lower_bound": -4.0} if safe_gate else {}
    g, ports, o, final = _graph(op, x, **attrs)
    g.create_execution_plans()
    g.build_plans()
    assert g.selected_plan.name.startswith(f"{op}_cutile[")
    t = sum(T_LENGTHS)
    out = {o: torch.full((t, H, D), float("nan"), dtype=torch.bfloat16),
           final: torch.full((len(T_LENGTHS), H, D, D), float("nan"))}  # fmt: skip
    raw = torch.empty(g.get_workspace_size() + 256, dtype=torch.uint8)
    g.execute({**{ports[n]: v for n, v in x.items()}, **out}, workspace=raw[(-raw.data_ptr()) % 256 :])

    ref = gated_delta_net_v2_reference if op == "gdn2" else kimi_delta_attention_reference
    gates = [x["g"], x["beta"], *([x["w"]] if op == "gdn2" else [])]
    options = (
        {"safe_gate": True, "gate_lower_bound": -4.0, "a_log": x["a_log"], "dt_bias": x["dt_bias"]}
        if safe_gate
        else {}
    )
    want_o, want_s = ref(x["q"], x["k"], x["v"], *gates, x["cu_seqlens"], initial_state=x["initial_state"],
                         output_final_state=True, **options)  # fmt: skip

    def rel(got, want):
        return float((got.double() - want).norm() / want.norm())

    assert rel(out[o], want_o) < 1e-2 and rel(out[final], want_s) < 1e-2  # bf16 w, u, O between kernels


@pytest.mark.parametrize("op", ["kda", "gdn2"])
@pytest.mark.parametrize("safe_gate", [False, True], ids=["gates-as-given", "safe-gate"])
def test_a_backward_graph_runs_end_to_end_on_the_emulated_kernels(emulated, op, safe_gate):
    from pygraph_linear_attention.reference import (
        gated_delta_net_v2_backward_reference,
        kimi_delta_attention_backward_reference,
    )

    x = _inputs(op, safe_gate=safe_gate)
    t, n = sum(T_LENGTHS), len(T_LENGTHS)
    gen = torch.Generator().manual_seed(3)
    d_o = torch.randn(t, H, D, generator=gen).bfloat16()
    d_final = torch.randn(n, H, D, D, generator=gen)
    attrs = {"safe_gate": True, "gate_lower_bound": -4.0} if safe_gate else {}
    g = pygraph.Graph(name=f"{op}-bwd-emulated", io_data_type=torch.bfloat16)
    ports = {
        name: g.tensor(name=name, dim=list(v.shape), stride=list(v.stride()), data_type=v.dtype)
        for name, v in {**x, "dO": d_o, "d_final_state": d_final}.items()
    }
    outs = getattr(g, f"{op}_bwd")(**ports, **attrs)
    names = ["dQ", "dK", "dV", "dG", "dBeta", *(["dW"] if op == "gdn2" else []), "d_initial_state", "d_a_log",
             "d_dt_bias"]  # fmt: skip
    like = {"dQ": "q", "dK": "k", "dV": "v", "dG": "g", "dBeta": "beta", "dW": "w", "d_initial_state": "initial_state",
            "d_a_log": "a_log", "d_dt_bias": "dt_bias"}  # fmt: skip
    out = {}
    for name, port in zip(names, outs):
        if port is not None:
            port.set_output(True).set_data_type(x[like[name]].dtype)
            out[name] = (port, torch.full(x[like[name]].shape, float("nan"), dtype=x[like[name]].dtype))
    g.create_execution_plans()
    g.build_plans()
    assert g.selected_plan.name.startswith(f"{op}_cutile_bwd[")
    raw = torch.empty(g.get_workspace_size() + 256, dtype=torch.uint8)
    pack = {ports[name]: v for name, v in {**x, "dO": d_o, "d_final_state": d_final}.items()}
    g.execute({**pack, **dict(out.values())}, workspace=raw[(-raw.data_ptr()) % 256 :])

    options = {"a_log": x["a_log"], "dt_bias": x["dt_bias"], **attrs} if safe_gate else {}
    gates = [x["g"], x["beta"], *([x["w"]] if op == "gdn2" else [])]
    ref = gated_delta_net_v2_backward_reference if op == "gdn2" else kimi_delta_attention_backward_reference
    want = ref(x["q"], x["k"], x["v"], *gates, x["cu_seqlens"], d_o, grad_final_state=d_final,
               initial_state=x["initial_state"], **options)  # fmt: skip
    assert set(out) == set(want)
    errors = {
        name: float((got.double() - want[name]).norm() / want[name].norm()) for name, (_, got) in out.items()
    }
    assert all(err < 2e-2 for err in errors.values()), (
        errors
    )  # bf16 h, dh, v_new, dv_new and dQ, dK, dV between kernels


def test_the_engines_ship_opt_in(monkeypatch, no_cute_dsl_kda):  # kda_sm90 (default-on) declining
    monkeypatch.delenv(OPT_IN_ENV, raising=False)
    monkeypatch.setattr(engine_mod, "cutile_installed", lambda: True)
    g, *_ = _graph("kda", _inputs("kda"))
    with pytest.raises(pygraph.GraphNotSupportedError):
        g.create_execution_plans()


def _decline(op: str, x: dict, **attrs) -> str:
    g, *_ = _graph(op, x, **attrs)
    engine = (engine_mod.Gdn2CutileEngine if op == "gdn2" else engine_mod.KdaCutileEngine)(
        20301 if op == "gdn2" else 20201
    )
    with pytest.raises(pygraph.GraphNotSupportedError) as err:
        engine.check_support(g.engine_request())
    return str(err.value)


@pytest.mark.parametrize(
    ("op", "change", "message"),
    [
        ("kda", {"safe_gate": True, "a_log": torch.zeros(H), "dt_bias": torch.zeros(H)},
         "dt_bias must be [heads, K], got [2]"),
        ("kda", {"safe_gate": True, "a_log": torch.zeros(H), "dt_bias": torch.zeros(H, 3)},
         "dt_bias has 6 values: 64 per head for heads dividing the output's 2"),
        ("kda", {"safe_gate": True, "a_log": torch.zeros(H, 1)}, "a_log must be [heads], got [2, 1]"),
        ("kda", {"gate_domain": "linear"}, "gate_domain='linear' is not served"),
        ("gdn2", {"w": torch.zeros(127, H, D)}, "w (the write gate) must be the io dtype BFLOAT16, got FLOAT"),
        ("kda", {"q": torch.zeros(127, H, 48, dtype=torch.bfloat16), "k": torch.zeros(127, H, 48, dtype=torch.bfloat16),
                 "g": -torch.ones(127, H, 48)},  # a per-channel gate of K=48 (the op refuses another)
         "head dims K=48, V=64: each must be one of (64, 128, 256)"),
    ],
)  # fmt: skip
def test_a_graph_it_cannot_serve_is_declined_naming_the_rule(monkeypatch, op, change, message):
    monkeypatch.setattr(engine_mod, "cutile_installed", lambda: True)
    x = _inputs(op)
    attrs = {k: v for k, v in change.items() if not isinstance(v, torch.Tensor)}
    if attrs.get("safe_gate"):
        x["g"] = torch.randn(x["g"].shape)
    x |= {k: v for k, v in change.items() if isinstance(v, torch.Tensor)}
    if "q" in change:
        x.pop("initial_state")
    assert message in _decline(op, x, **attrs)


@pytest.mark.parametrize("op", ["kda", "gdn2"])
def test_the_device_suites_runners_run_on_the_emulated_kernels(emulated, op, monkeypatch):
    """`kda_cases`' runners (the sm90 suite's) on host tensors, the kernels emulated: the harness the
    device run uses, checked before it spends device time."""
    import kda_cases

    monkeypatch.setattr(kda_cases, "DEVICE", "cpu")
    case = next(c for c in kda_cases.CASES if c.op == op and c.name == "d64")
    forward = kda_cases.run_case(case)
    assert (
        forward["plan"].startswith(f"{op}_cutile[")
        and forward["o_rel"] < 1e-2
        and forward["state_rel"] < 1e-2
    )
    backward = kda_cases.run_bwd_case(case)
    assert backward["plan"].startswith(f"{op}_cutile_bwd[")
    assert all(err < 2e-2 for err in backward["rel"].values()), backward


@pytest.mark.parametrize("sm", [80, 90, 100, 103, 120])
def test_the_backward_engines_serve_every_cutile_arch(monkeypatch, sm):
    """SM80 to SM121, SM100 included: the gradient scan that tileiras 13.4 failed to compile there
    (P computed inside it) now takes plain products (tests/test_kda_cutile_compile.py compiles every
    backward kernel for sm_100)."""
    monkeypatch.setattr(engine_mod, "cutile_installed", lambda: True)
    x = _inputs("kda")
    g = pygraph.Graph(name="kda-bwd-arch", io_data_type=torch.bfloat16, sm_version=sm)
    d_o = torch.zeros(sum(T_LENGTHS), H, D, dtype=torch.bfloat16)
    ports = {
        n: g.tensor(name=n, dim=list(v.shape), stride=list(v.stride()), data_type=v.dtype)
        for n, v in {**x, "dO": d_o}.items()
    }
    for out in g.kda_bwd(**ports):
        if out is not None:
            out.set_output(True)
    engine_mod.KdaCutileBwdEngine(20202).check_support(g.engine_request())
