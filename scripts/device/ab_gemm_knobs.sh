#!/usr/bin/env bash
# One device call comparing gemm_sm90 knob sets: the SM90 numerics cases CHECK selects (a pytest -k
# expression over the cases' ids, e.g. a knob label), memcheck of those MEMCHECK selects, paired A/B
# rounds (AB_SHAPES), ncu cycles at one clock, and host cost last.
#   source /tmp/site/env.sh && CHECK=128x256c21z8g2 MEMCHECK="128x256c21z8g2 and aux" \
#     KNOBS=128x256c21z8g2vf,128x256c21z8g2vfo NCU_SHAPES=16384x4096x4096 bash scripts/device/ab_gemm_knobs.sh
# NCU_L2_DETAIL=<shape> splits the L2 read sectors by request, hit and partition fabric per kernel, and
# the SMs' TMA reads into their own and multicast destinations.
# NCU_EPILOGUES="plain bias bias+relu bias+gelu" profiles ours each way (bias+relu: an activation
# without MUFU work).
# Each step's log goes under $OUT; the summary lines print at the end.
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device/env.sh
KNOBS=${KNOBS:-128x256c21z8}
# the metric names this ncu knows for the H200's chip, listed once per call (NCU_MEM_SHAPE, NCU_L2_DETAIL)
metrics_list() {
  [ -s "$OUTDIR/ncu_metrics.txt" ] || ncu --query-metrics --chip gh100 > "$OUTDIR/ncu_metrics.txt" 2>&1
}
NUMERICS=packages/engines-gemm/tests/test_gemm_sm90_numerics.py
if [ -n "${CHECK:-}" ]; then
  python3 -m pytest -p no:cacheprovider -q "$NUMERICS" -k "$CHECK" > "$OUTDIR/check.log" 2>&1
fi
if [ -n "${MEMCHECK:-}" ]; then
  compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 3 \
    python3 -m pytest -p no:cacheprovider -q "$NUMERICS" -k "$MEMCHECK" > "$OUTDIR/memcheck.log" 2>&1
  echo "memcheck exit status: $?" >> "$OUTDIR/memcheck.log"
fi
if [ -n "${AB_SHAPES:-}" ]; then  # paired rounds (benchmarks.gemm.ab_gemm), each epilogue named
  for epi in ${AB_EPILOGUES:-bias+gelu}; do
    python3 -m benchmarks.gemm.ab_gemm --knobs "$KNOBS" --shapes "$AB_SHAPES" --epilogue "$epi" \
      --rounds "${AB_ROUNDS:-31}" >> "$OUTDIR/ab.log" 2>&1
  done
