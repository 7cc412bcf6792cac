"""The kda and gdn2 forward's correctness cases and the runner the sm90 tests and bench_kda_gdn2 share.

A case is one kda or gdn2 graph (a varlen THD batch, heads, head dims, dtypes, options). `run_case`
builds it, plans it (the ranked plan list, or the plan with the BLOCK_V given), runs it on fresh
random inputs with the outputs poisoned (NaN) first, and returns the relative error of O and of the
final state against the float64 token loops of `pygraph_linear_attention.reference` on the same
inputs: ||got - want|| / ||want||.

Inputs are what models feed: q standard normal, k unit rows (raw normal rows under ``qk_l2norm``),
v normal, g = logsigmoid(normal) per key channel (a log decay; under ``safe_gate`` raw logits with
a_log = log U(1, 16) and dt_bias normal [HV, K], so every channel's gate sits in (-5, 0)), beta in
(0, 1) (logits under ``beta_sigmoid``), GDN-2's beta per key channel and its write gate w in (0, 1).
"""

from __future__ import annotations

import dataclasses
import itertools
from typing import Any

from gdn_cases import _select, _torch_dtype, error_over_terms

__all__ = [
    "CASES",
    "DEVICE",
    "GATE_PARAMETERS",
    "KdaCase",
    "build_graph",
    "execute_case",
    "gate_parameter_error",
    "gate_parameter_terms",
    "gradient_error",
    "make_inputs",
    "reference_forward",
    "relative_error",
    "run_bwd_case",
    "run_case",
]

# where the runners put their tensors: the H200's suites run on "cuda"; the CPU tests run the same
# runners on host tensors with the kernels emulated (tests/test_kda_cutile_engine.py)
DEVICE = "cuda"


def _workspace(torch: Any, graph: Any) -> Any:
    """The graph's workspace, 256-byte aligned as the engines require (a host allocation is not)."""
    raw = torch.empty(graph.get_workspace_size() + 256, dtype=torch.uint8, device=DEVICE)
    return raw[(-raw.data_ptr()) % 256 :]


def _synchronize(torch: Any) -> None:
    if DEVICE == "cuda":
        torch.cuda.synchronize()


@dataclasses.dataclass(frozen=True)
class KdaCase:
    op: str  # "kda" or "gdn2"
    name: str
    lengths: tuple[int, ...]
    heads_qk: int = 4
    heads_v: int = 4
    key_dim: int = 128
    value_dim: int = 128
    io: str = "bfloat16"
    options: tuple[str, ...] = (
        "final_state",
    )  # initial_state final_state qk_l2norm beta_sigmoid neg_eigval safe_gate scale
    block_v: int | None = None  # None: the hook's first pick
    tolerance: float = 1e-2

    @property
    def heads_out(self) -> int:
        return max(self.heads_qk, self.heads_v)

    @property
    def id(self) -> str:
        return f"{self.op}-{self.name}"


_ALL = ("initial_state", "final_state", "qk_l2norm", "beta_sigmoid", "neg_eigval", "safe_gate")
_SHAPES = (
    ("varlen-odd", dict(lengths=(1, 63, 64, 65, 130, 7, 200), options=("initial_state", "final_state"))),
    ("t1", dict(lengths=(1,))),
    ("empty-inside", dict(lengths=(65, 0, 33), options=("initial_state", "final_state"))),
    ("no-final", dict(lengths=(65, 130), options=())),
    ("l2norm-sigmoid-negeig", dict(lengths=(97, 30), options=("qk_l2norm", "beta_sigmoid", "neg_eigval", "final_state"))),
    ("safe-gate", dict(lengths=(97, 30), options=("safe_gate", "initial_state", "final_state"))),
    ("scale", dict(lengths=(97, 30), options=("scale", "final_state"))),
    ("all-options-gva", dict(lengths=(130, 1, 64), heads_qk=2, heads_v=4, options=_ALL)),
    ("gqa", dict(lengths=(100, 50), heads_qk=4, heads_v=2, options=("final_state",))),
    ("long-4097", dict(lengths=(4097,), options=("initial_state", "final_state"))),
    ("d64", dict(lengths=(65, 70), key_dim=64, value_dim=64, options=("initial_state", "final_state"))),
    ("fp16", dict(lengths=(130, 60), io="float16", options=("initial_state", "final_state"))),
    ("block-v32", dict(lengths=(130, 60), block_v=32, options=("initial_state", "final_state"))),
    ("block-v16", dict(lengths=(130, 1, 60), block_v=16, options=("initial_state", "final_state"))),
)  # fmt: skip
CASES: tuple[KdaCase, ...] = tuple(KdaCase(op, name, **kw) for op in ("kda", "gdn2") for name, kw in _SHAPES)


