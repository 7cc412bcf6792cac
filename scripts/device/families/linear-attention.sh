# linear-attention: gdn, kda and gdn2 (the cuTile engines need `source .dev3/cutile.sh` first: tileiras
# with a ptxas/libnvvm of CUDA 13.2+). cuTile compiles each kernel on its first launch into its disk
# cache (the forward's 2-5 s each, the backward's chunk gradient kernels 3-18 s a configuration, over
# about ten configurations), so where a call's time is bounded run the parts as separate calls: a later
# part finds them compiled. The test parts run one pytest per case, PAR (default 8) at once
# (scripts/device/env.sh's run_tests), so the compiles overlap.
#   all        fwd, bwd, fla, ops, then bench (ARGS: bench_gdn's)
#   fwd        gdn's forward sm90 tests (test_gdn_cutile_sm90.py: gdn_cutile's and gdn_sm90's cases)
#   sm90       gdn_sm90's (the CuTe DSL forward) alone
#   sm90bwd    gdn_sm90_bwd's (the CuTe DSL backward) alone
#   wgmma      the cases of both CuTe DSL engines on warpgroup MMAs (WGMMA 1 and 2)
#   fused      the fused warpgroup scan's cases (SPLIT 0 WGMMA 1, SEGMENT included), then memcheck over
#              three of them (two segmented)
#   qla1       FlashQLA's first wheels (carry .qla1: ../shared/device/qla_bundle.sh) into /tmp/fq
#   qla        FlashQLA's other wheels (carry .qla2) into /tmp/fq, then issue 54's table in one warm
#              machine: bench_gdn_flashqla (FlashQLA and FLA's Triton, FlashQLA's own process) and
#              bench_gdn --plans first (ours and FLA's Triton), forward and forward+backward, strong
#              and weak gates (GATES, default "0 4": bench_gdn's --gate-mean), then flashqla_bridge's
#              table (ours against FlashQLA through FLA's Triton, timed in both processes);
#              BENCH_ARGS: more bench_gdn arguments (other plans beside the first, e.g. "--sm90 64
#              --sm90-modes fusedwg64"); TileLang's compiled kernels come back as tilelang-cache.tgz
#              (carry it as .qlacache/tilelang-cache.tgz: a later machine skips their compiles)
#   capture    the torch ops in CUDA graphs (capture and replay, a first call inside a capture, a
#              reduce-overhead layer), then benchmarks.ops.host_cost with --profile (about 5 minutes on a fresh
#              machine, most of it compiling)
#   cp         context parallelism's ranks simulated in one process with the device kernels, against
#              the single-GPU op (test_linear_attention_context_parallel_sm90.py)
#   fronts     the front doors against the libraries they stand in for: FLA's (gdn, kda, gdn2) and
#              flash-attention's (flash_attn_func, flash_attn_varlen_func); over 200 s on a fresh
#              machine (flash-attention's CuTe DSL kernels and FLA's Triton compile and tune on first
#              call; FLA's tuning comes back as triton-autotune.tgz)
#   bwd        the backward's, both engines' (K: its pytest -k, e.g. K='backward and not gdn_sm90'
#              for cuTile's alone; the table takes about 6 minutes on a fresh machine)
#   fla        gdn's forward against flash-linear-attention's on the same inputs
#   ops        the gdn torch op's sm90 tests: opcheck, a side stream, a compiled training step
#   memcheck   compute-sanitizer over the varlen-odd forward and backward cases; MEMCHECK_CASES:
#              ';'-separated pytest -k expressions, MEMCHECK_TESTS: their test file (KDA and GDN-2:
#              test_kda_cutile_sm90.py, one expression per engine, e.g. "forward and kda-varlen-odd-sm90"),
#              MEMCHECK_TMA=1: the TMA build (whose clipped tail accesses memcheck reports)
#   kda        the forward tests of kda_cutile, gdn2_cutile, kda_sm90 and gdn2_sm90 (K: a pytest -k,
#              K=backward the backwards)
#   kdasm90    the CuTe DSL KDA / GDN-2 cases alone, forward and backward (no cuTile needed)
#   kdaops     the KDA and GDN-2 torch ops' sm90 tests through each forward engine (K: a pytest -k,
#              e.g. K='not cutile' for the CuTe DSL pair alone)
#   kdafla     the KDA and GDN-2 forward against flash-linear-attention's chunk_kda / chunk_gdn2
#   kdacheck   the rest of the CuTe DSL pair's device check once kdasm90 passed: each kernel's time
#              forward and forward+backward (kda_kernel_times.py), kdaops through the pair, memcheck
#              of both ops' varlen-odd forward and backward
#   kdabench   benchmarks.linear_attention.bench_kda_gdn2 (ARGS: its arguments)
#   ncu KERNEL [SHAPE] [--bwd]  Nsight Compute's stall samples per source line of one launch of a
#              kernel (e.g. chunk_prepare) at a bench_gdn shape (default B4xT4096); NCU_RUN: another
#              workload, e.g. the KDA pair's: NCU_RUN="scripts/device/kda_kernel_times.py --ops kda
#              --shapes B4xT4096 --no-profile" with KERNEL prepare_kda
#   bench      benchmarks.linear_attention.bench_gdn's timing, forward and forward+backward (ARGS: its
#              arguments; its log in bench_gdn.log)
DEFAULT_PART=all
la_tests=packages/engines-linear-attention/tests
tests=$la_tests/test_gdn_cutile_sm90.py  # the file run_tests (env.sh) reads, unless a part names another

