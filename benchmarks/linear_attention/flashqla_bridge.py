"""Our GDN against FlashQLA across the two processes of one warm machine: `bench_gdn`'s JSON (ours
and FLA's Triton, ``--gate-mean`` 0 and 4) and `bench_gdn_flashqla`'s (FlashQLA and FLA's Triton).

    python -m benchmarks.linear_attention.flashqla_bridge OUT/flashqla.json OUT/bench_gdn.json \\
        [OUT/bench_gdn_gate4.json]

FLA's Triton kernels ran in both processes on the same card, so per cell
``FlashQLA / ours = (FLA / ours, ours' run) / (FLA / FlashQLA, FlashQLA's run)`` (> 1: ours is
faster); the two FLA times are printed too, since a ratio against an anchor's slow run is not a
result (the bridge is only as good as their agreement).
"""

from __future__ import annotations

import argparse
import json
import pathlib

GATES = {0.0: "strong", 4.0: "weak"}  # bench_gdn's --gate-mean: bench_gdn_flashqla's gate names


def bridge(qla: dict, ours_runs: list[dict]) -> list[dict]:
    """One row per (gates, shape, pass) both runs timed: ours, FLA in ours' run, FlashQLA, FLA in
    FlashQLA's run, and FlashQLA / ours through FLA."""
    rows = []
    for run in ours_runs:
        gates = GATES.get(float(run.get("gate_mean", 0.0)))
        for part, label in (("timing", "fwd"), ("timing_bwd", "fwd+bwd")):
            for cell in run.get(part, []):
                theirs = qla["cells"].get(f"{gates} {cell['shape']} {label}")
                ms = cell["ms"]
                if theirs is None or "fla" not in ms or "ours[first]" not in ms:
                    continue
                ours, fla_ours = ms["ours[first]"], ms["fla"]
                flashqla, fla_qla = theirs["flashqla"], theirs["fla"]
                rows.append({
                    "gates": gates, "shape": cell["shape"], "pass": label, "ours": ours, "fla_ours_run": fla_ours,
                    "flashqla": flashqla, "fla_flashqla_run": fla_qla,
                    "flashqla_over_ours": (fla_ours / ours) / (fla_qla / flashqla),
                })  # fmt: skip
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("flashqla_json")
    parser.add_argument("ours_json", nargs="+")
    args = parser.parse_args()
    qla = json.loads(pathlib.Path(args.flashqla_json).read_text())
    runs = [json.loads(pathlib.Path(p).read_text()) for p in args.ours_json]
    print(f"device (FlashQLA's run): {qla.get('device')}")
    print("gates  shape      pass      ours ms  FLA(ours run)  FlashQLA  FLA(its run)  FlashQLA/ours")
    for r in bridge(qla, runs):
        print(
            f"{r['gates']:6s} {r['shape']:10s} {r['pass']:8s} {r['ours']:8.3f} {r['fla_ours_run']:14.3f} "
            f"{r['flashqla']:9.3f} {r['fla_flashqla_run']:13.3f} {r['flashqla_over_ours']:14.2f}x"
        )


if __name__ == "__main__":
    main()
