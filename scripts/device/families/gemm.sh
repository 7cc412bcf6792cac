# gemm: the GEMM family (gemm_sm90, gemm_sm80 and the cuDNN backend's plan)
#   tests      the family's sm90 tests: both kernels' numerics cases against float64, the engines
#              through the graph, the backend plan (ARGS: pytest's, e.g. -k "64x128 and aux")
#   memcheck   compute-sanitizer memcheck over one case per config family (the numerics cases marked
#              memcheck in packages/engines-gemm/tests/gemm_cases.py): the SM90 kernel, then the
#              portable SM80 one built for this GPU's arch (K tails with NaN padding, odd M/N with
#              padded C rows, M=1 also swapped, a broadcast batch)
DEFAULT_PART=tests
gemm_tests=packages/engines-gemm/tests

part_tests() {
  python3 -m pytest -m sm90 -p no:cacheprovider -q --durations=10 "$@" "$gemm_tests" 2>&1 \
    | tee "$OUTDIR/gemm_pytest.log" | tail -40
}

part_memcheck() {
  # API-error reports are off: CUDA's own cuGetProcAddress probing at load raises harmless ones
  compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 3 \
    python3 -m pytest -p no:cacheprovider -q -m memcheck "$gemm_tests/test_gemm_sm90_numerics.py" 2>&1 \
    | tee "$OUTDIR/memcheck.log" | tail -20
  echo "memcheck exit status: ${PIPESTATUS[0]}"
  compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 3 \
    python3 -m pytest -p no:cacheprovider -q -m memcheck "$gemm_tests/test_gemm_sm80_numerics.py" 2>&1 \
    | tee "$OUTDIR/memcheck_sm80.log" | tail -12
  echo "memcheck (sm80) exit status: ${PIPESTATUS[0]}"
}
