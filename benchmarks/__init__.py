"""Benchmarks of pygraph's engine families, run from the repository root as modules, e.g.
``python -m benchmarks.gemm.bench_gemm``. `benchmarks.harness` is the one timing harness they share;
their CPU parts are tested in ``benchmarks/tests``.

The correctness cases a benchmark shares with its family's device tests belong to the tests
(``packages/engines-linear-attention/tests/gdn_cases.py`` and ``kda_cases.py``). Importing this
package puts that folder on ``sys.path``, as pytest's ``pythonpath`` does for the tests, so the
benchmarks and the device scripts import the case tables by the tests' own names (``import gdn_cases``).
"""

from __future__ import annotations

import sys
from pathlib import Path

# the tests folders holding case tables benchmarks import; appended, so they shadow no installed module
CASE_DIRS = [Path(__file__).resolve().parent.parent / "packages" / "engines-linear-attention" / "tests"]
for _dir in map(str, CASE_DIRS):
    if _dir not in sys.path:
        sys.path.append(_dir)
