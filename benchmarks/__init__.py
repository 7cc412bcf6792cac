"""Benchmarks of pygraph's engine families, run from the repository root as modules, e.g.
``python -m benchmarks.gemm.bench_gemm``. `benchmarks.harness` is the one timing harness they share."""
