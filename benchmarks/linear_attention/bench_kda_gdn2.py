"""The anchors of KDA and GDN-2 on the device: flash-linear-attention's ``chunk_kda`` and
``chunk_gdn2`` and cudnn-frontend 1.32's ``kimi_delta_attention`` and ``gated_delta_net_v2``, each
checked against pygraph's float64 references, then timed.

    python -m benchmarks.linear_attention.bench_kda_gdn2 [--ops kda,gdn2] [--rounds 3]
        [--skip semantics,timing,bwd,pygraph,cutile,fla,cudnn] [--shapes B4xT4096,B1xT32768]
        [--gates strong,weak]

1. Semantics (`SEMANTIC_CASES`): a varlen batch (lengths 37, 1, 90; H4, D128, bf16 q/k/v/beta, fp32
   g and states) with an initial and a final state, in three option sets: per-channel log decays
   as given; the bounded safe gate (``lower_bound * sigmoid(exp(a_log) * (g + dt_bias))``, -5) with
   L2-normalised q, k; beta as logits with the negative-eigenvalue scaling. Each anchor's O, final
   state and gradients (through O and the final state) against autograd through
   `pygraph_linear_attention.reference.kimi_delta_attention_reference` (GDN-2:
   `gated_delta_net_v2_reference`, beta [T, H, K] and w [T, H, V] in (0, 1); FLA's GDN-2 takes no
   beta logits, so its third set is skipped), relative errors printed. This fixes the conventions
   the engines are written to (FLA's state is [N, H, K, V], ours and cudnn-frontend's [N, HO, V, K]).
   Our torch ops run as two more anchors, "pygraph-cutile" (the cuTile pair) and "pygraph-sm90"
   (the CuTe DSL forward, the cuTile backward), each also against FLA's O and final state.
2. Timing at the issue's shapes (H16, D128, bf16; unit-norm k rows, g = logsigmoid(normal) per
   channel, or shifted for weakly decaying channels (`GATES`), beta in (0, 1); cudnn-frontend gets
   fp32 g and beta, which its Hopper backward needs): forward and forward+backward of each anchor, median of ``--rounds``
   cold-L2 rounds in rotated order (`benchmarks.harness.interleaved`), ms, tokens/s and each
   anchor's time over every pygraph column's (`benchmarks.harness.time_lines`); the
   forward's "pygraph-cutile" and "pygraph-sm90" columns are the op's graph on each engine's first
   plan (`kda_cases.build_graph`: kda_cutile / gdn2_cutile, kda_sm90 / gdn2_sm90), the forward+backward's
   "pygraph" the torch op (`kda.op`) forward and backward on the hook's first plans, and
   "graph-cutile" / "graph-sm90" the forward and backward graphs of each engine pair executed one
   after the other (`kda_cases.build_bwd_graph`: kda_cutile_bwd, kda_sm90_bwd), no autograd. Each
   column's first call's O is held to the first column's on the same inputs (the relative error is
   printed on its "first call" line), so a time never stands for an output that went wrong at the
   timing shape but not at the semantic cases'.
"""

from __future__ import annotations

import argparse
import contextlib
import time
from typing import Any

from benchmarks.harness import interleaved, run_footer, time_lines

SHAPES = {"B4xT4096": (4096,) * 4, "B1xT32768": (32768,)}
HEADS, DIM = 16, 128
SEMANTIC_LENGTHS = (37, 1, 90)
SEMANTIC_HEADS = 4
SEMANTIC_CASES = {
    "plain": {},
    "safe-gate-l2norm": {"safe_gate": True, "use_qk_l2norm": True},
    "beta-logits-neg-eigval": {"use_beta_sigmoid": True, "allow_neg_eigval": True},
}
LOWER_BOUND = -5.0
GRADS = ("q", "k", "v", "g", "beta")


def _grads(op: str) -> tuple[str, ...]:
    return (*GRADS, "w") if op == "gdn2" else GRADS


def _rel(a: Any, b: Any) -> float:
    return float((a.double() - b.double()).norm() / b.double().norm().clamp_min(1e-30))


