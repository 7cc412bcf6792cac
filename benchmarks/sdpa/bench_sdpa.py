"""The SDPA families' timing table: attention through pygraph (the cuDNN backend's plan; "sm90 pair",
the CuTe DSL ``sdpa_fwd_sm90`` and ``sdpa_bwd_sm90``; "sm90 pair det", the same with the
deterministic backward; "sm90 fwd", that forward with the backend's backward; "sm90 fwd P_REGS", the
same with P in registers) side by side with torch's cuDNN and flash SDPA backends and
flash-attention 4: forward, backward alone (on the forward's outputs) and forward+backward.

    python -m benchmarks.sdpa.bench_sdpa [--shapes ...] [--rounds 3] [--out DIR]

Shapes (bf16, ``b h s d`` and causal): the family issue's four rows. TFLOP/s count the forward's two
matmuls (4 B H S^2 D, halved when causal), the backward as 2.5 forwards and the forward+backward
as 3.5. Each column's O (and gradients) are checked against pygraph's before timing; columns are
timed from a cold L2 in interleaved rounds (`benchmarks.harness`), the ratios taken within the run.
Last, the host cost of `execute()` of a small forward graph (1 x 1 x 128 x 64), on the backend's
plan and on sdpa_fwd_sm90's, against torch's cuDNN SDPA call.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import time
from typing import Any

from benchmarks.harness import burst_cost, interleaved, run_footer

SHAPES = {
    "4x16x4096x128": (4, 16, 4096, 128, False),
    "4x16x4096x128-causal": (4, 16, 4096, 128, True),
    "16x16x1024x128": (16, 16, 1024, 128, False),
    "2x32x8192x64-causal": (2, 32, 8192, 64, True),
}


def _flops(b: int, h: int, s: int, d: int, causal: bool) -> float:
    return 4.0 * b * h * s * s * d * (0.5 if causal else 1.0)


def _rel(a: Any, b: Any) -> float:
    return float((a.double() - b.double()).norm() / b.double().norm().clamp_min(1e-30))


Made = tuple[Any, Any, Any, dict]  # a column's (forward, backward, forward+backward) calls and outputs


def _pygraph(q: Any, k: Any, v: Any, causal: bool, d_o: Any) -> Made:
    """A column of the op's graphs executed directly (the planner's first plans)."""
    import torch

    from pygraph.op_support import execute
    from pygraph_sdpa import op_graphs
    from pygraph_sdpa.op_arguments import check_forward

    p, masks = check_forward(q, k, v, None, causal, False, -1, None, None)
    scale = p.scale(None)
    fwd, bwd = op_graphs.forward_graph(p, masks, scale), op_graphs.backward_graph(p, masks, scale)
    out = {"o": torch.empty_like(q), "lse": q.new_empty(p.lse_shape, dtype=torch.float32)}
    out |= {"dQ": torch.empty_like(q), "dK": torch.empty_like(k), "dV": torch.empty_like(v)}
    f_tensors = {"q": q, "k": k, "v": v, "o": out["o"], "lse": out["lse"]}
    b_tensors = {**f_tensors, "dO": d_o, "dQ": out["dQ"], "dK": out["dK"], "dV": out["dV"]}

    def forward():
        execute(fwd, f_tensors, q.device)

    def backward():
        execute(bwd, b_tensors, q.device)

    def forward_backward():
        forward()
        backward()

    return forward, backward, forward_backward, out


def _select(g: Any, engine: str) -> str | None:
    """Plan ``g`` and build ``engine``'s first plan (None), or why it offers none."""
    g.create_execution_plans()
    names = [g.get_plan_name_at_index(i) for i in range(g.get_execution_plan_count())]
    ours = [i for i, n in enumerate(names) if n.startswith(engine)]
    if not ours:
        return f"{engine} offers no plan: {g.decline_reasons()}"
    g.select_plan(ours[0])
    g.build_plans()
    return None


