"""Where a gdn_cutile kernel's warps stall, per source line, from Nsight Compute's source counters.

    python3 scripts/device/gdn_profile.py run SHAPE [--bwd] [--sm90-wgmma]  # the hook's first plan
        (or the CuTe DSL pair on warpgroup MMAs, BLOCK_V 32), called twice
    python3 scripts/device/gdn_profile.py lines CSV [--top 22] # the lines with the most stall samples

`gdn_cutile.sh ncu KERNEL [SHAPE] [--bwd]` runs the first under ncu (the kernel's second launch) and
the second over the report's source page (``ncu --page source --csv --print-source cuda,sass``).
"""

from __future__ import annotations

import argparse
import csv


def run(shape: str, backward: bool, sm90_wgmma: bool = False) -> None:
    import torch

    from benchmarks.linear_attention import bench_gdn
    from benchmarks.linear_attention.gdn_cases import make_inputs

    case = bench_gdn._timing_case(shape, bench_gdn.SHAPES[shape])
    tensors, _ = make_inputs(case, seed=1)
    if backward:
        d_o = torch.randn_like(tensors["v"])
        if sm90_wgmma:
            call, _ = bench_gdn._ours_fwd_bwd(case, tensors, d_o, 32, engine="gdn_sm90", wgmma=1)
        else:
            call, _ = bench_gdn._ours_fwd_bwd(case, tensors, d_o, None)
    elif sm90_wgmma:
        call, _ = bench_gdn._ours(case, tensors, 32, engine="gdn_sm90", stages=2, wgmma=1)
    else:
        call, _ = bench_gdn._ours(case, tensors, None)
    for _ in range(2):  # the first launch compiles; ncu -s 1 profiles the second
        call()
        torch.cuda.synchronize()


def _number(text: str) -> float:
    return float(text.replace(",", "")) if text not in ("", "-") else 0.0


def lines(path: str, top: int) -> None:
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    # a kernel built with line info has a source page ("Line No", "Source", ...); one without (the
    # CuTe DSL kernels) has only its SASS ("Address", "Source", ...): then instructions are ranked
    start = next(
        (i for i, r in enumerate(rows) if r[:2] in (["Line No", "Source"], ["Address", "Source"])), None
    )
    if start is None:
        raise SystemExit(
            f"{path}: no source or SASS table (ncu printed: {' '.join(c for r in rows[:2] for c in r)[:200]})"
        )
    header = rows[start]
    samples = header.index("Warp Stall Sampling (All Samples)")
    stalls = [j for j, name in enumerate(header) if name.startswith("stall_") and "Not Issued" not in name]
    source = [r for r in rows[start + 1 :] if r and r[0]]  # the source lines (the SASS rows have no number)
    total = sum(_number(r[samples]) for r in source) or 1.0
    unit = "line" if header[0] == "Line No" else "instruction"
    print(f"{int(total)} stall samples; per {unit}: share, then its top stall reasons")
    for r in sorted(source, key=lambda r: -_number(r[samples]))[:top]:
        n = _number(r[samples]) or 1.0
        reasons = sorted(((_number(r[j]), header[j][6:]) for j in stalls), reverse=True)[:3]
        why = " ".join(f"{name} {100 * v / n:.0f}%" for v, name in reasons if v)
        print(f"{r[0]:>5} {100 * _number(r[samples]) / total:5.1f}%  {r[1].strip()[:72]:<72}  {why}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p_run = sub.add_parser("run")
    p_run.add_argument("shape")
    p_run.add_argument("--bwd", action="store_true")
    p_run.add_argument("--sm90-wgmma", action="store_true")
    p_lines = sub.add_parser("lines")
    p_lines.add_argument("csv")
    p_lines.add_argument("--top", type=int, default=22)
    args = parser.parse_args()
    if args.command == "run":
        run(args.shape, args.bwd, args.sm90_wgmma)
    else:
        lines(args.csv, args.top)


if __name__ == "__main__":
    main()