def _semantic_inputs(op: str, options: dict, seed: int = 0) -> dict:
    import torch
    import torch.nn.functional as F

    gen = torch.Generator(device="cuda").manual_seed(seed)
    t, h, d = sum(SEMANTIC_LENGTHS), SEMANTIC_HEADS, DIM

    def normal(*shape):
        return torch.randn(*shape, generator=gen, device="cuda")

    q, k, v = normal(t, h, d), normal(t, h, d), normal(t, h, d)
    beta_dims = (d,) if op == "gdn2" else ()
    if not options.get("use_qk_l2norm"):
        q, k = F.normalize(q, dim=-1), F.normalize(k, dim=-1)  # a stable recurrence without the option
    inputs = {
        "q": q.bfloat16(), "k": k.bfloat16(), "v": v.bfloat16(),
        # safe gate: raw logits; else a log decay per channel in (-inf, 0)
        "g": normal(t, h, d) if options.get("safe_gate") else F.logsigmoid(normal(t, h, d)) / 4,
        "beta": (normal(t, h, *beta_dims) if options.get("use_beta_sigmoid") else torch.rand(t, h, *beta_dims, generator=gen, device="cuda")).bfloat16(),
        "initial_state": normal(len(SEMANTIC_LENGTHS), h, d, d) * 0.1,  # [N, HO, V, K]
        "cu_seqlens": torch.tensor([0, *SEMANTIC_LENGTHS], device="cuda").cumsum(0).to(torch.int32),
    }  # fmt: skip
    if op == "gdn2":
        inputs["w"] = torch.rand(t, h, d, generator=gen, device="cuda").bfloat16()
    if options.get("safe_gate"):
        inputs["a_log"] = normal(h) * 0.5
        inputs["dt_bias"] = normal(h, d) * 0.5
    return inputs


def _names(op: str, options: dict) -> list[str]:
    return [*_grads(op), "initial_state", *(["a_log", "dt_bias"] if options.get("safe_gate") else [])]


def _reference(op: str, inputs: dict, options: dict, d_o: Any, d_final: Any) -> dict:
    """O, the final state and the gradients of every input from the float64 reference."""
    import torch

    from pygraph_linear_attention.reference import (
        gated_delta_net_v2_reference,
        kimi_delta_attention_reference,
    )

    forward = gated_delta_net_v2_reference if op == "gdn2" else kimi_delta_attention_reference
    names = _names(op, options)
    leaves = {n: inputs[n].detach().double().requires_grad_(True) for n in names}
    extra = {"gate_lower_bound": LOWER_BOUND} if options.get("safe_gate") else {}
    o, final = forward(
        *(leaves[n] for n in _grads(op)), inputs["cu_seqlens"], initial_state=leaves["initial_state"],
        output_final_state=True, a_log=leaves.get("a_log"), dt_bias=leaves.get("dt_bias"), **options, **extra,
    )  # fmt: skip
    grads = torch.autograd.grad([o, final], list(leaves.values()), [d_o.double(), d_final.double()])
    return {"o": o, "final": final} | {f"d{n}": gr for n, gr in zip(names, grads)}


def _fla(op: str, inputs: dict, options: dict, leaves: dict) -> tuple[Any, Any]:
    kwargs: dict[str, Any] = {"use_qk_l2norm_in_kernel": bool(options.get("use_qk_l2norm"))}
    if op == "gdn2":
        from fla.ops.gdn2 import chunk_gdn2 as run
    else:
        from fla.ops.kda import chunk_kda as run

        kwargs["use_beta_sigmoid_in_kernel"] = bool(options.get("use_beta_sigmoid"))
        kwargs["allow_neg_eigval"] = bool(options.get("allow_neg_eigval"))
    if options.get("safe_gate"):
        kwargs |= {"use_gate_in_kernel": True, "safe_gate": True, "lower_bound": LOWER_BOUND}
        kwargs |= {"A_log": leaves["a_log"], "dt_bias": leaves["dt_bias"].reshape(-1)}
    o, final = run(
        *(leaves[n][None] for n in _grads(op)), initial_state=leaves["initial_state"].transpose(-1, -2),
        output_final_state=True, cu_seqlens=inputs["cu_seqlens"].long(), **kwargs,
    )  # fmt: skip
    return o[0], final.transpose(-1, -2)  # FLA's state is [N, H, K, V]


def _op_options(options: dict, leaves: dict) -> dict[str, Any]:
    """A semantics option set as keywords of the ANCHOR.md signature (cudnn-frontend's ops and ours)."""
    kwargs: dict[str, Any] = {
        "use_qk_l2norm_in_kernel": bool(options.get("use_qk_l2norm")),
        "use_beta_sigmoid_in_kernel": bool(options.get("use_beta_sigmoid")),
        "allow_neg_eigval": bool(options.get("allow_neg_eigval")),
    }
    if options.get("safe_gate"):
        kwargs |= {"safe_gate": True, "gate_lower_bound": LOWER_BOUND}
        kwargs |= {"a_log": leaves["a_log"], "dt_bias": leaves["dt_bias"]}
    return kwargs


