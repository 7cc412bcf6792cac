"""The compile cache of the GEMM kernels: in-process, then on disk, then CuTe DSL.

Compile once per (knobs, kernel epilogue, kernel layout, arch, resident clusters: the persistent
grid's size, which the SM count of the card planned for sets); the compiled function is a TVM-FFI
function whose arguments are raw device addresses (Python ints), 32-bit sizes and 64-bit strides
and the CUDA stream, so the per-call path does no DLPack conversion.

Disk cache (`pygraph.disk_cache`): ``export_to_c`` writes the compiled host+device object and
``load_module`` maps it back. It lives in ``<the user's cache directory>/pygraph/gemm`` unless
PYGRAPH_GEMM_CACHE_DIR (or PYGRAPH_CACHE_DIR) moves it; ``off`` disables it. An object is written to
a temporary file and renamed into place under a file lock (one process compiles a key, the others
wait and load it), and checked against its sha256 sidecar before it is loaded: a torn or foreign
file is recompiled, with a notice. Its key holds the digest of the kernels' module graph
(`pygraph.kernel_cache`), so an edited kernel never loads a stale object. Where an object is stored
does not change its bytes.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import astuple

from pygraph.engines.base import REFERENCE_SM_COUNT
from pygraph.kernel_cache import KernelCache

from .config import GemmKnobs, KernelEpilogue, KernelLayout, dtype_bytes, needs_workspace, resident_for

ARCH = "sm_90a"
FN_NAME = "pygraph_gemm_sm90"
CACHE_ENV = "PYGRAPH_GEMM_CACHE_DIR"
# The compiled functions, per process and on disk (`pygraph.kernel_cache`): keyed by `cache_key`, the
# DSL's version and the sources of the module graph of this module (it builds the compile's
# arguments) and the two kernels. Named by this module's package, so a second copy of the kernels
# loaded beside these (benchmarks.gemm.ab_gemm's tree B) hashes its own files.
KERNELS = KernelCache(
    "gemm",
    CACHE_ENV,
    roots=(__name__, f"{__package__}.gemm_sm90", f"{__package__}.gemm_sm80"),
    kind="pygraph_gemm kernel object",
)


def cache_key(
    knobs: GemmKnobs,
    epi: KernelEpilogue,
    lay: KernelLayout,
    arch: str = ARCH,
    kernel: str = "sm90",
    sm_count: int | None = None,
) -> tuple:
    """The compiled function's identity. The SM count enters only through what it changes in the
    code, the persistent grid's resident clusters (`resident_clusters`): two cards that place as
    many clusters share a kernel."""
    clusters = resident_clusters(knobs.cga_m * knobs.cga_n, sm_count)
    return (f"{kernel}_gemm_v1", astuple(knobs), astuple(epi), astuple(lay), arch, clusters)


_RESIDENT: dict[tuple[int, int | None], int] = {}


def resident_clusters(cluster_size: int, sm_count: int | None = None) -> int:
    """How many clusters of ``cluster_size`` CTAs (one per SM) a card of ``sm_count`` SMs (the
    request's `DeviceInfo.sm_count`; None: the current GPU's) runs at once: the persistent grid's
    size, a compile-time constant of the kernel (so part of its key, `cache_key`).

    The persistent grid must not exceed it: a cluster that cannot be placed waits for a whole
    other cluster's share of tiles to finish (only time: the schedule reads the grid's size at run
    time and split-K's last CTA reduces, nothing waits on a cluster being resident). 4-CTA clusters
    do not tile every GPC exactly, so on the GPU present, when it is the card asked for, this is
    the occupancy query's answer, not SMs / 4; with no GPU to ask (compiling ahead on a CPU) or a
    card of another SM count asked for, `config.resident_for` (the reference card's table when
    ``sm_count`` is None).
    """
    hit = _RESIDENT.get((cluster_size, sm_count))
    if hit is not None:
        return hit
    n = None
    try:
        import torch

        if torch.cuda.is_available():
            present = torch.cuda.get_device_properties(torch.cuda.current_device()).multi_processor_count
            if sm_count in (None, present):
                from cutlass.utils import HardwareInfo

                torch.empty(1, device="cuda")  # the occupancy query needs the device's context current

                n = int(HardwareInfo().get_max_active_clusters(cluster_size))
    except Exception:
        n = None
    if not n:
        n = resident_for(sm_count or REFERENCE_SM_COUNT, cluster_size)
    _RESIDENT[(cluster_size, sm_count)] = n
    return n


def compile_uncached(
    knobs: GemmKnobs,
    epi: KernelEpilogue,
    lay: KernelLayout,
    arch: str,
    kernel: str = "sm90",
    sm_count: int | None = None,
) -> Callable:
    if kernel == "sm80":
        from .gemm_sm80 import compile_sm80

        return compile_sm80(knobs, epi, lay, arch=arch)
    from .gemm_sm90 import Sm90Gemm
    from .gemm_sm90_split import Sm90GemmSplitK

    cls = Sm90GemmSplitK if needs_workspace(knobs) else Sm90Gemm
    clusters = resident_clusters(knobs.cga_m * knobs.cga_n, sm_count)
    kern = cls(knobs, lay, epi, max_active_clusters=clusters)
    lean = is_lean(knobs, epi)
    return compile_kernel(kern, lay, epi, arch, with_workspace=needs_workspace(knobs), lean=lean)


def is_lean(knobs: GemmKnobs, epi: KernelEpilogue, kernel: str = "sm90") -> bool:
    """The compiled function takes only A, B, C, the sizes, their strides and the stream (14
    arguments, `entry.GemmEntry.call_lean`): the SM90 kernel without a workspace, with an epilogue
    that reads no other tensor. Otherwise the full 24 (+ workspace and semaphores). The SM80 kernel
    keeps the full signature, which its check and bench runners call directly."""
    return kernel == "sm90" and not needs_workspace(knobs) and not epi.has_operands


def compile_kernel(
    kern,
    lay: KernelLayout,
    epi: KernelEpilogue,
    arch: str,
    with_workspace: bool = False,
    tma_outputs: bool = True,
    lean: bool = False,
) -> Callable:
    """Compile a GEMM kernel object (Sm90Gemm, Sm80Gemm) for ``arch`` with placeholder arguments:
    8 pointers, 4 sizes, 11 strides, [workspace, semaphores,] stream; ``lean`` (`is_lean`): the
    kernel's ``call_lean`` with 3 pointers, 4 sizes, 6 strides, stream. Output pointers are assumed
    16-byte aligned when TMA stores them (``tma_outputs``), else element-aligned."""
    import cutlass
    import cutlass.cute as cute
    from cutlass.cute.runtime import make_fake_stream, make_ptr

    from .gemm_sm90 import _DT

    g = cute.AddressSpace.gmem

    def p(dt, align=16):
        return make_ptr(_DT[dt], 0, g, assumed_align=align)

    def out(dt):
        return p(dt, 16 if tma_outputs else dtype_bytes(dt))

    vec_align = 4 if epi.vec_dtype == "fp32" else 2
    res_align = 4 if epi.residual_dtype == "fp32" else 2
    args = [
        p(lay.ab_dtype),
        p(lay.ab_dtype),
        out(lay.c_dtype),
        p(epi.vec_dtype, vec_align),
        p(epi.vec_dtype, vec_align),
        p(epi.vec_dtype, vec_align),
        p(epi.residual_dtype, res_align),
        out(epi.aux_dtype),
    ]
    if lean:
        args = args[:3]  # A, B, C
    args += [cutlass.Int32(1)] * 4 + [cutlass.Int64(8)] * (6 if lean else 11)
    if with_workspace:
        args.append(p("fp32", 16))  # workspace: the fp32 partials
        args.append(make_ptr(cutlass.Int32, 0, g, assumed_align=4))  # the tile semaphores
    args.append(make_fake_stream())
    with warnings.catch_warnings():
        # Trace-time advisories only: DSLOptimizationWarning flags our fully unrolled 64/128-element
        # epilogue loops, which are intended. Under warnings-as-errors the DSL would turn it into a
        # misleading ARG_NON_CONSTANT error.
        warnings.simplefilter("ignore")
        entry = kern.call_lean if lean else kern
        return cute.compile(entry, *args, options=f"--enable-tvm-ffi --gpu-arch {arch}")


def get_compiled(
    knobs: GemmKnobs,
    epi: KernelEpilogue,
    lay: KernelLayout,
    arch: str = ARCH,
    kernel: str = "sm90",
    sm_count: int | None = None,
) -> Callable:
    """The compiled function for this static configuration (in-process dict, then disk, then compile).
    ``kernel``: "sm90" (TMA + wgmma, ``arch`` sm_90a) or "sm80" (portable mma.sync, built for ``arch``,
    the GPU's own: a cubin loads only on its own major architecture); both take the same arguments.
    ``sm_count``: the SM count of the card planned for (the request's device; None: the GPU present,
    else the reference card), which sizes the SM90 kernel's persistent grid (`resident_clusters`)."""
    key = cache_key(knobs, epi, lay, arch, kernel, sm_count)
    return KERNELS.get(
        key, lambda: compile_uncached(knobs, epi, lay, arch, kernel, sm_count), function_name=FN_NAME
    )
