"""The gdn forward's correctness cases and the runner the sm90 tests and bench_gdn share.

A case is one gdn graph: sequence lengths (a varlen THD batch), heads, head dims, dtypes and
options. `run_case` builds the graph, plans it (the ranked plan list, or the config named by
BLOCK_V), runs it on fresh random inputs with the outputs poisoned (NaN) first, and returns the
relative error of O and of the final state against the float64 token loop
(`pygraph_linear_attention.reference`) on the same inputs: ||got - want|| / ||want||.

Inputs are what models feed: q standard normal, k unit rows (raw normal rows when the kernel
normalizes them, ``qk_l2norm``), v normal, g = logsigmoid(normal) (a log decay), beta in (0, 1)
(logits when ``beta_sigmoid``); under ``safe_gate`` g is raw logits with a_log = log U(1, 16) and
dt_bias normal, as Mamba-style gates are initialised.
"""

from __future__ import annotations

import dataclasses
import itertools
from typing import Any

__all__ = [
    "BWD_CASES",
    "CASES",
    "WARMUP_CASES",
    "GdnCase",
    "build_bwd_graph",
    "build_graph",
    "bwd_reference",
    "error_over_terms",
    "execute_bwd",
    "execute_case",
    "gate_parameter_error",
    "make_bwd_inputs",
    "make_inputs",
    "reference_outputs",
    "rel_error",
    "run_bwd_case",
    "run_case",
    "sm90_bwd_cases",
    "sm90_cases",
]


@dataclasses.dataclass(frozen=True)
class GdnCase:
    name: str
    lengths: tuple[int, ...]
    heads_qk: int = 4
    heads_v: int = 4
    key_dim: int = 128
    value_dim: int = 128
    io: str = "bfloat16"  # q, k, v, o
    beta: str = "float32"  # or "io"
    options: tuple[str, ...] = (
        "final_state",
    )  # initial_state final_state qk_l2norm beta_sigmoid neg_eigval safe_gate scale
    cu_dtype: str = "int32"
    block_v: int | None = None  # None: the hook's first pick
    occupancy: int | None = None  # the OCCUPANCY knob; None: the hook's first pick
    segment: int | None = None  # the SEGMENT knob (the split scans); None: the hook's first pick
    # the engine whose plan runs: "gdn_cutile" (its bwd for a backward case), "gdn_sm90" or
    # "gdn_sm90_bwd" (its first plan with the knobs given); None: the hook's first pick, or the
    # first plan with the given cuTile knobs
    engine: str | None = "gdn_cutile"
    stages: int | None = None  # gdn_sm90's STAGES knob (gdn_sm90_bwd's too, with WGMMA 1)
    split: int | None = None  # gdn_sm90's SPLIT knob
    wgmma: int | None = None  # gdn_sm90's and gdn_sm90_bwd's WGMMA knob
    gate_shift: float = 0.0  # g = logsigmoid(N(0, 1) + gate_shift): larger, weaker decay
    beta_max: float = 1.0  # beta uniform in [0, beta_max] (without beta_sigmoid)
    tolerance: float = 1e-2

    @property
    def heads_out(self) -> int:
        return max(self.heads_qk, self.heads_v)