def _pygraph(op: str, inputs: dict, options: dict, leaves: dict) -> tuple[Any, Any]:
    """Our torch op (`kda.op`) as a semantics anchor, the cuTile engines opted in: the CuTe DSL pair
    (default-on) ranks first, unless the call runs inside `_without_cute_dsl`."""
    import os

    from pygraph.environment import OPT_IN_ENV
    from pygraph_linear_attention.kda.op import gated_delta_net_v2, kimi_delta_attention

    os.environ[OPT_IN_ENV] = "kda_cutile,gdn2_cutile,kda_cutile_bwd,gdn2_cutile_bwd"
    fn = gated_delta_net_v2 if op == "gdn2" else kimi_delta_attention
    kwargs = _op_options(options, leaves)
    return fn(
        *(leaves[n] for n in _grads(op)), inputs["cu_seqlens"], initial_state=leaves["initial_state"],
        output_final_state=True, **kwargs,
    )  # fmt: skip


@contextlib.contextmanager
def _without_cute_dsl():
    """kda_sm90 / gdn2_sm90 and their backwards disabled (``PYGRAPH_DISABLE_ENGINES``): they are
    default-on and ranked first, so the cuTile column's forward and backward (planned at the first
    backward call) run inside this; the op's graph cache keys on the variable, so no plan of the
    other engine set is reused."""
    import os
    from unittest import mock

    from pygraph.environment import DISABLE_ENV

    with mock.patch.dict(os.environ, {DISABLE_ENV: "kda_sm90,gdn2_sm90,kda_sm90_bwd,gdn2_sm90_bwd"}):
        yield


def _cudnn(op: str, inputs: dict, options: dict, leaves: dict) -> tuple[Any, Any]:
    from cudnn.linear_attention import gated_delta_net_v2, kimi_delta_attention

    run = gated_delta_net_v2 if op == "gdn2" else kimi_delta_attention
    kwargs = _op_options(options, leaves)
    o, final = run(
        *(leaves[n] for n in _grads(op)), inputs["cu_seqlens"], initial_state=leaves["initial_state"],
        output_final_state=True, **kwargs,
    )  # fmt: skip
    return o, final


def semantics(op: str, skip: set, log: list) -> None:
    """Each anchor of ``op`` against the float64 reference in every `SEMANTIC_CASES` option set."""
    import torch

    # (name, call, the context its call and backward run in)
    every = (
        ("fla", _fla, contextlib.nullcontext),
        ("cudnn", _cudnn, contextlib.nullcontext),
        ("pygraph-cutile", _pygraph, _without_cute_dsl),
        ("pygraph-sm90", _pygraph, contextlib.nullcontext),
    )
    anchors = [anchor for anchor in every if not set(anchor[0].split("-")) & skip]
    for case, options in SEMANTIC_CASES.items():
        inputs = _semantic_inputs(op, options)
        gen = torch.Generator(device="cuda").manual_seed(1)
        d_o = torch.randn(inputs["v"].shape, generator=gen, device="cuda").bfloat16()
        d_final = torch.randn(inputs["initial_state"].shape, generator=gen, device="cuda")
        want = _reference(op, inputs, options, d_o, d_final)
        names = _names(op, options)
        outputs = {}
        for anchor, run, around in anchors:
            if op == "gdn2" and anchor == "fla" and options.get("use_beta_sigmoid"):
                continue  # FLA's GDN-2 takes beta post-activation only
            leaves = {n: inputs[n].detach().clone().requires_grad_(True) for n in names}
            try:
                with around():
                    o, final = run(op, inputs, options, leaves)
                    torch.autograd.backward([o, final], [d_o, d_final])
                    torch.cuda.synchronize()
            except Exception as exc:  # an anchor that cannot take the option set says why
                print(f"  semantics {op} {case} {anchor}: failed: {type(exc).__name__}: {str(exc)[:300]}")
                log.append(f"semantics {op} {case} {anchor}: {type(exc).__name__}")
                continue
            outputs[anchor] = (o.detach(), final.detach())
            errors = {"o": _rel(o, want["o"]), "final": _rel(final, want["final"])}
            for n in names:
                got = leaves[n].grad
                errors[f"d{n}"] = float("nan") if got is None else _rel(got, want[f"d{n}"])
            text = " ".join(f"{k} {v:.2e}" for k, v in errors.items())
            print(f"  semantics {op} {case} {anchor} vs float64 reference: {text}")
        for ours in ("pygraph-cutile", "pygraph-sm90"):  # ours against FLA's on the same inputs
            if ours in outputs and "fla" in outputs:
                (o, final), (fla_o, fla_final) = outputs[ours], outputs["fla"]
                print(
                    f"  semantics {op} {case} {ours} vs fla: o {_rel(o, fla_o):.2e} final {_rel(final, fla_final):.2e}"
                )


