"""Host cost of one torch-op call on the device: pygraph's ops beside torch's cuDNN SDPA and FLA.

Each row is `benchmarks.harness.burst_cost`: drain the queue (torch.cuda.synchronize), time a burst
of N back-to-back calls with time.perf_counter around the launches only, take the min over 25 bursts,
divide by N; bursts of 1, 8 and 64, after 0.2 s of the same calls (a host CPU that idled is back at
its working clock). A number flat in the burst size is the host's; one that climbs with it is the
device's rate showing through. Forward calls under torch.no_grad (an inference step):

    sdpa            pygraph_sdpa.sdpa, [1, 1, 128, 64] bf16, and torch's
                    scaled_dot_product_attention on its cuDNN backend, same tensors
    gated_delta_net T=64 (one sequence), H = HV = 4, K = V = 128, bf16, and FLA's
                    chunk_gated_delta_rule on the same tensors where `fla` imports
    kimi_delta_attention T=64, the same sizes (per-channel gates)

and, to place the op's own cost, each op's graph executed alone (`Graph.execute` with the op's
tensors on torch's current stream, no op around it) and, for the linear-attention ops, the compiled
function its plan calls (the TVM-FFI call and its kernel launches, nothing of the graph). Goal (issue 55): each op <= torch's cuDNN SDPA
in the same run, <= 20 us for a single-graph op. Not a test: run it on the device,

    source scripts/device/env.sh && python -m benchmarks.ops.host_cost [--json $OUT/host_cost.json]
        [--profile $OUT/host_profile.txt]

``--profile`` also runs each row's call 2000 times under cProfile and writes the functions that took
the most time of their own (tottime) per row: where the microseconds above a kernel launch go (a row
whose kernels take longer than its host path fills the launch queue, and then shows that wait in the
launch call).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from benchmarks.harness import burst_cost

REPS, BURSTS, WARMUP_S = 25, (1, 8, 64), 0.2


def costs(call: Any) -> dict[int, float]:
    """us per call at each burst size (min over REPS bursts, each from a drained queue)."""
    import torch

    call()  # the first call builds (graphs, plans, kernels): not timed
    torch.cuda.synchronize()
    return {n: burst_cost(call, n, reps=REPS, sync=torch.cuda.synchronize, warmup_s=WARMUP_S) for n in BURSTS}


def _graph_alone(op_graphs: Any, cache_key: str, tensors: dict, device: Any) -> Any:
    """The op's built graph executed alone (op_support.execute) with ``tensors`` by port name."""
    from pygraph.op_support import execute

    key = next(k for k in op_graphs.GRAPHS.keys() if k[0] == cache_key)  # built by the op's first call
    built = op_graphs.GRAPHS.get(key, None)
    return lambda: execute(built, tensors, device)


def _compiled_alone(call: Any) -> Any:
    """The CuTe DSL function a linear-attention plan launches, called alone with the raw addresses
    and sizes ``call`` passed it (its TVM-FFI call and kernel launches, nothing of the graph)."""
    from pygraph_linear_attention.common import engine_sm90

    seen: list = []
    execute = engine_sm90.Sm90Plan.execute

    def spy(plan: Any, graph: Any, pack: Any, ctx: Any) -> None:
        fn = plan._fn
        plan._fn = lambda *args: seen.append((fn, args)) or fn(*args)
        try:
            execute(plan, graph, pack, ctx)
        finally:
            plan._fn = fn

    engine_sm90.Sm90Plan.execute = spy
    try:
        call()
    finally:
        engine_sm90.Sm90Plan.execute = execute
    fn, args = seen[-1]
    return lambda: fn(*args)


def profile(label: str, call: Any, out: Any, calls: int = 2000, top: int = 14) -> None:
    """``calls`` calls of ``call`` under cProfile; the ``top`` functions by their own time to ``out``."""
    import cProfile
    import io
    import pstats

    import torch

    prof = cProfile.Profile()
    prof.enable()
    for _ in range(calls):
        call()
    prof.disable()
    torch.cuda.synchronize()
    text = io.StringIO()
    pstats.Stats(prof, stream=text).sort_stats("tottime").print_stats(top)
    out.write(f"==== {label}: {calls} calls under cProfile (its overhead inflates Python frames)\n")
    out.write(text.getvalue().split("Ordered by:", 1)[-1])


