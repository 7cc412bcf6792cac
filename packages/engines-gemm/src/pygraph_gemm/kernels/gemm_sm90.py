"""Persistent, warp-specialized SM90 GEMM in CuTe DSL with a fused epilogue.

Roles in a CTA (one CTA per SM, persistent over output tiles):
  * warpgroup 0, warp 0: producer. Walks the tile schedule and issues TMA loads of A and B k-blocks
    into a ring of ``stages`` shared-memory slots, each guarded by a full/empty mbarrier pair
    (PipelineTmaAsync). With a cluster, A is multicast along N and B along M.
  * warpgroups 1..W: consumers. wgmma over the ring into fp32 accumulators in registers, then the
    epilogue: scale / bias / residual (coordinates from an identity tensor partitioned like the
    accumulator), activation, conversion, stmatrix into a small smem ring and TMA store to C (and
    the optional auxiliary pre-activation output). Cooperative (default): the consumer warpgroups
    share each tile, half its rows each. Ping-pong (``knobs.pingpong``): each owns alternate tiles
    and they take turns on the tensor cores, so one's epilogue runs under the other's main loop.
  * split-K (``knobs.split_k > 1``): K slices of a tile run on different CTAs; fp32 partials meet in
    a workspace and the last slice to arrive (per-tile semaphore) reduces them and runs the epilogue.
  * split tail (``knobs.tail_split > 1``): only the tiles of the persistent grid's last, partly idle
    round are cut into K slices (as many as `tile_schedule.tail_split` finds worth it, per launch),
    reduced the same way.

Shapes and strides are runtime values: one compiled kernel serves every M, N, K, L and leading
dimension of its static layout (majorness, dtypes, epilogue, knobs). This module holds the
configuration and the device kernel; the host side that builds the TMA atoms and launches it is
`gemm_sm90_host.Sm90Host`.
"""

from __future__ import annotations

import cutlass
import cutlass.cute as cute
import cutlass.pipeline as pipeline
import cutlass.utils as utils
import cutlass.utils.hopper_helpers as sm90_utils
from cutlass import Int32, Int64, const_expr
from cutlass.pipeline import pipeline_init_arrive, pipeline_init_wait
from cutlass.tensor_utils import LayoutEnum

from .config import (
    GemmKnobs,
    KernelEpilogue,
    KernelLayout,
    bias_staged,
    epi_ring_depth,
    gelu_from_half,
    l2_cache_hints,
    pick_stages,
)
from .epilogue import activate, apply_affine
from .gemm_sm90_host import Sm90Host
from .mainloop import run_k_blocks
from .tile_schedule import cta_tile, cta_work, placed_rank

_DT = {"bf16": cutlass.BFloat16, "fp16": cutlass.Float16, "fp32": cutlass.Float32}


