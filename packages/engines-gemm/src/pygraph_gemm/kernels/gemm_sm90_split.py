"""The SM90 GEMM's entry point for split-K launches, whose K slices meet in a workspace: `Sm90Gemm`
with two more pointers, the fp32 partials and the tile semaphores. The kernel is `Sm90Gemm.kernel`
(its reduction `split_k.reduce_slices`); this class only changes the compiled function's signature."""

from __future__ import annotations

import cuda.bindings.driver as cuda
import cutlass.cute as cute
from cutlass import Int32, Int64

from .entry import HostArgs
from .gemm_sm90 import Sm90Gemm


class Sm90GemmSplitK(Sm90Gemm):
    """``Sm90Gemm`` with ``knobs.split_k > 1``: the compiled function takes two more pointers after
    the 15 sizes/strides and before the stream: the fp32 partials (``config.workspace_bytes``, any
    contents) and the int32 tile semaphores (``config.splitk_tiles`` words, zero at launch and left
    zero)."""

    @cute.jit
    def __call__(
        self,
        a_ptr: cute.Pointer,
        b_ptr: cute.Pointer,
        c_ptr: cute.Pointer,
        bias_ptr: cute.Pointer,
        scale_m_ptr: cute.Pointer,
        scale_n_ptr: cute.Pointer,
        res_ptr: cute.Pointer,
        aux_ptr: cute.Pointer,
        m: Int32,
        n: Int32,
        k: Int32,
        l: Int32,
        a_ld: Int64,
        a_bs: Int64,
        b_ld: Int64,
        b_bs: Int64,
        c_ld: Int64,
        c_bs: Int64,
        r_sm: Int64,
        r_sn: Int64,
        r_bs: Int64,
        x_ld: Int64,
        x_bs: Int64,
        ws_ptr: cute.Pointer,
        sem_ptr: cute.Pointer,
        stream: cuda.CUstream,
    ):
        self._host(HostArgs(
            a_ptr, b_ptr, c_ptr, bias_ptr, scale_m_ptr, scale_n_ptr, res_ptr, aux_ptr,
            m, n, k, l, a_ld, a_bs, b_ld, b_bs, c_ld, c_bs, r_sm, r_sn, r_bs, x_ld, x_bs,
            ws_ptr, sem_ptr, stream,
        ))  # fmt: skip
