"""Portable SM80-class GEMM (mma.sync + cp.async) in CuTe DSL with the same fused epilogue as SM90.

One CTA of 128 threads (2 x 2 warps) per ``tile_m x tile_n`` output tile, batch on grid z; no
clusters, no TMA, no warp specialization, so it builds for sm_80 (A100) and runs on anything
newer when compiled for that arch (a cubin is arch-specific: compile for sm_90 to run on H100/H200).

Main loop: a ring of ``stages`` shared-memory slots filled by 16-byte ``cp.async`` copies (one
commit group per k-tile, ``stages - 1`` tiles in flight), ``ldmatrix`` (transposed for MN-major
operands) into registers, ``mma.sync.m16n8k16`` with fp32 accumulators. Shared layouts are
16-byte-chunk swizzles of 8 x 64 (or 8 x 32) element atoms, K-major or MN-major as the operand.

Tails: a 16-byte chunk is copied iff its first element is inside (M or N, K), else zero-filled
(the DSL emits cp.async's src-size form, 0 bytes when predicated off). The only operand values past
the problem that reach the MMA are then the tail of a chunk that straddles M, N or K (possible when
the extent is not a multiple of 8 along the contiguous mode): past M / N they only feed accumulator
rows/columns that are never stored, and past K the LAST k-tile zeroes them in registers after
``ldmatrix`` (every operand element whose k >= K; it would otherwise be 0 * garbage, NaN for NaN).
A chunk whose first element is in range lies inside one 16-byte-aligned segment holding a valid
element, so reading all its 16 bytes never leaves the allocation's page.

Epilogue, in registers: ``apply_affine`` (scales, bias, residual), optional aux (pre-activation)
store, ``activate``, conversion, then per-element predicated stores straight from the accumulator
fragment to C (row- or column-major). Uncoalesced but exact for every M/N tail; a shared-memory
staged store is a later optimisation.

The compiled function has exactly ``Sm90Gemm.__call__``'s signature and kernel frame, so
``frame.kernel_frame`` maps user arguments to it unchanged.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import cutlass
import cutlass.cute as cute
import cutlass.utils as utils
from cutlass import Float32, const_expr

from .config import GemmKnobs, KernelEpilogue, KernelLayout, dtype_bytes
from .entry import GemmEntry, HostArgs
from .epilogue import activate, apply_affine

_DT = {"bf16": cutlass.BFloat16, "fp16": cutlass.Float16, "fp32": cutlass.Float32}

SM80_TILES_MN = ((128, 128), (64, 128), (128, 64), (64, 64))
SM80_TILE_K = (32, 64)
SM80_MAX_SMEM = 163 * 1024  # opt-in dynamic shared memory per block on A100 (sm_80)
_STAGE_BUDGET = 96 * 1024  # auto stages stay under this (fits sm_86/sm_89's 99 KiB too)
_THREADS = 128  # 4 warps, 2 x 2 over the tile
_WARPS_MN = (2, 2)
_VEC = 8  # 16-bit elements per 16-byte cp.async


def sm80_stages(knobs: GemmKnobs) -> int:
    """Ring depth: ``knobs.stages`` if set, else as many as fit ``_STAGE_BUDGET`` (2..4)."""
    if knobs.stages:
        return knobs.stages
    per = (knobs.tile_m + knobs.tile_n) * knobs.tile_k * 2
    return max(2, min(4, _STAGE_BUDGET // per))


def sm80_smem_bytes(knobs: GemmKnobs) -> int:
    return (knobs.tile_m + knobs.tile_n) * knobs.tile_k * 2 * sm80_stages(knobs) + 1024


def can_implement_sm80(knobs: GemmKnobs, lay: KernelLayout, epi: KernelEpilogue) -> str | None:
    """Why this static configuration cannot be built by ``Sm80Gemm`` (a reason), or None.

    Problem-level checks (alignment, sizes) are the shared ``config.can_implement``; its 16-byte
    rules (base addresses, leading and batch strides) are exactly what the 16-byte cp.async needs.
    """
    if (knobs.tile_m, knobs.tile_n) not in SM80_TILES_MN:
        return f"sm80 tile {knobs.tile_m}x{knobs.tile_n} not in {SM80_TILES_MN}"
    if knobs.tile_k not in SM80_TILE_K:
        return f"sm80 tile_k={knobs.tile_k} not in {SM80_TILE_K}"
    if knobs.cga_m != 1 or knobs.cga_n != 1:
        return f"sm80 has no clusters (cga {knobs.cga_m}x{knobs.cga_n})"
    if knobs.split_k != 1:
        return f"sm80 kernel has no split-K (split_k={knobs.split_k})"
    if knobs.pingpong:
        return "sm80 kernel has no ping-pong schedule"
    stages = sm80_stages(knobs)
    if not 2 <= stages <= 8:
        return f"sm80 stages={stages} not in [2, 8]"
    if sm80_smem_bytes(knobs) > SM80_MAX_SMEM:
        return f"sm80 shared memory {sm80_smem_bytes(knobs)} B over {SM80_MAX_SMEM} B ({stages} stages)"
    if lay.ab_dtype not in ("bf16", "fp16"):
        return f"sm80 input dtype {lay.ab_dtype!r} not bf16/fp16"
    if lay.c_dtype not in _DT:
        return f"sm80 output dtype {lay.c_dtype!r} unsupported"
    if lay.a_major not in ("k", "m") or lay.b_major not in ("k", "n") or lay.c_major not in ("n", "m"):
        return f"sm80 majors a={lay.a_major!r} b={lay.b_major!r} c={lay.c_major!r} invalid"
    for nm, dt in (("vec", epi.vec_dtype), ("residual", epi.residual_dtype), ("aux", epi.aux_dtype)):
        if dt not in _DT:
            return f"sm80 {nm} dtype {dt!r} unsupported"
    return None


class Sm80Gemm(GemmEntry):
    """C[m, n, l] = epilogue(sum_k A[m, k, l] * B[n, k, l]) for one static configuration."""

    def __init__(self, knobs: GemmKnobs, lay: KernelLayout, epi: KernelEpilogue):
        why = can_implement_sm80(knobs, lay, epi)
        if why:
            raise ValueError(why)
        self.knobs, self.lay, self.epi = knobs, lay, epi
        self.ab_dtype = _DT[lay.ab_dtype]
        self.c_dtype = _DT[lay.c_dtype]
        self.aux_dtype = _DT[epi.aux_dtype]
        self.acc_dtype = Float32
        self.tile_m, self.tile_n, self.tile_k = knobs.tile_m, knobs.tile_n, knobs.tile_k
        self.stages = sm80_stages(knobs)
        self.a_kmaj = lay.a_major == "k"
        self.b_kmaj = lay.b_major == "k"
        self.align_el = 16 // dtype_bytes(lay.ab_dtype)  # elements in a 16-byte chunk
        self.ab_align = self.align_el  # `config.can_implement` guarantees it: cp.async can vectorize

    # ------------------------------------------------------------------ host side (traced once)
    def _smem_layout(self, rows: int, k_major: bool):
        """(rows, tile_k, stages) staging layout and the byte swizzle of its 16-byte chunks.

        The atom is 8 rows of the contiguous mode (at most 64 elements = 128 B); the swizzle XORs
        the chunk index within a 128 B (or 64 B) line with the line index, so the 8 rows an
        ldmatrix phase reads, and the chunks a warp's cp.async writes, hit distinct banks.
        """
        width = min(self.tile_k if k_major else rows, 64)
        if k_major:
            atom = cute.make_layout((8, width), stride=(width, 1))
        else:
            atom = cute.make_layout((width, 8), stride=(1, width))
        layout = cute.tile_to_shape(atom, (rows, self.tile_k, self.stages), (0, 1, 2))
        bits = min(3, int(math.log2(width * dtype_bytes(self.lay.ab_dtype) // 16)))
        return layout, cute.make_swizzle(bits, 4, 3)

    def _g2s_copy(self, rows: int, k_major: bool):
        """128 threads x 16-byte cp.async over a (rows, tile_k) tile, threads along the contiguous mode."""
        atom = cute.make_copy_atom(
            cute.nvgpu.cpasync.CopyG2SOp(cache_mode=cute.nvgpu.LoadCacheMode.GLOBAL),
            self.ab_dtype,
            num_bits_per_copy=128,
        )
        v = self.align_el
        if k_major:
            per_row = self.tile_k // v
            thr = cute.make_layout((_THREADS // per_row, per_row), stride=(per_row, 1))
            val = cute.make_layout((1, v))
        else:
            per_col = rows // v
            thr = cute.make_layout((per_col, _THREADS // per_col), stride=(1, per_col))
            val = cute.make_layout((v, 1))
        return cute.make_tiled_copy_tv(atom, thr, val)

    def _host(self, args: HostArgs):
        """Host-side body of the entry points (`entry.GemmEntry`); no workspace (``args.ws_ptr``,
        ``args.sem_ptr`` unused: this kernel has no split-K)."""
        epi = self.epi
        mA, mB, mC = self._tensors(args)
        mX = mC  # placeholder when there is no aux output
        if const_expr(epi.aux_out):
            mX = self._aux(args)

        sA_layout, sA_swz = self._smem_layout(self.tile_m, self.a_kmaj)
        sB_layout, sB_swz = self._smem_layout(self.tile_n, self.b_kmaj)
        g2s_a = self._g2s_copy(self.tile_m, self.a_kmaj)
        g2s_b = self._g2s_copy(self.tile_n, self.b_kmaj)

        wm, wn = _WARPS_MN
        tiled_mma = cute.make_tiled_mma(
            cute.nvgpu.warp.MmaF16BF16Op(self.ab_dtype, self.acc_dtype, (16, 8, 16)),
            cute.make_layout((wm, wn, 1)),
            # each warp takes two n8 atoms side by side, so one x4 ldmatrix feeds B
            permutation_mnk=(wm * 16, wn * 16, 16),
        )

        mBiasM, mBiasN, mScaleM, mScaleN, mRes = self._epilogue_tensors(args)

        grid = ((args.m + self.tile_m - 1) // self.tile_m, (args.n + self.tile_n - 1) // self.tile_n, args.l)
        self.kernel(
            mA,
            mB,
            mC,
            mX,
            mBiasM,
            mBiasN,
            mScaleM,
            mScaleN,
            mRes,
            sA_layout,
            sA_swz,
            sB_layout,
            sB_swz,
            g2s_a,
            g2s_b,
            tiled_mma,
        ).launch(grid=grid, block=[_THREADS, 1, 1], stream=args.stream)

    # ------------------------------------------------------------------ device side
    @cute.kernel
    def kernel(
        self,
        mA: cute.Tensor,
        mB: cute.Tensor,
        mC: cute.Tensor,
        mX: cute.Tensor,
        mBiasM: cute.Tensor,
        mBiasN: cute.Tensor,
        mScaleM: cute.Tensor,
        mScaleN: cute.Tensor,
        mRes: cute.Tensor,
        sA_layout: cute.Layout,
        sA_swz: cute.Swizzle,
        sB_layout: cute.Layout,
        sB_swz: cute.Swizzle,
        g2s_a: cute.TiledCopy,
        g2s_b: cute.TiledCopy,
        tiled_mma: cute.TiledMma,
    ):
        epi = self.epi
        stages = self.stages
        tm, tn, tk = self.tile_m, self.tile_n, self.tile_k
        tidx, _, _ = cute.arch.thread_idx()
        bm, bn, batch = cute.arch.block_idx()
        M, N, K = mC.shape[0], mC.shape[1], mA.shape[1]
        la = 0 if const_expr(self.lay.a_bcast) else batch
        lb = 0 if const_expr(self.lay.b_bcast) else batch

        # this CTA's slabs of A and B along K, and their global coordinates (for predication)
        gA = cute.local_tile(mA[None, None, la], (tm, tk), (bm, None))  # (tm, tk, k_tiles)
        gB = cute.local_tile(mB[None, None, lb], (tn, tk), (bn, None))  # (tn, tk, k_tiles)
        cA = cute.local_tile(cute.make_identity_tensor((M, K)), (tm, tk), (bm, None))
        cB = cute.local_tile(cute.make_identity_tensor((N, K)), (tn, tk), (bn, None))
        k_tiles = cute.size(gA, mode=[2])

        R, A = cute.struct.MemRange, cute.struct.Align
        fields = {
            "sA": A[R[self.ab_dtype, cute.cosize(sA_layout)], 1024],
            "sB": A[R[self.ab_dtype, cute.cosize(sB_layout)], 1024],
        }
        storage_t = cute.struct(type("Sm80Storage", (), {"__annotations__": fields}))
        smem = utils.SmemAllocator()
        storage = smem.allocate(storage_t)
        sA = storage.sA.get_tensor(sA_layout, swizzle=sA_swz)  # (tm, tk, stages)
        sB = storage.sB.get_tensor(sB_layout, swizzle=sB_swz)  # (tn, tk, stages)

        # ---- global -> shared partitions (cp.async)
        thr_a = g2s_a.get_slice(tidx)
        thr_b = g2s_b.get_slice(tidx)
        tAgA = thr_a.partition_S(gA)  # (CPY, CPY_M, CPY_K, k_tiles)
        tAsA = thr_a.partition_D(sA)  # (CPY, CPY_M, CPY_K, stages)
        tAcA = thr_a.partition_S(cA)
        tBgB = thr_b.partition_S(gB)
        tBsB = thr_b.partition_D(sB)
        tBcB = thr_b.partition_S(cB)
        # one predicate per 16-byte chunk: (CPY_REST, CPY_MN, CPY_K)
        pA = cute.make_rmem_tensor(
            (
                cute.size(tAgA, mode=[0]) // self.align_el,
                cute.size(tAgA, mode=[1]),
                cute.size(tAgA, mode=[2]),
            ),
            cutlass.Boolean,
        )
        pB = cute.make_rmem_tensor(
            (
                cute.size(tBgB, mode=[0]) // self.align_el,
                cute.size(tBgB, mode=[1]),
                cute.size(tBgB, mode=[2]),
            ),
            cutlass.Boolean,
        )

        # ---- shared -> register partitions (ldmatrix) and the MMA fragments
        thr_mma = tiled_mma.get_slice(tidx)
        # register fragments hold two k-blocks (a double buffer), not the whole k-tile: with
        # tile_k = 64 four k-blocks of A and B would take 128 registers next to the 128 of acc
        k_blocks = tk // 16  # mma k-blocks per k-tile
        nbuf = min(2, k_blocks)
        kbuf = 16 * nbuf
        tCrA = tiled_mma.make_fragment_A(
            thr_mma.partition_A(cute.local_tile(sA[None, None, 0], (tm, kbuf), (0, 0)))
        )
        tCrB = tiled_mma.make_fragment_B(
            thr_mma.partition_B(cute.local_tile(sB[None, None, 0], (tn, kbuf), (0, 0)))
        )
        tCcA = thr_mma.partition_A(cute.make_identity_tensor((tm, tk)))  # (m, k) inside the tile
        tCcB = thr_mma.partition_B(cute.make_identity_tensor((tn, tk)))
        ldm_a = cute.make_copy_atom(cute.nvgpu.warp.LdMatrix8x8x16bOp(not self.a_kmaj, 4), self.ab_dtype)
        ldm_b = cute.make_copy_atom(cute.nvgpu.warp.LdMatrix8x8x16bOp(not self.b_kmaj, 4), self.ab_dtype)
        s2r_a = cute.make_tiled_copy_A(ldm_a, tiled_mma)
        s2r_b = cute.make_tiled_copy_B(ldm_b, tiled_mma)
        thr_s2r_a = s2r_a.get_slice(tidx)
        thr_s2r_b = s2r_b.get_slice(tidx)
        tXsA = thr_s2r_a.partition_S(sA)  # (CPY, CPY_M, CPY_K, stages)
        tXrA = thr_s2r_a.retile(tCrA)
        tXsB = thr_s2r_b.partition_S(sB)
        tXrB = thr_s2r_b.retile(tCrB)

        gC = cute.local_tile(mC[None, None, batch], (tm, tn), (bm, bn))
        tCgC = thr_mma.partition_C(gC)
        acc = cute.make_rmem_tensor(tCgC.shape, self.acc_dtype)
        acc.fill(0.0)
        # what every k-block's ldmatrix + mma reads and writes (`_mma_k_block`)
        operands = (tiled_mma, acc, s2r_a, tXsA, tXrA, tCrA, tCcA, s2r_b, tXsB, tXrB, tCrB, tCcB)

        # ---- prologue: k-tiles 0 .. stages-2 in flight, one commit group each (empty past K)
        for s in cutlass.range_constexpr(stages - 1):
            if s < k_tiles:
                _issue_tile(g2s_a, tAgA, tAsA, tAcA, pA, (M, K), g2s_b, tBgB, tBsB, tBcB, pB, (N, K), s, s)
            cute.arch.cp_async_commit_group()

        # ---- steady state: every k-tile but the last; one group issued, one consumed per step
        for kt in cutlass.range(k_tiles - 1, unroll=1):
            cute.arch.cp_async_wait_group(stages - 2)  # k-tile kt has landed (this thread's part)
            cute.arch.sync_threads()  # ... everyone's; and slot (kt-1) % stages is free again
            nxt = kt + (stages - 1)
            if nxt < k_tiles:
                _issue_tile(
                    g2s_a,
                    tAgA,
                    tAsA,
                    tAcA,
                    pA,
                    (M, K),
                    g2s_b,
                    tBgB,
                    tBsB,
                    tBcB,
                    pB,
                    (N, K),
                    nxt,
                    nxt % stages,
                )
            cute.arch.cp_async_commit_group()
            slot = kt % stages
            for kb in cutlass.range_constexpr(k_blocks):
                _mma_k_block(*operands, slot, kb, None)

        # ---- last k-tile: mask k >= K in registers (covers partial tiles and partial chunks)
        last = k_tiles - 1
        cute.arch.cp_async_wait_group(0)
        cute.arch.sync_threads()
        k_lim = K - last * tk
        for kb in cutlass.range_constexpr(k_blocks):
            _mma_k_block(*operands, last % stages, kb, k_lim)

        # ---- epilogue, in registers, one MMA_M row block of the fragment at a time (bounds the
        # live epilogue loads); per-element predicated stores (exact for any M/N tail)
        m0 = bm * tm
        n0 = bn * tn
        tCcC = thr_mma.partition_C(cute.make_identity_tensor((tm, tn)))
        lim = (M - m0, N - n0)
        tCgX = tCgC
        if const_expr(epi.aux_out):
            tCgX = thr_mma.partition_C(cute.local_tile(mX[None, None, batch], (tm, tn), (bm, bn)))
        for mi in cutlass.range_constexpr(cute.size(acc, mode=[1])):
            blk = (None, mi, None)
            acc_b, crd_b = acc[blk], tCcC[blk]
            n_blk = cute.size(acc_b)
            if const_expr(epi.has_affine):
                apply_affine(
                    acc_b, crd_b, m0, n0, batch, M - 1, N - 1, mBiasM, mBiasN, mScaleM, mScaleN, mRes, epi
                )
            if const_expr(epi.aux_out):
                rX = cute.make_rmem_tensor(acc_b.shape, self.aux_dtype)
                rX.store(acc_b.load().to(self.aux_dtype))
                gX_b = tCgX[blk]
                for i in cutlass.range_constexpr(n_blk):
                    if cute.elem_less(crd_b[i], lim):
                        gX_b[i] = rX[i]
            if const_expr(epi.act != "none"):
                for i in cutlass.range_constexpr(n_blk):
                    acc_b[i] = activate(acc_b[i], epi.act)
            rC = cute.make_rmem_tensor(acc_b.shape, self.c_dtype)
            rC.store(acc_b.load().to(self.c_dtype))
            gC_b = tCgC[blk]
            for i in cutlass.range_constexpr(n_blk):
                if cute.elem_less(crd_b[i], lim):
                    gC_b[i] = rC[i]


# Trace-time helpers of the kernel (plain Python: static loops only, everything passed explicitly,
# since the DSL does not let staged control flow capture closures).
def _issue_tile(cp_a, gA, sA, cA, pA, lim_a, cp_b, gB, sB, cB, pB, lim_b, t, slot):
    """Issue the cp.async copies of k-tile ``t`` of A and B into ring slot ``slot`` (no commit).
    A chunk is copied iff its first element's (row, k) is inside ``lim``."""
    for p, c, lim in ((pA, cA, lim_a), (pB, cB, lim_b)):
        for r in range(cute.size(p, mode=[0])):
            for i in range(cute.size(p, mode=[1])):
                for j in range(cute.size(p, mode=[2])):
                    p[r, i, j] = cute.elem_less(c[(0, r), i, j, t], lim)
    cute.copy(cp_a, gA[None, None, None, t], sA[None, None, None, slot], pred=pA)
    cute.copy(cp_b, gB[None, None, None, t], sB[None, None, None, slot], pred=pB)