family_setup() {
  python3 -c "import cuda.tile, torch; print('cuda.tile', cuda.tile.__version__, 'torch', torch.__version__)" 2>&1 \
    | tee -a "$OUTDIR/device.txt"
}

part_fwd() { run_tests forward gdn_sm90_fwd_pytest.log; }
part_sm90() { run_tests gdn_sm90_forward gdn_sm90_engine_pytest.log; }
part_sm90bwd() { run_tests gdn_sm90_backward gdn_sm90_bwd_engine_pytest.log; }
part_wgmma() { run_tests wgmma gdn_sm90_wgmma_pytest.log; }
part_fused() {
  run_tests "sm90 and fused-wg" gdn_sm90_fused_pytest.log
  compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 3 python3 -m pytest -m sm90 \
    -p no:cacheprovider -q "$tests" -k "sm90-varlen-odd-fused-wg or sm90-split-varlen-fused-wg or sm90-long-4097-fused-wg-seg16" \
    > "$OUTDIR/fused_memcheck.log" 2>&1
  echo "memcheck exit $?"; grep -E "ERROR SUMMARY|passed|failed" "$OUTDIR/fused_memcheck.log" | tail -3
}
part_qla1() { python3 -m pip install -q --no-index --no-deps --target /tmp/fq .qla1/*.whl && echo "qla1 in /tmp/fq"; }
part_qla() {
  python3 -m pip install -q --no-index --no-deps --target /tmp/fq .qla2/*.whl || return 1
  # TileLang compiles with the image's nvcc; its apache-tvm-ffi pin conflicts with CuTe DSL's, so
  # FlashQLA runs in a process of its own (/tmp/fq first on its path)
  PYTHONPATH=/tmp/fq:/tmp/site PATH=/usr/local/cuda/bin:$PATH FLA_FLASH_QLA=0 \
    python3 -m benchmarks.linear_attention.bench_gdn_flashqla --gates strong,weak --json "$OUTDIR/flashqla.json" 2>&1 \
    | tee "$OUTDIR/flashqla.log" | grep -v "^\s*$" | tail -14
  # ours needs the staged CuTe DSL on its path (FlashQLA's process above names its own): a call that
  # did not source the site first timed no plan of ours
  if ! python3 -c "import cutlass" 2> /dev/null && [ -f /tmp/site/env.sh ]; then source /tmp/site/env.sh; fi
  for mean in ${GATES:-0 4}; do
    FLA_FLASH_QLA=0 python3 -m benchmarks.linear_attention.bench_gdn --skip cases,cudnn,cutile --plans first \
      --gate-mean "$mean" --out "$OUTDIR" ${BENCH_ARGS:-} 2>&1 | tee "$OUTDIR/bench_gdn_gates$mean.log" | grep -E "^--|^  ours|^  fla" | cut -c1-160
  done
  python3 -m benchmarks.linear_attention.flashqla_bridge "$OUTDIR/flashqla.json" "$OUTDIR"/bench_gdn*.json
  save_autotune
  save_tilelang
}
part_capture() {
  python3 -m pytest -m sm90 -q -p no:cacheprovider -rf "$la_tests/test_linear_attention_capture_sm90.py" \
    packages/engines-sdpa/tests/test_sdpa_capture_sm90.py 2>&1 | tee "$OUTDIR/capture.log" | tail -15
  python3 -m benchmarks.ops.host_cost --json "$OUTDIR/host_cost.json" --profile "$OUTDIR/host_profile.txt" 2>&1 \
    | tee "$OUTDIR/host_cost.log" | tail -12
}
part_cp() {
  python3 -m pytest -m sm90 -q -p no:cacheprovider -rf "$la_tests/test_linear_attention_context_parallel_sm90.py" 2>&1 \
    | tee "$OUTDIR/cp.log" | tail -15
}
part_fronts() {
  python3 -m pytest -m sm90 -q -p no:cacheprovider -rf "$la_tests/test_fla_front_door_sm90.py" \
    packages/engines-sdpa/tests/test_sdpa_front_doors_sm90.py 2>&1 | tee "$OUTDIR/fronts.log" | tail -15
  save_autotune  # FLA's tuning at the front doors' shapes, for the next machine
}
part_bwd() { run_tests "${K:-backward}" gdn_sm90_bwd_pytest.log; }

part_fla() {
  python3 -m pytest -m sm90 -p no:cacheprovider -q -rs -s "$la_tests/test_gdn_vs_fla_sm90.py" 2>&1 \
    | tee "$OUTDIR/gdn_vs_fla_pytest.log" | grep -E ": \{|passed|failed" | cut -c1-300
}

part_ops() {
  python3 -m pytest -m sm90 -p no:cacheprovider -q -rs --maxfail=5 "$la_tests/test_gdn_ops_sm90.py" 2>&1 \
    | tee "$OUTDIR/gdn_ops_sm90_pytest.log" | tail -25
}

part_all() {
  part_fwd
  part_bwd
  part_fla
  part_ops
  part_bench "$@"
}

part_kda() {
  # (the compile checks for the other archs run on the CPU: scripts/cpu_dsl_env.sh)
  # (K may be an expression, e.g. "backward and sm90": its spaces become underscores in the log's name)
  tests=$la_tests/test_kda_cutile_sm90.py run_tests "${K:-forward}" "kda_$(echo "${K:-forward}" | tr ' ' '_')_pytest.log"
}

part_kdasm90() {
  # the ids ending in -sm90 (a -k expression cannot say "not cutile": the file's name holds it)
  local tests=$la_tests/test_kda_cutile_sm90.py ids
  ids=$(python3 -m pytest -m sm90 -p no:cacheprovider -q --collect-only "$tests" 2>/dev/null \
    | grep -o '\[[a-z0-9-]*-sm90\]' | tr -d '[]' | sort -u | paste -sd' ' | sed 's/ / or /g')
  run_tests "$ids" kda_sm90_pytest.log
}

part_kdafla() {
  python3 -m pytest -m sm90 -p no:cacheprovider -q -rs -s "$la_tests/test_kda_vs_fla_sm90.py" 2>&1 \
    | tee "$OUTDIR/kda_vs_fla_pytest.log" | grep -E "^(kda|gdn2)-|passed|failed" | cut -c1-300
}

part_kdaops() {
  python3 -m pytest -m sm90 -p no:cacheprovider -q -rs -s --maxfail=5 -k "${K:-}" "$la_tests/test_kda_ops_sm90.py" 2>&1 \
    | tee "$OUTDIR/kda_ops_sm90_pytest.log" | grep -E ": o |steps|passed|failed|Error" | cut -c1-300
}

part_kdacheck() {
  python3 scripts/device/kda_kernel_times.py 2>&1 | tee "$OUTDIR/kda_kernel_times.txt" | tail -40
  python3 scripts/device/kda_kernel_times.py --bwd 2>&1 | tee "$OUTDIR/kda_kernel_times_bwd.txt" | tail -40
  K='not cutile' part_kdaops | tail -6
  MEMCHECK_TESTS=$la_tests/test_kda_cutile_sm90.py \
    MEMCHECK_CASES="forward and kda-varlen-odd-sm90;backward and kda-varlen-odd-sm90;forward and gdn2-varlen-odd-sm90;backward and gdn2-varlen-odd-sm90" \
    part_memcheck | grep "exit status"
}

part_kdabench() {
  python3 -m benchmarks.linear_attention.bench_kda_gdn2 "$@" 2>&1 | tee "$OUTDIR/bench_kda_gdn2.log"
  save_autotune
}

part_memcheck() {
  # API-error reports off: CUDA's own cuGetProcAddress probing raises harmless ones. TMA off
  # (PYGRAPH_CUTILE_TMA=0) unless MEMCHECK_TMA=1: memcheck flags the TMA accesses of sliced views'
  # partial tail chunks, which the hardware clips (the cuTile forward's kernel module says more).
  local exprs k
  IFS=';' read -ra exprs <<< "${MEMCHECK_CASES:-forward and varlen-odd;backward and varlen-odd}"
  for k in "${exprs[@]}"; do
    PYGRAPH_CUTILE_TMA=${MEMCHECK_TMA:-0} compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 3 \
      python3 -m pytest -m sm90 -p no:cacheprovider -q -k "$k" "${MEMCHECK_TESTS:-$tests}" 2>&1 \
      | tee -a "$OUTDIR/gdn_memcheck.log" | tail -8
    echo "memcheck ($k, TMA ${MEMCHECK_TMA:-0}) exit status: ${PIPESTATUS[0]}"
  done
}

part_ncu() {
  local kernel=${1:?ncu needs a kernel name, e.g. chunk_prepare} shape=${2:-B4xT4096} runner
  shift $(($# < 2 ? $# : 2))
  if [ -n "${NCU_RUN:-}" ]; then read -ra runner <<< "$NCU_RUN"; else runner=(scripts/device/gdn_profile.py "$shape" "$@"); fi
  ncu -k "regex:$kernel" -s 1 -c 1 --section SourceCounters --section WarpStateStats --section LaunchStats \
    --section SpeedOfLight --section Occupancy --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis \
    --import-source yes -o "$OUTDIR/$kernel" -f python3 "${runner[@]}" 2>&1 | tail -2
  ncu -i "$OUTDIR/$kernel.ncu-rep" --page details 2>&1 \
    | grep -E "Registers Per|Block Size|Warp Cycles Per Issued|Duration|Throughput|Occupancy|Block Limit|Issue Slots Busy|Executed Ipc|Shared Memory Configuration Size|Dynamic Shared"
  ncu -i "$OUTDIR/$kernel.ncu-rep" --page source --csv --print-source cuda,sass > "$OUTDIR/$kernel.source.csv"
  # no line info (the CuTe DSL kernels): the SASS page instead
  grep -q "^\"Line No\"" "$OUTDIR/$kernel.source.csv" \
    || ncu -i "$OUTDIR/$kernel.ncu-rep" --page source --csv --print-source sass > "$OUTDIR/$kernel.source.csv"
  python3 -m benchmarks.ncu_lines "$OUTDIR/$kernel.source.csv" | tee "$OUTDIR/$kernel.lines.txt"
}

part_bench() {
  python3 -m benchmarks.linear_attention.bench_gdn --skip cases "$@" 2>&1 | tee "$OUTDIR/bench_gdn.log"
  save_autotune
}
