"""Compile the GEMM kernels the device runs use, on any machine (no GPU needed).

    PYGRAPH_GEMM_CACHE_DIR=.gemmcache python scripts/device/precompile_gemm.py --only check
    source scripts/device/env.sh && PYGRAPH_GEMM_CACHE_DIR=.gemmcache \\
      python3 scripts/device/precompile_gemm.py [--only bench,splitk,check] [--labels 128x256c21z8g2vf]

CuTe DSL compiles for sm_90a without a device; the disk cache (keyed by the kernel sources' digest,
see pygraph_gemm.kernels.compile_cache) then travels with the working tree, so device time goes to
running rather than compiling. ``check`` is every case of the numerics suites
(packages/engines-gemm/tests/gemm_cases.py; the SM80 ones built for the H200's sm_90, as the SM80
test builds them there); ``bench`` and ``splitk`` the kernels of benchmarks.gemm.bench_gemm and
bench_splitk (they import the ``benchmarks`` package: the repository root on PYTHONPATH, as
scripts/device/env.sh sets it). Prints one line per kernel and the total.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import os
import pathlib
import sys
import time

from pygraph_gemm.kernels.config import EpilogueSpec, KernelEpilogue
from pygraph_gemm.kernels.frame import kernel_layout
from pygraph_gemm.knob_labels import knob_label

ROOT = pathlib.Path(__file__).resolve().parents[2]
CASES = ROOT / "packages" / "engines-gemm" / "tests" / "gemm_cases.py"
SM80_DEVICE_ARCH = "sm_90"  # the SM80 kernel's build on the H200 (a cubin loads only on its own major)


def _benchmark(name: str):
    """``benchmarks.gemm.<name>``; the repository root must be importable (scripts/device/env.sh)."""
    try:
        return importlib.import_module(f"benchmarks.gemm.{name}")
    except ModuleNotFoundError as exc:
        raise SystemExit(
            f"precompile_gemm: cannot import benchmarks.gemm.{name} ({exc}); put the repository root on "
            "PYTHONPATH (source scripts/device/env.sh) or pass --only check"
        ) from None


def _row_major(kn, spec: EpilogueSpec, dn: str, m: int, n: int, k: int):
    """The SM90 key of A (M, K) row-major, B the transpose of an (N, K) row-major weight, C (M, N)."""
    lay = kernel_layout(kn.swap_ab, dn, dn, (0, k, 1), (0, 1, k), (0, n, 1), m, n, k, 1)
    return "sm90", "sm_90a", kn, KernelEpilogue.from_spec(spec, kn.swap_ab), lay


def _bench_gemm_kernels():
    bench_gemm = _benchmark("bench_gemm")
    for dn in ("bf16", "fp16"):
        for m, n, k in bench_gemm.SHAPES:
            for fused in (False, True):
                spec = EpilogueSpec(
                    bias=fused, activation="gelu_approx_tanh" if fused else "none", vec_dtype=dn
                )
                for kn in bench_gemm.candidates(m, n, k):
                    yield _row_major(kn, spec, dn, m, n, k)


def _bench_splitk_kernels():
    bench_splitk = _benchmark("bench_splitk")
    for dn in ("bf16", "fp16"):
        for spec in bench_splitk.specs(dn).values():
            for _name, kn in bench_splitk.CONFIGS:
                yield _row_major(kn, spec, dn, 128, 4096, 4096)


def _check_kernels():
    """Every case of the SM90 and SM80 numerics suites, in the layout the tests give it."""
    spec = importlib.util.spec_from_file_location("gemm_cases", CASES)
    cases = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = cases  # dataclasses resolve their module's annotations through it
    spec.loader.exec_module(cases)
    for kernel, arch, kn, kepi, lay in cases.compile_keys():
        yield kernel, (SM80_DEVICE_ARCH if kernel == "sm80" else arch), kn, kepi, lay


def _labelled_kernels(labels: str, dtypes: str):
    """Each knob label, plain and bias+gelu, in each dtype (what ab_gemm and the ncu target build)."""
    from pygraph_gemm.knob_labels import parse_knob_label

    for label in labels.split(","):
        for dn in dtypes.split(","):
            for fused in (False, True):
                act = "gelu_approx_tanh" if fused else "none"
                spec = EpilogueSpec(bias=fused, activation=act, vec_dtype=dn)
                yield _row_major(parse_knob_label(label), spec, dn, 8192, 8192, 8192)


SETS = {"bench": _bench_gemm_kernels, "splitk": _bench_splitk_kernels, "check": _check_kernels}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default=",".join(SETS), help=f"comma-separated of {sorted(SETS)}")
    ap.add_argument("--labels", default="", help="knob labels (pygraph_gemm.knob_labels) to build as well")
    ap.add_argument("--dtypes", default="bf16,fp16", help="dtypes of the --labels builds")
    args = ap.parse_args(argv)
    if not os.environ.get("PYGRAPH_GEMM_CACHE_DIR"):
        print("set PYGRAPH_GEMM_CACHE_DIR: the compiled kernels go there", file=sys.stderr)
        return 2
    from pygraph_gemm.kernels.compile_cache import get_compiled

    seen, t0 = set(), time.time()
    sets = [SETS[name]() for name in args.only.split(",") if name]
    if args.labels:
        sets.append(_labelled_kernels(args.labels, args.dtypes))
    for keys in sets:
        for key in keys:
            if key in seen:
                continue
            seen.add(key)
            kernel, arch, kn, kepi, lay = key
            t = time.time()
            try:
                get_compiled(kn, kepi, lay, arch, kernel)
                status = "ok"
            except Exception as exc:  # a knob set the kernel declines is reported, not fatal
                status = f"{type(exc).__name__}: {str(exc)[:120]}"
            print(
                f"{time.time() - t:6.1f}s {kernel} {arch} {lay.ab_dtype}>{lay.c_dtype} "
                f"{lay.a_major}{lay.b_major}{lay.c_major} {knob_label(kn)} {kepi.act}: {status}",
                flush=True,
            )
    print(f"compiled {len(seen)} kernels in {time.time() - t0:.0f}s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