# The per-channel log decay of the timing inputs. Ours and FLA's times do not depend on it;
# cudnn-frontend's Hopper KDA forward does: it splits a sequence into pieces that each start from a
# zero state a few chunks back, as far back as the decays make the skipped history negligible, and
# replays from the sequence's start where they do not. "strong": logsigmoid(N(0, 1)), about -0.8 a
# token, history gone within a few 16-token chunks; "weak": logsigmoid(N(4, 1)), about -0.02 a token
# (a long-memory channel), where no piece can skip any.
GATES = {"strong": 0.0, "weak": 4.0}


def _timing_inputs(op: str, lengths: tuple[int, ...], gates: str = "strong") -> dict:
    import torch
    import torch.nn.functional as F

    gen = torch.Generator(device="cuda").manual_seed(0)
    t = sum(lengths)

    def normal(*shape):
        return torch.randn(*shape, generator=gen, device="cuda")

    return {
        "q": normal(t, HEADS, DIM).bfloat16(),
        "k": F.normalize(normal(t, HEADS, DIM), dim=-1).bfloat16(),
        "v": normal(t, HEADS, DIM).bfloat16(),
        "g": F.logsigmoid(normal(t, HEADS, DIM) + GATES[gates]),
        "beta": torch.rand(
            t, HEADS, *((DIM,) if op == "gdn2" else ()), generator=gen, device="cuda"
        ).bfloat16(),
        "w": torch.rand(t, HEADS, DIM, generator=gen, device="cuda").bfloat16(),
        "cu_seqlens": torch.tensor([0, *lengths], device="cuda").cumsum(0).to(torch.int32),
        "d_o": normal(t, HEADS, DIM).bfloat16(),
    }


# every engine of both families: planning reads the variable when a graph is planned (the torch op
# plans its backward at its first backward call), so each column sets it just before it plans
_EVERY_ENGINE = (
    "kda_cutile,gdn2_cutile,kda_sm90,gdn2_sm90,kda_cutile_bwd,gdn2_cutile_bwd,kda_sm90_bwd,gdn2_sm90_bwd"
)


def _pygraph_call(op: str, x: dict, lengths: tuple[int, ...], engine: str, block_v: int | None = None):
    """The op's graph on ``x`` on ``engine``'s first plan ("cutile" or "sm90", the engines opted in;
    ``block_v`` its first at that BLOCK_V), its pack bound once: a call is one ``execute``."""
    import os

    import torch

    from kda_cases import KdaCase, build_graph
    from pygraph.environment import OPT_IN_ENV

    os.environ[OPT_IN_ENV] = "kda_cutile,gdn2_cutile,kda_sm90,gdn2_sm90"
    case = KdaCase(
        op, "bench", lengths, heads_qk=HEADS, heads_v=HEADS, key_dim=DIM, value_dim=DIM, options=(),
        block_v=block_v,
    )  # fmt: skip
    tensors = {n: x[n] for n in ("q", "k", "v", "g", "beta", *(("w",) if op == "gdn2" else ()), "cu_seqlens")}
    g, ports = build_graph(case, tensors, {}, engine)
    print(f"  pygraph plan: {g.selected_plan.name}")
    o = torch.empty_like(x["v"])
    pack = {ports[n]: t for n, t in tensors.items()} | {ports["O"]: o}
    workspace = torch.empty(max(g.get_workspace_size(), 1), dtype=torch.uint8, device="cuda")

    def call():
        g.execute(pack, workspace=workspace)
        return o

    return call


