#!/usr/bin/env bash
# compute-sanitizer memcheck over one GEMM case per config family (the numerics tests' cases marked
# memcheck in packages/engines-gemm/tests/gemm_cases.py): the SM90 kernel, then the portable SM80 one
# built for this GPU's arch (K tails with NaN padding, odd M/N with padded C rows, M=1 also swapped, a
# broadcast batch).
#   source /tmp/site/env.sh && bash scripts/device/memcheck_gemm.sh
# API-error reports are off: CUDA's own cuGetProcAddress probing at load raises harmless ones.
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device/env.sh
tests=packages/engines-gemm/tests
compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 3 \
  python3 -m pytest -p no:cacheprovider -q -m memcheck $tests/test_gemm_sm90_numerics.py 2>&1 \
  | tee "$OUTDIR/memcheck.log" | tail -20
echo "memcheck exit status: ${PIPESTATUS[0]}"
compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 3 \
  python3 -m pytest -p no:cacheprovider -q -m memcheck $tests/test_gemm_sm80_numerics.py 2>&1 \
  | tee "$OUTDIR/memcheck_sm80.log" | tail -12
echo "memcheck (sm80) exit status: ${PIPESTATUS[0]}"
