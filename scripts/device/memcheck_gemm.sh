#!/usr/bin/env bash
# compute-sanitizer memcheck over one GEMM case per config family (check_gemm.py --representatives).
#   source /tmp/site/env.sh && bash scripts/device/memcheck_gemm.sh
# API-error reports are off: CUDA's own cuGetProcAddress probing at load raises harmless ones.
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device/env.sh
compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 3 \
  python3 benchmarks/check_gemm.py --representatives 2>&1 | tee "$OUTDIR/memcheck.log" | tail -20
echo "memcheck exit status: ${PIPESTATUS[0]}"
# The portable kernel (gemm_sm80, built for this GPU's arch): K tails with NaN padding, odd M/N with
# padded C rows, M=1 (also swapped), a broadcast batch (check_gemm_sm80.py's case indices).
compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 3 \
  python3 benchmarks/check_gemm_sm80.py --only 36,38,39,41,42,45,47,53 2>&1 | tee "$OUTDIR/memcheck_sm80.log" | tail -12
echo "memcheck (sm80) exit status: ${PIPESTATUS[0]}"
