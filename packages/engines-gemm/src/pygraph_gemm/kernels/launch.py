"""Compile cache and low-host-cost launcher for the SM90 GEMM.

Compile once per (knobs, kernel epilogue, kernel layout, arch); the compiled function is a TVM-FFI
function whose arguments are raw device addresses (Python ints), 32-bit sizes and 64-bit strides,
with the CUDA stream taken from the caller's current torch stream. The per-call path therefore
does no DLPack conversion: ``launch(...)`` reads only pointers, M/N/K/L and strides.

Disk cache: ``export_to_c`` writes the compiled host+device object; ``load_module`` maps it back
(enabled when PYGRAPH_GEMM_CACHE_DIR is set; any failure falls back to compiling).
"""

from __future__ import annotations

import hashlib
import os
import threading
import warnings
from collections.abc import Callable
from dataclasses import astuple
from typing import Any

from .config import (
    EpilogueSpec,
    GemmKnobs,
    KernelEpilogue,
    KernelLayout,
    can_implement,
    dtype_bytes,
    dtype_name,
    needs_workspace,
    resident_fallback,
    semaphore_words,
    workspace_bytes,
)
from .semaphores import stream_semaphores

_CACHE: dict[tuple, Callable] = {}
_LOCK = threading.Lock()
ARCH = "sm_90a"
_FN_NAME = "pygraph_gemm_sm90"


def cache_key(
    knobs: GemmKnobs, epi: KernelEpilogue, lay: KernelLayout, arch: str = ARCH, kernel: str = "sm90"
) -> tuple:
    clusters = resident_clusters(knobs.cga_m * knobs.cga_n)
    return (f"{kernel}_gemm_v1", astuple(knobs), astuple(epi), astuple(lay), arch, clusters)


_RESIDENT: dict[int, int] = {}


def resident_clusters(cluster_size: int) -> int:
    """How many clusters of ``cluster_size`` CTAs (one per SM) the current GPU runs at once.

    The persistent grid must not exceed it: a cluster that cannot be placed waits for a whole
    other cluster's share of tiles to finish. 4-CTA clusters do not tile every GPC exactly, so
    this is the occupancy query's answer, not SMs / 4.
    """
    hit = _RESIDENT.get(cluster_size)
    if hit is not None:
        return hit
    n = None
    try:
        import torch

        if torch.cuda.is_available():
            from cutlass.utils import HardwareInfo

            torch.empty(1, device="cuda")  # the occupancy query needs the device's context current

            n = int(HardwareInfo().get_max_active_clusters(cluster_size))
    except Exception:
        n = None
    if not n:
        n = resident_fallback(cluster_size)  # no GPU to ask, e.g. compiling ahead on a CPU
    _RESIDENT[cluster_size] = n
    return n


def _compile(
    knobs: GemmKnobs, epi: KernelEpilogue, lay: KernelLayout, arch: str, kernel: str = "sm90"
) -> Callable:
    if kernel == "sm80":
        from .gemm_sm80 import compile_sm80

        return compile_sm80(knobs, epi, lay, arch=arch)
    from .gemm_sm90 import Sm90Gemm
    from .gemm_sm90_split import Sm90GemmSplitK

    cls = Sm90GemmSplitK if needs_workspace(knobs) else Sm90Gemm
    kern = cls(knobs, lay, epi, max_active_clusters=resident_clusters(knobs.cga_m * knobs.cga_n))
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


def _disk_path(key: tuple) -> str | None:
    root = os.environ.get("PYGRAPH_GEMM_CACHE_DIR")
    if not root:
        return None
    import cutlass

    h = hashlib.sha256(
        repr((key, getattr(cutlass, "__version__", "?"), _source_digest())).encode()
    ).hexdigest()[:24]
    return os.path.join(root, f"{h}.o")


_SOURCE_DIGEST: str | None = None