def _mask_k(frag, coords, k_lim):
    """Zero the fragment elements whose k (inside the tile) is >= k_lim."""
    keep = cute.make_rmem_tensor(frag.shape, cutlass.Boolean)
    for i in range(cute.size(frag)):
        keep[i] = coords[i][1] < k_lim
    vals = frag.load()
    frag.store(cute.where(keep.load(), vals, cute.zeros_like(vals)))


def _mma_k_block(tiled_mma, acc, s2r_a, sA, rA_view, rA, cA, s2r_b, sB, rB_view, rB, cB, slot, kb, k_lim):
    """ldmatrix k-block ``kb`` of ring slot ``slot`` into register buffer ``kb % nbuf`` and
    accumulate it; with ``k_lim`` (the last k-tile) first zero every operand element whose k is
    past the problem."""
    b = kb % cute.size(rA, mode=[2])
    cute.copy(s2r_a, sA[None, None, kb, slot], rA_view[None, None, b])
    cute.copy(s2r_b, sB[None, None, kb, slot], rB_view[None, None, b])
    if k_lim is not None:
        _mask_k(rA[None, None, b], cA[None, None, kb], k_lim)
        _mask_k(rB[None, None, b], cB[None, None, kb], k_lim)
    cute.gemm(tiled_mma, acc, rA[None, None, b], rB[None, None, b], acc)


def compile_sm80(knobs: GemmKnobs, epi: KernelEpilogue, lay: KernelLayout, arch: str = "sm_80") -> Callable:
    """Compile ``Sm80Gemm`` for ``arch`` with placeholder pointers/stream (`compile_cache.compile_kernel`);
    returns the TVM-FFI function taking (8 pointers, m, n, k, l, 11 strides, stream). Its outputs are
    stored per element, so their pointers need only element alignment."""
    from .compile_cache import compile_kernel

    return compile_kernel(Sm80Gemm(knobs, lay, epi), lay, epi, arch, tma_outputs=False)
