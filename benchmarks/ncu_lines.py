"""Where a kernel's warps stall, per source line (or per instruction), from Nsight Compute's source page.

    python3 -m benchmarks.ncu_lines CSV [--top 22]

CSV is ``ncu -i REPORT --page source --csv --print-source cuda,sass`` (or ``--print-source sass``
for a kernel built without line info). Printed: the total of stall samples, then the lines with the
most samples, each with its share and its top three stall reasons. The device runner's ``ncu`` parts
(scripts/device/run.sh sdpa|linear-attention ncu KERNEL) profile one launch and print this table.
"""

from __future__ import annotations

import argparse
import csv


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
    parser.add_argument("csv")
    parser.add_argument("--top", type=int, default=22)
    args = parser.parse_args()
    lines(args.csv, args.top)


if __name__ == "__main__":
    main()