# the device a graph declares (`pygraph.Graph`'s sm_version and sm_count); empty: the device it runs
# on. A CPU precompile (scripts/device/precompile_linear_attention.py) names the GPU the run will have
GRAPH_DEVICE: dict[str, int] = {}
ALL = ("initial_state", "final_state", "qk_l2norm", "beta_sigmoid", "neg_eigval", "safe_gate")
CASES: tuple[GdnCase, ...] = (
    GdnCase("varlen-odd", (1, 63, 64, 65, 130, 7, 200)),
    GdnCase("t1", (1,)),
    GdnCase("empty-inside", (65, 0, 33), options=("initial_state", "final_state")),
    GdnCase("initial-final", (65, 130), options=("initial_state", "final_state")),
    GdnCase("no-final", (65, 130), options=()),
    GdnCase("qk-l2norm", (97, 30), options=("qk_l2norm", "final_state")),
    GdnCase("beta-sigmoid", (97, 30), options=("beta_sigmoid", "final_state")),
    GdnCase("neg-eigval", (97, 30), options=("beta_sigmoid", "neg_eigval", "final_state")),
    GdnCase("safe-gate", (97, 30), options=("safe_gate", "final_state")),
    GdnCase("scale", (97, 30), options=("scale", "final_state")),
    GdnCase("all-options", (130, 1, 64), options=ALL),
    GdnCase("all-options-gva", (130, 1, 64), heads_qk=2, heads_v=4, options=ALL),
    GdnCase("gva4", (100, 65), heads_qk=1, heads_v=4),
    GdnCase("gqa2", (100, 65), heads_qk=4, heads_v=2),
    GdnCase("fp16", (100, 65), io="float16", options=("initial_state", "final_state")),
    GdnCase("beta-io", (100, 65), beta="io"),
    GdnCase("cu-int64", (100, 65), cu_dtype="int64"),
    GdnCase("long-4097", (4097,), heads_qk=2, heads_v=2, options=("initial_state", "final_state")),
    GdnCase("d64", (100, 65), key_dim=64, value_dim=64),
    GdnCase("d256", (100, 65), key_dim=256, value_dim=256, heads_qk=2, heads_v=2),
    GdnCase("bv32", (100, 65), block_v=32, options=("initial_state", "final_state")),
    GdnCase("bv64", (100, 65), block_v=64, options=("initial_state", "final_state")),
    GdnCase("bv128", (100, 65), block_v=128, options=("initial_state", "final_state")),
    # the split scan: 1024-token segments (SEGMENT 16), a 2100-token sequence in three, short ones in one
    GdnCase("split-varlen", (1, 63, 2100, 65, 0, 130), options=("initial_state", "final_state"), segment=16),
    GdnCase("split-all-options-gva", (2100, 7), heads_qk=2, heads_v=4, options=ALL, segment=16),
    GdnCase(
        "split-d64",
        (2100, 65),
        key_dim=64,
        value_dim=64,
        options=("initial_state", "final_state"),
        segment=16,
    ),
    # a sequence of exactly two segments, empty ones first and last, a one-token one
    GdnCase("split-exact", (2048, 0), options=("initial_state", "final_state"), segment=16),
    GdnCase("split-edges", (0, 1024, 1, 0), options=("initial_state", "final_state"), segment=16),
    GdnCase(
        "varlen-gated", (1, 63, 64, 65, 130, 0, 97), options=("initial_state", "final_state", "safe_gate")
    ),
    # weakly decaying gates: the state and T's off-diagonal blocks carry across chunks, which the
    # strong gates above (about -0.8 a token) erase within a few tokens; a defect in either is
    # visible only here (about -3 a chunk, -0.02 a chunk, and betas past 1)
    *(
        GdnCase(name, (2100, 65), options=("qk_l2norm", "initial_state", "final_state"), **kw)
        for name, kw in (
            ("gates-3-a-chunk", {"gate_shift": 3.0}),
            ("weak-gates", {"gate_shift": 8.0}),
            ("weak-gates-beta-range", {"gate_shift": 3.0, "beta_max": 2.2}),
        )
    ),
    GdnCase("weak-gates-unit-keys", (2100, 65), options=("initial_state", "final_state"), gate_shift=8.0),
    GdnCase(  # the segments' combine carrying a state across them
        "weak-gates-seg16",
        (2100, 65),
        options=("qk_l2norm", "initial_state", "final_state"),
        gate_shift=8.0,
        segment=16,
    ),
)


# the segmented scan's warmup (`gdn.sm90_fused`), checked against float64 beside the unsegmented scan
# on the same inputs (`test_gdn_cutile_sm90`): l2-normalized keys, gates of about -3 a chunk
# (segments dropped after about 6 chunks), of about -0.02 (none dropped: the exact path), betas up
# to 2.2 (out of range: the exact path).
WARMUP_CASES: tuple[GdnCase, ...] = tuple(
    GdnCase(name, (2100, 65), options=("qk_l2norm", "initial_state", "final_state"), segment=16, **kw)
    for name, kw in (
        ("warmup", {"gate_shift": 3.0}),
        ("warmup-weak-gates", {"gate_shift": 8.0}),
        ("warmup-beta-range", {"gate_shift": 3.0, "beta_max": 2.2}),
    )
)