def kernel_sources() -> list[str]:
    """Every module of this package, by path: what a compiled kernel may be built from. All of them,
    so a module added later cannot be left out of the cache key."""
    here = os.path.dirname(os.path.abspath(__file__))
    return sorted(os.path.join(here, name) for name in os.listdir(here) if name.endswith(".py"))


def _source_digest() -> str:
    """Hash of the kernel's own source files: an edited kernel never loads a stale cached object."""
    global _SOURCE_DIGEST
    if _SOURCE_DIGEST is None:
        digest = hashlib.sha256()
        for path in kernel_sources():
            digest.update(os.path.basename(path).encode())
            with open(path, "rb") as f:
                digest.update(f.read())
        _SOURCE_DIGEST = digest.hexdigest()
    return _SOURCE_DIGEST


def get_compiled(
    knobs: GemmKnobs, epi: KernelEpilogue, lay: KernelLayout, arch: str = ARCH, kernel: str = "sm90"
) -> Callable:
    """The compiled function for this static configuration (in-process dict, then disk, then compile).
    ``kernel``: "sm90" (TMA + wgmma, ``arch`` sm_90a) or "sm80" (portable mma.sync, built for ``arch``,
    the GPU's own: a cubin loads only on its own major architecture); both take the same arguments."""
    key = cache_key(knobs, epi, lay, arch, kernel)
    fn = _CACHE.get(key)
    if fn is not None:
        return fn
    with _LOCK:
        fn = _CACHE.get(key)
        if fn is not None:
            return fn
        path = _disk_path(key)
        if path and os.path.exists(path):
            try:
                import cutlass.cute as cute

                fn = getattr(cute.runtime.load_module(path, enable_tvm_ffi=True), _FN_NAME)
            except Exception:
                fn = None
        if fn is None:
            fn = _compile(knobs, epi, lay, arch, kernel)
            if path:
                try:
                    os.makedirs(os.path.dirname(path), exist_ok=True)
                    fn.export_to_c(path, function_name=_FN_NAME)
                except Exception:
                    pass
        _CACHE[key] = fn
        return fn


def _major(strides: tuple, rows: int, cols: int, row_name: str, col_name: str) -> tuple[str, int]:
    """Which mode is contiguous and the other mode's stride (the leading dimension)."""
    _, sr, sc = strides
    if sc == 1 or cols == 1:
        return col_name, (sr if rows > 1 else max(cols, 8))
    if sr == 1 or rows == 1:
        return row_name, (sc if cols > 1 else max(rows, 8))
    raise ValueError(f"strides {strides}: neither rows nor columns are contiguous")


# User-frame pointer roles, in ``Plan.kernel_args`` order.
POINTER_ROLES = ("a", "b", "c", "bias", "row_scale", "col_scale", "residual", "aux")


