#!/usr/bin/env bash
# A refactor's kernels against the ones they replace, in one process (benchmarks.gemm.ab_gemm --tree-b),
# sustained as floor_gemm.sh times them: each knob set from this tree and from TREE_B.
#   mkdir -p .abtree && git archive main packages/engines-gemm/src/pygraph_gemm/kernels | tar -x -C .abtree
#   source /tmp/site/env.sh && KNOBS=128x256c21z8g2vf bash scripts/device/ab_trees.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
TREE_B=${TREE_B:-.abtree/packages/engines-gemm/src/pygraph_gemm/kernels}
labels=""
knobs=${KNOBS:-128x256c21z8g2vf}
for k in ${knobs//,/ }; do labels="$labels,$k,$k@b"; done
KNOBS=${labels#,} AB_ARGS="--tree-b $TREE_B" LOG=ab_trees.log ROUNDS=${ROUNDS:-5} \
  RUNS=${RUNS:-8192x8192x8192:600 4096x14336x4096:1400} exec bash scripts/device/floor_gemm.sh