def make_inputs(case: KdaCase, seed: int = 0, device: str | None = None) -> tuple[dict, dict]:
    """(tensors, options) of a case: the op's inputs on ``device`` and the reference's keywords."""
    import torch
    import torch.nn.functional as F

    device = device or DEVICE
    gen = torch.Generator(device=device).manual_seed(seed)
    io = _torch_dtype(torch, case.io)
    t, n, ho = sum(case.lengths), len(case.lengths), case.heads_out
    hq, hv, dk, dv = case.heads_qk, case.heads_v, case.key_dim, case.value_dim

    def normal(*shape):
        return torch.randn(*shape, device=device, generator=gen)

    def uniform(*shape):
        return torch.rand(*shape, device=device, generator=gen)

    k = normal(t, hq, dk)
    if "qk_l2norm" not in case.options:
        k = F.normalize(k, dim=-1)
    beta_shape = (t, hv, dk) if case.op == "gdn2" else (t, hv)
    tensors = {
        "q": normal(t, hq, dk).to(io),
        "k": k.to(io),
        "v": normal(t, hv, dv).to(io),
        "g": F.logsigmoid(normal(t, hv, dk)),
        "beta": (normal(*beta_shape) if "beta_sigmoid" in case.options else uniform(*beta_shape)).to(io),
    }
    if case.op == "gdn2":
        tensors["w"] = uniform(t, hv, dv).to(io)
    tensors["cu_seqlens"] = torch.tensor(
        [0, *itertools.accumulate(case.lengths)], dtype=torch.int32, device=device
    )
    options = {
        "output_final_state": "final_state" in case.options,
        "use_qk_l2norm": "qk_l2norm" in case.options,
        "use_beta_sigmoid": "beta_sigmoid" in case.options,
        "allow_neg_eigval": "neg_eigval" in case.options,
        "safe_gate": "safe_gate" in case.options,
    }
    if "scale" in case.options:
        options["scale"] = 0.05
    if "initial_state" in case.options:
        tensors["initial_state"] = normal(n, ho, dv, dk) * 0.1
    if "safe_gate" in case.options:
        tensors["g"] = normal(t, hv, dk)
        tensors["a_log"] = torch.log(1 + 15 * uniform(hv))
        tensors["dt_bias"] = normal(hv, dk)
    return tensors, options


def build_graph(case: KdaCase, tensors: dict, options: dict, engine: str = "cutile") -> tuple[Any, dict]:
    """The planned and built graph of a case: (graph, {name: pygraph Tensor}) incl. O (and final_state),
    on the op's ``engine`` ("cutile": kda_cutile / gdn2_cutile; "sm90": kda_sm90 / gdn2_sm90), its
    first-ranked plan with the case's BLOCK_V."""
    import pygraph

    g = pygraph.Graph(name=case.id, io_data_type=tensors["q"].dtype)
    ports = {
        name: g.tensor(name=name, dim=list(x.shape), stride=list(x.stride()), data_type=x.dtype)
        for name, x in tensors.items()
    }
    o, final = getattr(g, case.op)(**ports, **options)
    o.set_output(True)
    ports["O"] = o
    if final is not None:
        final.set_output(True).set_data_type(tensors["g"].dtype)
        ports["final_state"] = final
    g.create_execution_plans()
    _select(g, f"{case.op}_{engine}", force=True, BLOCK_V=case.block_v)
    g.build_plans()
    return g, ports


def execute_case(case: KdaCase, tensors: dict, options: dict, engine: str = "cutile") -> tuple[str, Any, Any]:
    """Execute a case's graph (`build_graph`) on ``tensors``, its outputs poisoned (NaN) first:
    (the plan's name, O, the final state or None)."""
    import torch

    g, ports = build_graph(case, tensors, options, engine)
    t, ho, n = sum(case.lengths), case.heads_out, len(case.lengths)
    out = {"O": torch.full((t, ho, case.value_dim), float("nan"), dtype=tensors["q"].dtype, device=DEVICE)}
    if "final_state" in ports:
        out["final_state"] = torch.full((n, ho, case.value_dim, case.key_dim), float("nan"), device=DEVICE)
    workspace = _workspace(torch, g)
    g.execute({ports[name]: x for name, x in {**tensors, **out}.items()}, workspace=workspace)
    _synchronize(torch)
    return g.selected_plan.name, out["O"], out.get("final_state")