def kernel_frame(
    lay: KernelLayout, swap: bool, lean: bool = False
) -> tuple[tuple[int, ...], Callable[..., tuple]]:
    """The argument mapping from the user frame to the compiled function's frame; ONE source.

    Returns ``(pointer_order, geometry)``: kernel pointer slot ``j`` takes user pointer
    ``POINTER_ROLES[pointer_order[j]]``, and ``geometry(m, n, k, l, a_strides, b_strides,
    c_strides, residual_strides, aux_strides)`` is the 15 sizes/strides that follow the pointers
    (user-frame (batch, row, col) element strides in; l == 1 zeroes the batch strides, and a zero
    batch stride becomes the dense one). The compiled function's arguments are the 8 pointers,
    the geometry, then the stream. ``lean`` (`is_lean`): the 3 pointers of A, B, C and the first 10
    sizes/strides (theirs). Everything ``lay``/``swap``/``lean`` decide is settled here, once.
    """
    c_row = lay.c_major == "n"
    a_row = lay.a_major == "k"  # kernel A (M, K) with K contiguous: leading dim is the row stride
    b_row = lay.b_major == "n"  # kernel B seen as (K, N) with N contiguous
    b_k = lay.b_major == "k"

    def geometry(
        m: int,
        n: int,
        k: int,
        l: int,
        a_strides: tuple,
        b_strides: tuple,
        c_strides: tuple,
        residual_strides: tuple,
        aux_strides: tuple,
    ) -> tuple:
        abs_, ar, ac = a_strides
        bbs, br, bc = b_strides
        cbs, cr, cc = c_strides
        xbs, xr, xc = aux_strides
        if l == 1:  # batch strides unused; keep them TMA-legal
            abs_ = bbs = cbs = xbs = 0
        a_ld = ar if a_row else ac
        b_ld = br if b_row else bc
        c_ld = cr if c_row else cc
        cm = m if c_row else n
        core = (
            m,
            n,
            k,
            l,
            a_ld,
            abs_ or a_ld * (m if a_row else k),
            b_ld,
            bbs or b_ld * (n if b_k else k),
            c_ld,
            cbs or c_ld * cm,
        )
        if lean:
            return core
        x_ld = xr if c_row else xc
        return (*core, residual_strides[1], residual_strides[2], residual_strides[0], x_ld, xbs or x_ld * cm)

    n_pointers = 3 if lean else 8
    if not swap:
        return (0, 1, 2, 3, 4, 5, 6, 7)[:n_pointers], geometry

    # Swapped: C^T = B^T A^T, i.e. the same problem with M and N exchanged, A and B exchanged, and
    # every matrix transposed (a transpose swaps its row and column strides).
    def swapped(
        m: int,
        n: int,
        k: int,
        l: int,
        a_strides: tuple,
        b_strides: tuple,
        c_strides: tuple,
        residual_strides: tuple,
        aux_strides: tuple,
    ) -> tuple:
        return geometry(
            n, m, k, l, _transposed(b_strides), _transposed(a_strides), _transposed(c_strides),
            _transposed(residual_strides), _transposed(aux_strides),
        )  # fmt: skip

    return (1, 0, 2, 3, 5, 4, 6, 7)[:n_pointers], swapped


def _transposed(strides: tuple) -> tuple:
    """(batch, row, col) strides of the transposed matrix."""
    batch, row, col = strides
    return batch, col, row


def user_majors(a_strides: tuple, b_strides: tuple, c_strides: tuple, m: int, n: int, k: int) -> tuple:
    """(A, B, C) majors in the user frame, as `Plan` reads them; ValueError when neither mode is contiguous."""
    return (
        _major(a_strides, m, k, "m", "k")[0],
        _major(b_strides, k, n, "k", "n")[0],
        _major(c_strides, m, n, "m", "n")[0],
    )


def kernel_layout(
    swap: bool,
    ab_dtype,
    c_dtype,
    a_strides: tuple,
    b_strides: tuple,
    c_strides: tuple,
    m: int,
    n: int,
    k: int,
    l: int,
) -> KernelLayout:
    """The problem's static layout in the KERNEL's frame (the compile key with the knobs), from
    user-frame (batch, row, col) strides. Swapped (``swap``): kernel A = B^T (N x K), kernel B = A
    (M x K), kernel C = C^T."""
    ad, cd = dtype_name(ab_dtype), dtype_name(c_dtype)
    # user frame: A (M, K) major 'k' if K contiguous else 'm'; B (K, N): 'n' if N contiguous
    a_maj, b_maj, c_maj = user_majors(a_strides, b_strides, c_strides, m, n, k)
    a_bc = l > 1 and a_strides[0] == 0
    b_bc = l > 1 and b_strides[0] == 0
    if swap:
        return KernelLayout(
            ad,
            cd,
            "k" if b_maj == "k" else "m",
            "k" if a_maj == "k" else "n",
            "n" if c_maj == "m" else "m",
            b_bc,
            a_bc,
        )
    return KernelLayout(ad, cd, a_maj, "k" if b_maj == "k" else "n", c_maj, a_bc, b_bc)


