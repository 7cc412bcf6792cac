"""The workload the linear-attention runner's ``ncu`` part profiles: gdn at a bench_gdn shape.

    python3 scripts/device/gdn_profile.py SHAPE [--bwd] [--sm90-wgmma] [--bwd-wgmma 2] [--fused-wg BLOCK_V]

Runs the hook's first plan (or, with ``--sm90-wgmma``, the CuTe DSL pair on warpgroup MMAs, BLOCK_V
32; with ``--bwd-wgmma``, the hook's first forward then gdn_sm90_bwd at that WGMMA, BLOCK_V 32,
unsegmented), forward or forward+backward, twice: the first launch compiles, ``ncu -s 1`` profiles the
second. ``scripts/device/run.sh linear-attention ncu KERNEL [SHAPE] [--bwd]`` runs it under ncu, then
reads the report's source page with ``python3 -m benchmarks.ncu_lines``.
"""

from __future__ import annotations

import argparse


def run(shape: str, backward: bool, sm90_wgmma: bool = False, fused_wg: int = 0, bwd_wgmma: int = 0) -> None:
    import torch

    from benchmarks.linear_attention import bench_gdn  # first: it puts gdn_cases on sys.path
    from gdn_cases import make_inputs

    case = bench_gdn._timing_case(shape, bench_gdn.SHAPES[shape])
    tensors, _ = make_inputs(case, seed=1)
    if backward:
        d_o = torch.randn_like(tensors["v"])
        if bwd_wgmma:
            call, _ = bench_gdn._ours_fwd_bwd(
                case, tensors, d_o, 32, bwd_stages=1, bwd_segment=0, bwd_wgmma=bwd_wgmma
            )
        elif sm90_wgmma:
            call, _ = bench_gdn._ours_fwd_bwd(case, tensors, d_o, 32, engine="gdn_sm90", wgmma=1)
        else:
            call, _ = bench_gdn._ours_fwd_bwd(case, tensors, d_o, None)
    elif fused_wg:  # the fused warpgroup scan (SPLIT 0, WGMMA 1) at that BLOCK_V, STAGES 2
        call, _ = bench_gdn._ours(case, tensors, fused_wg, engine="gdn_sm90", stages=2, wgmma=1, split=0)
    elif sm90_wgmma:
        call, _ = bench_gdn._ours(case, tensors, 32, engine="gdn_sm90", stages=2, wgmma=1)
    else:
        call, _ = bench_gdn._ours(case, tensors, None)
    for _ in range(2):  # the first launch compiles; ncu -s 1 profiles the second
        call()
        torch.cuda.synchronize()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("shape")
    parser.add_argument("--bwd", action="store_true")
    parser.add_argument("--sm90-wgmma", action="store_true")
    parser.add_argument("--fused-wg", type=int, default=0, help="BLOCK_V of the fused warpgroup scan to run")
    parser.add_argument(
        "--bwd-wgmma", type=int, default=0, help="gdn_sm90_bwd's WGMMA behind the first forward"
    )
    args = parser.parse_args()
    run(args.shape, args.bwd, args.sm90_wgmma, args.fused_wg, args.bwd_wgmma)


if __name__ == "__main__":
    main()
