"""Compile the SM90 GEMM kernels the device benchmarks use, on any machine (no GPU needed).

    PYGRAPH_GEMM_CACHE_DIR=.gemmcache python scripts/device/precompile_gemm.py [--only splitk,bench,check]

CuTe DSL compiles for sm_90a without a device; the disk cache (keyed by the kernel source's digest,
see pygraph_gemm.kernels.launch) then travels with the working tree, so device time goes to running
rather than compiling. Prints one line per kernel and the total.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "benchmarks"))

from pygraph_gemm.kernels.config import EpilogueSpec
from pygraph_gemm.kernels.plan import Plan


def _bench_gemm_kernels():
    import bench_gemm

    for dn in ("bf16", "fp16"):
        for m, n, k in bench_gemm.SHAPES:
            for fused in (False, True):
                spec = EpilogueSpec(
                    bias=fused, activation="gelu_approx_tanh" if fused else "none", vec_dtype=dn
                )
                for kn in bench_gemm.candidates(m, n, k):
                    yield kn, spec, dn, m, n, k


def _bench_splitk_kernels():
    import bench_splitk

    for dn in ("bf16", "fp16"):
        for spec in bench_splitk.specs(dn).values():
            for _name, kn in bench_splitk.CONFIGS:
                yield kn, spec, dn, 128, 4096, 4096


def _probe_kernels():
    import gemm_epilogue_probe as probe

    from pygraph_gemm.knob_labels import parse_knob_label

    for label in probe.KNOBS.split(","):
        for spec in probe.EPILOGUES.values():
            yield parse_knob_label(label), spec, "bf16", 8192, 8192, 8192


def _check_kernels():
    """Every case of benchmarks/check_gemm.py (the sm90 suite runs them all), in its own layout."""
    import check_gemm

    return map(check_gemm.plan_args, check_gemm.cases())


def _row_major(kernels):
    """A (M, K) row-major, B the transpose of an (N, K) row-major weight, C (M, N) row-major."""
    for kn, spec, dn, m, n, k in kernels:
        yield kn, spec, dn, dn, (0, k, 1), (0, 1, k), (0, n, 1), m, n, k, 1


SETS = {
    "bench": lambda: _row_major(_bench_gemm_kernels()),
    "splitk": lambda: _row_major(_bench_splitk_kernels()),
    "probe": lambda: _row_major(_probe_kernels()),
    "check": _check_kernels,
}


def _labelled_kernels(labels: str, dtypes: str):
    """Each knob label, plain and bias+gelu, in each dtype (what ab_gemm.py and the ncu target build)."""
    from pygraph_gemm.knob_labels import parse_knob_label

    for label in labels.split(","):
        for dn in dtypes.split(","):
            for fused in (False, True):
                act = "gelu_approx_tanh" if fused else "none"
                spec = EpilogueSpec(bias=fused, activation=act, vec_dtype=dn)
                yield parse_knob_label(label), spec, dn, 8192, 8192, 8192


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", default=",".join(SETS), help=f"comma-separated of {sorted(SETS)}")
    ap.add_argument("--labels", default="", help="knob labels (pygraph_gemm.knob_labels) to build as well")
    ap.add_argument("--dtypes", default="bf16,fp16", help="dtypes of the --labels builds")
    args = ap.parse_args(argv)
    if not os.environ.get("PYGRAPH_GEMM_CACHE_DIR"):
        print("set PYGRAPH_GEMM_CACHE_DIR: the compiled kernels go there", file=sys.stderr)
        return 2
    seen, t0 = set(), time.time()
    sets = [SETS[name]() for name in args.only.split(",") if name]
    if args.labels:
        sets.append(_row_major(_labelled_kernels(args.labels, args.dtypes)))
    for kernels in sets:
        for plan_args in kernels:
            kn, spec, dn, out, a, b, c = plan_args[:7]
            # one kernel per static layout: majors (unit strides) and broadcasts (zero batch strides)
            key = (kn, spec, dn, out, tuple(x == 1 for x in a + b + c), a[0] == 0, b[0] == 0)
            if key in seen:
                continue
            seen.add(key)
            t = time.time()
            try:
                Plan(*plan_args)
                status = "ok"
            except Exception as exc:  # a knob set the kernel declines is reported, not fatal
                status = f"{type(exc).__name__}: {str(exc)[:120]}"
            print(f"{time.time() - t:6.1f}s {dn} {kn} {spec.activation}: {status}", flush=True)
    print(f"compiled {len(seen)} kernels in {time.time() - t0:.0f}s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
