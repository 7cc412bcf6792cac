"""`Plan`: a problem's static configuration resolved to a compiled kernel and its argument mapping."""

from __future__ import annotations

from .compile_cache import ARCH, get_compiled, is_lean
from .config import EpilogueSpec, GemmKnobs, KernelEpilogue, needs_workspace, semaphore_words, workspace_bytes
from .frame import kernel_frame, kernel_layout
from .semaphores import stream_semaphores


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
        sm_count: int | None = None,
    ):
        """``kernel`` "sm80" builds the portable mma.sync kernel for ``arch`` (the GPU's own, e.g.
        "sm_90" on an H200) instead of the SM90 one; a configuration it cannot build is a ValueError.
        ``sm_count``: the SM count of the card planned for, which sizes the SM90 kernel's persistent
        grid (`compile_cache.resident_clusters`; None: the GPU present, else the reference card)."""
        lay = kernel_layout(knobs.swap_ab, ab_dtype, c_dtype, a_strides, b_strides, c_strides, m, n, k, l)
        self.kepi = KernelEpilogue.from_spec(spec, knobs.swap_ab)
        self.klay, self.knobs, self.swap = lay, knobs, knobs.swap_ab
        # user-frame broadcast flags (the kernel frame exchanges A and B when swapped)
        self.a_bcast, self.b_bcast = (
            (lay.b_bcast, lay.a_bcast) if knobs.swap_ab else (lay.a_bcast, lay.b_bcast)
        )
        self.lean = is_lean(knobs, self.kepi, kernel)
        self.pointer_order, self.geometry = kernel_frame(lay, knobs.swap_ab, self.lean)
        # Sm80Gemm raises what it cannot build
        self.fn = get_compiled(knobs, self.kepi, lay, arch, kernel, sm_count=sm_count)
        self._ws = None  # split-K: the plan's own workspace (torch tensor), grown on demand

    @property
    def split_k(self) -> int:
        return self.knobs.split_k

    @property
    def needs_workspace(self) -> bool:
        """Launches take a workspace and semaphores (split-K)."""
        return needs_workspace(self.knobs)

    def workspace_bytes(self, m: int, n: int, l: int) -> int:
        """Workspace (bytes) a launch of (M, N, L) needs; 0 without split-K."""
        return workspace_bytes(m, n, l, self.knobs)

    def semaphore_words(self, m: int, n: int, l: int) -> int:
        """Engine-owned tile semaphores a launch of (M, N, L) needs."""
        return semaphore_words(m, n, l, self.knobs)

    def own_workspace(self, m: int, n: int, l: int, device=None) -> int:
        """Address of a plan-owned workspace for (M, N, L) (the partials need no initialization).
        Not for concurrent launches of one plan on two streams."""
        need = self.workspace_bytes(m, n, l)
        if self._ws is None or self._ws.numel() < need:
            import torch

            self._ws = torch.empty(max(need, 256), dtype=torch.uint8, device=device or "cuda")
        return self._ws.data_ptr()

    def semaphores(self, m: int, n: int, l: int, stream: int = 0, device: int | None = None) -> int:
        """Address of the engine-owned tile semaphores for a launch of (M, N, L) on ``stream``."""
        if device is None:
            import torch

            device = torch.cuda.current_device()
        return stream_semaphores().address(device, stream, self.semaphore_words(m, n, l))

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
        cudaStream_t (0 = legacy default stream). Split-K only (``needs_workspace``): ``workspace``
        is the device address of ``workspace_bytes(m, n, l)`` bytes (any contents)
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
        """Launch; same arguments as ``kernel_args``. With split-K, a missing ``workspace`` is the
        plan's own and missing ``semaphores`` the engine-owned ones of the stream."""
        if self.needs_workspace:
            m = args[3] if len(args) > 3 else kwargs["m"]
            n = args[4] if len(args) > 4 else kwargs["n"]
            l = args[6] if len(args) > 6 else kwargs["l"]
            st = args[17] if len(args) > 17 else kwargs.get("stream", 0)
            extra = dict(zip(("workspace", "semaphores"), args[18:]))
            args = args[:18]
            kwargs = {**kwargs, **extra}
            if not kwargs.get("workspace"):
                kwargs["workspace"] = self.own_workspace(m, n, l)
            if not kwargs.get("semaphores"):
                kwargs["semaphores"] = self.semaphores(m, n, l, st)
        self.fn(*self.kernel_args(*args, **kwargs))
