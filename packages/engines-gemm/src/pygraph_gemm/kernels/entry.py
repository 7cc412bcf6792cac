"""The compiled GEMM function's entry points, shared by the SM90 and SM80 kernel classes.

The compiled function is a TVM-FFI function of raw device addresses, 32-bit sizes, 64-bit strides
and the stream (no DLPack), and its host cost per call grows with each argument converted. So
there are two signatures: ``__call__`` takes every operand (8 pointers, 4 sizes, 11 strides,
stream); ``call_lean`` only A, B, C and their geometry (3 pointers, 4 sizes, 6 strides, stream),
for an epilogue that reads no other tensor (`launch.is_lean`). Both hand over to the kernel
class's ``_host``, which takes the workspace and semaphore pointers too (None here; the split
entry point, `gemm_sm90_split`, passes them).
"""

from __future__ import annotations

import cuda.bindings.driver as cuda
import cutlass.cute as cute
from cutlass import Int32, Int64


class GemmEntry:
    """Mixin: the two compiled signatures over ``self._host`` (traced inside them)."""

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
        stream: cuda.CUstream,
    ):
        self._host(
            a_ptr, b_ptr, c_ptr, bias_ptr, scale_m_ptr, scale_n_ptr, res_ptr, aux_ptr,
            m, n, k, l, a_ld, a_bs, b_ld, b_bs, c_ld, c_bs, r_sm, r_sn, r_bs, x_ld, x_bs,
            None, None, stream,
        )  # fmt: skip

    @cute.jit
    def call_lean(
        self,
        a_ptr: cute.Pointer,
        b_ptr: cute.Pointer,
        c_ptr: cute.Pointer,
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
        stream: cuda.CUstream,
    ):
        """The operands the epilogue does not read alias C, with zero strides."""
        zero = Int64(0)
        self._host(
            a_ptr, b_ptr, c_ptr, c_ptr, c_ptr, c_ptr, c_ptr, c_ptr,
            m, n, k, l, a_ld, a_bs, b_ld, b_bs, c_ld, c_bs, zero, zero, zero, zero, zero,
            None, None, stream,
        )  # fmt: skip
