#!/usr/bin/env bash
# The fused floor, sustained (benchmarks.gemm.ab_gemm): bias+gelu of the long-K rule's config
# against cuBLASLt's fused kernel, cuBLAS addmm and the unfused addmm-then-gelu on the four
# large shapes, bf16 and fp16. Each column runs about one second of back-to-back launches per round
# (the reps below), so every kernel is timed at the clock its own power draw settles to; bursts of
# 10 launches flatter kernels that draw more power (ping-pong 128x128 led bursts by 1-4% and trailed
# sustained by 2-5%).
#   source /tmp/site/env.sh && bash scripts/device/floor_gemm.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device/env.sh
KNOBS=${KNOBS:-128x256c21z8g2}
# shape:reps, about one second of launches each on the H200
RUNS=${RUNS:-4096x4096x4096:5000 8192x8192x8192:600 4096x14336x4096:1400 16384x4096x4096:1200}
# AB_ARGS: more ab_gemm arguments, e.g. --tree-b DIR to time a refactor's kernels against the ones they
# replace (KNOBS=128x256c21z8g2vf,128x256c21z8g2vf@b: a label ending in @b is built from DIR);
# LOG: the log under $OUT
LOG="$OUTDIR/${LOG:-floor_sustained.log}"
for dt in ${DTYPES:-bf16 fp16}; do
  for run in $RUNS; do
    python3 -m benchmarks.gemm.ab_gemm ${AB_ARGS:-} --knobs "$KNOBS" --shapes "${run%%:*}" --dtype $dt \
      --rounds "${ROUNDS:-3}" --reps "${run##*:}" >> "$LOG" 2>&1
  done
done
ab_table "$LOG"
