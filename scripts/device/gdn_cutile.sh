#!/usr/bin/env bash
# gdn_cutile on the device: the sm90 correctness tests of the linear-attention family, then the
# benchmark (timing against flash-linear-attention and cudnn-frontend).
#   source /tmp/site/env.sh && source .dev3/cutile.sh && bash scripts/device/gdn_cutile.sh [PART] [bench args...]
# PART: all (default: fwd, bwd, fla, ops, bench), fwd (the forward's sm90 tests, gdn_sm90's among them),
# sm90 (gdn_sm90's, the CuTe DSL forward, alone), sm90bwd (gdn_sm90_bwd's, the CuTe DSL backward,
# alone), wgmma (the cases of both CuTe DSL engines on warpgroup MMAs, WGMMA 1 and 2), bwd (the backward's,
# both engines'; K overrides its pytest -k expression, e.g. K='backward and not gdn_sm90' for cuTile's alone),
# fla (the forward against flash-linear-attention's on the same inputs),
# ops (the torch op's sm90 tests: opcheck, a side stream, a compiled training step), memcheck
# (compute-sanitizer over the varlen-odd forward and backward cases, or MEMCHECK_CASES's; not in
# all), kda (the forward tests of kda_cutile, gdn2_cutile, kda_sm90 and gdn2_sm90, K=backward the backwards (kda_cutile_bwd,
# gdn2_cutile_bwd); not in all), kdasm90 (the CuTe DSL KDA / GDN-2 cases alone, forward and backward, no
# cuTile needed; not in all), kdaops (the KDA and GDN-2 torch
# ops' sm90 tests through each forward engine; not in all), kdafla (the KDA and GDN-2 forward against
# flash-linear-attention's chunk_kda / chunk_gdn2 on the same inputs; not in all), kdacheck (the rest of
# the CuTe DSL pair's device check once kdasm90 passed: each kernel's time forward and forward+backward,
# kdaops through the pair, memcheck on both ops' varlen-odd forward and backward; not in all), kdabench (bench_kda_gdn2: the
# anchors and the pygraph columns, forward through the graph, forward+backward through the torch op; not in
# all), ncu KERNEL [SHAPE] [--bwd]
# (Nsight Compute's per-source-line stall samples of one launch of a kernel, e.g. chunk_prepare, at a
# bench_gdn shape, default B4xT4096; not in all), bench. Run the parts as
# separate calls where one call's time is bounded: each kernel compiles on its first launch into
# cuTile's disk cache (the forward's 2-5 s each; the backward's chunk gradient kernels 3-18 s per
# configuration, and the backward's cases span about ten), so a later part finds them compiled.
# cuTile needs its compiler (tileiras with a ptxas/libnvvm of CUDA 13.2+: .dev3/cutile.sh).
set -uo pipefail
self="$(cd "$(dirname "$0")" && pwd)/$(basename "$0")"  # kdacheck runs its parts through it
cd "$(dirname "$0")/../.."
source scripts/device/env.sh
part=all
case "${1:-}" in all|fwd|sm90|sm90bwd|wgmma|bwd|fla|ops|memcheck|ncu|bench|kda|kdasm90|kdaops|kdafla|kdacheck|kdabench) part=$1; shift ;; esac
nvidia-smi --query-gpu=name,compute_cap,driver_version,clocks.sm --format=csv,noheader | tee "$OUTDIR/device.txt"
python3 -c "import cuda.tile, torch; print('cuda.tile', cuda.tile.__version__, 'torch', torch.__version__)" 2>&1 | tee -a "$OUTDIR/device.txt"
tests=packages/engines-linear-attention/tests/test_gdn_cutile_sm90.py  # run_tests (env.sh) reads it
if [ "$part" = all ] || [ "$part" = fwd ]; then run_tests forward gdn_sm90_fwd_pytest.log; fi
if [ "$part" = sm90 ]; then run_tests gdn_sm90_forward gdn_sm90_engine_pytest.log; fi
if [ "$part" = sm90bwd ]; then run_tests gdn_sm90_backward gdn_sm90_bwd_engine_pytest.log; fi
if [ "$part" = wgmma ]; then run_tests wgmma gdn_sm90_wgmma_pytest.log; fi
if [ "$part" = all ] || [ "$part" = bwd ]; then run_tests "${K:-backward}" gdn_sm90_bwd_pytest.log; fi
if [ "$part" = all ] || [ "$part" = fla ]; then
  python3 -m pytest -m sm90 -p no:cacheprovider -q -rs -s packages/engines-linear-attention/tests/test_gdn_vs_fla_sm90.py \
    2>&1 | tee "$OUTDIR/gdn_vs_fla_pytest.log" | grep -E ": \{|passed|failed" | cut -c1-300
