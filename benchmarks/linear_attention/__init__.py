"""The linear-attention families' benchmarks: gdn's correctness table and its timing against
flash-linear-attention and cudnn-frontend (bench_gdn), and kda's and gdn2's (bench_kda_gdn2); their
cases are the sm90 tests' (``gdn_cases``, ``kda_cases`` in packages/engines-linear-attention/tests)."""