class Sm90Gemm(Sm90Host):
    """C[m, n, l] = epilogue(sum_k A[m, k, l] * B[n, k, l]) for one static configuration."""

    # Measurement probe only (benchmarks/gemm_epilogue_probe.py): True compiles a kernel that skips
    # the epilogue (C is not written, the accumulators stay live), to time the main loop alone.
    # Never set by the engine.
    probe_skip_epilogue = False

    def __init__(
        self, knobs: GemmKnobs, lay: KernelLayout, epi: KernelEpilogue, max_active_clusters: int = 132
    ):
        self.knobs, self.lay, self.epi = knobs, lay, epi
        self.ab_dtype = _DT[lay.ab_dtype]
        self.c_dtype = _DT[lay.c_dtype]
        self.acc_dtype = cutlass.Float32
        self.vec_dtype = _DT[epi.vec_dtype]
        self.res_dtype = _DT[epi.residual_dtype]
        self.aux_dtype = _DT[epi.aux_dtype]
        self.tile_mnk = (knobs.tile_m, knobs.tile_n, knobs.tile_k)
        self.split_k = knobs.split_k
        self.tail_split = knobs.tail_split
        self.has_split = knobs.split_k > 1 or knobs.tail_split > 1  # K slices reduced in the kernel
        self.cluster_mn = (knobs.cga_m, knobs.cga_n)
        self.pingpong = knobs.pingpong
        self.n_consumer_wg = 2 if knobs.pingpong or knobs.tile_m != 64 else 1
        # cooperative: the consumer warpgroups split each tile's rows; ping-pong: each owns whole tiles
        self.atom_mnk = (1, 1, 1) if knobs.pingpong else (self.n_consumer_wg, 1, 1)
        self.threads = 128 * (1 + self.n_consumer_wg)
        self.n_mma_threads = 128 if knobs.pingpong else 128 * self.n_consumer_wg  # threads per tile
        # staggered cooperative (knobs.stagger): the warpgroups share each tile but run k-blocks
        # apart, and each stores its own rows, so one's epilogue runs under the other's main loop
        self.stagger = knobs.stagger
        # the tile's bias along N staged in shared memory by a spare producer warp (knobs.bias_smem)
        self.bias_smem = bias_staged(knobs, epi)
        # bias / 2 staged and tanh-gelu run from half the pre-activation (knobs.gelu_half)
        self.gelu_half = gelu_from_half(knobs, epi)
        self.act = "gelu_approx_tanh_of_half" if self.gelu_half else epi.act
        own_rows = knobs.pingpong or knobs.stagger > 0  # each warpgroup stores through its own ring
        self.epi_threads = 128 if own_rows else self.n_mma_threads  # threads that store together
        self.epi_rings = 2 if own_rows else 1  # a store ring per warpgroup storing on its own
        self.ab_stage = pick_stages(knobs, lay, epi)
        # whole passes over the ring with constant slot indices (knobs.static_ring); wait_all's
        # release order is the runtime loop's only
        self.static_ring = knobs.static_ring and not knobs.wait_all
        if knobs.stagger >= self.ab_stage:
            # warpgroup 0 runs `stagger` k-blocks before warpgroup 1 releases any slot
            raise ValueError(f"stagger={knobs.stagger} needs more than {self.ab_stage} A/B stages")
        # Epilogue sub-tiles: each must hold one M-repeat of every thread's accumulator, so that a
        # sub-tile's values are one contiguous run of the retiled fragment: 128 rows when two
        # warpgroups share the tile (64 each), 64 when one warpgroup owns it.
        rows = 128 if self.n_consumer_wg == 2 and not own_rows else 64
        self.epi_tile = (min(rows, knobs.tile_m), min(knobs.epi_n, knobs.tile_n))
        self.epi_stages = epi_ring_depth(knobs)  # store-ring slots (per warpgroup in ping-pong)
        self.mcast_a = knobs.cga_n  # A tile shared by CTAs along N
        self.mcast_b = knobs.cga_m
        # the persistent grid: clusters of this shape that are resident at once (launch.resident_clusters)
        self.max_active_clusters = max_active_clusters
        row, col = LayoutEnum.ROW_MAJOR, LayoutEnum.COL_MAJOR
        self.a_layout = row if lay.a_major == "k" else col
        self.b_layout = row if lay.b_major == "k" else col
        self.c_layout = row if lay.c_major == "n" else col

    # ------------------------------------------------------------------ device side
    def _l2_policy(self, operand: int):
        """The L2 cache policy of operand 0 (A's loads), 1 (B's loads) or 2 (C's stores) under
        knobs.l2_hint (`config.l2_cache_hints`); None: no hint."""
        hint = l2_cache_hints(self.knobs)[operand]
        return None if const_expr(hint is None) else Int64(hint)

    @cute.kernel
    def kernel(
        self,
        tma_a: cute.CopyAtom,
        mA: cute.Tensor,
        tma_b: cute.CopyAtom,
        mB: cute.Tensor,
        tma_c: cute.CopyAtom,
        mC: cute.Tensor,
        tma_x: cute.CopyAtom,
        mX: cute.Tensor,
        mBiasM: cute.Tensor,
        mBiasN: cute.Tensor,
        mScaleM: cute.Tensor,
        mScaleN: cute.Tensor,
        mRes: cute.Tensor,
        mWs: cute.Tensor,
        mCnt: cute.Tensor,
        tiled_mma: cute.TiledMma,
        cta_layout_mnk: cute.Layout,
        sA_layout: cute.ComposedLayout,
        sB_layout: cute.ComposedLayout,
        sC_layout: cute.ComposedLayout,
        sX_layout: cute.ComposedLayout,
        rows: Int32,
        cols: Int32,
        n_units: Int32,
        whole: Int32,
        slices: Int32,
    ):
        epi = self.epi
        tidx, _, _ = cute.arch.thread_idx()
        warp_idx = cute.arch.make_warp_uniform(cute.arch.warp_idx())
        if warp_idx == 0:
            cute.nvgpu.cpasync.prefetch_descriptor(tma_a)
            cute.nvgpu.cpasync.prefetch_descriptor(tma_b)
            cute.nvgpu.cpasync.prefetch_descriptor(tma_c)
            if const_expr(epi.aux_out):
                cute.nvgpu.cpasync.prefetch_descriptor(tma_x)

        rank_in_cluster = cute.arch.make_warp_uniform(cute.arch.block_idx_in_cluster())
        cl_coord = cta_layout_mnk.get_flat_coord(rank_in_cluster)
        a_mask = cute.make_layout_image_mask(cta_layout_mnk, cl_coord, mode=1)
        b_mask = cute.make_layout_image_mask(cta_layout_mnk, cl_coord, mode=0)
        a_mask = a_mask if const_expr(self.mcast_a > 1) else 0
        b_mask = b_mask if const_expr(self.mcast_b > 1) else 0

        tx_bytes = cute.size_in_bytes(
            self.ab_dtype, cute.slice_(sA_layout, (None, None, 0))
        ) + cute.size_in_bytes(self.ab_dtype, cute.slice_(sB_layout, (None, None, 0)))

        smem = utils.SmemAllocator()
        storage = smem.allocate(self.shared_storage)
        # every consumer warp of every CTA that receives a multicast tile releases the slot
        n_release = (self.mcast_a + self.mcast_b - 1) * (self.n_mma_threads // 32)
        ab_pipe = pipeline.PipelineTmaAsync.create(
            barrier_storage=storage.mbar.data_ptr(),
            num_stages=self.ab_stage,
            producer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread),
            consumer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread, n_release),
            tx_count=tx_bytes,
            cta_layout_vmnk=cute.make_layout((1, *cta_layout_mnk.shape)),
            defer_sync=True,
        )
        if const_expr(self.bias_smem):
            # one producer warp fills a buffer per tile; every thread of the tile reads it, then releases
            bias_pipe = pipeline.PipelineAsync.create(
                barrier_storage=storage.bias_mbar.data_ptr(),
                num_stages=2,
                producer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread, 32),
                consumer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread, self.n_mma_threads),
                defer_sync=True,
            )
            sBias = storage.sBias.get_tensor(cute.make_layout((self.tile_mnk[1], 2)))
        pipeline_init_arrive(cluster_shape_mn=self.cluster_mn, is_relaxed=True)

        sA = storage.sA.get_tensor(sA_layout.outer, swizzle=sA_layout.inner)
        sB = storage.sB.get_tensor(sB_layout.outer, swizzle=sB_layout.inner)
        sC = storage.sC.get_tensor(sC_layout.outer, swizzle=sC_layout.inner)

        tile_mn = (self.tile_mnk[0], self.tile_mnk[1])
        gA = cute.local_tile(mA, (self.tile_mnk[0], self.tile_mnk[2]), (None, None, None))
        gB = cute.local_tile(mB, (self.tile_mnk[1], self.tile_mnk[2]), (None, None, None))
        gC = cute.local_tile(mC, tile_mn, (None, None, None))
        k_tiles = cute.size(gA, mode=[3])

        tAsA, tAgA = cute.nvgpu.cpasync.tma_partition(
            tma_a,
            cl_coord[1],
            cute.make_layout(cute.slice_(cta_layout_mnk, (0, None, 0)).shape),
            cute.group_modes(sA, 0, 2),
            cute.group_modes(gA, 0, 2),
        )
        tBsB, tBgB = cute.nvgpu.cpasync.tma_partition(
            tma_b,
            cl_coord[0],
            cute.make_layout(cute.slice_(cta_layout_mnk, (None, 0, 0)).shape),
            cute.group_modes(sB, 0, 2),
            cute.group_modes(gB, 0, 2),
        )

        wg_idx = cute.arch.make_warp_uniform(tidx // 128)
        # the persistent schedule (tile_schedule.py): this CTA's cluster runs units bidz, bidz + grid_z, ..
        bidx, bidy, bidz = cute.arch.block_idx()
        _, _, n_resident = cute.arch.grid_dim()
        first_unit = Int32(bidz)
        if const_expr(self.knobs.place_order):
            first_unit = placed_rank(first_unit, n_resident)
        cta_mn = (Int32(bidx), Int32(bidy))  # the CTA's place in its cluster (grid x, y = cluster shape)
        pipeline_init_wait(cluster_shape_mn=self.cluster_mn)

        if wg_idx == 0:
            # ------------------------------------------------ producer warpgroup
            cute.arch.setmaxregister_decrease(40)
            if warp_idx == 0:
                unit = first_unit
                prod = pipeline.make_pipeline_state(pipeline.PipelineUserType.Producer, self.ab_stage)
                policy_a, policy_b = self._l2_policy(0), self._l2_policy(1)
                flip = Int32(0)  # knobs.k_flip: 1 on every other tile, whose k-blocks run last to first
                while unit < n_units:
                    row, col, batch, kt0, n_kt, _, _, _ = cta_work(
                        self.knobs, unit, rows, cols, cta_mn, k_tiles, whole, slices
                    )
                    la = 0 if const_expr(self.lay.a_bcast) else batch
                    lb = 0 if const_expr(self.lay.b_bcast) else batch
                    tAg = tAgA[(None, row, None, la)]
                    tBg = tBgB[(None, col, None, lb)]
                    for kt in cutlass.range(n_kt, unroll=1):
                        k = kt0 + kt
                        if const_expr(self.knobs.k_flip):
                            k = k + flip * (n_kt - 1 - 2 * kt)
                        ab_pipe.producer_acquire(prod)
                        bar = ab_pipe.producer_get_barrier(prod)
                        cute.copy(
                            tma_a,
                            tAg[(None, k)],
                            tAsA[(None, prod.index)],
                            tma_bar_ptr=bar,
                            mcast_mask=a_mask,
                            cache_policy=policy_a,
                        )
                        cute.copy(
                            tma_b,
                            tBg[(None, k)],
                            tBsB[(None, prod.index)],
                            tma_bar_ptr=bar,
                            mcast_mask=b_mask,
                            cache_policy=policy_b,
                        )
                        ab_pipe.producer_commit(prod)
                        prod.advance()
                    unit = unit + n_resident
                    if const_expr(self.knobs.k_flip):
                        flip = 1 - flip
                ab_pipe.producer_tail(prod)
            if const_expr(self.bias_smem):
                if warp_idx == 1:
                    # the bias of each of the CTA's tiles, a tile ahead of the epilogue that reads it
                    lane = cute.arch.lane_idx()
                    n_max = cute.size(mBiasN) - 1
                    fill = pipeline.make_pipeline_state(pipeline.PipelineUserType.Producer, 2)
                    unit = first_unit
                    while unit < n_units:
                        n0 = (
                            cta_tile(self.knobs, unit, rows, cols, cta_mn)[1] * self.tile_mnk[1]
                        )  # no K slices here
                        bias_pipe.producer_acquire(fill)
                        for j in cutlass.range_constexpr(self.tile_mnk[1] // 32):
                            gn = cute.math.min(n0 + lane + 32 * j, n_max)
                            b = cutlass.Float32(mBiasN[gn])
                            if const_expr(self.gelu_half):
                                b = b * cutlass.Float32(0.5)
                            sBias[(lane + 32 * j, fill.index)] = b
                        bias_pipe.producer_commit(fill)
                        fill.advance()
                        unit = unit + n_resident
        else:
            # ------------------------------------------------ consumer (MMA + epilogue) warpgroups
            cute.arch.setmaxregister_increase(232)
            cwg = wg_idx - 1  # consumer warpgroup
            ctid = tidx - 128  # thread index among the threads that share a tile
            etid = ctid  # thread index among the threads that store together
            ring0 = 0  # this warpgroup's first slot in the epilogue store ring
            if const_expr(self.pingpong):
                ctid = tidx - 128 * wg_idx
                etid = ctid
                ring0 = cwg * self.epi_stages
            if const_expr(self.stagger > 0):
                etid = tidx - 128 * wg_idx
                ring0 = cwg * self.epi_stages
            # the tile's threads sync the epilogue on their own barrier (ids 1, 2); ping-pong's turn
            # on the tensor cores passes through barriers 3 + cwg (waited on by cwg, arrived at by
            # the other warpgroup)
            epi_barrier = pipeline.NamedBarrier(barrier_id=1, num_threads=self.epi_threads)
            if const_expr(self.pingpong or self.stagger > 0):
                epi_barrier = pipeline.NamedBarrier(barrier_id=1 + cwg, num_threads=self.epi_threads)
            wg_gap = None
            if const_expr(self.stagger > 0):
                # warpgroup 1 starts once warpgroup 0 has issued its first `stagger` k-blocks
                wg_gap = pipeline.NamedBarrier(barrier_id=5, num_threads=256)
            if const_expr(self.pingpong):
                my_turn = pipeline.NamedBarrier(barrier_id=3 + cwg, num_threads=256)
                their_turn = pipeline.NamedBarrier(barrier_id=4 - cwg, num_threads=256)
            thr_mma = tiled_mma.get_slice(ctid)
            # A and B are read from shared memory by the whole warpgroup (wgmma descriptors), so their
            # views depend on the warpgroup alone: slicing at its first thread, a warp-uniform index,
            # lets the descriptors live in uniform registers instead of being moved there per wgmma
            # (17% fewer instructions at 8192^3, kernels/NOTES.md v12)
            wg_first = 0 if const_expr(self.pingpong) else cwg * 128
            thr_mma_ab = tiled_mma.get_slice(wg_first)
            tCsA = thr_mma_ab.partition_A(sA)
            tCsB = thr_mma_ab.partition_B(sB)
            tCrA = tiled_mma.make_fragment_A(tCsA)
            tCrB = tiled_mma.make_fragment_B(tCsB)
            tCgC = thr_mma.partition_C(gC)
            acc = cute.make_rmem_tensor(tCgC.shape[:3], self.acc_dtype)
            tCcC = thr_mma.partition_C(cute.make_identity_tensor(tile_mn))

            # register -> smem copies for the epilogue (stmatrix for 16-bit outputs)
            stm_atom = cute.make_copy_atom(
                cute.nvgpu.warp.StMatrix8x8x16bOp(self.c_layout.is_m_major_c(), 4), self.c_dtype
            )
            epi_mma = tiled_mma
            if const_expr(self.stagger > 0):
                # one warpgroup's rows (one 64-row wgmma): its threads hold the same fragment as in
                # the two-warpgroup MMA, so the copy partitions it for the warpgroup alone
                epi_mma = sm90_utils.make_trivial_tiled_mma(
                    self.ab_dtype,
                    self.ab_dtype,
                    self.a_layout.sm90_mma_major_mode(),
                    self.b_layout.sm90_mma_major_mode(),
                    self.acc_dtype,
                    (1, 1, 1),
                    tiler_mn=(64, self.tile_mnk[1]),
                )
            tiled_copy_c_atom = cute.make_tiled_copy_C_atom(stm_atom, epi_mma)
            r2s_c = cute.make_tiled_copy_S(
                sm90_utils.sm90_get_smem_store_op(
                    self.c_layout, elem_ty_d=self.c_dtype, elem_ty_acc=self.acc_dtype
                ),
                tiled_copy_c_atom,
            )
            thr_r2s_c = r2s_c.get_slice(etid)
            tRS_sC = thr_r2s_c.partition_D(sC)
            tRS_acc = r2s_c.retile(acc)
            frag_shape = cute.shape(thr_r2s_c.partition_S(sC))[:3]
            tRS_r = cute.make_rmem_tensor(frag_shape, self.acc_dtype)
            tRS_rC = cute.make_rmem_tensor(frag_shape, self.c_dtype)
            frag_size = cute.size(tRS_r)
            if const_expr(epi.aux_out):
                sX = storage.sX.get_tensor(sX_layout.outer, swizzle=sX_layout.inner)
                r2s_x = cute.make_tiled_copy_S(
                    sm90_utils.sm90_get_smem_store_op(
                        self.c_layout, elem_ty_d=self.aux_dtype, elem_ty_acc=self.acc_dtype
                    ),
                    tiled_copy_c_atom,
                )
                tRS_sX = r2s_x.get_slice(etid).partition_D(sX)
                tRS_rX = cute.make_rmem_tensor(frag_shape, self.aux_dtype)

            store_pipe = pipeline.PipelineTmaStore.create(
                num_stages=self.epi_stages,
                producer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread, self.epi_threads),
            )
            policy_c = self._l2_policy(2)
            is_store_warp = warp_idx == 4
            if const_expr(self.pingpong or self.stagger > 0):
                is_store_warp = warp_idx == 4 + 4 * cwg
            m_max = mC.shape[0] - 1
            n_max = mC.shape[1] - 1

            unit = first_unit
            step = n_resident  # units between this warpgroup's tiles
            read = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, self.ab_stage)
            release = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, self.ab_stage)
            if const_expr(self.has_split):
                sFlag = storage.flag.get_tensor(cute.make_layout(4))
            if const_expr(self.bias_smem):
                bias_read = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, 2)
            epi_count = Int32(0)  # sub-tiles stored so far (split-K: only the tiles this CTA finished)
            tiles_done = Int32(0)  # tiles this warpgroup has run
            if const_expr(self.pingpong):
                # the CTA's tiles alternate between the warpgroups: warpgroup 1 starts at the second,
                # past the first tile's k-blocks in the ring (warpgroup 0 consumes those)
                step = 2 * n_resident
                if cwg == 1:
                    unit = unit + n_resident
                    for _ in cutlass.range(k_tiles, unroll=1):
                        read.advance()
                        release.advance()
            if const_expr(self.stagger > 0):
                if cwg == 1:
                    if unit < n_units:
                        wg_gap.arrive_and_wait()
            while unit < n_units:
                row, col, batch, _, n_kt, ks, n_slices, slot = cta_work(
                    self.knobs, unit, rows, cols, cta_mn, k_tiles, whole, slices
                )
                crd = (row, col)
                gap_at = cutlass.min(n_kt, self.stagger) - 1  # the k-block after which warpgroup 1 starts
                if const_expr(self.pingpong):
                    if cwg + tiles_done > 0:  # all but the CTA's first tile wait for their turn
                        my_turn.arrive_and_wait()
                # ---- main loop: keep one wgmma batch in flight, release the slot before it (or, with
                # wait_all, wait for this batch and release its own slot)
                acc.fill(0.0)
                tiled_mma.set(cute.nvgpu.warpgroup.Field.ACCUMULATE, True)
                cute.nvgpu.warpgroup.fence()
                read, release = run_k_blocks(
                    ab_pipe,
                    tiled_mma,
                    acc,
                    tCrA,
                    tCrB,
                    read,
                    release,
                    n_kt,
                    self.ab_stage,
                    self.static_ring,
                    self.knobs.wait_all,
                    wg_gap,
                    cwg,
                    tiles_done,
                    gap_at,
                )
                if const_expr(self.pingpong):
                    # every wgmma of this tile is issued: the tensor cores pass to the other warpgroup
                    # if the CTA has a next tile (then it is theirs, and so are its k-blocks)
                    if unit + n_resident < n_units:
                        their_turn.arrive()
                if const_expr(not self.knobs.wait_all):
                    cute.nvgpu.warpgroup.wait_group(0)
                    ab_pipe.consumer_release(release)
                    release.advance()
                if const_expr(self.pingpong):
                    for _ in cutlass.range(k_tiles, unroll=1):
                        read.advance()
                        release.advance()

                # ---- K slices (split-K, split tail): publish this slice's fp32 partial; the CTA of
                # the last slice to arrive reduces them
                do_epi = not self.probe_skip_epilogue
                if const_expr(self.tail_split > 1):
                    do_epi = cutlass.Boolean(do_epi)  # set again below, under a runtime branch
                if const_expr(self.probe_skip_epilogue):
                    # keep the accumulators (and so every wgmma) live: a store that finite data never takes
                    total = acc[0]
                    for i in cutlass.range_constexpr(1, cute.size(acc)):
                        total = total + acc[i]
                    if total != total:
                        mBiasN[0] = total.to(mBiasN.element_type)
                if const_expr(self.has_split):
                    if n_slices > 1:  # always under split-K; the tail's units under a split tail
                        n_frag = cute.size(acc)
                        tile_elems = self.tile_mnk[0] * self.tile_mnk[1]
                        frag = cute.make_layout(n_frag, stride=self.n_mma_threads)
                        # [slice][element][thread] per tile: each fragment element is one coalesced row
                        t_base = Int64(slot) * Int64(n_slices * tile_elems) + Int64(ctid)
                        ws_mine = cute.make_tensor(mWs.iterator + (t_base + Int64(ks) * tile_elems), frag)
                        for i in cutlass.range_constexpr(n_frag):
                            ws_mine[i] = acc[i]
                        cute.arch.fence_acq_rel_gpu()
                        epi_barrier.arrive_and_wait()
                        if ctid == 0:
                            sFlag[0] = cute.arch.atomic_add(
                                mCnt.iterator + slot, Int32(1), sem="acq_rel", scope="gpu"
                            )
                        epi_barrier.arrive_and_wait()
                        do_epi = sFlag[0] == n_slices - 1
                        if do_epi:
                            cute.arch.fence_acq_rel_gpu()
                            # sum the slices in slice order (deterministic, independent of arrival)
                            ws_first = cute.make_tensor(mWs.iterator + t_base, frag)
                            for i in cutlass.range_constexpr(n_frag):
                                acc[i] = ws_first[i]
                            for j in cutlass.range(1, n_slices, unroll=1):
                                ws_j = cute.make_tensor(mWs.iterator + (t_base + Int64(j) * tile_elems), frag)
                                for i in cutlass.range_constexpr(n_frag):
                                    acc[i] = acc[i] + ws_j[i]
                            if ctid == 0:
                                mCnt[slot] = Int32(0)  # leave the semaphore zeroed for the next launch

                bias_tile = None  # the global loads, unless the bias is staged in shared memory
                if const_expr(self.bias_smem):
                    bias_pipe.consumer_wait(bias_read)
                    bias_tile = sBias[(None, bias_read.index)]
                if do_epi:
                    # ---- epilogue, in registers
                    if const_expr(epi.has_affine):
                        apply_affine(
                            acc,
                            tCcC,
                            crd[0] * self.tile_mnk[0],
                            crd[1] * self.tile_mnk[1],
                            batch,
                            m_max,
                            n_max,
                            mBiasM,
                            mBiasN,
                            mScaleM,
                            mScaleN,
                            mRes,
                            epi,
                            bias_tile,
                            self.gelu_half,
                        )
                if const_expr(self.bias_smem):
                    bias_pipe.consumer_release(bias_read)
                    bias_read.advance()
                if do_epi:
                    gC_tile = cute.zipped_divide(gC[(None, None, crd[0], crd[1], batch)], self.epi_tile)
                    bSG_sC, bSG_gC = cute.nvgpu.cpasync.tma_partition(
                        tma_c, 0, cute.make_layout(1), cute.group_modes(sC, 0, 2), gC_tile
                    )
                    if const_expr(epi.aux_out):
                        gX = cute.local_tile(mX, tile_mn, (None, None, None))
                        gX_tile = cute.zipped_divide(gX[(None, None, crd[0], crd[1], batch)], self.epi_tile)
                        bSG_sX, bSG_gX = cute.nvgpu.cpasync.tma_partition(
                            tma_x, 0, cute.make_layout(1), cute.group_modes(sX, 0, 2), gX_tile
                        )
                    n_sub = cute.size(gC_tile, mode=[1])
                    sub_shape = gC_tile.shape[1]
                    sub_layout = cute.make_layout(sub_shape, stride=(sub_shape[1], 1))
                    if const_expr(self.stagger > 0):
                        n_sub = n_sub // 2  # the sub-tiles of this warpgroup's rows (64 per M-repeat)
                    done_before = epi_count
                    for s in cutlass.range_constexpr(n_sub):
                        for v in cutlass.range_constexpr(frag_size):
                            tRS_r[v] = tRS_acc[s * frag_size + v]
                        buf = ring0 + (done_before + s) % self.epi_stages
                        if const_expr(epi.aux_out):
                            tRS_rX.store(tRS_r.load().to(self.aux_dtype))
                            cute.copy(r2s_x, tRS_rX, tRS_sX[(None, None, None, buf)])
                        if const_expr(epi.act != "none"):
                            for v in cutlass.range_constexpr(frag_size):
                                tRS_r[v] = activate(tRS_r[v], self.act)
                        tRS_rC.store(tRS_r.load().to(self.c_dtype))
                        cute.copy(r2s_c, tRS_rC, tRS_sC[(None, None, None, buf)])
                        cute.arch.fence_proxy("async.shared", space="cta")
                        epi_barrier.arrive_and_wait()
                        gcrd = sub_layout.get_hier_coord(s)
                        if const_expr(self.stagger > 0):
                            # M-repeat r of this warpgroup's fragment is the tile's 64-row band 2r + cwg
                            gcrd = (cwg + 2 * (s // sub_shape[1]), s % sub_shape[1])
                        if is_store_warp:
                            cute.copy(
                                tma_c,
                                bSG_sC[(None, buf)],
                                bSG_gC[(None, gcrd)],
                                cache_policy=policy_c,
                            )
                            if const_expr(epi.aux_out):
                                cute.copy(tma_x, bSG_sX[(None, buf)], bSG_gX[(None, gcrd)])
                            store_pipe.producer_commit()
                            store_pipe.producer_acquire()
                        epi_barrier.arrive_and_wait()
                    epi_count = epi_count + n_sub

                tiles_done = tiles_done + 1
                unit = unit + step
            store_pipe.producer_tail()
