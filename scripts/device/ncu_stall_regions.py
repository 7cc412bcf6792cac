"""Where a GEMM kernel's warps spend their time, from ncu's per-instruction warp-state samples.

    python3 scripts/device/ncu_stall_regions.py $OUT/source_sass.csv

Reads the SASS source page that `scripts/device/ab_gemm_knobs.sh` exports with NCU_SOURCE
(``ncu -i source.ncu-rep --page source --csv --print-source sass``) and splits the kernel in three:
the main loop (from the consumers' first full-barrier wait before the first HGMMA to the wait for the
tile's last wgmma), the epilogue (everything after that wait), and the rest (set-up and the producer).
Per region: share of all samples, instructions per consumer warp per tile, the top stall reasons; then
the epilogue's samples and counts by opcode. Runs anywhere (no GPU needed).
"""

from __future__ import annotations

import argparse
import collections
import csv
import sys

ALL = "Warp Stall Sampling (All Samples)"
EXECUTED = "Instructions Executed"


def read(path: str) -> tuple[list[str], list[list[str]]]:
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    for i, row in enumerate(rows):
        if ALL in row:
            return row, rows[i + 1 :]
    raise ValueError(f"{path}: no {ALL!r} column; export the SASS source page with --csv")


def opcode(source: str) -> str:
    words = source.split()
    if not words:
        return ""
    word = words[1] if words[0].startswith("@") and len(words) > 1 else words[0]
    return word.split(".")[0]


def regions(addresses: list[int], sources: list[str]) -> dict[str, range]:
    """Main loop, epilogue and the rest (what precedes the loop): the k-loop is the backward branch around the first HGMMA (its
    head is the branch's target), the epilogue starts at the wait for the tile's last wgmma batch."""
    first_mma = next((i for i, s in enumerate(sources) if "HGMMA" in s), None)
    if first_mma is None:
        raise ValueError("no HGMMA instruction: not an SM90 wgmma kernel")
    drain = next(
        (i for i in range(first_mma, len(sources)) if "WARPGROUP.DEPBAR.LE gsb0, 0x0" in sources[i]), None
    )
    if drain is None:
        raise ValueError(
            "no wait for the last wgmma batch (WARPGROUP.DEPBAR.LE gsb0, 0x0) after the first HGMMA"
        )
    index = {a: i for i, a in enumerate(addresses)}
    heads = []
    for i in range(first_mma, drain):
        words = sources[i].replace(",", " ").split()
        if "BRA" in words and words[-1].startswith("0x"):
            target = index.get(int(words[-1], 16))
            if target is not None and target <= first_mma:
                heads.append(target)
    start = min(heads, default=first_mma)
    return {
        "main loop": range(start, drain),
        "epilogue": range(drain, len(sources)),
        "set-up and producer": range(start),
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("csv", help="the SASS source page exported as CSV")
    ap.add_argument("--top", type=int, default=16, help="opcodes listed for the epilogue")
    args = ap.parse_args(argv)
    header, data = read(args.csv)
    col = {name: i for i, name in enumerate(header)}
    reasons = [h for h in header if h.startswith("stall_") and "Not Issued" not in h]
    sources = [row[col["Source"]] for row in data]
    addresses = [int(row[col["Address"]], 16) for row in data]

    def num(row, name):
        return float(row[col[name]].replace(",", "") or 0)

    total = sum(num(r, ALL) for r in data)
    spans = regions(addresses, sources)
    # the wait for the tile's last wgmma runs once per consumer warp per tile
    per_tile = num(data[spans["epilogue"][0]], EXECUTED) or 1.0
    print(f"{args.csv}: {int(total)} samples, {len(data)} instructions, {int(per_tile)} consumer warp-tiles")
    for name, span in spans.items():
        rows = [data[i] for i in span]
        samples = sum(num(r, ALL) for r in rows)
        insts = sum(num(r, EXECUTED) for r in rows) / per_tile
        top = sorted(((sum(num(r, h) for r in rows), h[6:]) for h in reasons), reverse=True)[:5]
        why = ", ".join(f"{h} {100 * v / max(samples, 1):.0f}%" for v, h in top if v)
        print(f"  {name:20s} {100 * samples / total:5.1f}% of samples, {insts:7.0f} inst/warp-tile  ({why})")
    epi = [data[i] for i in spans["epilogue"]]
    epi_samples = sum(num(r, ALL) for r in epi) or 1.0
    by_op: dict[str, list[float]] = collections.defaultdict(lambda: [0.0, 0.0])
    for r in epi:
        entry = by_op[opcode(r[col["Source"]])]
        entry[0] += num(r, ALL)
        entry[1] += num(r, EXECUTED) / per_tile
    print("  epilogue by opcode (share of its samples, per warp-tile):")
    for op, (samples, count) in sorted(by_op.items(), key=lambda kv: -kv[1][0])[: args.top]:
        print(f"    {op or '?':12s} {100 * samples / epi_samples:5.1f}%  {count:6.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
