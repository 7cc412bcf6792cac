"""Benchmarks of pygraph's engine families, run from the repository root as modules, e.g.
``python -m benchmarks.gemm.bench_gemm``. `benchmarks.harness` is the one timing harness they share;
their CPU parts are tested in ``benchmarks/tests``.

The correctness cases a benchmark shares with its family's device tests belong to the tests
(``packages/engines-linear-attention/tests/gdn_cases.py`` and ``kda_cases.py``) and are imported by
the tests' own names (``import gdn_cases``): that folder is on the path the same way for the tests
(pytest's ``pythonpath``) and for the benchmarks and device scripts (``scripts/device/env.sh`` puts
it on ``PYTHONPATH``).
"""