def reference_forward(case: KdaCase, tensors: dict, options: dict) -> tuple[Any, Any]:
    """(O, final state or None) of the float64 token loop of `pygraph_linear_attention.reference` on a
    case's inputs."""
    from pygraph_linear_attention.reference import (
        gated_delta_net_v2_reference,
        kimi_delta_attention_reference,
    )

    ref = gated_delta_net_v2_reference if case.op == "gdn2" else kimi_delta_attention_reference
    gates = [tensors["g"], tensors["beta"], *([tensors["w"]] if case.op == "gdn2" else [])]
    named = ("q", "k", "v", "g", "beta", "w", "cu_seqlens")
    extra = {k: v for k, v in tensors.items() if k not in named}
    return ref(
        tensors["q"], tensors["k"], tensors["v"], *gates, tensors["cu_seqlens"].cpu(), **extra, **options
    )


def run_case(case: KdaCase, seed: int = 0, engine: str = "cutile") -> dict:
    """Run a case on the device through the op's ``engine`` (`build_graph`): {plan, o_rel, state_rel
    (None without a final state)}."""
    tensors, options = make_inputs(case, seed)
    plan, o, final = execute_case(case, tensors, options, engine)
    want_o, want_s = reference_forward(case, tensors, options)
    return {
        "plan": plan,
        "o_rel": relative_error(o, want_o),
        "state_rel": relative_error(final, want_s) if final is not None else None,
    }


def run_bwd_case(case: KdaCase, seed: int = 0, engine: str = "cutile") -> dict:
    """Run a case's backward on the device through the op's ``engine`` ("cutile": kda_cutile_bwd /
    gdn2_cutile_bwd; "sm90": kda_sm90_bwd / gdn2_sm90_bwd): {plan, rel: {gradient: relative error}}
    against autograd through the float64 reference, on fresh inputs and output gradients, the
    gradients poisoned first."""
    import torch

    from pygraph_linear_attention.reference import (
        gated_delta_net_v2_backward_reference,
        kimi_delta_attention_backward_reference,
    )

    tensors, options = make_inputs(case, seed)
    final = options.pop("output_final_state")
    t, ho, n = sum(case.lengths), case.heads_out, len(case.lengths)
    gen = torch.Generator(device=DEVICE).manual_seed(seed + 1)
    extra = {"dO": torch.randn(t, ho, case.value_dim, device=DEVICE, generator=gen).to(tensors["q"].dtype)}
    if final:
        extra["d_final_state"] = torch.randn(
            n, ho, case.value_dim, case.key_dim, device=DEVICE, generator=gen
        )
    g, grads = build_bwd_graph(case, tensors, extra, options, engine)
    ports = g.ports
    out = {
        name: (port, torch.full_like(tensors[GRADIENT_OF[name]], float("nan")))
        for name, port in grads.items()
    }
    workspace = _workspace(torch, g.graph)
    g.graph.execute(
        {**{ports[k]: v for k, v in {**tensors, **extra}.items()}, **dict(out.values())}, workspace=workspace
    )
    _synchronize(torch)

    ref = (
        gated_delta_net_v2_backward_reference
        if case.op == "gdn2"
        else kimi_delta_attention_backward_reference
    )
    gates = [tensors["g"], tensors["beta"], *([tensors["w"]] if case.op == "gdn2" else [])]
    kw = {k: v for k, v in tensors.items() if k in ("initial_state", "a_log", "dt_bias")}
    want = ref(tensors["q"], tensors["k"], tensors["v"], *gates, tensors["cu_seqlens"].cpu(), extra["dO"],
               grad_final_state=extra.get("d_final_state"), **kw, **options)  # fmt: skip

    return {
        "plan": g.graph.selected_plan.name,
        "rel": {
            name: gradient_error(name, got, want[name], tensors, want["dG"]) for name, (_, got) in out.items()
        },
    }


# each gradient output of a backward graph by the input it is the gradient of (its shape and dtype)
GRADIENT_OF = {
    "dQ": "q", "dK": "k", "dV": "v", "dG": "g", "dBeta": "beta", "dW": "w", "d_initial_state": "initial_state",
    "d_a_log": "a_log", "d_dt_bias": "dt_bias",
}  # fmt: skip


