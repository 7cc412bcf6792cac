"""Every gemm_sm90 configuration that `can_implement` accepts must compile: a random sweep, on the CPU.

    .venv/bin/python scripts/compile_sweep_gemm.py [--seconds 300]

Draws knobs from the engine's domain (`heuristics._domain`) and problems over input/output dtypes,
operand majors, batching and every epilogue piece and activation. A configuration the kernel's
rules decline is counted, not compiled; one they accept and the DSL then fails to compile is
printed as FAIL (the engine would crash at build_plans instead of declining). No GPU needed: CuTe DSL compiles for sm_90a anywhere.
"""

from __future__ import annotations

import argparse
import random
import time

from pygraph_gemm.engines.sm90 import knobs_from_config
from pygraph_gemm.heuristics import _domain
from pygraph_gemm.kernels.config import ACTIVATIONS, EpilogueSpec, can_implement
from pygraph_gemm.kernels.plan import Plan

PROBLEMS = [(128, 4096, 4096), (1000, 1048, 520), (16, 4096, 1024), (4096, 4096, 256)]
DTYPES_IN, DTYPES_OUT = ("bf16", "fp16"), ("bf16", "fp16", "fp32")


def _strides(rows: int, cols: int, col_major: bool, batch: int) -> tuple[int, int, int]:
    step = rows * cols if batch > 1 else 0
    return (step, 1, rows) if col_major else (step, cols, 1)


def draw(rng: random.Random, domain: list):
    kn = knobs_from_config(rng.choice(domain))
    ind, out = rng.choice(DTYPES_IN), rng.choice(DTYPES_OUT)
    m, n, k = rng.choice(PROBLEMS)
    batch = rng.choice([1, 1, 3])
    a_col, b_col, c_col = (rng.random() < 0.3 for _ in range(3))
    aux = rng.random() < 0.3
    spec = EpilogueSpec(
        bias=rng.random() < 0.5,
        row_scale=rng.random() < 0.3,
        col_scale=rng.random() < 0.3,
        residual=rng.random() < 0.3,
        activation=rng.choice(ACTIVATIONS),
        aux_out=aux,
        vec_dtype=rng.choice(DTYPES_OUT),
        residual_dtype=rng.choice(DTYPES_OUT),
        aux_dtype=out if rng.random() < 0.8 else rng.choice(DTYPES_OUT),
    )
    strides = (_strides(m, k, a_col, batch), _strides(k, n, b_col, batch), _strides(m, n, c_col, batch))
    return kn, spec, ind, out, (m, n, k, batch), strides


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=300)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    rng, domain = random.Random(args.seed), _domain()
    compiled = failed = declined = 0
    t0 = time.time()
    while time.time() - t0 < args.seconds:
        kn, spec, ind, out, (m, n, k, batch), (a_st, b_st, c_st) = draw(rng, domain)
        res_st = (m * n if batch > 1 else 0, n, 1) if spec.residual else None
        why = can_implement(
            m, n, k, batch, ind, ind, out, a_st, b_st, c_st, knobs=kn, spec=spec,
            residual_strides=res_st, aux_strides=c_st if spec.aux_out else None,
        )  # fmt: skip
        if why:
            declined += 1
            continue
        try:
            Plan(kn, spec, ind, out, a_st, b_st, c_st, m, n, k, batch)
            compiled += 1
        except Exception as exc:  # the finding this sweep exists for: report it and go on
            failed += 1
            print(
                f"FAIL {kn} {spec} in={ind} out={out} strides={a_st, b_st, c_st}: {type(exc).__name__}",
                flush=True,
            )
    print(f"compiled {compiled}, failed {failed}, declined {declined} in {time.time() - t0:.0f}s")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
