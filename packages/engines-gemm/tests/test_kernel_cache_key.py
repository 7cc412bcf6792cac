"""The compiled-kernel cache key covers the kernels' sources: the module graph of the compile's
host and of both kernels (`pygraph.kernel_cache`), so an edited helper never loads an object
compiled from the old code (the rule itself: packages/pygraph-core/tests/test_kernel_cache.py)."""

from __future__ import annotations

from pygraph.kernel_cache import module_sources
from pygraph_gemm.kernels import compile_cache


def test_the_kernels_module_graph_is_hashed():
    names = set(module_sources(compile_cache.KERNELS.roots))
    here = "pygraph_gemm.kernels."
    wanted = {
        "gemm_sm90",
        "gemm_sm80",
        "epilogue",
        "config",
        "tile_schedule",
        "entry",
        "mainloop",
        "compile_cache",
    }
    assert {here + n for n in wanted} <= names
    assert "pygraph_gemm.heuristics" not in names  # ranking is no source of a kernel
