"""The SDPA families' benchmarks: attention through pygraph against torch's SDPA backends and
flash-attention 4 (bench_sdpa)."""