fi
if [ "$part" = all ] || [ "$part" = ops ]; then
  python3 -m pytest -m sm90 -p no:cacheprovider -q -rs --maxfail=5 packages/engines-linear-attention/tests/test_gdn_ops_sm90.py \
    2>&1 | tee "$OUTDIR/gdn_ops_sm90_pytest.log" | tail -25
fi
if [ "$part" = kda ]; then
  # (the compile checks for the other archs run on the CPU: scripts/cpu_cutile_env.sh)
  # (K may be an expression, e.g. "backward and sm90": its spaces become underscores in the log's name)
  tests=packages/engines-linear-attention/tests/test_kda_cutile_sm90.py run_tests "${K:-forward}" "kda_$(echo "${K:-forward}" | tr ' ' '_')_pytest.log"
fi
if [ "$part" = kdasm90 ]; then
  # the CuTe DSL engines' cases alone (forward and backward, KDA and GDN-2; no cuTile needed): the ids
  # ending in -sm90 (a -k expression cannot say "not cutile": the file's name holds it)
  tests=packages/engines-linear-attention/tests/test_kda_cutile_sm90.py
  ids=$(python3 -m pytest -m sm90 -p no:cacheprovider -q --collect-only "$tests" 2>/dev/null \
    | grep -o '\[[a-z0-9-]*-sm90\]' | tr -d '[]' | sort -u | paste -sd' ' | sed 's/ / or /g')
  run_tests "$ids" kda_sm90_pytest.log
fi
if [ "$part" = kdafla ]; then
  python3 -m pytest -m sm90 -p no:cacheprovider -q -rs -s packages/engines-linear-attention/tests/test_kda_vs_fla_sm90.py \
    2>&1 | tee "$OUTDIR/kda_vs_fla_pytest.log" | grep -E "^(kda|gdn2)-|passed|failed" | cut -c1-300
fi
if [ "$part" = kdaops ]; then  # the KDA and GDN-2 torch ops through each engine pair (K: a -k expression,
  # e.g. K='not cutile' for the CuTe DSL pair alone, without cuTile)
  python3 -m pytest -m sm90 -p no:cacheprovider -q -rs -s --maxfail=5 -k "${K:-}" packages/engines-linear-attention/tests/test_kda_ops_sm90.py \
    2>&1 | tee "$OUTDIR/kda_ops_sm90_pytest.log" | grep -E ": o |steps|passed|failed|Error" | cut -c1-300
fi
if [ "$part" = kdacheck ]; then
  python3 scripts/device/kda_kernel_times.py 2>&1 | tee "$OUTDIR/kda_kernel_times.txt" | tail -40
  python3 scripts/device/kda_kernel_times.py --bwd 2>&1 | tee "$OUTDIR/kda_kernel_times_bwd.txt" | tail -40
  K='not cutile' bash "$self" kdaops | tail -6
  MEMCHECK_TESTS=packages/engines-linear-attention/tests/test_kda_cutile_sm90.py \
    MEMCHECK_CASES="forward and kda-varlen-odd-sm90;backward and kda-varlen-odd-sm90;forward and gdn2-varlen-odd-sm90;backward and gdn2-varlen-odd-sm90" \
    bash "$self" memcheck | grep "exit status"