def sm90_cases() -> tuple[GdnCase, ...]:
    """The forward cases on the gdn_sm90 engine: those its build serves (K and V of 64 or 128; the
    cuTile engine's SEGMENT cases on the segmented fused warpgroup scan at the same SEGMENT),
    BLOCK_V 128 as 64, on the fused scan on mma.sync and again on warpgroup MMAs (SPLIT 0, WGMMA 1:
    `gdn.sm90_fused`; long-4097 also at SEGMENT 16), reading prepare's P (WGMMA 3) and on two
    warpgroups (WGMMA 4, `gdn.sm90_fused_ws`); a few also at STAGES 2 (the
    prefetch) and with SPLIT (the split scan), on mma.sync and at WGMMA 1 and 2. The knobs are named,
    so each case keeps its path whatever the hook ranks first."""
    out = []
    for c in CASES:
        if c.key_dim not in (64, 128) or c.value_dim not in (64, 128):
            continue
        block_v = 64 if c.block_v == 128 else c.block_v
        if c.segment:  # the segmented fused warpgroup scan, at the case's SEGMENT
            case = dataclasses.replace(
                c, engine="gdn_sm90", block_v=block_v, occupancy=None, split=0, wgmma=1
            )
            out += [
                dataclasses.replace(case, name=f"{c.name}-fused-wg"),
                dataclasses.replace(case, name=f"{c.name}-fused-wg-s2", stages=2),
                dataclasses.replace(case, name=f"{c.name}-fused-p", wgmma=3),
                dataclasses.replace(case, name=f"{c.name}-fused-ws", wgmma=4, stages=2),
            ]
            continue
        case = dataclasses.replace(c, engine="gdn_sm90", block_v=block_v, occupancy=None, split=0, wgmma=0)
        out += [case, dataclasses.replace(case, name=f"{c.name}-fused-wg", wgmma=1)]
        out.append(dataclasses.replace(case, name=f"{c.name}-fused-p", wgmma=3))  # P from prepare
        out.append(dataclasses.replace(case, name=f"{c.name}-fused-ws", wgmma=4, stages=2))  # two warpgroups
        if c.name == "long-4097":  # five segments of 1024 tokens, the last one token
            out.append(dataclasses.replace(case, name=f"{c.name}-fused-wg-seg16", wgmma=1, segment=16))
        if c.name in _SM90_STAGES2:
            out.append(dataclasses.replace(case, name=f"{c.name}-stages2", stages=2))
            out.append(dataclasses.replace(case, name=f"{c.name}-fused-wg-s2", stages=2, wgmma=1))
        if c.name in _SM90_SPLIT:  # the split scan and its output kernel, at both STAGES
            out += [
                dataclasses.replace(case, name=f"{c.name}-split-s{st}", split=1, stages=st) for st in (1, 2)
            ]
            out += [  # the split scan on warpgroup MMAs (2: its output kernel too)
                dataclasses.replace(
                    case, name=f"{c.name}-wgmma{'' if wg == 1 else wg}-s{st}", split=1, stages=st, wgmma=wg
                )
                for wg in (1, 2)
                for st in (1, 2)
            ]
    return tuple(out)


def sm90_bwd_cases() -> tuple[GdnCase, ...]:
    """The backward cases on the gdn_sm90_bwd engine: those its build serves (K and V of 64 or 128),
    BLOCK_V 128 as 64, on mma.sync, and each again with WGMMA 1 (the scans on warpgroup MMAs) at
    STAGES 1 and 2, and with WGMMA 2 (the chunk gradients fused on two warpgroups too); the SEGMENT
    cases (and long-1100: two segments, the second of 76 tokens) with both scans segmented (WGMMA 1)
    at STAGES 1 and 2, at BLOCK_V 64, and with WGMMA 2."""
    out = []
    for c in BWD_CASES:
        if c.key_dim not in (64, 128) or c.value_dim not in (64, 128):
            continue
        case = dataclasses.replace(
            c, engine="gdn_sm90_bwd", block_v=64 if c.block_v == 128 else c.block_v, occupancy=None,
            stages=1, wgmma=0,
        )  # fmt: skip
        if c.segment or c.name == "long-1100":  # both scans segmented, at SEGMENT 16
            seg = dataclasses.replace(case, wgmma=1, segment=16)
            out += [
                dataclasses.replace(seg, name=f"{c.name}-wgmma-seg16"),
                dataclasses.replace(seg, name=f"{c.name}-wgmma-seg16-s2", stages=2),
                dataclasses.replace(seg, name=f"{c.name}-wgmma-seg16-bv64", block_v=64),  # the hook's BLOCK_V
                dataclasses.replace(seg, name=f"{c.name}-wgmma2-seg16", wgmma=2),
            ]
            if c.segment:
                continue
        out += [
            case,
            dataclasses.replace(case, name=f"{c.name}-wgmma", wgmma=1),
            dataclasses.replace(case, name=f"{c.name}-wgmma-s2", wgmma=1, stages=2),  # the scans' prefetch
            dataclasses.replace(case, name=f"{c.name}-wgmma2", wgmma=2),  # the fused chunk gradients
        ]
    return tuple(out)