def _ours(
    q: Any, k: Any, v: Any, causal: bool, d_o: Any, backward: str, p_regs: int = 0, deterministic: int = 0
) -> Made | str:
    """A column of sdpa_fwd_sm90's plan of the forward graph (knob P_REGS) and, for the backward,
    sdpa_bwd_sm90's (``backward`` "python", knob DETERMINISTIC) or the backend's ("backend"); the
    hook ranks the backend first, so the python engines' plans are selected by name."""
    import torch

    import pygraph
    from pygraph import data_type as dt
    from pygraph.op_support import execute
    from pygraph_sdpa import op_graphs
    from pygraph_sdpa.op_arguments import check_forward

    scale = q.shape[-1] ** -0.5
    out = {
        "o": torch.empty_like(q),
        "lse": torch.empty((*q.shape[:3], 1), device=q.device, dtype=torch.float32),
    }
    out |= {"dQ": torch.empty_like(q), "dK": torch.empty_like(k), "dV": torch.empty_like(v)}
    g = pygraph.Graph("bench-sdpa-fwd-sm90", q.dtype, dt.FLOAT, dt.FLOAT)
    tq, tk, tv = g.tensor_like(q), g.tensor_like(k), g.tensor_like(v)
    to, tstats = g.sdpa(tq, tk, tv, generate_stats=True, attn_scale=scale, use_causal_mask=causal)
    to.set_output(True).set_data_type(q.dtype)
    tstats.set_output(True).set_data_type(dt.FLOAT)
    why = _select(g, f"sdpa_fwd_sm90[P_REGS={p_regs}")
    if why is not None:
        return why
    fwd = {tq: q, tk: k, tv: v, to: out["o"], tstats: out["lse"]}
    if backward == "python":
        gb = pygraph.Graph("bench-sdpa-bwd-sm90", q.dtype, dt.FLOAT, dt.FLOAT)
        ports = [gb.tensor_like(x) for x in (q, k, v, out["o"], d_o, out["lse"])]
        grads = gb.sdpa_backward(*ports, attn_scale=scale, use_causal_mask=causal)
        bwd = dict(zip(ports, (q, k, v, out["o"], d_o, out["lse"])))
        for name, port in zip(("dQ", "dK", "dV"), grads):
            port.set_output(True).set_data_type(q.dtype)
            bwd[port] = out[name]
        why = _select(gb, f"sdpa_bwd_sm90[DETERMINISTIC={deterministic}")
        if why is not None:
            return why
        workspace = torch.empty(max(gb.get_workspace_size(), 1) + 256, device=q.device, dtype=torch.uint8)
        workspace = workspace[(-workspace.data_ptr()) % 256 :]

        def run_backward():
            gb.execute(bwd, workspace)
    else:
        p, masks = check_forward(q, k, v, None, causal, False, -1, None, None)
        built = op_graphs.backward_graph(p, masks, p.scale(None))
        tensors = {"q": q, "k": k, "v": v, "o": out["o"], "lse": out["lse"], "dO": d_o}
        tensors |= {"dQ": out["dQ"], "dK": out["dK"], "dV": out["dV"]}

        def run_backward():
            execute(built, tensors, q.device)

    def forward():
        g.execute(fwd)

    def forward_backward():
        g.execute(fwd)
        run_backward()

    return forward, run_backward, forward_backward, out


def _autograd_columns(label: str, run: Any, leaves: list, grad: Any, to_bhsd: Any) -> Made | str:
    """The column of an autograd attention ``run()`` over ``leaves`` (outputs in [B, H, S, D]), its
    output's gradient ``grad`` in its own layout; the backward alone replays one forward's graph
    (retained); a first call that raises is the column's reason to be left out."""
    import torch

    out: dict = {}
    retained: dict = {}

    def forward():
        out["o"] = to_bhsd(run())

    def backward():
        if "o" not in retained:
            retained["o"] = run()
        for t in leaves:
            t.grad = None
        retained["o"].backward(grad, retain_graph=True)

    def forward_backward():
        for t in leaves:
            t.grad = None
        o = run()
        o.backward(grad)
        out["o"] = to_bhsd(o)
        out["dQ"], out["dK"], out["dV"] = (to_bhsd(t.grad) for t in leaves)

    try:
        forward_backward()
        torch.cuda.synchronize()
    except Exception as exc:
        return f"{label}: {type(exc).__name__}: {exc}"
    return forward, backward, forward_backward, out


def _torch_backend(name: str, q: Any, k: Any, v: Any, causal: bool, d_o: Any) -> Made | str:
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel

    backend = {"cudnn": SDPBackend.CUDNN_ATTENTION, "flash": SDPBackend.FLASH_ATTENTION}[name]
    leaves = [t.detach().clone().requires_grad_(True) for t in (q, k, v)]

    def run():
        with sdpa_kernel(backend):
            return torch.nn.functional.scaled_dot_product_attention(*leaves, is_causal=causal)

    return _autograd_columns(f"torch-{name}", run, leaves, d_o, lambda t: t)


def _fa4(q: Any, k: Any, v: Any, causal: bool, d_o: Any) -> Made | str:
    try:
        from flash_attn.cute import flash_attn_func
    except Exception as exc:
        return f"flash-attention 4 not importable: {type(exc).__name__}: {exc}"
    leaves = [t.detach().transpose(1, 2).contiguous().requires_grad_(True) for t in (q, k, v)]  # [B, S, H, D]

    def run():
        result = flash_attn_func(*leaves, causal=causal)
        return result[0] if isinstance(result, tuple) else result

    return _autograd_columns(
        "fa4", run, leaves, d_o.transpose(1, 2).contiguous(), lambda t: t.transpose(1, 2)
    )