class Plan:
    """A problem's static configuration resolved to a compiled kernel plus the argument mapping.

    Built once per (shapes' static facts); ``__call__`` maps user-frame pointers and strides to the
    kernel frame (`kernel_frame`) and launches on the given stream.
    """

    __slots__ = (
        "_ws",
        "a_bcast",
        "b_bcast",
        "fn",
        "geometry",
        "k",
        "kepi",
        "klay",
        "knobs",
        "lean",
        "pointer_order",
        "swap",
    )

    def __init__(
        self,
        knobs: GemmKnobs,
        spec: EpilogueSpec,
        ab_dtype,
        c_dtype,
        a_strides: tuple,
        b_strides: tuple,
        c_strides: tuple,
        m: int,
        n: int,
        k: int,
        l: int,
        arch: str = ARCH,
        kernel: str = "sm90",
    ):
        """``kernel`` "sm80" builds the portable mma.sync kernel for ``arch`` (the GPU's own, e.g.
        "sm_90" on an H200) instead of the SM90 one; a configuration it cannot build is a ValueError."""
        lay = kernel_layout(knobs.swap_ab, ab_dtype, c_dtype, a_strides, b_strides, c_strides, m, n, k, l)
        self.kepi = KernelEpilogue.from_spec(spec, knobs.swap_ab)
        self.klay, self.knobs, self.swap = lay, knobs, knobs.swap_ab
        self.k = k  # the K the plan was built for (a split tail's workspace depends on K)
        # user-frame broadcast flags (the kernel frame exchanges A and B when swapped)
        self.a_bcast, self.b_bcast = (
            (lay.b_bcast, lay.a_bcast) if knobs.swap_ab else (lay.a_bcast, lay.b_bcast)
        )
        self.lean = is_lean(knobs, self.kepi, kernel)
        self.pointer_order, self.geometry = kernel_frame(lay, knobs.swap_ab, self.lean)
        self.fn = get_compiled(knobs, self.kepi, lay, arch, kernel)  # Sm80Gemm raises what it cannot build
        self._ws = None  # split-K: the plan's own workspace (torch tensor), grown on demand

    @property
    def split_k(self) -> int:
        return self.knobs.split_k

    @property
    def needs_workspace(self) -> bool:
        """Launches take a workspace and semaphores (split-K or a split tail)."""
        return needs_workspace(self.knobs)

    def _resident(self) -> int:
        return resident_clusters(self.knobs.cga_m * self.knobs.cga_n)

    def workspace_bytes(self, m: int, n: int, l: int, k: int = 0) -> int:
        """Workspace (bytes) a launch of (M, N, K, L) needs; 0 without split-K or a split tail
        (whose size depends on K: 0 means the K the plan was built for)."""
        return workspace_bytes(m, n, l, self.knobs, k or self.k, self._resident())

    def semaphore_words(self, m: int, n: int, l: int, k: int = 0) -> int:
        """Engine-owned tile semaphores a launch of (M, N, K, L) needs."""
        return semaphore_words(m, n, l, self.knobs, k or self.k, self._resident())

    def own_workspace(self, m: int, n: int, l: int, device=None, k: int = 0) -> int:
        """Address of a plan-owned workspace for (M, N, K, L) (the partials need no initialization).
        Not for concurrent launches of one plan on two streams."""
        need = self.workspace_bytes(m, n, l, k)
        if self._ws is None or self._ws.numel() < need:
            import torch

            self._ws = torch.empty(max(need, 256), dtype=torch.uint8, device=device or "cuda")
        return self._ws.data_ptr()

    def semaphores(
        self, m: int, n: int, l: int, stream: int = 0, device: int | None = None, k: int = 0
    ) -> int:
        """Address of the engine-owned tile semaphores for a launch of (M, N, K, L) on ``stream``."""
        if device is None:
            import torch

            device = torch.cuda.current_device()
        return stream_semaphores().address(device, stream, self.semaphore_words(m, n, l, k))

    def kernel_args(
        self,
        a_ptr: int,
        b_ptr: int,
        c_ptr: int,
        m: int,
        n: int,
        k: int,
        l: int,
        a_strides: tuple,
        b_strides: tuple,
        c_strides: tuple,
        bias_ptr: int = 0,
        row_scale_ptr: int = 0,
        col_scale_ptr: int = 0,
        residual_ptr: int = 0,
        residual_strides: tuple = (0, 0, 0),
        aux_ptr: int = 0,
        aux_strides: tuple = (0, 0, 0),
        stream: int = 0,
        workspace: int = 0,
        semaphores: int = 0,
    ) -> tuple:
        """The compiled function's argument tuple: ``plan.fn(*plan.kernel_args(...))`` launches.

        Pointers are raw device addresses (ints); strides are user-frame (batch, row, col) in
        elements for A (M, K), B (K, N), C (M, N), residual and aux (M, N); ``stream`` is a raw
        cudaStream_t (0 = legacy default stream). Split-K or a split tail only (``needs_workspace``):
        ``workspace`` is the device address of ``workspace_bytes(m, n, l, k)`` bytes (any contents)
        and ``semaphores`` that of ``semaphore_words`` zeroed int32 words (see ``semaphores``); they
        go after the sizes/strides, before the stream. A lean plan (`is_lean`) passes only A, B, C,
        the sizes and their strides (``pointer_order`` and ``geometry`` are cut to those).
        """
        ptrs = (a_ptr, b_ptr, c_ptr, bias_ptr, row_scale_ptr, col_scale_ptr, residual_ptr, aux_ptr)
        geo = self.geometry(m, n, k, l, a_strides, b_strides, c_strides, residual_strides, aux_strides)
        if self.needs_workspace:
            return tuple(ptrs[i] for i in self.pointer_order) + geo + (workspace, semaphores, stream)
        return tuple(ptrs[i] for i in self.pointer_order) + geo + (stream,)

    def __call__(self, *args, **kwargs) -> None:
        """Launch; same arguments as ``kernel_args``. With split-K or a split tail, a missing
        ``workspace`` is the plan's own and missing ``semaphores`` the engine-owned ones of the stream."""
        if self.needs_workspace:
            m = args[3] if len(args) > 3 else kwargs["m"]
            n = args[4] if len(args) > 4 else kwargs["n"]
            k = args[5] if len(args) > 5 else kwargs["k"]
            l = args[6] if len(args) > 6 else kwargs["l"]
            st = args[17] if len(args) > 17 else kwargs.get("stream", 0)
            extra = dict(zip(("workspace", "semaphores"), args[18:]))
            args = args[:18]
            kwargs = {**kwargs, **extra}
            if not kwargs.get("workspace"):
                kwargs["workspace"] = self.own_workspace(m, n, l, k=k)
            if not kwargs.get("semaphores"):
                kwargs["semaphores"] = self.semaphores(m, n, l, st, k=k)
        self.fn(*self.kernel_args(*args, **kwargs))


