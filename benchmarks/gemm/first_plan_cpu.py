"""CPU time of the first plan list of the gemm example (`pygraph.examples`' "gemm", 4096^3 bf16).

Each run is a fresh interpreter (the hook's domain is cached per process, so only a process's first
graph pays for it), which imports pygraph and builds the example's graph, then times with
``time.process_time()``:

- *first plan list, after imports*: ``create_execution_plans()`` and reading entry 0 (its name,
  engine and knobs), with every module that the first planning imports loaded beforehand (a probe
  process plans once and lists them). What planning itself costs.
- *first plan list, cold*: the same with nothing loaded beforehand: what a process's first call
  costs, the family's, the backend's and the plan cache's imports included.
- *whole list*: then ``get_execution_plan_count()`` on that graph, which builds the rest of the knob
  domain (what autotune and the at-index APIs past the ranked prefix pay once).
- *later graph*: a second graph of the example planned in the same process.

No GPU needed (on the CPU the backend declines and the list is gemm_sm90's):

    python -m benchmarks.gemm.first_plan_cpu [--runs 5]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

ROWS = (
    ("after_imports", "first plan list, after imports"),
    ("cold", "first plan list, cold"),
    ("whole", "whole list (the count), after it"),
    ("later", "later graph's plan list"),
)


def _child(preload: list[str]) -> dict[str, float | int]:
    import importlib

    from pygraph.examples import EXAMPLES

    for name in preload:
        importlib.import_module(name)
    example = EXAMPLES["gemm"]
    g = example.graph()
    start = time.process_time()
    g.create_execution_plans()
    g.get_plan_name_at_index(0)
    g.get_engine_and_knobs_at_index(0)
    first = time.process_time() - start
    start = time.process_time()
    count = g.get_execution_plan_count()
    whole = time.process_time() - start
    g2 = example.graph()
    start = time.process_time()
    g2.create_execution_plans()
    g2.get_plan_name_at_index(0)
    later = time.process_time() - start
    return {"first_ms": first * 1e3, "whole_ms": whole * 1e3, "later_ms": later * 1e3, "count": count}


def _probe() -> list[str]:
    """The modules a first planning of the example imports (a fresh process plans once)."""
    from pygraph.examples import EXAMPLES

    g = EXAMPLES["gemm"].graph()
    before = set(sys.modules)
    g.create_execution_plans()
    g.get_plan_name_at_index(0)
    return sorted(set(sys.modules) - before)


def _run(*args: str) -> dict:
    out = subprocess.run(
        [sys.executable, "-m", "benchmarks.gemm.first_plan_cpu", *args],
        capture_output=True,
        text=True,
        check=True,
        env=os.environ.copy(),
    ).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="fresh processes per row (default 5)")
    parser.add_argument("--child", choices=("cold", "after_imports", "probe"), help=argparse.SUPPRESS)
    parser.add_argument("--preload", default="", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child == "probe":
        print(json.dumps(_probe()))
        return 0
    if args.child is not None:
        print(json.dumps(_child([m for m in args.preload.split(",") if m])))
        return 0

    preload = ",".join(_run("--child", "probe"))
    samples: dict[str, list[float]] = {key: [] for key, _ in ROWS}
    count = None
    for _ in range(args.runs):  # the two kinds of run interleaved, so drift hits both alike
        warm = _run("--child", "after_imports", "--preload", preload)
        cold = _run("--child", "cold")
        samples["after_imports"].append(warm["first_ms"])
        samples["cold"].append(cold["first_ms"])
        samples["whole"].append(warm["whole_ms"])
        samples["later"].append(warm["later_ms"])
        count = warm["count"]
    print(
        f"gemm example, first plan list: CPU ms over {args.runs} fresh processes ({count} plans in the whole list)"
    )
    print(f"{'':36s}{'min':>9s}{'median':>9s}")
    for key, label in ROWS:
        values = samples[key]
        print(f"{label:36s}{min(values):9.1f}{statistics.median(values):9.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
