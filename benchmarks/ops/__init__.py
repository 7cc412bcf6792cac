"""The torch ops' benchmarks: the host cost of one call of each op beside torch's and FLA's
(`host_cost`, on the device), and the same path on the CPU with a stand-in plan (`host_cost_cpu`)."""