def build_bwd_graph(
    case: KdaCase, tensors: dict, extra: dict, options: dict, engine: str = "cutile"
) -> tuple[Any, dict]:
    """The planned and built backward graph of a case (``extra``: dO, d_final_state; ``options`` without
    output_final_state) on the op's ``engine`` backward, its first plan with the case's BLOCK_V:
    (the declared graph, {gradient name: its port})."""
    g = pygraph_graph(case, {**tensors, **extra})
    outs = getattr(g.graph, f"{case.op}_bwd")(**g.ports, **options)
    names = ["dQ", "dK", "dV", "dG", "dBeta", *(["dW"] if case.op == "gdn2" else []), "d_initial_state",
             "d_a_log", "d_dt_bias"]  # fmt: skip
    grads = {}
    for name, port in zip(names, outs):
        if port is not None:
            port.set_output(True).set_data_type(tensors[GRADIENT_OF[name]].dtype)
            grads[name] = port
    g.graph.create_execution_plans()
    _select(g.graph, f"{case.op}_{engine}_bwd", force=True, BLOCK_V=case.block_v)
    g.graph.build_plans()
    return g, grads


# the safe gate's parameters' gradients by the parameter: sums of dG (`gate_parameter_error`)
GATE_PARAMETERS = {"d_a_log": "a_log", "d_dt_bias": "dt_bias"}


def gradient_error(name: str, got: Any, want: Any, tensors: dict, d_g: Any) -> float:
    """The error of gradient ``name`` (`GRADIENT_OF`'s names): `relative_error`, but
    `gate_parameter_error` for the safe gate's parameters (``d_g``: the reference's dG)."""
    if name in GATE_PARAMETERS:
        return gate_parameter_error(GATE_PARAMETERS[name], got, want, tensors, d_g)
    return relative_error(got, want)


def gate_parameter_error(name: str, got: Any, want: Any, tensors: dict, d_g: Any) -> float:
    """The error of the safe gate's parameter gradient ``name`` ("a_log" or "dt_bias") relative to the
    summed magnitudes of the terms it adds up: ||got - want|| / ||sum |term|||.

    Both are sums of the raw gate's gradient ``d_g`` [T, H, K] (`gate_parameter_terms`). A sum of
    signed terms is exact, relative to its value, only to its terms' error times its condition number
    sum |term| / |sum term|: d_a_log's (a head's T * K terms of both signs) is 10 to 30 on the
    all-options cases, so a 1e-2 bound on ||got - want|| / ||want|| would ask ~4e-4 of each
    bf16-computed term (bf16's unit roundoff is 3.9e-3; the kernels' d_g sits at 4e-3). Relative to
    the magnitudes the bound is the one every other gradient meets; d_dt_bias (condition ~2) is
    measured the same way."""
    terms, dims = gate_parameter_terms(name, tensors, d_g)
    return error_over_terms(got, want, terms, dims)


def gate_parameter_terms(name: str, tensors: dict, d_g: Any) -> tuple[Any, tuple[int, ...]]:
    """The float64 terms [T, H, K] whose sums are the safe gate's parameter gradient ``name``, and the
    dims they are summed over: d_g for dt_bias (over tokens), d_g (g + dt_bias) for a_log (over
    tokens and channels)."""
    g = tensors["g"].detach().double()
    d_g = d_g.detach().double().to(g.device)
    if name == "dt_bias":
        return d_g, (0,)
    if name != "a_log":
        raise ValueError(f"gate_parameter_terms: name must be 'a_log' or 'dt_bias', got {name!r}")
    bias = tensors.get("dt_bias")
    return d_g * (g if bias is None else g + bias.detach().double().reshape(g.shape[1:])), (0, 2)


def relative_error(got: Any, want: Any) -> float:
    """||got - want|| / ||want||; where the reference is exactly 0 (dG of a lone first token: the state
    it decays is 0), the RMS of ``got`` instead, the absolute error per element (a ratio to 0 would
    make rounding noise infinite)."""
    diff = got.detach().double() - want.detach().double().to(got.device)
    scale = want.detach().double().norm()
    if scale == 0:
        return float(diff.norm() / max(diff.numel(), 1) ** 0.5)
    return float(diff.norm() / scale)


@dataclasses.dataclass
class _Declared:
    graph: Any
    ports: dict


def pygraph_graph(case: KdaCase, tensors: dict) -> _Declared:
    """A graph with every tensor of ``tensors`` declared as a port (shapes, strides, dtypes)."""
    import pygraph

    g = pygraph.Graph(name=f"{case.id}-bwd", io_data_type=tensors["q"].dtype)
    ports = {
        name: g.tensor(name=name, dim=list(x.shape), stride=list(x.stride()), data_type=x.dtype)
        for name, x in tensors.items()
    }
    return _Declared(g, ports)