def _pygraph_graphs_call(op: str, x: dict, lengths: tuple[int, ...], engine: str, block_v: int | None = None):
    """The forward graph then the backward graph of ``engine``'s pair ("cutile" or "sm90"), each on
    its first plan (at ``block_v`` where given), packs bound once: a call is two ``execute``s."""
    import os

    import torch

    from kda_cases import GRADIENT_OF, KdaCase, build_bwd_graph
    from pygraph.environment import OPT_IN_ENV

    case = KdaCase(
        op, "bench", lengths, heads_qk=HEADS, heads_v=HEADS, key_dim=DIM, value_dim=DIM, options=(),
        block_v=block_v,
    )  # fmt: skip
    tensors = {n: x[n] for n in ("q", "k", "v", "g", "beta", *(("w",) if op == "gdn2" else ()), "cu_seqlens")}
    forward = _pygraph_call(op, x, lengths, engine, block_v)
    os.environ[OPT_IN_ENV] = _EVERY_ENGINE  # after _pygraph_call, which offers the forwards alone
    g, grads = build_bwd_graph(case, tensors, {"dO": x["d_o"]}, {}, engine)
    print(f"  pygraph backward plan: {g.graph.selected_plan.name}")
    pack = {g.ports[n]: t for n, t in {**tensors, "dO": x["d_o"]}.items()}
    pack |= {port: torch.empty_like(x[GRADIENT_OF[name]]) for name, port in grads.items()}
    workspace = torch.empty(max(g.graph.get_workspace_size(), 1), dtype=torch.uint8, device="cuda")

    def call():
        o = forward()
        g.graph.execute(pack, workspace=workspace)
        return o

    return call


def _pygraph_op_call(op: str, x: dict, leaves: dict):
    """The torch op (`kimi_delta_attention` / `gated_delta_net_v2`) forward then backward through O,
    on the hook's first plans (every engine of both families opted in)."""
    import os

    from pygraph.environment import OPT_IN_ENV
    from pygraph_linear_attention.kda.op import gated_delta_net_v2, kimi_delta_attention

    fn = gated_delta_net_v2 if op == "gdn2" else kimi_delta_attention
    names = [*_grads(op), "cu_seqlens"]
    args = [leaves[n] if n in leaves else x[n] for n in names]

    def call():
        # the op plans its graphs at its first call (the backward's at its first backward): every
        # engine offered then, whichever column set the variable last
        os.environ[OPT_IN_ENV] = _EVERY_ENGINE
        _unset_grads(leaves)
        o, _ = fn(*args)
        o.backward(x["d_o"])
        return o

    return call


def _unset_grads(leaves: dict) -> None:
    """Each autograd column's call starts with no gradient on its leaves (a training step's
    ``zero_grad(set_to_none=True)``): accumulating into them added an elementwise pass over every
    gradient to each call, about 0.3 ms of KDA's forward+backward at B4 T4096 on an H100."""
    for leaf in leaves.values():
        leaf.grad = None


def _columns(op: str, x: dict, lengths: tuple[int, ...], backward: bool, skip: set) -> dict:
    """The anchors' calls on ``x`` (forward, or forward then backward through O), each returning O [T, H, V]."""
    columns = {}
    names = _grads(op)
    leaves = {n: x[n].detach().clone().requires_grad_(backward) for n in names}
    dense = len(set(lengths)) == 1 and len(lengths) > 1
    if "pygraph" not in skip:
        engines = [e for e in ("cutile", "sm90") if e not in skip]  # --skip cutile: no cuTile compiler
        pygraph_columns = (
            {
                "pygraph": lambda: _pygraph_op_call(op, x, leaves),
                **{f"graph-{e}": lambda e=e: _pygraph_graphs_call(op, x, lengths, e) for e in engines},
            }
            if backward
            else {f"pygraph-{e}": lambda e=e: _pygraph_call(op, x, lengths, e) for e in engines}
        )
        for name, make in pygraph_columns.items():
            try:
                columns[name] = make()
            except Exception as exc:
                print(f"  {name}: not built: {type(exc).__name__}: {str(exc)[:300]}")
    if "fla" not in skip:
        try:
            import fla.ops.common.chunk_o as chunk_o
            from fla.ops.gdn2 import chunk_gdn2
            from fla.ops.kda import chunk_kda

            fla_op = chunk_gdn2 if op == "gdn2" else chunk_kda

            chunk_o.TRITON_ABOVE_3_7_1 = True  # FLA's Hopper backward guard, lifted for timing only
            b = len(lengths)
            args = [leaves[n].view(b, -1, *leaves[n].shape[1:]) if dense else leaves[n][None] for n in names]
            kwargs = {} if dense else {"cu_seqlens": x["cu_seqlens"].long()}
            grad = x["d_o"].view(b, -1, HEADS, DIM) if dense else x["d_o"][None]

            def fla_call():
                _unset_grads(leaves)
                o, _ = fla_op(*args, **kwargs)
                if backward:
                    o.backward(grad)
                return o.reshape(x["v"].shape)

            columns["fla"] = fla_call
        except Exception as exc:
            print(f"  fla: not importable: {type(exc).__name__}: {exc}")
    if "cudnn" not in skip:
        try:
            from cudnn.linear_attention import gated_delta_net_v2, kimi_delta_attention

            cudnn_op = gated_delta_net_v2 if op == "gdn2" else kimi_delta_attention

            # fp32 g and beta (converted once, outside the timed call): its Hopper CUDA backward takes
            # fp32 only and autograd gives dG and dBeta their inputs' dtypes; with bf16 beta the
            # backward falls to its cuTile engine
            wide = {n: x[n].float() if n in ("g", "beta") else x[n] for n in names}
            cudnn_leaves = {n: t.detach().clone().requires_grad_(backward) for n, t in wide.items()}

            def cudnn_call():
                _unset_grads(cudnn_leaves)
                o, _ = cudnn_op(*(cudnn_leaves[n] for n in names), x["cu_seqlens"])
                if backward:
                    o.backward(x["d_o"])
                return o

            columns["cudnn"] = cudnn_call
        except Exception as exc:
            print(f"  cudnn: not importable: {type(exc).__name__}: {exc}")
    return columns


