"""The CuTe DSL kernels' compile and cache, shared by gdn's and kda's hosts (`gdn.sm90_host`,
`kda.sm90_host`): `cute_compile` compiles a kernel for an arch without a GPU, as a TVM-FFI function
of raw device addresses, 32-bit sizes, the attention scale and the stream; `compiled` keeps the
result per process and on disk, so a configuration compiles (seconds) once per machine, not once per
process. The scale is a run-time argument, so one compile serves every scale.

The disk key holds the digest of every source a compiled object is built from (the hosts' module
graph, `pygraph.kernel_cache`): an edited kernel module or helper never loads a stale object.
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Callable
from typing import Any

from pygraph.kernel_cache import KernelCache

__all__ = ["ARCH", "CACHE_ENV", "KERNELS", "compiled", "cute_compile"]

ARCH = "sm_90a"
CACHE_ENV = "PYGRAPH_GDN_SM90_CACHE_DIR"
# gdn's and kda's compiled kernels (`pygraph.kernel_cache`): per process and on disk under
# ``<the user's cache directory>/pygraph/gdn_sm90`` unless PYGRAPH_GDN_SM90_CACHE_DIR or
# PYGRAPH_CACHE_DIR moves it (``off`` disables it), keyed by the compile key, the DSL's version and
# the sources of the module graph of both ops' hosts (which import their kernels, this compile and
# what those import, transitively).
KERNELS = KernelCache(
    "gdn_sm90",
    CACHE_ENV,
    roots=("pygraph_linear_attention.gdn.sm90_host", "pygraph_linear_attention.kda.sm90_host"),
    kind="gdn_sm90 kernel object",
)


def compiled(key: Any, arch: str, name: str, build: Callable[[Any, str], Any]) -> Any:
    """The compiled function for ``key`` (a frozen dataclass naming everything the compile is
    specialised for): from the process, the disk or ``build(key, arch)``; ``name``: the function's
    symbol in the stored object."""
    ident = (type(key).__name__, dataclasses.astuple(key), arch)
    return KERNELS.get(ident, lambda: build(key, arch), function_name=name)


def cute_compile(
    kernel: Any,
    pointers: list[tuple[str, int]],
    cu_dtype: str,
    sizes: int,
    arch: str,
    *,
    roles: tuple[str, ...] | None = None,
) -> Any:
    """``cute.compile`` of ``kernel`` (a host-side @cute.jit callable) for ``arch`` as a TVM-FFI
    function of raw addresses: ``pointers`` as (dtype name, or "cu" for cu_seqlens' ``cu_dtype``;
    assumed alignment in bytes), then ``sizes`` 32-bit sizes, the scale (fp32) and the stream.
    ``roles``, where given, names the pointers the host passes in this order: a list of another
    length would bind every later operand to the wrong argument, so it is refused before compiling."""
    if roles is not None and len(pointers) != len(roles):
        raise RuntimeError(
            f"cute_compile({type(kernel).__name__}): {len(pointers)} pointer arguments for the "
            f"{len(roles)} roles the host passes ({', '.join(roles)})"
        )
    import cutlass
    import cutlass.cute as cute
    from cutlass.cute.runtime import make_fake_stream, make_ptr

    from pygraph_linear_attention.common.sm90_tiles import DTYPES

    types = {**DTYPES, "cu": cutlass.Int64 if cu_dtype == "int64" else cutlass.Int32}
    gmem = cute.AddressSpace.gmem
    args = [make_ptr(types[dtype], 0, gmem, assumed_align=align) for dtype, align in pointers]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # trace-time advisories on the intended fully unrolled loops
        return cute.compile(
            kernel, *args, *[cutlass.Int32(1)] * sizes, cutlass.Float32(1.0), make_fake_stream(),
            options=f"--enable-tvm-ffi --gpu-arch {arch}",
        )  # fmt: skip
