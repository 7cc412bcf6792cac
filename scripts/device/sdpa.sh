#!/usr/bin/env bash
# The sdpa families on the device: the sm90 tests (the backend path, sdpa_fwd_sm90, sdpa_bwd_sm90, the
# torch op), compute-sanitizer memcheck of two cases of each python engine, and the benchmark.
#   source /tmp/site/env.sh && bash scripts/device/sdpa.sh [PART] [bench args...]
# PART: tests (default: backend, fwd_sm90, bwd_sm90, ops), backend, fwd_sm90, bwd_sm90, ops, memcheck, bench,
# ncu KERNEL [SHAPE] (Nsight Compute's stall samples per line of one launch of a python engine's kernel at a
# bench_sdpa shape, default 4x16x4096x128: kernel_cutlass_kernel (the forward), _main, _grad_q, _prepare).
# memcheck takes MEMCHECK_FILES (test files) and MEMCHECK_CASE (a pytest -k), e.g. the ragged op on the
# python engines: MEMCHECK_FILES=test_sdpa_ops_sm90.py MEMCHECK_CASE="python_engines and thd-causal-gqa".
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device/env.sh
part=tests
case "${1:-}" in tests|backend|fwd_sm90|bwd_sm90|ops|memcheck|bench|ncu) part=$1; shift ;; esac
nvidia-smi --query-gpu=name,compute_cap,driver_version,clocks.sm --format=csv,noheader | tee "$OUTDIR/device.txt"
dir=packages/engines-sdpa/tests
run() {  # $1: test file, $2: log name; the cases PAR at a time (run_tests, env.sh), K: a pytest -k filter
  tests=$dir/$1 run_tests "${K:-}" "$2"
}
if [ "$part" = tests ] || [ "$part" = backend ]; then run test_sdpa_backend_sm90.py sdpa_backend_pytest.log; fi
if [ "$part" = tests ] || [ "$part" = fwd_sm90 ]; then run test_sdpa_fwd_sm90.py sdpa_fwd_sm90_pytest.log; fi
if [ "$part" = tests ] || [ "$part" = bwd_sm90 ]; then run test_sdpa_bwd_sm90.py sdpa_bwd_sm90_pytest.log; fi
if [ "$part" = tests ] || [ "$part" = ops ]; then run test_sdpa_ops_sm90.py sdpa_ops_pytest.log; fi
if [ "$part" = memcheck ]; then
  for f in ${MEMCHECK_FILES:-test_sdpa_fwd_sm90.py test_sdpa_bwd_sm90.py}; do
    compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 3 python3 -m pytest -m sm90 \
      -p no:cacheprovider -q -k "${MEMCHECK_CASE:-long-causal or padding-window}" "$dir/$f" 2>&1 \
      | tee -a "$OUTDIR/sdpa_memcheck.log" | tail -8
    echo "memcheck ($f) exit status: ${PIPESTATUS[0]}"
  done
fi
if [ "$part" = bench ]; then
  python3 -m benchmarks.sdpa.bench_sdpa "$@" 2>&1 | tee "$OUTDIR/bench_sdpa.log"
fi
if [ "$part" = ncu ]; then
  kernel=${1:?ncu needs a kernel name, e.g. kernel_cutlass_kernel}; shape=${2:-4x16x4096x128}
  ncu --clock-control none -k "regex:$kernel" -s 1 -c 1 --section SourceCounters --section WarpStateStats --section LaunchStats \
    --section SpeedOfLight --section Occupancy -o "$OUTDIR/$kernel" -f \
    python3 -m benchmarks.sdpa.bench_sdpa --shapes "$shape" --rounds 1 2>&1 | tail -2
  ncu -i "$OUTDIR/$kernel.ncu-rep" --page details 2>&1 | grep -E "Registers Per|Duration|Throughput|Occupancy|Block Limit|Issue Slots Busy|Warp Cycles Per Issued"
  ncu -i "$OUTDIR/$kernel.ncu-rep" --page source --csv --print-source sass > "$OUTDIR/$kernel.source.csv"
  python3 -m benchmarks.ncu_lines "$OUTDIR/$kernel.source.csv" | tee "$OUTDIR/$kernel.lines.txt"
fi