def timing(rounds: int, log: list) -> list[dict]:
    import torch

    rows = []
    for shape, (b, h, s, d, causal) in SHAPES.items():
        gen = torch.Generator(device="cuda").manual_seed(0)
        q, k, v, d_o = (
            torch.randn(b, h, s, d, generator=gen, device="cuda").to(torch.bfloat16) for _ in range(4)
        )
        args = (q, k, v, causal, d_o)
        makers = {
            "pygraph": lambda a=args: _pygraph(*a),
            "sm90 pair": lambda a=args: _ours(*a, "python"),
            "sm90 pair det": lambda a=args: _ours(*a, "python", 1, 1),
            "sm90 fwd": lambda a=args: _ours(*a, "backend"),
            "sm90 fwd P_REGS": lambda a=args: _ours(*a, "backend", 1),
            "torch-cudnn": lambda a=args: _torch_backend("cudnn", *a),
            "torch-flash": lambda a=args: _torch_backend("flash", *a),
            "fa4": lambda a=args: _fa4(*a),
        }
        fwd_cols, bwd_cols, both_cols, outs = {}, {}, {}, {}
        for name, make in makers.items():
            made = make()
            if isinstance(made, str):
                print(f"  {shape} {name}: {made}")
                continue
            fwd_cols[name], bwd_cols[name], both_cols[name], outs[name] = made
        for name in list(fwd_cols):
            both_cols[name]()
            torch.cuda.synchronize()
            if name != "pygraph" and "pygraph" in outs:
                diffs = " ".join(
                    f"{t} {_rel(outs[name][t], outs['pygraph'][t]):.2e}" for t in ("o", "dQ", "dK", "dV")
                )
                print(f"  {shape} {name} vs pygraph: rel diff {diffs}")
        flops = _flops(b, h, s, d, causal)
        row = {"shape": shape}
        for label, columns, scale in (
            ("fwd", fwd_cols, 1.0),
            ("bwd", bwd_cols, 2.5),
            ("fwd+bwd", both_cols, 3.5),
        ):
            times = interleaved(columns, rounds, log)
            row[label] = times
            print(f"-- {shape} {label} (bf16), median of {rounds} cold-L2 rounds")
            for name, ms in times.items():
                ratios = "".join(
                    f"  {name}/{a} {times[a] / ms:.2f}x"
                    for a in ("pygraph", "torch-cudnn", "fa4")
                    if a in times and a != name
                )
                print(f"  {name:12s} {ms:8.3f} ms  {flops * scale / ms / 1e9:7.1f} TFLOP/s{ratios}")
        rows.append(row)
    return rows


def host_cost() -> dict:
    """us per call of a small forward: pygraph's execute() of its built graph on the backend's plan and
    on sdpa_fwd_sm90's, torch's cuDNN SDPA."""
    import torch

    q, k, v = (torch.randn(1, 1, 128, 64, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    forward = _pygraph(q, k, v, False, q)[0]
    made = _torch_backend("cudnn", q, k, v, False, q)
    costs = {"pygraph execute()": burst_cost(forward, 200, sync=torch.cuda.synchronize)}
    ours = _ours(q, k, v, False, q, "backend")
    if not isinstance(ours, str):
        costs["sdpa_fwd_sm90 execute()"] = burst_cost(ours[0], 200, sync=torch.cuda.synchronize)
    if not isinstance(made, str):
        costs["torch cuDNN SDPA"] = burst_cost(made[0], 200, sync=torch.cuda.synchronize)
    for name, us in costs.items():
        print(f"  host cost, 1x1x128x64 forward: {name:24s} {us:7.1f} us/call")
    return costs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--shapes", default=",".join(SHAPES), help=f"comma list of {list(SHAPES)}")
    parser.add_argument("--out", default=os.environ.get("OUT"))
    args = parser.parse_args()
    for name in [s for s in SHAPES if s not in args.shapes.split(",")]:
        del SHAPES[name]
    started, log = time.perf_counter(), []
    result = {"timing": timing(args.rounds, log), "host_cost_us": host_cost()}
    for line in log:
        print("LOG", line)
    print(run_footer(), f" wall {time.perf_counter() - started:.0f} s")
    if args.out:
        (pathlib.Path(args.out) / "bench_sdpa.json").write_text(json.dumps(result, indent=1, default=str))


if __name__ == "__main__":
    main()
