"""The compiled GEMM function's entry points, shared by the SM90 and SM80 kernel classes.

The compiled function is a TVM-FFI function of raw device addresses, 32-bit sizes, 64-bit strides
and the stream (no DLPack), and its host cost per call grows with each argument converted. So
there are two signatures: ``__call__`` takes every operand (8 pointers, 4 sizes, 11 strides,
stream); ``call_lean`` only A, B, C and their geometry (3 pointers, 4 sizes, 6 strides, stream),
for an epilogue that reads no other tensor (`launch.is_lean`). Both hand over to the kernel
class's ``_host``, which takes the workspace and semaphore pointers too (None here; the split
entry point, `gemm_sm90_split`, passes them). The global views both kernels' ``_host`` build from
those arguments are here too.
"""

from __future__ import annotations

import cuda.bindings.driver as cuda
import cutlass.cute as cute
from cutlass import Int32, Int64, const_expr


class GemmEntry:
    """Mixin: the two compiled signatures over ``self._host`` (traced inside them), and the global
    views ``_host`` makes of their arguments in the kernel frame. ``ab_align``: elements the A/B
    strides are known to divide by (the SM80 kernel's cp.async vectorizes on it), None to assume
    nothing."""

    ab_align: int | None = None

    def _tensors(self, a_ptr, b_ptr, c_ptr, m, n, k, l, a_ld, a_bs, b_ld, b_bs, c_ld, c_bs):
        """A (m, k, l), B (n, k, l) and C (m, n, l); a broadcast operand's batch mode is 1."""
        lay = self.lay
        la = 1 if lay.a_bcast else l
        lb = 1 if lay.b_bcast else l
        if const_expr(self.ab_align is not None):
            d = self.ab_align
            a_ld, b_ld = cute.assume(a_ld, divby=d), cute.assume(b_ld, divby=d)
            a_bs, b_bs = cute.assume(a_bs, divby=d), cute.assume(b_bs, divby=d)
        a_st = (a_ld, 1, a_bs) if lay.a_major == "k" else (1, a_ld, a_bs)
        b_st = (b_ld, 1, b_bs) if lay.b_major == "k" else (1, b_ld, b_bs)
        mA = cute.make_tensor(a_ptr, cute.make_layout((m, k, la), stride=a_st))
        mB = cute.make_tensor(b_ptr, cute.make_layout((n, k, lb), stride=b_st))
        return mA, mB, self._c_like(c_ptr, m, n, l, c_ld, c_bs)

    def _c_like(self, ptr, m, n, l, ld, bs):
        """An (m, n, l) view in C's major order: C itself, or the aux output."""
        st = (ld, 1, bs) if self.lay.c_major == "n" else (1, ld, bs)
        return cute.make_tensor(ptr, cute.make_layout((m, n, l), stride=st))

    def _epilogue_tensors(self, bias_ptr, scale_m_ptr, scale_n_ptr, res_ptr, m, n, l, r_sm, r_sn, r_bs):
        """Bias along M and N, the two scales and the residual, read with plain loads; a vector the
        epilogue does not read is a 1-element view."""
        epi = self.epi
        one = cute.make_layout(1)
        vec_m = cute.make_layout(m)
        vec_n = cute.make_layout(n)
        return (
            cute.make_tensor(bias_ptr, vec_m if const_expr(epi.bias_m) else one),
            cute.make_tensor(bias_ptr, vec_n if const_expr(epi.bias_n) else one),
            cute.make_tensor(scale_m_ptr, vec_m if const_expr(epi.scale_m) else one),
            cute.make_tensor(scale_n_ptr, vec_n if const_expr(epi.scale_n) else one),
            cute.make_tensor(res_ptr, cute.make_layout((m, n, l), stride=(r_sm, r_sn, r_bs))),
        )

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
