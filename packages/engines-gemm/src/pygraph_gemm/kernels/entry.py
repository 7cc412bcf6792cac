"""The compiled GEMM function's entry points, shared by the SM90 and SM80 kernel classes.

The compiled function is a TVM-FFI function of raw device addresses, 32-bit sizes, 64-bit strides
and the stream (no DLPack), and its host cost per call grows with each argument converted. So
there are two signatures: ``__call__`` takes every operand (8 pointers, 4 sizes, 11 strides,
stream); ``call_lean`` only A, B, C and their geometry (3 pointers, 4 sizes, 6 strides, stream),
for an epilogue that reads no other tensor (`compile_cache.is_lean`). Both hand over to the kernel
class's ``_host`` as one `HostArgs`, with the workspace and semaphore pointers too (None here; the
split entry point, `gemm_sm90_split`, passes them). The global views both kernels' ``_host`` build
from those arguments are here too.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import cuda.bindings.driver as cuda
import cutlass.cute as cute
from cutlass import Int32, Int64, const_expr


class HostArgs(NamedTuple):
    """The compiled function's arguments as ``_host`` reads them, while tracing: the eight operand
    pointers, the sizes, the strides (elements; C's order for the aux output), the split entry's
    workspace and semaphores (None from the other entry points), the stream."""

    a_ptr: Any
    b_ptr: Any
    c_ptr: Any
    bias_ptr: Any
    scale_m_ptr: Any
    scale_n_ptr: Any
    res_ptr: Any
    aux_ptr: Any
    m: Any
    n: Any
    k: Any
    l: Any
    a_ld: Any
    a_bs: Any
    b_ld: Any
    b_bs: Any
    c_ld: Any
    c_bs: Any
    r_sm: Any
    r_sn: Any
    r_bs: Any
    x_ld: Any
    x_bs: Any
    ws_ptr: Any
    sem_ptr: Any
    stream: Any


class GemmEntry:
    """Mixin: the two compiled signatures over ``self._host`` (traced inside them), and the global
    views ``_host`` makes of their arguments in the kernel frame. ``ab_align``: elements the A/B
    strides are known to divide by (the SM80 kernel's cp.async vectorizes on it), None to assume
    nothing."""

    ab_align: int | None = None

    def _tensors(self, args: HostArgs):
        """A (m, k, l), B (n, k, l) and C (m, n, l); a broadcast operand's batch mode is 1."""
        lay = self.lay
        la = 1 if lay.a_bcast else args.l
        lb = 1 if lay.b_bcast else args.l
        a_ld, a_bs, b_ld, b_bs = args.a_ld, args.a_bs, args.b_ld, args.b_bs
        if const_expr(self.ab_align is not None):
            d = self.ab_align
            a_ld, b_ld = cute.assume(a_ld, divby=d), cute.assume(b_ld, divby=d)
            a_bs, b_bs = cute.assume(a_bs, divby=d), cute.assume(b_bs, divby=d)
        a_st = (a_ld, 1, a_bs) if lay.a_major == "k" else (1, a_ld, a_bs)
        b_st = (b_ld, 1, b_bs) if lay.b_major == "k" else (1, b_ld, b_bs)
        mA = cute.make_tensor(args.a_ptr, cute.make_layout((args.m, args.k, la), stride=a_st))
        mB = cute.make_tensor(args.b_ptr, cute.make_layout((args.n, args.k, lb), stride=b_st))
        return mA, mB, self._c_like(args.c_ptr, args, args.c_ld, args.c_bs)

    def _aux(self, args: HostArgs):
        """The aux output's (m, n, l) view, in C's major order."""
        return self._c_like(args.aux_ptr, args, args.x_ld, args.x_bs)

    def _c_like(self, ptr, args: HostArgs, ld, bs):
        """An (m, n, l) view in C's major order: C itself, or the aux output."""
        st = (ld, 1, bs) if self.lay.c_major == "n" else (1, ld, bs)
        return cute.make_tensor(ptr, cute.make_layout((args.m, args.n, args.l), stride=st))

    def _epilogue_tensors(self, args: HostArgs):
        """Bias along M and N, the two scales and the residual, read with plain loads; a vector the
        epilogue does not read is a 1-element view."""
        epi = self.epi
        m, n, l = args.m, args.n, args.l
        one = cute.make_layout(1)
        vec_m = cute.make_layout(m)
        vec_n = cute.make_layout(n)
        return (
            cute.make_tensor(args.bias_ptr, vec_m if const_expr(epi.bias_m) else one),
            cute.make_tensor(args.bias_ptr, vec_n if const_expr(epi.bias_n) else one),
            cute.make_tensor(args.scale_m_ptr, vec_m if const_expr(epi.scale_m) else one),
            cute.make_tensor(args.scale_n_ptr, vec_n if const_expr(epi.scale_n) else one),
            cute.make_tensor(
                args.res_ptr, cute.make_layout((m, n, l), stride=(args.r_sm, args.r_sn, args.r_bs))
            ),
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
        self._host(HostArgs(
            a_ptr, b_ptr, c_ptr, bias_ptr, scale_m_ptr, scale_n_ptr, res_ptr, aux_ptr,
            m, n, k, l, a_ld, a_bs, b_ld, b_bs, c_ld, c_bs, r_sm, r_sn, r_bs, x_ld, x_bs,
            None, None, stream,
        ))  # fmt: skip

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
        self._host(HostArgs(
            a_ptr, b_ptr, c_ptr, c_ptr, c_ptr, c_ptr, c_ptr, c_ptr,
            m, n, k, l, a_ld, a_bs, b_ld, b_bs, c_ld, c_bs, zero, zero, zero, zero, zero,
            None, None, stream,
        ))  # fmt: skip
