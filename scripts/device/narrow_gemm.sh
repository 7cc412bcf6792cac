#!/usr/bin/env bash
# The narrow row (M = 128, 128x4096x4096) as bench_gemm times it: every launch from a cold L2,
# paired rounds of the knob sets and cuBLAS's columns (benchmarks.gemm.ab_gemm --flush). SHAPES
# takes any list (the narrow and small buckets' cells are timed this way too).
#   source /tmp/site/env.sh && KNOBS=128x64c11k2,128x64c12k2 bash scripts/device/narrow_gemm.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device/env.sh
KNOBS=${KNOBS:-128x64c11k2}
SHAPES=${SHAPES:-128x4096x4096}
for epi in ${EPILOGUES:-bias+gelu plain}; do
  for dt in ${DTYPES:-fp16 bf16}; do
    python3 -m benchmarks.gemm.ab_gemm --knobs "$KNOBS" --shapes "$SHAPES" --dtype $dt --epilogue $epi --flush \
      --rounds "${ROUNDS:-31}" >> "$OUTDIR/narrow.log" 2>&1
  done
done
ab_table "$OUTDIR/narrow.log"
