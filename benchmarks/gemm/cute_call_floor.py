"""The floor under a compiled CuTe DSL function's host cost: no-op kernels called the way gemm_sm90's is.

gemm_sm90's compiled function is a TVM-FFI function taking 8 pointers, 4 int32 sizes, 11 int64
strides and the stream; on the host it builds the TMA descriptors and launches. The two no-op
functions here take (a) the same 24 arguments and (b) one pointer and the stream, and launch an
empty kernel with no TMA descriptor. So, per call:

    (b)            TVM-FFI entry + one kernel launch
    (a) - (b)      converting the other 22 arguments
    gemm - (a)     what gemm_sm90's host function adds: TMA descriptors, grid, cluster launch

``compile_floor()`` compiles both for sm_90a (no GPU needed); calling them needs an SM90 device.
"""

# No `from __future__ import annotations`: the DSL reads the jit functions' annotations as objects.
from typing import Any


def compile_floor(arch: str = "sm_90a") -> tuple[Any, Any]:
    """(the 24-argument no-op function, the 2-argument one), compiled with TVM-FFI for ``arch``."""
    import cuda.bindings.driver as cuda
    import cutlass
    import cutlass.cute as cute
    from cutlass import Int32, Int64
    from cutlass.cute.runtime import make_fake_stream, make_ptr

    @cute.kernel
    def empty(m: Int32):
        pass

    @cute.jit
    def like_gemm(
        p0: cute.Pointer,
        p1: cute.Pointer,
        p2: cute.Pointer,
        p3: cute.Pointer,
        p4: cute.Pointer,
        p5: cute.Pointer,
        p6: cute.Pointer,
        p7: cute.Pointer,
        m: Int32,
        n: Int32,
        k: Int32,
        l: Int32,
        s0: Int64,
        s1: Int64,
        s2: Int64,
        s3: Int64,
        s4: Int64,
        s5: Int64,
        s6: Int64,
        s7: Int64,
        s8: Int64,
        s9: Int64,
        s10: Int64,
        stream: cuda.CUstream,
    ):
        empty(m).launch(grid=(1, 1, 1), block=(32, 1, 1), stream=stream)

    @cute.jit
    def bare(p0: cute.Pointer, stream: cuda.CUstream):
        empty(Int32(1)).launch(grid=(1, 1, 1), block=(32, 1, 1), stream=stream)

    g = cute.AddressSpace.gmem
    ptr = make_ptr(cutlass.BFloat16, 0, g, assumed_align=16)
    opts = f"--enable-tvm-ffi --gpu-arch {arch}"
    args = [ptr] * 8 + [Int32(1)] * 4 + [Int64(8)] * 11 + [make_fake_stream()]
    return (
        cute.compile(like_gemm, *args, options=opts),
        cute.compile(bare, ptr, make_fake_stream(), options=opts),
    )


def floor_args(pointer: int, stream: int) -> tuple[tuple, tuple]:
    """Argument tuples for the two functions, every pointer ``pointer``."""
    return (pointer,) * 8 + (256, 256, 128, 1) + (128,) * 11 + (stream,), (pointer, stream)


if __name__ == "__main__":
    import time

    t = time.time()
    compile_floor()
    print(f"compiled both no-op functions in {time.time() - t:.1f} s")