def sdpa_rows() -> list[tuple[str, Any]]:
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from pygraph_sdpa import op_graphs, sdpa

    q, k, v = (torch.randn(1, 1, 128, 64, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    rows: list[tuple[str, Any]] = [("pygraph_sdpa.sdpa 1x1x128x64", lambda: sdpa(q, k, v))]
    sdpa(q, k, v)
    o, lse = torch.empty_like(q), torch.empty(1, 1, 128, 1, device="cuda")
    rows.append(
        (
            "  its graph alone",
            _graph_alone(op_graphs, "sdpa", {"q": q, "k": k, "v": v, "o": o, "lse": lse}, q.device),
        )
    )

    def torch_cudnn():
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            return torch.nn.functional.scaled_dot_product_attention(q, k, v)

    rows.append(("torch SDPA (cuDNN) 1x1x128x64", torch_cudnn))
    return rows


def _linear_inputs(per_key: bool) -> dict:
    import torch

    t, h, d = 64, 4, 128
    gen = torch.Generator(device="cuda").manual_seed(0)
    gate = (t, h, d) if per_key else (t, h)
    return {
        "q": torch.randn(t, h, d, generator=gen, device="cuda").bfloat16(),
        "k": torch.nn.functional.normalize(
            torch.randn(t, h, d, generator=gen, device="cuda"), dim=-1
        ).bfloat16(),
        "v": torch.randn(t, h, d, generator=gen, device="cuda").bfloat16(),
        "g": torch.nn.functional.logsigmoid(torch.randn(*gate, generator=gen, device="cuda")),
        "beta": torch.rand(t, h, generator=gen, device="cuda"),
        "cu_seqlens": torch.tensor([0, t], device="cuda", dtype=torch.int32),
    }


def linear_attention_rows() -> list[tuple[str, Any]]:
    import torch

    from pygraph_linear_attention import gated_delta_net, kimi_delta_attention
    from pygraph_linear_attention.common import op_graphs

    rows: list[tuple[str, Any]] = []
    for name, op, per_key, key in (
        ("gated_delta_net T=64", gated_delta_net, False, "gdn"),
        ("kimi_delta_attention T=64", kimi_delta_attention, True, "kda"),
    ):
        x = _linear_inputs(per_key)
        rows.append((name, lambda op=op, x=x: op(**x)))
        op(**x)
        tensors = dict(x) | {"o": torch.empty_like(x["v"])}
        rows.append(("  its graph alone", _graph_alone(op_graphs, key, tensors, x["q"].device)))
        rows.append(("  its compiled function alone", _compiled_alone(lambda op=op, x=x: op(**x))))
        if key == "gdn":
            try:
                from fla.ops.gated_delta_rule import chunk_gated_delta_rule
            except Exception as exc:  # FLA is optional: the row says why it is absent
                rows.append((f"FLA chunk_gated_delta_rule T=64 (not importable: {type(exc).__name__})", None))
            else:
                args = [x[n][None] for n in ("q", "k", "v", "g", "beta")]
                rows.append(("FLA chunk_gated_delta_rule T=64", lambda a=args: chunk_gated_delta_rule(*a)))
    return rows


def main() -> int:
    import torch

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", help="also write the table here (us per call by burst size)")
    parser.add_argument("--profile", help="also write each row's cProfile top functions here")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print(
            "host_cost: needs a CUDA device (benchmarks.ops.host_cost_cpu is the CPU side)", file=sys.stderr
        )
        return 2
    print(f"device: {torch.cuda.get_device_name()}; torch {torch.__version__}")
    table: dict[str, dict[int, float] | str] = {}
    with torch.no_grad():
        for label, call in sdpa_rows() + linear_attention_rows():
            table[label] = "n/a" if call is None else costs(call)
            if call is not None and args.profile:
                with open(args.profile, "a") as out:
                    profile(label.strip(), call, out)
    print(f"\nhost cost per call, us (min of {REPS} bursts from a drained queue)")
    print(f"{'call':48s}" + "".join(f"{'burst ' + str(n):>11s}" for n in BURSTS))
    for label, cells in table.items():
        if isinstance(cells, str):
            print(f"{label:48s}{cells:>11s}")
        else:
            print(f"{label:48s}" + "".join(f"{cells[n]:11.2f}" for n in BURSTS))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), "us_per_call": table}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