def default_knobs(m: int, n: int, k: int, l: int = 1) -> GemmKnobs:
    """A reasonable configuration without tuning."""
    if m <= 64 and n >= 256:
        return GemmKnobs(tile_m=128, tile_n=max(16, min(64, 16 * ((m + 15) // 16))), swap_ab=True)
    if m * n * l <= 128 * 256 * 132:
        return GemmKnobs(tile_m=128, tile_n=128)
    return GemmKnobs(tile_m=128, tile_n=256, cga_m=2)


_PLANS: dict[tuple, Plan] = {}


def gemm(
    a,
    b,
    out=None,
    *,
    bias=None,
    row_scale=None,
    col_scale=None,
    residual=None,
    activation: str = "none",
    aux=None,
    knobs: GemmKnobs | None = None,
    out_dtype=None,
) -> Any:
    """Torch convenience wrapper: out = act(a @ b * scales + bias + residual); a (L?,M,K), b (L?,K,N).

    Declines (ValueError with the reason) what can_implement refuses.
    """
    import torch

    a3 = a if a.dim() == 3 else a.unsqueeze(0)
    b3 = b if b.dim() == 3 else b.unsqueeze(0)
    l = max(a3.shape[0], b3.shape[0])
    if a3.shape[0] != l:
        a3 = a3.expand(l, -1, -1)
    if b3.shape[0] != l:
        b3 = b3.expand(l, -1, -1)
    m, k = a3.shape[1:]
    n = b3.shape[2]
    if out is None:
        shape = (l, m, n) if (a.dim() == 3 or b.dim() == 3) else (m, n)
        out = torch.empty(shape, device=a.device, dtype=out_dtype or a.dtype)
    o3 = out if out.dim() == 3 else out.unsqueeze(0)
    r3 = (
        None
        if residual is None
        else (residual if residual.dim() == 3 else residual.unsqueeze(0)).expand(l, m, n)
    )
    x3 = None if aux is None else (aux if aux.dim() == 3 else aux.unsqueeze(0))
    spec = EpilogueSpec(
        bias=bias is not None,
        row_scale=row_scale is not None,
        col_scale=col_scale is not None,
        residual=r3 is not None,
        activation=activation,
        aux_out=x3 is not None,
        vec_dtype=dtype_name(
            next((v.dtype for v in (bias, row_scale, col_scale) if v is not None), torch.float32)
        ),
        residual_dtype=dtype_name(r3.dtype) if r3 is not None else "bf16",
        aux_dtype=dtype_name(x3.dtype) if x3 is not None else "bf16",
    )
    knobs = knobs or default_knobs(m, n, k, l)
    st = lambda t: tuple(t.stride()) if t is not None else (0, 0, 0)  # noqa: E731
    vecs = tuple(v.data_ptr() for v in (bias, row_scale, col_scale) if v is not None)
    why = can_implement(
        m,
        n,
        k,
        l,
        a.dtype,
        b.dtype,
        out.dtype,
        st(a3),
        st(b3),
        st(o3),
        a3.data_ptr(),
        b3.data_ptr(),
        o3.data_ptr(),
        knobs,
        spec,
        st(r3) if r3 is not None else None,
        st(x3) if x3 is not None else None,
        vecs,
        r3.data_ptr() if r3 is not None else 0,
        x3.data_ptr() if x3 is not None else 0,
    )
    if why:
        raise ValueError(f"sm90 gemm cannot serve this problem: {why}")
    for v, ln, nm in ((bias, n, "bias"), (row_scale, m, "row_scale"), (col_scale, n, "col_scale")):
        if v is not None and (v.numel() != ln or (v.dim() == 1 and v.stride(0) != 1)):
            raise ValueError(f"{nm} must be a contiguous vector of length {ln}, got shape {tuple(v.shape)}")
    key = (knobs, spec, a.dtype, out.dtype, _sig(st(a3), m, k), _sig(st(b3), k, n), _sig(st(o3), m, n), l > 1)
    plan = _PLANS.get(key)
    if plan is None:
        plan = _PLANS[key] = Plan(knobs, spec, a.dtype, out.dtype, st(a3), st(b3), st(o3), m, n, k, l)
    plan(
        a3.data_ptr(),
        b3.data_ptr(),
        o3.data_ptr(),
        m,
        n,
        k,
        l,
        st(a3),
        st(b3),
        st(o3),
        bias.data_ptr() if bias is not None else 0,
        row_scale.data_ptr() if row_scale is not None else 0,
        col_scale.data_ptr() if col_scale is not None else 0,
        r3.data_ptr() if r3 is not None else 0,
        st(r3),
        x3.data_ptr() if x3 is not None else 0,
        st(x3),
        torch.cuda.current_stream(a.device).cuda_stream,
    )
    return out


def _sig(strides: tuple, rows: int, cols: int) -> tuple:
    bs, sr, sc = strides
    return (bs == 0, sc == 1 or cols == 1, sr == 1 or rows == 1)