fi
if [ -n "${NCU_MEM_SHAPE:-}" ]; then  # where the L2 and DRAM bytes go, ours against cuBLAS
  PYGRAPH_NCU_SHAPE=$NCU_MEM_SHAPE ncu --clock-control none --profile-from-start off \
    --section MemoryWorkloadAnalysis --section MemoryWorkloadAnalysis_Tables --print-details all \
    --metrics lts__t_bytes.sum,dram__bytes_read.sum,dram__bytes_write.sum \
    python3 scripts/device/ncu_gemm_target.py ${KNOBS//,/ } > "$OUTDIR/ncu_mem.log" 2>&1
  metrics_list
  # The L2 read sectors of every layout come in under its tile arithmetic (81-99% of what the tiles
  # read). If the part's L2 request coalescer merges requests before the L2 slices, its counters say so: whatever lrc__ metrics this ncu knows, in a run of their own (a wrong name fails only it).
  LRC=$(awk '$1 ~ /^lrc__/ && $1 ~ /sectors|requests/ {print $1 ".sum"}' "$OUTDIR/ncu_metrics.txt" | head -6 | paste -sd, -)
  if [ -n "$LRC" ]; then
    PYGRAPH_NCU_SHAPE=$NCU_MEM_SHAPE ncu --clock-control none --profile-from-start off \
      --metrics "$LRC,lts__t_sectors_srcunit_tex_op_read.sum" \
      python3 scripts/device/ncu_gemm_target.py ${KNOBS//,/ } > "$OUTDIR/ncu_lrc.log" 2>&1
  fi
fi
if [ -n "${NCU_L2_SHAPES:-}" ]; then  # L2 read sectors, DRAM bytes and the SMs' active spread per knob set
  for shape in $NCU_L2_SHAPES; do
    PYGRAPH_NCU_SHAPE=$shape ncu --clock-control none --profile-from-start off \
      --metrics sm__cycles_elapsed.avg,sm__cycles_active.avg,sm__cycles_active.min,sm__cycles_active.max,lts__t_sectors_srcunit_tex_op_read.sum,dram__bytes_read.sum,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active \
      python3 scripts/device/ncu_gemm_target.py ${KNOBS//,/ } > "$OUTDIR/ncu_l2_$shape.log" 2>&1
  done
fi
if [ -n "${NCU_L2_DETAIL:-}" ]; then  # where the L2 read sectors come from: requests, hits, the partition fabric,
  # and what the L2 request coalescer (lrc__) merged: multicast ("programmatic") and identical
  # requests of different SMs ("hardware")
  # Only the names this ncu lists for gh100 are asked for (one unknown name fails the whole run).
  metrics_list
  WANT="lts__t_requests_srcunit_tex_op_read lts__t_sectors_srcunit_tex_op_read lts__t_sectors_srcunit_tex_op_read_lookup_hit
    lts__t_sectors_srcunit_tex_op_read_lookup_miss lts__t_sectors_op_read lts__t_requests_op_read lts__t_sectors_srcunit_ltcfabric
    lts__t_sectors_srcnode_gpc lts__t_sectors_srcunit_tex lts__t_requests_srcunit_tex lts__ltcfabric2lts_cycles_active
    lts__t_sectors_lookup_hit lts__t_sectors_lookup_miss
    l1tex__m_xbar2l1tex_read_sectors_mem_global_op_tma_ld l1tex__m_xbar2l1tex_read_sectors_mem_global_op_tma_ld_dest_self
    l1tex__m_xbar2l1tex_read_sectors_mem_global_op_tma_ld_dest_multicast
    l1tex__m_l1tex2xbar_read_requests_mem_global_op_tma_ld_dest_multicast
    l1tex__m_l1tex2xbar_read_requests_replayed_mem_global_op_tma_ld_dest_multicast
    lrc__xbar2lrc_requests_op_read lrc__request_sectors_op_read_coalescable
    lrc__request_sectors_op_read_coalescing_achieved_type_hardware
    lrc__request_sectors_op_read_coalescing_achieved_type_programmatic lrc__lrc2xbar_sectors_op_read
    lrc__lts2lrc_sectors_op_read lrc__xbar2gpc_sectors_op_read"
  HAVE=$(for m in $WANT; do awk -v m="$m" '$1 == m {print m ".sum"; exit}' "$OUTDIR/ncu_metrics.txt"; done | paste -sd, -)
  echo "asked: $HAVE" > "$OUTDIR/ncu_l2_detail.log"
  [ -n "$HAVE" ] && PYGRAPH_NCU_SHAPE=$NCU_L2_DETAIL ncu --clock-control none --profile-from-start off --metrics "$HAVE" \
    python3 scripts/device/ncu_gemm_target.py ${KNOBS//,/ } >> "$OUTDIR/ncu_l2_detail.log" 2>&1
fi
for epi in ${NCU_EPILOGUES:-bias+gelu}; do
for shape in ${NCU_SHAPES:-}; do
  [ "$epi" = bias+gelu ] && unset PYGRAPH_NCU_EPILOGUE || export PYGRAPH_NCU_EPILOGUE=$epi
  PYGRAPH_NCU_SHAPE=$shape ncu --clock-control none --profile-from-start off \
    --metrics sm__cycles_elapsed.avg,sm__cycles_elapsed.avg.per_second,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,smsp__inst_executed.sum \
    python3 scripts/device/ncu_gemm_target.py ${KNOBS//,/ } > "$OUTDIR/ncu_${epi//+/_}_$shape.log" 2>&1
done
done
if [ -n "${HOST:-}" ]; then
  python3 -m benchmarks.gemm.bench_host_cost > "$OUTDIR/host.log" 2>&1
fi
echo "== check";    grep -E "passed|failed|FAILED|ERROR" "$OUTDIR/check.log" 2>/dev/null | tail -12
echo "== memcheck"; grep -E "ERROR SUMMARY|exit status|passed|failed" "$OUTDIR/memcheck.log" 2>/dev/null
echo "== a/b";      grep -vE "^\s*$" "$OUTDIR/ab.log" 2>/dev/null | tail -40
for epi in ${NCU_EPILOGUES:-bias+gelu}; do
for shape in ${NCU_SHAPES:-}; do
  echo "== ncu $epi $shape"
  grep -E "^  [a-z_]+.*\(|sm__cycles_elapsed.avg |per_second|hmma|inst_executed" "$OUTDIR/ncu_${epi//+/_}_$shape.log" \
    | sed -E 's/ +/ /g' | cut -c1-110
done
done
for shape in ${NCU_L2_SHAPES:-}; do
  echo "== ncu l2 $shape"
  grep -E "^  [a-z]|^    [a-z]" "$OUTDIR/ncu_l2_$shape.log" | sed -E 's/ +/ /g' | cut -c1-110
done
[ -n "${NCU_L2_DETAIL:-}" ] && { echo "== ncu l2 detail $NCU_L2_DETAIL"; head -1 "$OUTDIR/ncu_l2_detail.log";
  grep -E "^  [a-z]|^    [a-z]" "$OUTDIR/ncu_l2_detail.log" | sed -E 's/ +/ /g' | cut -c1-110; }
echo "== host";     tail -36 "$OUTDIR/host.log" 2>/dev/null
