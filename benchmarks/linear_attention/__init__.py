"""The linear-attention families' benchmarks: the gdn forward's correctness table and its timing
against flash-linear-attention and cudnn-frontend (bench_gdn), with the cases shared by the sm90
tests (gdn_cases)."""