_SM90_STAGES2 = ("varlen-odd", "all-options-gva", "empty-inside")
_SM90_SPLIT = (
    "varlen-odd", "all-options-gva", "empty-inside", "long-4097", "d64", "fp16", "weak-gates",
    "weak-gates-beta-range",
)  # fmt: skip


def _torch_dtype(torch: Any, name: str) -> Any:
    return {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}[name]


def make_inputs(case: GdnCase, seed: int = 0, device: str = "cuda") -> tuple[dict, dict]:
    """(tensors, options) of a case: the gdn inputs on ``device`` and the reference's keywords."""
    import torch
    import torch.nn.functional as F

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
    beta_dtype = io if case.beta == "io" else torch.float32
    tensors = {
        "q": normal(t, hq, dk).to(io),
        "k": k.to(io),
        "v": normal(t, hv, dv).to(io),
        "g": F.logsigmoid(normal(t, hv) + case.gate_shift),
        "beta": (normal(t, hv) if "beta_sigmoid" in case.options else uniform(t, hv) * case.beta_max).to(
            beta_dtype
        ),
        "cu_seqlens": torch.tensor(
            [0, *itertools.accumulate(case.lengths)], dtype=getattr(torch, case.cu_dtype), device=device
        ),
    }
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
        tensors["g"] = normal(t, hv)
        tensors["a_log"] = torch.log(1 + 15 * uniform(hv))
        tensors["dt_bias"] = normal(hv)
    return tensors, options


def build_graph(case: GdnCase, tensors: dict, options: dict) -> tuple[Any, dict]:
    """The planned and built gdn graph of a case: (graph, {name: pygraph Tensor}) incl. O (and final_state)."""
    import pygraph

    g = pygraph.Graph(name=f"gdn-{case.name}", io_data_type=tensors["q"].dtype, **GRAPH_DEVICE)
    ports = {}
    for name, x in tensors.items():
        ports[name] = g.tensor(name=name, dim=list(x.shape), stride=list(x.stride()), data_type=x.dtype)
    o, final = g.gdn(**ports, **options)
    o.set_output(True)
    ports["O"] = o
    if final is not None:
        state_dtype = tensors["initial_state"].dtype if "initial_state" in tensors else tensors["g"].dtype
        final.set_output(True).set_data_type(state_dtype)
        ports["final_state"] = final
    g.create_execution_plans()
    if case.engine == "gdn_sm90":
        _select(
            g,
            "gdn_sm90",
            force=True,
            BLOCK_V=case.block_v,
            STAGES=case.stages,
            SPLIT=case.split,
            WGMMA=case.wgmma,
            SEGMENT=case.segment or 0,
        )
    else:
        _select(
            g, "gdn_cutile", force=case.engine == "gdn_cutile", BLOCK_V=case.block_v,
            OCCUPANCY=case.occupancy, SEGMENT=case.segment,
        )  # fmt: skip
    g.build_plans()
    return g, ports


def _select(g: Any, engine: str, force: bool = False, **knobs: Any) -> None:
    """Select the first plan of ``engine`` whose knobs include every given (not None) one (none
    given: keep the first-ranked plan, unless ``force``)."""
    wanted = [f"{k}={v}" for k, v in knobs.items() if v is not None]
    if not wanted and not force:
        return
    names = [g.get_plan_name_at_index(i) for i in range(g.get_execution_plan_count())]
    for i, name in enumerate(names):
        inner = name.removeprefix(f"{engine}[").removesuffix("]")
        if name.startswith(f"{engine}[") and set(wanted) <= set(inner.split(",")):
            g.select_plan(i)
            return
    raise LookupError(f"no {engine} plan with {wanted} in {names}")


def execute_case(case: GdnCase, tensors: dict, options: dict) -> tuple[str, Any, Any]:
    """(plan name, O, final state or None): the case's graph planned and executed on ``tensors``,
    its outputs poisoned (NaN) first."""
    import torch

    g, ports = build_graph(case, tensors, options)
    t, ho, n = sum(case.lengths), case.heads_out, len(case.lengths)
    io = _torch_dtype(torch, case.io)
    out = {"O": torch.full((t, ho, case.value_dim), float("nan"), dtype=io, device="cuda")}
    if "final_state" in ports:
        dtype = ports["final_state"].data_type
        out["final_state"] = torch.full(
            (n, ho, case.value_dim, case.key_dim), float("nan"),
            dtype=torch.float32 if dtype.name == "FLOAT" else torch.bfloat16, device="cuda",
        )  # fmt: skip
    workspace = torch.empty(max(g.get_workspace_size(), 1), dtype=torch.uint8, device="cuda")
    g.execute({ports[name]: x for name, x in {**tensors, **out}.items()}, workspace=workspace)
    torch.cuda.synchronize()
    return g.selected_plan.name, out["O"], out.get("final_state")


