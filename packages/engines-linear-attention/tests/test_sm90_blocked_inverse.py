"""`common.sm90_tiles.blocked_inverse` alone on the device: (I + A)^-1 of a chunk's strictly lower A
as prepare builds it (beta_i (k_i . k_j) exp(gamma_i - gamma_j), unit keys), against float64.

Why alone: strong gates shrink T's off-diagonal blocks (the merges' output) to about exp(-13) of
it, so no strong-gate case of the scans can see a fault there; weak gates put about 8% of T's norm
in the lower-left 32 x 32 block. Such a fault (the merges' A fragments aliased, row g + 8 reading
row g's next k-block) put every fused scan 5% to 26% from float64 under weak gates while every
strong-gate case passed. In float64 with tf32-rounded operands the algorithm's error is 9e-5 (weak
gates), so 5e-4 is the bound here.
"""

import pytest

torch = pytest.importorskip("torch")
cutlass = pytest.importorskip("cutlass")
import cutlass.cute as cute  # noqa: E402  (the kernel's annotations are read at trace time)
from cutlass import Float32, Int32  # noqa: E402

pytestmark = pytest.mark.sm90

C = 64


def _harness():
    import cutlass.utils as utils

    from pygraph_linear_attention.common.sm90_compile import ARCH, cute_compile
    from pygraph_linear_attention.common.sm90_tiles import (
        INVERSE_STRIDE,
        MERGE_STRIDE,
        THREADS,
        blocked_inverse,
    )

    class Inverse:
        @cute.kernel
        def kernel(self, mA: cute.Tensor, mT: cute.Tensor):
            tidx, _, _ = cute.arch.thread_idx()
            b, _, _ = cute.arch.block_idx()
            smem = utils.SmemAllocator()
            raw = smem.allocate(C * INVERSE_STRIDE * 4, 1024)
            sA = cute.make_tensor(
                cute.recast_ptr(raw, dtype=Float32), cute.make_layout((C, C), stride=(INVERSE_STRIDE, 1))
            )
            sX = smem.allocate_tensor(Float32, cute.make_layout((32, 32), stride=(MERGE_STRIDE, 1)), 16)
            for e in cutlass.range(C * C // THREADS, unroll=1):
                flat = tidx + e * THREADS
                sA[flat // C, flat % C] = mA[b, flat // C, flat % C]
            cute.arch.sync_threads()
            blocked_inverse(sA, sX, tidx)
            for e in cutlass.range(C * C // THREADS, unroll=1):
                flat = tidx + e * THREADS
                mT[b, flat // C, flat % C] = sA[flat // C, flat % C]

        @cute.jit
        def __call__(self, a_ptr: cute.Pointer, t_ptr: cute.Pointer, count: Int32, scale: Float32, stream):
            # scale: unused, the engines' signature (`cute_compile`: pointers, sizes, scale, stream)
            layout = cute.make_layout((count, C, C), stride=(C * C, C, 1))
            mA, mT = cute.make_tensor(a_ptr, layout), cute.make_tensor(t_ptr, layout)
            self.kernel(mA, mT).launch(grid=[count, 1, 1], block=[THREADS, 1, 1], stream=stream)

    return cute_compile(Inverse(), [("float32", 16), ("float32", 16)], "int32", 1, ARCH)


@pytest.mark.parametrize("gate_mean", [0.0, 4.0], ids=["strong-gates", "weak-gates"])
def test_the_blocked_inverse_matches_float64(gate_mean):
    if not torch.cuda.is_available():
        pytest.skip("needs an SM90 GPU")
    gen = torch.Generator().manual_seed(0)
    count = 8
    k = torch.nn.functional.normalize(torch.randn(count, C, 128, generator=gen, dtype=torch.float64), dim=-1)
    k = k.bfloat16().double()
    gamma = torch.nn.functional.logsigmoid(
        torch.randn(count, C, generator=gen, dtype=torch.float64) + gate_mean
    )
    gamma = gamma.cumsum(-1)
    beta = torch.rand(count, C, generator=gen, dtype=torch.float64)
    a = beta[..., None] * (k @ k.transpose(-1, -2)) * torch.exp(gamma[..., :, None] - gamma[..., None, :])
    a = a.tril(-1).float()
    want = torch.linalg.inv(torch.eye(C, dtype=torch.float64) + a.double())
    a_dev = a.cuda()
    t_dev = torch.full_like(a_dev, float("nan"))
    fn = _harness()
    fn(a_dev.data_ptr(), t_dev.data_ptr(), count, 1.0, torch.cuda.current_stream().cuda_stream)
    torch.cuda.synchronize()
    got = t_dev.double().cpu()
    err = float((got - want).norm() / want.norm())

    def part(rows, cols):  # a block's share of the error, relative to the whole T
        return float((got[:, rows, cols] - want[:, rows, cols]).norm() / want.norm())

    diag = part(slice(0, 16), slice(0, 16))
    merged16 = part(slice(16, 32), slice(0, 16)), part(slice(48, 64), slice(32, 48))
    merged32 = part(slice(32, 64), slice(0, 32))
    print(
        f"gates {gate_mean}: T rel err {err:.2e}; first diagonal block {diag:.2e}, the 16-row merges "
        f"{merged16[0]:.2e} {merged16[1]:.2e}, the 32-row merge {merged32:.2e}"
    )
    assert err <= 5e-4