def timing(op: str, shapes: list[str], rounds: int, skip: set, log: list, gates: str = "strong") -> None:
    import torch

    for shape in shapes:
        lengths = SHAPES[shape]
        x = _timing_inputs(op, lengths, gates)
        tokens = sum(lengths)
        for backward in (False, True) if "bwd" not in skip else (False,):
            what = f"{op} {shape} {'fwd+bwd' if backward else 'fwd'} {gates} gates"
            columns, first = {}, None  # first: the first column's O, which every other's is held to
            for name, call in _columns(op, x, lengths, backward, skip).items():
                t0 = time.perf_counter()
                try:
                    o = call().detach()
                    torch.cuda.synchronize()
                except Exception as exc:
                    print(f"  {what} {name}: first call failed: {type(exc).__name__}: {str(exc)[:300]}")
                    continue
                seconds = time.perf_counter() - t0
                agree = "" if first is None else f", O vs {first[0]}'s {_rel(o, first[1]):.2e}"
                print(f"  {what} {name}: first call {seconds:.1f} s{agree}")
                first = first or (name, o.clone())
                columns[name] = call
            per_round = {}
            times = interleaved(columns, rounds, log, per_round)
            print(f"-- {what} ({tokens} tokens, H{HEADS} D{DIM} bf16), median of {rounds} cold-L2 rounds")
            print("\n".join(time_lines(times, tokens, per_round=per_round)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", default="kda,gdn2", help="comma list: kda, gdn2")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--skip", default="", help="comma list: semantics, timing, bwd, pygraph, cutile, fla, cudnn"
    )
    parser.add_argument("--shapes", default=",".join(SHAPES), help=f"comma list of {list(SHAPES)}")
    parser.add_argument(
        "--gates", default="strong", help=f"comma list of {list(GATES)} (the timing inputs' decays)"
    )
    args = parser.parse_args()
    skip = {s for s in args.skip.split(",") if s}
    shapes = [s for s in args.shapes.split(",") if s]
    unknown = [s for s in shapes if s not in SHAPES]
    if unknown:
        parser.error(f"--shapes: unknown {unknown}; known: {list(SHAPES)}")
    gate_sets = [g for g in args.gates.split(",") if g]
    if set(gate_sets) - set(GATES):
        parser.error(f"--gates: unknown {sorted(set(gate_sets) - set(GATES))}; known: {list(GATES)}")
    log: list[str] = []
    started = time.perf_counter()
    ops = [o for o in args.ops.split(",") if o]
    if set(ops) - {"kda", "gdn2"}:
        parser.error(f"--ops: unknown {sorted(set(ops) - {'kda', 'gdn2'})}; known: kda, gdn2")
    for op in ops:
        if "semantics" not in skip:
            semantics(op, skip, log)
    for op in ops:
        if "timing" not in skip:
            for gates in gate_sets:
                timing(op, shapes, args.rounds, skip, log, gates)
    for line in log:
        print(line)
    print(f"{run_footer()}  wall {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