def reference_outputs(tensors: dict, options: dict) -> tuple[Any, Any]:
    """(O, final state or None) of the float64 reference on a case's inputs."""
    from pygraph_linear_attention.reference import gated_delta_net_reference

    ref_args = {k: v for k, v in tensors.items() if k not in ("q", "k", "v", "g", "beta", "cu_seqlens")}
    return gated_delta_net_reference(
        tensors["q"], tensors["k"], tensors["v"], tensors["g"], tensors["beta"], tensors["cu_seqlens"].cpu(),
        **ref_args, **options,
    )  # fmt: skip


def rel_error(got: Any, want: Any) -> float:
    """||got - want|| / ||want|| in float64."""
    got, want = got.detach().double(), want.detach().double()
    return float((got - want).norm() / want.norm().clamp_min(1e-30))


def run_case(case: GdnCase, seed: int = 0) -> dict:
    """Run a case on the device: {plan, o_rel, state_rel (None without a final state)}."""
    tensors, options = make_inputs(case, seed)
    plan, o, final = execute_case(case, tensors, options)
    want_o, want_s = reference_outputs(tensors, options)
    result = {"plan": plan, "o_rel": rel_error(o, want_o), "state_rel": None}
    if want_s is not None:
        result["state_rel"] = rel_error(final, want_s)
    return result


# --- the backward (gdn_bwd): the same cases' inputs plus dO and d_final_state -------------------------

# the backward's table: the forward's cases, a shorter long one (the reference's autograd runs the
# token loop), and d256 last: its kernels compile the longest (the chunk gradient kernels about
# 13 s each on a CPU core), so a time-bounded device run loses it first;
# "final_state" means d_final_state is given
BWD_CASES: tuple[GdnCase, ...] = (
    *(c for c in CASES if c.name not in ("long-4097", "d256")),
    GdnCase("long-1100", (1100,), heads_qk=2, heads_v=2, options=("initial_state", "final_state")),
    *(c for c in CASES if c.name == "d256"),
)


def gate_parameter_error(name: str, got: Any, want: Any, tensors: dict, d_g: Any) -> float:
    """The error of the safe gate's parameter gradient ``name`` ("a_log" or "dt_bias", [HG]) relative
    to the summed magnitudes of the float64 terms it adds up: ||got - want|| / ||sum_t |term_t|||.

    With b = g + dt_bias and the decay -exp(a_log) softplus(b), d_dt_bias sums the raw gate's gradient
    d_g [T, HG] over the tokens and d_a_log sums d_g softplus(b) / sigmoid(b) (the decay times its
    gradient). d_a_log's terms take both signs (its sum cancels), so relative to ||want|| a bound asks
    of each bf16-computed term a fraction of the bound; relative to the terms' magnitudes it is the
    bound every other gradient meets (as `kda_cases.gate_parameter_error` measures KDA's)."""
    import torch

    g = tensors["g"].detach().double()
    d_g = d_g.detach().double().to(g.device)
    bias = tensors.get("dt_bias")
    b = g if bias is None else g + bias.detach().double().to(g.device)
    if name == "dt_bias":
        terms = d_g
    elif name == "a_log":
        terms = d_g * torch.nn.functional.softplus(b) / torch.sigmoid(b)
    else:
        raise ValueError(f"gate_parameter_error: name must be 'a_log' or 'dt_bias', got {name!r}")
    return error_over_terms(got, want, terms, (0,))


def error_over_terms(got: Any, want: Any, terms: Any, dims: tuple[int, ...]) -> float:
    """||got - want|| / ||sum |terms||| for a gradient that sums ``terms`` (float64) over ``dims``."""
    magnitude = terms.abs().sum(dim=dims).reshape(want.shape)
    diff = got.detach().double() - want.detach().double().to(got.device)
    return float(diff.norm() / magnitude.to(got.device).norm())


