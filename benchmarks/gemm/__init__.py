"""The GEMM family's benchmarks: the table against cuBLAS (bench_gemm), split-K (bench_splitk), the
portable kernel (bench_gemm_sm80), the host cost of execute() (bench_host_cost, host_cost_cpu,
closure_cpu), paired A/B rounds of knob sets (ab_gemm) and the backend placement cells
(placement_gemm)."""
