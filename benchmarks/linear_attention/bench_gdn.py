"""The gdn forward and backward on the device: the engine's correctness tables, then its timing
against flash-linear-attention and cudnn-frontend.

    python -m benchmarks.linear_attention.bench_gdn [--rounds 3] [--budget-s 420] [--out DIR]
        [--occupancy 2,4] [--segment 32,16] [--profile] [--skip cases,cudnn] [--shapes B4xT4096]
        [--plans first|all] [--sm90 32] [--sm90-modes fused,wg1,wg2,fusedwg,fusedwg16]
        [--sm90-bwd-segments 0,64] [--sm90-bwd-wgmma 1,2] [--gate-mean 4]

1. Correctness: every case of `gdn_cases.CASES` (varlen odd lengths, T = 1, an empty sequence,
   initial and final state, each option alone and together, GQA/GVA, fp16, head dims 64 and 256,
   each BLOCK_V), fresh random inputs, outputs poisoned first, relative error of O and of the final
   state against the float64 token loop.
2. Timing at B4 T4096, B1 T32768 and a varlen batch of 8 sequences summing to 32768 (H16, D128,
   bf16, k unit rows, g = logsigmoid(normal), beta in (0, 1) in bf16): our plans through
   ``graph.execute()`` (the hook's first, gdn_cutile's first, with ``--plans all`` (the default)
   gdn_cutile at each BLOCK_V, each ``--occupancy`` hint at each BLOCK_V, each ``--segment``,
   and ``--sm90``'s gdn_sm90 columns),
   ``fla.ops.gated_delta_rule.chunk_gated_delta_rule`` and
   ``cudnn.linear_attention.gated_delta_net`` where they import, each timed from a cold L2 in
   interleaved rounds (`benchmarks.harness.interleaved`); ms, tokens/s and the ratios
   anchor / ours (> 1: ours is faster). Before timing, ours is compared with each anchor's output
   on the same inputs (relative difference). The first call of FLA's kernels autotunes (30 s to
   minutes); ``--budget-s`` skips the anchors still untimed when the run has used that many seconds.
3. The backward (``--skip bwd`` leaves it out): every case of `gdn_cases.BWD_CASES`, each gradient
   against autograd through the float64 token loop; then forward+backward at the same shapes: ours
   is the gdn graph's execute() then the gdn_bwd graph's (the hook's first pair, gdn_cutile's
   first pair, with ``--plans all`` gdn_cutile_bwd at each BLOCK_V, each ``--occupancy`` hint the
   backward has, both graphs hinted, each ``--segment``, both split, ``--sm90``'s pairs, and the
   first forward with gdn_sm90_bwd at each ``--sm90-bwd-segments`` SEGMENT and each
   ``--sm90-bwd-wgmma`` WGMMA), FLA's is
   ``chunk_gated_delta_rule`` and ``.backward(dO)`` (its Hopper guard lifted for timing only:
   ``fla.ops.common.chunk_o.TRITON_ABOVE_3_7_1 = True``), cudnn-frontend's its op's autograd
   where it has one; our gradients are compared with FLA's first.
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import os
import pathlib
import time
from typing import Any

from benchmarks.harness import interleaved, run_footer, time_lines
from gdn_cases import (
    BWD_CASES,
    CASES,
    GdnCase,
    build_bwd_graph,
    build_graph,
    make_inputs,
    run_bwd_case,
    run_case,
)
from pygraph_linear_attention.gdn.cutile_host import OCCUPANCY_BWD
from pygraph_linear_attention.gdn.sm90_host import STAGES_SM90

SHAPES = {
    "B4xT4096": (4096,) * 4,
    "B1xT32768": (32768,),
    "varlen8": (1024, 8192, 2048, 4096, 512, 7680, 3072, 6144),  # 8 mixed lengths, 32768 tokens
}
HEADS, DIM = 16, 128


# gdn_sm90's forward scans by name: (SPLIT, WGMMA, SEGMENT)
SM90_MODES = {
    "fused": (0, 0, 0), "wg1": (1, 1, 0), "wg2": (1, 2, 0), "fusedwg": (0, 1, 0), "fusedwg16": (0, 1, 16),
    "fusedwg32": (0, 1, 32), "fusedwg64": (0, 1, 64), "fusedp": (0, 3, 0), "fusedp64": (0, 3, 64),
    "fusedws": (0, 4, 0), "fusedws64": (0, 4, 64),
}  # fmt: skip


@dataclasses.dataclass(frozen=True)
class TimingRun:
    """What every timing table of one run shares: its settings, its start and its log."""

    rounds: int
    budget_s: float
    started: float  # perf_counter() at the run's start: --budget-s counts from it
    log: list[str]
    skip: frozenset[str]
    profile: bool = False
    occupancies: tuple[int, ...] = ()  # OCCUPANCY hints timed beside the BLOCK_V columns
    segments: tuple[int, ...] = ()  # the forward's SEGMENT values (split scan) timed beside them
    sm90_block_vs: tuple[int, ...] = ()  # the gdn_sm90 engine's BLOCK_V columns (CuTe DSL)
    sm90_modes: tuple[str, ...] = tuple(SM90_MODES)  # the gdn_sm90 forward's scans timed at each
    all_plans: bool = True  # gdn_cutile's BLOCK_V columns too (--plans all), not only each engine's first
    gate_mean: float = 0.0  # g = logsigmoid(N(gate_mean, 1)): 0 strong gates, 4 weak ones
    sm90_bwd_segments: tuple[int, ...] = ()  # gdn_sm90_bwd's SEGMENT values timed behind the first forward
    sm90_bwd_wgmma: tuple[int, ...] = (1,)  # and its WGMMA values (2: the chunk gradients fused)


def correctness_table(log: list[str]) -> bool:
    print(
        "== correctness: gdn_cutile forward against the float64 reference (rel = ||got - want|| / ||want||)"
    )
    ok = True
    for case in CASES:
        started = time.perf_counter()
        try:
            r = run_case(case)
        except Exception as exc:  # one broken case must not hide the others
            ok = False
            print(f"  {case.name:18s} ERROR {type(exc).__name__}: {exc}")
            log.append(f"case {case.name}: {type(exc).__name__}: {exc}")
            continue
        worst = max(r["o_rel"], r["state_rel"] or 0.0)
        good = worst <= case.tolerance
        ok &= good
        state = f"{r['state_rel']:.2e}" if r["state_rel"] is not None else "    -   "
        print(
            f"  {case.name:18s} {r['plan']:24s} O {r['o_rel']:.2e}  state {state}  "
            f"{'ok' if good else 'FAIL'}  ({time.perf_counter() - started:.1f} s)"
        )
    return ok


def _timing_case(name: str, lengths: tuple[int, ...]) -> GdnCase:
    return GdnCase(
        name, lengths, heads_qk=HEADS, heads_v=HEADS, key_dim=DIM, value_dim=DIM, beta="io", options=()
    )


# our plans timed per shape: the forward's and the backward's BLOCK_V values; None is the hook's first pick
FWD_BLOCK_VS = (64, 32, 128)
BWD_BLOCK_VS = (64, 32)


def _hint(case: GdnCase) -> dict:
    """Our graphs' options: the longest sequence's tokens (``max_seqlen``, the ranking's hint), as a
    caller that knows its lengths passes them."""
    return {"max_seqlen": max(case.lengths)}


def _label(block_v: Any, occupancy: Any = None, segment: Any = None) -> str:
    if segment:
        return f"ours[SEG={segment}]"  # at the hook's first BLOCK_V and OCCUPANCY
    if occupancy:
        return f"ours[BV={block_v},OCC={occupancy}]" if block_v else f"ours[OCC={occupancy}]"
    return f"ours[BV={block_v}]" if block_v else "ours[first]"


def _ours(
    case: GdnCase,
    tensors: dict,
    block_v: Any,
    occupancy: Any = None,
    segment: Any = None,
    engine: Any = None,
    stages: Any = None,
    wgmma: Any = None,
    split: Any = None,
) -> tuple[Any, Any]:
    """(call, output) of our plan at ``block_v`` (and ``occupancy``, ``segment``, ``engine``,
    ``stages``, ``wgmma``, ``split``: gdn_sm90's knobs, SPLIT 1 by default where ``wgmma`` is given,
    `SM90_MODES`; all None: the hook's first pick; ``engine`` "gdn_cutile" alone: gdn_cutile's
    first): the graph built once, the call one execute()."""
    import torch

    sm90 = engine == "gdn_sm90"
    if sm90 and split is None:
        split = 1 if wgmma else 0
    case = dataclasses.replace(
        case, block_v=block_v, occupancy=occupancy, segment=segment, engine=engine, stages=stages,
        split=split if sm90 else None, wgmma=(wgmma or 0) if sm90 else None,
    )  # fmt: skip
    g, ports = build_graph(case, tensors, _hint(case))
    out = torch.empty(sum(case.lengths), HEADS, DIM, dtype=torch.bfloat16, device="cuda")
    workspace = torch.empty(g.get_workspace_size(), dtype=torch.uint8, device="cuda")
    pack = {ports[n]: x for n, x in tensors.items()}
    pack[ports["O"]] = out

    def call():
        g.execute(pack, workspace=workspace)

    return call, out


def _fla(tensors: dict, lengths: tuple[int, ...]) -> tuple[Any, Any] | str:
    try:
        from fla.ops.gated_delta_rule import chunk_gated_delta_rule
    except Exception as exc:
        return f"flash-linear-attention not importable: {type(exc).__name__}: {exc}"
    q, k, v, g, beta = (tensors[n] for n in ("q", "k", "v", "g", "beta"))
    if len(set(lengths)) == 1 and len(lengths) > 1:  # a dense batch: FLA's [B, T, H, D] form
        b, t = len(lengths), lengths[0]
        args = [x.view(b, t, *x.shape[1:]) for x in (q, k, v, g, beta)]
        kwargs = {}
    else:
        args = [x[None] for x in (q, k, v, g, beta)]
        kwargs = {"cu_seqlens": tensors["cu_seqlens"].long()}
    holder = {}

    def call():
        holder["o"], _ = chunk_gated_delta_rule(*args, **kwargs)

    return call, holder


def _cudnn(tensors: dict, lengths: tuple[int, ...]) -> tuple[Any, Any] | str:
    try:
        from cudnn.linear_attention import gated_delta_net
    except Exception as exc:
        return f"cudnn-frontend gated_delta_net not importable: {type(exc).__name__}: {exc}"
    holder = {}
    args = [tensors[n] for n in ("q", "k", "v", "g", "beta", "cu_seqlens")]

    def call():
        holder["o"], _ = gated_delta_net(*args)

    return call, holder


def _rel(a: Any, b: Any) -> float:
    return float((a.double() - b.double()).norm() / b.double().norm().clamp_min(1e-30))


def kernel_breakdown(shape: str, columns: dict) -> None:
    """Each plan's kernels, their device time per call (torch.profiler over 5 calls after a warm one)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    for label, call in columns.items():
        call()
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(5):
                call()
            torch.cuda.synchronize()
        rows = [
            (e.key, e.device_time_total / 5 / 1e3) for e in prof.key_averages() if e.device_time_total > 0
        ]
        total = sum(ms for _, ms in rows)
        parts = "  ".join(
            f"{name.split('(')[0][:28]} {ms:.3f}" for name, ms in sorted(rows, key=lambda r: -r[1])
        )
        print(f"  {shape} {label} kernels (ms/call, sum {total:.3f}): {parts}")


def _first_call(what: str, call: Any, contain: bool = True) -> bool:
    """Run ``call`` once (compiles, autotunes), print how long it took; where it raises, False
    (printed) if ``contain`` (an anchor), else the error propagates (ours)."""
    import torch

    t0 = time.perf_counter()
    try:
        call()
        torch.cuda.synchronize()
    except Exception as exc:
        if not contain:
            raise
        print(f"  {what}: first call failed: {type(exc).__name__}: {exc}")
        return False
    print(f"  {what}: first call {time.perf_counter() - t0:.1f} s")
    return True


def _anchors(what: str, makers: tuple, args: tuple, run: TimingRun):
    """(name, call, result holder) of each anchor that imports, is not skipped, is within the run's
    budget and survives its first call."""
    for anchor, make in makers:
        if anchor in run.skip:
            continue
        if time.perf_counter() - run.started > run.budget_s:
            print(f"  {what} {anchor}: skipped, the run is past --budget-s {run.budget_s:.0f}")
            continue
        made = make(*args)
        if isinstance(made, str):
            print(f"  {what} {anchor}: {made}")
            continue
        call, holder = made
        if _first_call(f"{what} {anchor}", call):
            yield anchor, call, holder


def _print_times(title: str, times: dict[str, float], tokens: int, rounds: int, per_round: dict) -> None:
    """The timing table: ms, tokens/s and, on our rows, each anchor's time over ours (per round and
    their median)."""
    print(f"-- {title} ({tokens} tokens, H{HEADS} D{DIM} bf16), median of {rounds} cold-L2 rounds")
    print("\n".join(time_lines(times, tokens, per_round=per_round)))


def _shift_gates(tensors: dict, mean: float) -> None:
    """g = logsigmoid(N(mean, 1)) in place of the case's (mean 0: its own draw kept)."""
    if mean:
        import torch

        g = tensors["g"]
        gen = torch.Generator(device=g.device).manual_seed(2)
        noise = torch.randn(g.shape, device=g.device, generator=gen, dtype=torch.float32)
        tensors["g"] = torch.nn.functional.logsigmoid(noise + mean).to(g.dtype)


def timing(run: TimingRun) -> list[dict]:
    rows = []
    for shape, lengths in SHAPES.items():
        case = _timing_case(shape, lengths)
        tensors, _ = make_inputs(case, seed=1)
        _shift_gates(tensors, run.gate_mean)
        tokens = sum(lengths)
        columns, outputs = {}, {}
        firsts = (("ours[first]", None), ("ours[cutile]", "gdn_cutile"))
        for label, engine in firsts[: 1 if "cutile" in run.skip else 2]:
            call, out = _ours(case, tensors, None, engine=engine)
            _first_call(f"{shape} {label}", call, contain=False)
            columns[label], outputs[label] = call, out
        plans = [(bv, None, None) for bv in FWD_BLOCK_VS] if run.all_plans else []
        plans += [(bv, o, None) for o in run.occupancies for bv in FWD_BLOCK_VS]  # each BLOCK_V hinted
        for bv, occupancy, segment in plans + [(None, None, s) for s in run.segments]:
            label = _label(bv, occupancy, segment)
            call, out = _ours(case, tensors, bv, occupancy, segment)
            _first_call(f"{shape} {label}", call, contain=False)
            columns[label], outputs[label] = call, out
        for bv, stages, mode in itertools.product(run.sm90_block_vs, STAGES_SM90, run.sm90_modes):
            label = f"ours[sm90 BV={bv},ST={stages},{mode}]"
            split, wgmma, segment = SM90_MODES[mode]
            if wgmma == 4 and stages != 2:  # two warpgroups, each double-buffered
                continue
            call, out = _ours(
                case,
                tensors,
                bv,
                engine="gdn_sm90",
                stages=stages,
                wgmma=wgmma,
                split=split,
                segment=segment or None,
            )
            _first_call(f"{shape} {label}", call, contain=False)
            columns[label], outputs[label] = call, out
        first = "ours[first]"
        for label, out in outputs.items():
            if label != first:
                print(f"  {shape} {label} vs {first}: rel diff of O {_rel(out, outputs[first]):.2e}")
        if run.profile:
            kernel_breakdown(shape, columns)
        makers = (("cudnn", _cudnn), ("fla", _fla))
        for anchor, call, holder in _anchors(shape, makers, (tensors, lengths), run):
            columns[anchor] = call
            o = holder["o"].reshape(tokens, HEADS, DIM)
            print(f"  {shape} {first} vs {anchor}: rel diff of O {_rel(outputs[first], o):.2e}")
        per_round = {}
        times = interleaved(columns, run.rounds, run.log, per_round)
        best = min((n for n in times if n.startswith("ours")), key=times.get)
        _print_times(shape, times, tokens, run.rounds, per_round)
        rows.append({"shape": shape, "tokens": tokens, "ms": times, "ours_best": best})
    return rows


def bwd_correctness_table(log: list[str]) -> bool:
    print("== correctness: gdn_cutile backward against autograd through the float64 reference")
    ok = True
    for case in BWD_CASES:
        started = time.perf_counter()
        try:
            r = run_bwd_case(case)
        except Exception as exc:  # one broken case must not hide the others
            ok = False
            print(f"  {case.name:18s} ERROR {type(exc).__name__}: {exc}")
            log.append(f"bwd case {case.name}: {type(exc).__name__}: {exc}")
            continue
        good = all(err <= case.tolerance for err in r["rel"].values())  # a NaN fails
        ok &= good
        errors = " ".join(f"{n} {e:.1e}" for n, e in r["rel"].items())
        print(
            f"  {case.name:18s} {r['plan']:24s} {errors}  {'ok' if good else 'FAIL'}"
            f"  ({time.perf_counter() - started:.1f} s)"
        )
    return ok


_GRADS = ("q", "k", "v", "g", "beta")


def _ours_fwd_bwd(
    case: GdnCase,
    tensors: dict,
    d_o: Any,
    block_v: Any,
    occupancy: Any = None,
    segment: Any = None,
    engine: Any = None,
    wgmma: Any = None,
    bwd_stages: Any = None,
    bwd_segment: Any = None,
    bwd_wgmma: int = 1,
) -> tuple[Any, dict]:
    """(call, gradients) of our forward then backward graphs, built once. ``engine`` None: the
    hook's first forward, the backward at ``block_v`` (with ``occupancy``, ``segment``: gdn_cutile's
    pair at those knobs; nothing given: the hook's first backward too); "gdn_cutile": gdn_cutile's
    first forward and gdn_cutile_bwd at ``block_v``; "gdn_sm90": gdn_sm90's first forward and
    gdn_sm90_bwd at ``block_v`` (with ``wgmma``: the forward at WGMMA 2 and STAGES 2, the
    backward's scans on warpgroup MMAs at ``bwd_stages``). ``bwd_segment`` given: the hook's first
    forward and gdn_sm90_bwd at ``bwd_wgmma``, ``block_v``, ``bwd_stages`` and that SEGMENT."""
    import torch

    if bwd_segment is not None:
        fwd_call, _ = _ours(case, tensors, None)
        case = dataclasses.replace(
            case, block_v=block_v, engine="gdn_sm90_bwd", wgmma=bwd_wgmma, stages=bwd_stages, occupancy=None,
            segment=bwd_segment,
        )  # fmt: skip
    elif engine == "gdn_sm90":
        fwd_call, _ = _ours(
            case, tensors, 32, engine=engine, stages=2 if wgmma else None, wgmma=2 if wgmma else None
        )
        case = dataclasses.replace(
            case, block_v=block_v, engine="gdn_sm90_bwd", wgmma=wgmma or 0, stages=bwd_stages or 1,
            occupancy=None, segment=None,
        )  # fmt: skip
    else:
        knobs = (block_v, occupancy, segment)
        fwd_call, _ = _ours(case, tensors, None, occupancy, segment, engine=engine)
        case = dataclasses.replace(
            case, block_v=block_v, occupancy=occupancy, segment=segment,
            engine=engine if engine or any(k is not None for k in knobs) else None,
        )  # fmt: skip
    bwd_tensors = {**tensors, "dO": d_o}
    g, ports = build_bwd_graph(case, bwd_tensors, _hint(case))
    grads = {n: torch.empty_like(tensors[n]) for n in _GRADS}
    names = {"q": "dQ", "k": "dK", "v": "dV", "g": "dG", "beta": "dBeta"}
    pack = {ports[n]: x for n, x in bwd_tensors.items()}
    pack |= {ports[names[n]]: x for n, x in grads.items()}
    workspace = torch.empty(g.get_workspace_size(), dtype=torch.uint8, device="cuda")

    def call():
        fwd_call()
        g.execute(pack, workspace=workspace)

    return call, grads


def _fla_fwd_bwd(tensors: dict, lengths: tuple[int, ...], d_o: Any) -> tuple[Any, dict] | str:
    try:
        import fla.ops.common.chunk_o as chunk_o
        from fla.ops.gated_delta_rule import chunk_gated_delta_rule
    except Exception as exc:
        return f"flash-linear-attention not importable: {type(exc).__name__}: {exc}"
    chunk_o.TRITON_ABOVE_3_7_1 = True  # FLA's Hopper backward guard, lifted for timing only
    leaves = {n: tensors[n].detach().clone().requires_grad_(True) for n in _GRADS}
    if len(set(lengths)) == 1 and len(lengths) > 1:
        b, t = len(lengths), lengths[0]
        args = [leaves[n].view(b, t, *leaves[n].shape[1:]) for n in _GRADS]
        kwargs, grad = {}, d_o.view(b, t, *d_o.shape[1:])
    else:
        args = [leaves[n][None] for n in _GRADS]
        kwargs, grad = {"cu_seqlens": tensors["cu_seqlens"].long()}, d_o[None]

    def call():
        for x in leaves.values():
            x.grad = None
        o, _ = chunk_gated_delta_rule(*args, **kwargs)
        o.backward(grad)

    return call, leaves


def _cudnn_fwd_bwd(tensors: dict, lengths: tuple[int, ...], d_o: Any) -> tuple[Any, dict] | str:
    try:
        from cudnn.linear_attention import gated_delta_net
    except Exception as exc:
        return f"cudnn-frontend gated_delta_net not importable: {type(exc).__name__}: {exc}"
    leaves = {n: tensors[n].detach().clone().requires_grad_(True) for n in _GRADS}

    def call():
        for x in leaves.values():
            x.grad = None
        o, _ = gated_delta_net(*(leaves[n] for n in _GRADS), tensors["cu_seqlens"])
        o.backward(d_o)

    return call, leaves


def _sm90_bwd_segment_plans(
    segments: tuple[int, ...], wgmmas: tuple[int, ...]
) -> list[tuple[int, int, int, int]]:
    """(SEGMENT, STAGES, BLOCK_V, WGMMA) of the --sm90-bwd-segments columns: each SEGMENT at both
    STAGES (BLOCK_V 32), and a segmented one at BLOCK_V 64 too (STAGES 1: half the CTAs, each twice
    the rows), each at every --sm90-bwd-wgmma WGMMA."""
    plans = [(s, st, 32) for s in segments for st in STAGES_SM90]
    plans += [(s, 1, 64) for s in segments if s]
    return [(*p, w) for w in wgmmas for p in plans]


def _add_column(shape: str, columns: dict, first: Any, label: str, made: tuple[Any, dict]) -> Any:
    """Column ``label`` of a fwd+bwd table: ``made``'s call, first-called and kept in ``columns``, its
    gradients printed against ``first`` (the first column's; the anchors meet those). Returns the
    first column's gradients: ``made``'s where there is none yet."""
    call, grads = made
    _first_call(f"{shape} {label} fwd+bwd", call, contain=False)
    columns[label] = call
    if first is None:
        return grads
    diffs = " ".join(f"d{n} {_rel(grads[n], first[n]):.2e}" for n in _GRADS)
    print(f"  {shape} {label} vs the first: rel diff of the gradients {diffs}")
    return first


def timing_bwd(run: TimingRun) -> list[dict]:
    import torch

    rows = []
    for shape, lengths in SHAPES.items():
        case = _timing_case(shape, lengths)
        tensors, _ = make_inputs(case, seed=1)
        _shift_gates(tensors, run.gate_mean)
        tokens = sum(lengths)
        d_o = torch.randn(tokens, HEADS, DIM, device="cuda").to(torch.bfloat16)
        columns, ours = {}, None
        plans = [("ours[first]", None, None, None, None)]
        if "cutile" not in run.skip:
            plans.append(("ours[cutile pair]", None, None, None, "gdn_cutile"))
        plans += [(f"ours[bwd {bv}]", bv, None, None, "gdn_cutile") for bv in BWD_BLOCK_VS if run.all_plans]
        plans += [(f"ours[bwd OCC={o}]", None, o, None, None) for o in run.occupancies if o in OCCUPANCY_BWD]
        plans += [(f"ours[bwd SEG={s}]", None, None, s, None) for s in run.segments]
        for label, bv, occupancy, segment, engine in plans:
            made = _ours_fwd_bwd(case, tensors, d_o, bv, occupancy, segment, engine=engine)
            ours = _add_column(shape, columns, ours, label, made)
        for bv, (wgmma, stages) in itertools.product(run.sm90_block_vs, ((None, None), (1, None), (1, 2))):
            label = f"ours[sm90 bwd {bv}{' WG' if wgmma else ''}{' ST2' if stages else ''}]"
            made = _ours_fwd_bwd(case, tensors, d_o, bv, engine="gdn_sm90", wgmma=wgmma, bwd_stages=stages)
            ours = _add_column(shape, columns, ours, label, made)
        for segment, stages, bv, wg in _sm90_bwd_segment_plans(run.sm90_bwd_segments, run.sm90_bwd_wgmma):
            label = f"ours[first + sm90 bwd SEG={segment} ST={stages} BV={bv} WG={wg}]"
            made = _ours_fwd_bwd(case, tensors, d_o, bv, bwd_stages=stages, bwd_segment=segment, bwd_wgmma=wg)
            ours = _add_column(shape, columns, ours, label, made)
        if run.profile:
            kernel_breakdown(shape + " fwd+bwd", columns)
        makers = (("cudnn", _cudnn_fwd_bwd), ("fla", _fla_fwd_bwd))
        for anchor, call, leaves in _anchors(f"{shape} fwd+bwd", makers, (tensors, lengths, d_o), run):
            columns[anchor] = call
            diffs = " ".join(
                f"d{n} {_rel(ours[n], leaves[n].grad.reshape(ours[n].shape)):.2e}" for n in _GRADS
            )
            print(f"  {shape} ours vs {anchor}: rel diff of the gradients {diffs}")
        per_round = {}
        times = interleaved(columns, run.rounds, run.log, per_round)
        _print_times(f"{shape} fwd+bwd", times, tokens, run.rounds, per_round)
        rows.append({"shape": shape, "tokens": tokens, "ms": times})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--budget-s", type=float, default=420.0)
    parser.add_argument("--out", default=os.environ.get("OUT"))
    parser.add_argument(
        "--skip",
        default="",
        help="comma list: cases, timing, fwd (the forward's timing), bwd, fla, cudnn, cutile (gdn_cutile's columns)",
    )
    parser.add_argument("--shapes", default=",".join(SHAPES), help=f"comma list of {list(SHAPES)}")
    parser.add_argument("--profile", action="store_true", help="print each plan's kernels' times")
    parser.add_argument(
        "--plans",
        choices=("first", "all"),
        default="all",
        help="first: the hook's first plan and gdn_cutile's first only; all: gdn_cutile's BLOCK_V columns too",
    )
    parser.add_argument(
        "--occupancy",
        default="",
        help="comma list of OCCUPANCY hints to time too (forward: at each BLOCK_V; fwd+bwd: the hook's)",
    )
    parser.add_argument(
        "--segment", default="", help="comma list of the forward's SEGMENT values (split scan) to time too"
    )
    parser.add_argument(
        "--sm90",
        default="",
        help="comma list of BLOCK_V values of the CuTe DSL engines to time too (forward: gdn_sm90 at each "
        "STAGES, on mma.sync and at WGMMA 1 and 2; fwd+bwd: gdn_sm90's first plan then gdn_sm90_bwd, and "
        "both at WGMMA 1)",
    )
    parser.add_argument(
        "--sm90-modes",
        default=",".join(SM90_MODES),
        help=f"comma list of the gdn_sm90 forward's scans timed at each --sm90 BLOCK_V: {list(SM90_MODES)}",
    )
    parser.add_argument(
        "--sm90-bwd-segments",
        default="",
        help="comma list of gdn_sm90_bwd SEGMENT values (0: unsegmented) timed behind the hook's first forward, "
        "each at both STAGES (BLOCK_V 32) and, segmented, at BLOCK_V 64",
    )
    parser.add_argument(
        "--sm90-bwd-wgmma",
        default="1",
        help="comma list of gdn_sm90_bwd WGMMA values (1, or 2: the chunk gradients fused) of the "
        "--sm90-bwd-segments columns",
    )
    parser.add_argument(
        "--gate-mean",
        type=float,
        default=0.0,
        help="g = logsigmoid(N(mean, 1)): 0 strong gates (default), 4 weak",
    )
    args = parser.parse_args()
    skip = frozenset(s for s in args.skip.split(",") if s)
    for name in [s for s in SHAPES if s not in args.shapes.split(",")]:
        del SHAPES[name]
    started, log = time.perf_counter(), []
    run = TimingRun(
        args.rounds, args.budget_s, started, log, skip, args.profile,
        tuple(int(o) for o in args.occupancy.split(",") if o), tuple(int(s) for s in args.segment.split(",") if s),
        tuple(int(b) for b in args.sm90.split(",") if b), tuple(m for m in args.sm90_modes.split(",") if m),
        args.plans == "all", args.gate_mean, tuple(int(s) for s in args.sm90_bwd_segments.split(",") if s),
        tuple(int(w) for w in args.sm90_bwd_wgmma.split(",") if w),
    )  # fmt: skip
    result: dict[str, Any] = {}
    if "cases" not in skip:
        result["correct"] = correctness_table(log)
    if "timing" not in skip and "fwd" not in skip:
        print("== timing: the gdn forward, ours against the anchors")
        result["timing"] = timing(run)
    if "bwd" not in skip:
        if "cases" not in skip:
            result["bwd_correct"] = bwd_correctness_table(log)
        if "timing" not in skip:
            print("== timing: the gdn forward+backward, ours against the anchors")
            result["timing_bwd"] = timing_bwd(run)
    for line in log:
        print("LOG", line)
    print(run_footer(), f" wall {time.perf_counter() - started:.0f} s")
    if args.out:
        result["gate_mean"] = args.gate_mean
        name = f"bench_gdn_gate{args.gate_mean:g}.json" if args.gate_mean else "bench_gdn.json"
        path = pathlib.Path(args.out) / name
        path.write_text(json.dumps(result, indent=1, default=str))


if __name__ == "__main__":
    main()