# the gdn_bwd outputs by name -> the input each is the gradient of
GRADIENTS = {
    "dQ": "q", "dK": "k", "dV": "v", "dG": "g", "dBeta": "beta", "d_initial_state": "initial_state",
    "d_a_log": "a_log", "d_dt_bias": "dt_bias",
}  # fmt: skip


def make_bwd_inputs(case: GdnCase, seed: int = 0, device: str = "cuda") -> tuple[dict, dict]:
    """(tensors, options) of a case's backward: `make_inputs`' plus dO [T, HO, V] (io dtype) and,
    with ``final_state``, d_final_state [N, HO, V, K] fp32; options without output_final_state."""
    import torch

    tensors, options = make_inputs(case, seed, device)
    gen = torch.Generator(device=device).manual_seed(seed + 1)
    t, n, ho = sum(case.lengths), len(case.lengths), case.heads_out
    tensors["dO"] = torch.randn(t, ho, case.value_dim, device=device, generator=gen).to(tensors["q"].dtype)
    if options.pop("output_final_state"):
        shape = (n, ho, case.value_dim, case.key_dim)
        tensors["d_final_state"] = torch.randn(*shape, device=device, generator=gen) * 0.1
    return tensors, options


def build_bwd_graph(case: GdnCase, tensors: dict, options: dict) -> tuple[Any, dict]:
    """The planned and built gdn_bwd graph of a case: (graph, {name: pygraph Tensor}) incl. its gradients."""
    import pygraph

    g = pygraph.Graph(name=f"gdn-bwd-{case.name}", io_data_type=tensors["q"].dtype, **GRAPH_DEVICE)
    ports = {}
    for name, x in tensors.items():
        ports[name] = g.tensor(name=name, dim=list(x.shape), stride=list(x.stride()), data_type=x.dtype)
    outs = g.gdn_bwd(**ports, **options)
    for name, out in zip(GRADIENTS, outs):  # in the op's output order, None where absent
        if out is not None:  # each gradient in its input's dtype (unset, it would take the io dtype)
            out.set_output(True).set_data_type(ports[GRADIENTS[name]].data_type)
            ports[name] = out
    g.create_execution_plans()
    if case.engine == "gdn_sm90_bwd":
        _select(
            g, "gdn_sm90_bwd", force=True, BLOCK_V=case.block_v, STAGES=case.stages, WGMMA=case.wgmma,
            SEGMENT=case.segment,
        )  # fmt: skip
    else:
        _select(
            g, "gdn_cutile_bwd", force=case.engine == "gdn_cutile", BLOCK_V=case.block_v,
            OCCUPANCY=case.occupancy, SEGMENT=case.segment,
        )  # fmt: skip
    g.build_plans()
    return g, ports


def execute_bwd(case: GdnCase, tensors: dict, options: dict, device: str = "cuda") -> tuple[Any, dict]:
    """Plan, build and execute a case's gdn_bwd graph: (graph, {gradient name: tensor}), outputs
    poisoned (NaN) first, the workspace 256-byte aligned."""
    import torch

    g, ports = build_bwd_graph(case, tensors, options)
    out = {
        name: torch.full_like(tensors[like], float("nan"))
        for name, like in GRADIENTS.items()
        if name in ports
    }
    raw = torch.empty(g.get_workspace_size() + 256, dtype=torch.uint8, device=device)
    workspace = raw[(-raw.data_ptr()) % 256 :]
    g.execute({ports[name]: x for name, x in {**tensors, **out}.items()}, workspace=workspace)
    return g, out


def bwd_reference(tensors: dict, options: dict) -> dict:
    """The float64 gradients of a case's backward by autograd through the token loop."""
    from pygraph_linear_attention.reference import gated_delta_net_backward_reference

    extra = {k: v for k, v in tensors.items() if k in ("initial_state", "a_log", "dt_bias")}
    return gated_delta_net_backward_reference(
        *(tensors[k] for k in ("q", "k", "v", "g", "beta")), tensors["cu_seqlens"].cpu(), tensors["dO"],
        grad_final_state=tensors.get("d_final_state"), **extra, **options,
    )  # fmt: skip


def run_bwd_case(case: GdnCase, seed: int = 0) -> dict:
    """Run a case's backward on the device: {plan, rel: {gradient: ||got - want|| / ||want||}}."""
    import torch

    tensors, options = make_bwd_inputs(case, seed)
    g, out = execute_bwd(case, tensors, options)
    torch.cuda.synchronize()
    want = bwd_reference(tensors, options)
    return {"plan": g.selected_plan.name, "rel": {name: rel_error(out[name], want[name]) for name in out}}
