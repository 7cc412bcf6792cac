"""CuTe DSL kernels of the sdpa families."""