fi
if [ "$part" = kdabench ]; then
  python3 -m benchmarks.linear_attention.bench_kda_gdn2 "$@" 2>&1 | tee "$OUTDIR/bench_kda_gdn2.log"
  save_autotune
fi
if [ "$part" = memcheck ]; then  # API-error reports off: CUDA's own cuGetProcAddress probing raises harmless ones
  # TMA off (PYGRAPH_CUTILE_TMA=0): memcheck flags the TMA accesses of sliced views' partial tail
  # chunks, which the hardware clips (common/cutile_blocks.py says more); MEMCHECK_TMA=1 runs the
  # TMA build instead, to see those reports.
  # MEMCHECK_CASES: the pytest -k expressions, ';'-separated (default: every varlen-odd case);
  # MEMCHECK_TESTS: the test file (default the gdn suite; KDA and GDN-2:
  # packages/engines-linear-attention/tests/test_kda_cutile_sm90.py, whose ids end in the engine, so
  # one expression per engine keeps a fault of one from failing the other's case in the same process:
  # MEMCHECK_CASES="forward and kda-varlen-odd-sm90;backward and kda-varlen-odd-sm90;backward and kda-varlen-odd-cutile")
  IFS=';' read -ra exprs <<< "${MEMCHECK_CASES:-forward and varlen-odd;backward and varlen-odd}"
  tests=${MEMCHECK_TESTS:-$tests}
  for k in "${exprs[@]}"; do
    PYGRAPH_CUTILE_TMA=${MEMCHECK_TMA:-0} compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 3 \
      python3 -m pytest -m sm90 -p no:cacheprovider -q -k "$k" "$tests" 2>&1 | tee -a "$OUTDIR/gdn_memcheck.log" | tail -8
    echo "memcheck ($k, TMA ${MEMCHECK_TMA:-0}) exit status: ${PIPESTATUS[0]}"
  done
fi
if [ "$part" = ncu ]; then
  kernel=${1:?ncu needs a kernel name, e.g. chunk_prepare}; shape=${2:-B4xT4096}; shift $(( $# < 2 ? $# : 2 ))
  # NCU_RUN: the python command to profile instead of gdn_profile.py's GDN shapes, e.g. the KDA pair's
  # NCU_RUN="scripts/device/kda_kernel_times.py --ops kda --shapes B4xT4096 --no-profile" (ncu ... prepare_kda;
  # --bwd for the gradient kernels)
  if [ -n "${NCU_RUN:-}" ]; then read -ra runner <<< "$NCU_RUN"; else runner=(scripts/device/gdn_profile.py run "$shape" "$@"); fi
  ncu -k "regex:$kernel" -s 1 -c 1 --section SourceCounters --section WarpStateStats --section LaunchStats \
    --section SpeedOfLight --section Occupancy --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis \
    --import-source yes -o "$OUTDIR/$kernel" -f python3 "${runner[@]}" 2>&1 | tail -2
  ncu -i "$OUTDIR/$kernel.ncu-rep" --page details 2>&1 | grep -E "Registers Per|Block Size|Warp Cycles Per Issued|Duration|Throughput|Occupancy|Block Limit|Issue Slots Busy|Executed Ipc|Shared Memory Configuration Size|Dynamic Shared"
  ncu -i "$OUTDIR/$kernel.ncu-rep" --page source --csv --print-source cuda,sass > "$OUTDIR/$kernel.source.csv"
  # no line info (the CuTe DSL kernels): the SASS page instead
  grep -q "^\"Line No\"" "$OUTDIR/$kernel.source.csv" \
    || ncu -i "$OUTDIR/$kernel.ncu-rep" --page source --csv --print-source sass > "$OUTDIR/$kernel.source.csv"
  python3 scripts/device/gdn_profile.py lines "$OUTDIR/$kernel.source.csv" | tee "$OUTDIR/$kernel.lines.txt"
fi
if [ "$part" = all ] || [ "$part" = bench ]; then
  python3 -m benchmarks.linear_attention.bench_gdn --skip cases "$@" 2>&1 | tee "$OUTDIR/bench_gdn.log"
  save_autotune
fi
