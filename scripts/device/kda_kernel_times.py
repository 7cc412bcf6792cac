"""Where the KDA / GDN-2 engines' time goes: each kernel's CUDA time per call at the bench's shapes.

    source scripts/device/env.sh && PYGRAPH_GDN_SM90_CACHE_DIR=.lacache \\
      python3 scripts/device/kda_kernel_times.py [--ops kda,gdn2] [--shapes B4xT4096,B1xT32768] \\
      [--engine sm90|cutile] [--bwd] [--block-v 16] [--calls 5] [--no-profile]

The forward graph (or, with ``--bwd``, the forward then the backward graph) of ``bench_kda_gdn2``'s
columns on the engine pair's first plans, on its timing inputs; two warm-up calls, then ``--calls``
calls under `torch.profiler`; prints each kernel's CUDA time per call (ms), largest first, and the
sum, so a change to one kernel can be predicted and checked against its share.
"""

from __future__ import annotations

import argparse
import re


def _short(name: str) -> str:
    """A CuTe DSL or cuTile kernel's name without its mangled argument list."""
    name = re.sub(r"^kernel_cutlass_", "", name)
    return re.split(r"_pygraph_|_Kt\d|\(", name)[0][:48]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", default="kda,gdn2")
    parser.add_argument("--shapes", default="B4xT4096,B1xT32768")
    parser.add_argument("--engine", default="sm90", choices=("sm90", "cutile"))
    parser.add_argument("--bwd", action="store_true", help="the forward then the backward graph")
    parser.add_argument(
        "--block-v", type=int, default=None, help="the plans at this BLOCK_V (default: the hook's)"
    )
    parser.add_argument("--calls", type=int, default=5)
    parser.add_argument(
        "--no-profile", action="store_true",
        help="run the warm-up calls only (for Nsight Compute: run.sh linear-attention ncu with NCU_RUN)",
    )  # fmt: skip
    args = parser.parse_args()

    import torch
    from torch.profiler import ProfilerActivity, profile

    from benchmarks.linear_attention import bench_kda_gdn2 as bench

    for op in args.ops.split(","):
        for shape in args.shapes.split(","):
            lengths = bench.SHAPES[shape]
            x = bench._timing_inputs(op, lengths)
            if args.bwd:
                call = bench._pygraph_graphs_call(op, x, lengths, args.engine, args.block_v)
            else:
                call = bench._pygraph_call(op, x, lengths, args.engine, args.block_v)
            for _ in range(2):
                call()
            torch.cuda.synchronize()
            if args.no_profile:  # ncu profiles a launch of these; torch.profiler would contend for CUPTI
                continue
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                for _ in range(args.calls):
                    call()
                torch.cuda.synchronize()
            times: dict[str, float] = {}
            for event in prof.key_averages():
                if event.device_time_total > 0:
                    key = _short(event.key)
                    times[key] = times.get(key, 0.0) + event.device_time_total / 1e3 / args.calls
            pass_name = "fwd+bwd" if args.bwd else "fwd"
            print(
                f"-- {op} {shape} {pass_name} ({args.engine}, BLOCK_V {args.block_v or 'by the hook'}): ms per call, "
                f"{sum(times.values()):.3f} in all"
            )
            for key, ms in sorted(times.items(), key=lambda kv: -kv[1]):
                print(f"  {key:50s} {ms:8.3f}")


if __name__ == "__main__":
    main()
