#!/usr/bin/env bash
# A refactor's kernels against the ones they replace, in one process (benchmarks/ab_gemm.py --tree-b),
# sustained as floor_gemm.sh times them: each knob set from this tree and from TREE_B.
#   mkdir -p .abtree && git archive main packages/engines-gemm/src/pygraph_gemm/kernels | tar -x -C .abtree
#   source /tmp/site/env.sh && KNOBS=128x256c21z8g2vf bash scripts/device/ab_trees.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device/env.sh
TREE_B=${TREE_B:-.abtree/packages/engines-gemm/src/pygraph_gemm/kernels}
KNOBS=${KNOBS:-128x256c21z8g2vf}
labels=""
for k in ${KNOBS//,/ }; do labels="$labels,$k,$k@b"; done
RUNS=${RUNS:-8192x8192x8192:600 4096x14336x4096:1400}
for dt in ${DTYPES:-bf16 fp16}; do
  for run in $RUNS; do
    python3 benchmarks/ab_gemm.py --tree-b "$TREE_B" --knobs "${labels#,}" --shapes "${run%%:*}" --dtype $dt \
      --rounds "${ROUNDS:-5}" --reps "${run##*:}" >> "$OUTDIR/ab_trees.log" 2>&1
  done
done
grep -hvE "^\s*$|^device" "$OUTDIR/ab_trees.log" | sed -E 's/ +/ /g' | cut -c1-110
