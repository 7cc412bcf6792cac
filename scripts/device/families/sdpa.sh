# sdpa: the sdpa families (the backend path, sdpa_fwd_sm90, sdpa_bwd_sm90, the torch op)
#   tests      backend, fwd_sm90, bwd_sm90 and ops, one after the other
#   backend    the backend path's sm90 tests, each case printing its errors (one pytest per case, PAR
#              at once: scripts/device/env.sh's run_tests; K: a pytest -k filter)
#   fwd_sm90   sdpa_fwd_sm90's (the CuTe DSL forward; its tests select its plans by name), as backend
#   bwd_sm90   sdpa_bwd_sm90's, as backend
#   ops        the torch op's, as backend
#   memcheck   compute-sanitizer over two cases of each python engine; MEMCHECK_FILES (test files)
#              and MEMCHECK_CASE (a pytest -k) pick others, e.g. the ragged op on the python engines:
#              MEMCHECK_FILES=test_sdpa_ops_sm90.py MEMCHECK_CASE="python_engines and thd-causal-gqa"
#   bench      benchmarks.sdpa.bench_sdpa (ARGS: its arguments; its log in bench_sdpa.log)
#   ncu KERNEL [SHAPE]  Nsight Compute's stall samples per line of one launch of a python engine's
#              kernel at a bench_sdpa shape (default 4x16x4096x128): kernel_cutlass_kernel (the
#              forward), _main, _grad_q, _prepare
DEFAULT_PART=tests
sdpa_tests=packages/engines-sdpa/tests

_sdpa_cases() {  # $1: test file, $2: log name
  tests=$sdpa_tests/$1 run_tests "${K:-}" "$2"
}

part_backend() { _sdpa_cases test_sdpa_backend_sm90.py sdpa_backend_pytest.log; }
part_fwd_sm90() { _sdpa_cases test_sdpa_fwd_sm90.py sdpa_fwd_sm90_pytest.log; }
part_bwd_sm90() { _sdpa_cases test_sdpa_bwd_sm90.py sdpa_bwd_sm90_pytest.log; }
part_ops() { _sdpa_cases test_sdpa_ops_sm90.py sdpa_ops_pytest.log; }

part_tests() {
  part_backend
  part_fwd_sm90
  part_bwd_sm90
  part_ops
}

part_memcheck() {
  # API-error reports are off: CUDA's own cuGetProcAddress probing at load raises harmless ones
  for f in ${MEMCHECK_FILES:-test_sdpa_fwd_sm90.py test_sdpa_bwd_sm90.py}; do
    compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 3 python3 -m pytest -m sm90 \
      -p no:cacheprovider -q -k "${MEMCHECK_CASE:-long-causal or padding-window}" "$sdpa_tests/$f" 2>&1 \
      | tee -a "$OUTDIR/sdpa_memcheck.log" | tail -8
    echo "memcheck ($f) exit status: ${PIPESTATUS[0]}"
  done
}

part_bench() {
  python3 -m benchmarks.sdpa.bench_sdpa "$@" 2>&1 | tee "$OUTDIR/bench_sdpa.log"
}

part_ncu() {
  local kernel=${1:?ncu needs a kernel name, e.g. kernel_cutlass_kernel} shape=${2:-4x16x4096x128}
  ncu --clock-control none -k "regex:$kernel" -s 1 -c 1 --section SourceCounters --section WarpStateStats \
    --section LaunchStats --section SpeedOfLight --section Occupancy -o "$OUTDIR/$kernel" -f \
    python3 -m benchmarks.sdpa.bench_sdpa --shapes "$shape" --rounds 1 2>&1 | tail -2
  ncu -i "$OUTDIR/$kernel.ncu-rep" --page details 2>&1 \
    | grep -E "Registers Per|Duration|Throughput|Occupancy|Block Limit|Issue Slots Busy|Warp Cycles Per Issued"
  ncu -i "$OUTDIR/$kernel.ncu-rep" --page source --csv --print-source sass > "$OUTDIR/$kernel.source.csv"
  python3 -m benchmarks.ncu_lines "$OUTDIR/$kernel.source.csv" | tee "$OUTDIR/$kernel.lines.txt"
}
