#!/usr/bin/env bash
# evict_last hints with and without an L2 set-aside for persisting accesses (benchmarks/l2_set_aside.py):
# DRAM reads and L2 sectors under ncu at each SET_ASIDE (MB; 0 = none), then sustained paired rounds
# (floor_gemm.sh: benchmarks/ab_gemm.py, ~1 s per column) with the last one in force.
#   source /tmp/site/env.sh && KNOBS=128x256c21z8g2vf,128x256c21z8g2h2vf SET_ASIDE="0 64" \
#     RUNS="8192x8192x8192:600" bash scripts/device/l2_set_aside.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device/env.sh
KNOBS=${KNOBS:-128x256c21z8g2vf,128x256c21z8g2h2vf}
SET_ASIDE=${SET_ASIDE:-0 64}
RUNS=${RUNS:-8192x8192x8192:600}
METRICS=sm__cycles_elapsed.avg,sm__cycles_elapsed.avg.per_second,lts__t_sectors_srcunit_tex_op_read.sum,lts__t_sectors_srcunit_tex_op_read_lookup_hit.sum,dram__bytes_read.sum,dram__bytes_write.sum
for mb in $SET_ASIDE; do
  for run in $RUNS; do
    shape=${run%%:*}
    PYGRAPH_L2_SET_ASIDE_MB=$mb PYGRAPH_NCU_SHAPE=$shape ncu --clock-control none --profile-from-start off \
      --metrics $METRICS python3 scripts/device/ncu_gemm_target.py ${KNOBS//,/ } > "$OUTDIR/ncu_setaside${mb}_$shape.log" 2>&1
    echo "== ncu, set-aside $mb MB, $shape"
    grep -E "set-aside|^  [a-z]|^    [a-z]" "$OUTDIR/ncu_setaside${mb}_$shape.log" | sed -E 's/ +/ /g' | cut -c1-110
  done
done
last=${SET_ASIDE##* }
echo "== sustained, set-aside $last MB"
KNOBS=$KNOBS RUNS=$RUNS DTYPES=${DTYPES:-bf16} AB_ARGS="--l2-set-aside $last" LOG=ab_setaside.log \
  exec bash scripts/device/floor_gemm.sh
