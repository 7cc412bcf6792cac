"""Persistent, warp-specialized SM90 GEMM in CuTe DSL with a fused epilogue.

Roles in a CTA (one CTA per SM, persistent over output tiles):
  * warpgroup 0, warp 0: producer (`_load_ab`). Walks the tile schedule and issues TMA loads of A
    and B k-blocks into a ring of ``stages`` shared-memory slots, each guarded by a full/empty
    mbarrier pair (PipelineTmaAsync). With a cluster, A is multicast along N and B along M.
  * warpgroup 0, warp 1: the bias stager (`_stage_bias`, where `config.bias_staged` holds): the
    bias of each of the CTA's tiles into shared memory, a tile ahead of the epilogue.
  * warpgroups 1..W: consumers (`_consume`). Per tile: the k-loop (`_mainloop`, over
    `mainloop.run_k_blocks`) into fp32 accumulators in registers, split-K's reduction
    (`split_k.reduce_slices`), then the epilogue (`store.Sm90Epilogue`): scale / bias / residual,
    activation, conversion, stmatrix into a small smem ring and TMA store to C (and the optional
    auxiliary pre-activation output). Cooperative (default): the consumer warpgroups share each
    tile, half its rows each. Ping-pong (``knobs.pingpong``): each owns alternate tiles and they
    take turns on the tensor cores, so one's epilogue runs under the other's main loop. Staggered
    (``knobs.stagger``): they share each tile but run k-blocks apart and store their own rows.
  * split-K (``knobs.split_k > 1``): K slices of a tile run on different CTAs; fp32 partials meet in
    a workspace and the last slice to arrive (per-tile semaphore) reduces them and runs the epilogue.

Which tile a CTA runs at each step is `tile_schedule`'s. Shapes and strides are runtime values: one
compiled kernel serves every M, N, K, L and leading dimension of its static layout (majorness,
dtypes, epilogue, knobs). This module holds the configuration and the device kernel; the host side
that builds the TMA atoms and launches it is `gemm_sm90_host.Sm90Host`.

CuTe DSL traces Python: the helpers the kernel calls (`cute.jit` ones included) are inlined at
trace time, so cutting the kernel into them left every compiled object of the suites byte-identical.
A runtime loop or branch carries only the names its own body assigns or calls methods on, so a
helper that advances a pipeline state under one returns it and the caller rebinds it.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import cutlass
import cutlass.cute as cute
import cutlass.pipeline as pipeline
import cutlass.utils as utils
from cutlass import Int32, const_expr
from cutlass.pipeline import pipeline_init_arrive, pipeline_init_wait
from cutlass.tensor_utils import LayoutEnum

from .config import (
    EPI_N,
    GemmKnobs,
    KernelEpilogue,
    KernelLayout,
    bias_staged,
    epi_ring_depth,
    gelu_from_half,
    pick_stages,
)
from .epilogue import apply_affine
from .gemm_sm90_host import Sm90Host
from .mainloop import run_k_blocks
from .split_k import reduce_slices
from .store import Sm90Epilogue
from .tile_schedule import cta_tile, cta_work, placed_rank

_DT = {"bf16": cutlass.BFloat16, "fp16": cutlass.Float16, "fp32": cutlass.Float32}


class _Work(NamedTuple):
    """A CTA's walk over the tile schedule (`tile_schedule`): its cluster runs units first_unit,
    first_unit + n_resident, ... below n_units."""

    first_unit: Any
    n_resident: Any  # clusters of the persistent grid
    n_units: Any
    rows: Any  # cluster rows and columns of the tile grid
    cols: Any
    cta_mn: tuple  # the CTA's place in its cluster
    k_tiles: Any  # k-blocks of a whole K


class _Load(NamedTuple):
    """One operand's TMA loads: the atom, the CTA's slot views of the ring and of the tiles in
    global memory, and the multicast mask of the CTAs of the cluster that share them."""

    atom: Any
    smem: Any
    gmem: Any
    mask: Any


class _Roles(NamedTuple):
    """A consumer thread's place: its warpgroup, its index among the threads of a tile (``ctid``)
    and among the threads that store together (``etid``), its first store-ring slot, and the named
    barriers it syncs on (ids 1, 2: the tile's epilogue; 3 + cwg: ping-pong's turn on the tensor
    cores, waited on by cwg and arrived at by the other; 5: the stagger's start)."""

    cwg: Any
    ctid: Any
    etid: Any
    ring0: Any
    epi_barrier: Any
    wg_gap: Any = None
    my_turn: Any = None
    their_turn: Any = None


class Sm90Gemm(Sm90Epilogue, Sm90Host):
    """C[m, n, l] = epilogue(sum_k A[m, k, l] * B[n, k, l]) for one static configuration."""

    def __init__(self, knobs: GemmKnobs, lay: KernelLayout, epi: KernelEpilogue, max_active_clusters: int):
        self.knobs, self.lay, self.epi = knobs, lay, epi
        self.ab_dtype = _DT[lay.ab_dtype]
        self.c_dtype = _DT[lay.c_dtype]
        self.acc_dtype = cutlass.Float32
        self.vec_dtype = _DT[epi.vec_dtype]
        self.res_dtype = _DT[epi.residual_dtype]
        self.aux_dtype = _DT[epi.aux_dtype]
        self.tile_mnk = (knobs.tile_m, knobs.tile_n, knobs.tile_k)
        self.split_k = knobs.split_k
        self.has_split = knobs.split_k > 1  # K slices reduced in the kernel
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
        # the tile's bias along N staged in shared memory by a spare producer warp (`bias_staged`)
        self.bias_staged = bias_staged(knobs, epi)
        # bias / 2 staged and tanh-gelu run from half the pre-activation (`gelu_from_half`)
        self.gelu_from_half = gelu_from_half(knobs, epi)
        self.act = "gelu_approx_tanh_of_half" if self.gelu_from_half else epi.act
        own_rows = knobs.pingpong or knobs.stagger > 0  # each warpgroup stores through its own ring
        self.epi_threads = 128 if own_rows else self.n_mma_threads  # threads that store together
        self.epi_rings = 2 if own_rows else 1  # a store ring per warpgroup storing on its own
        self.ab_stage = pick_stages(knobs, lay, epi)
        if knobs.stagger >= self.ab_stage:
            # warpgroup 0 runs `stagger` k-blocks before warpgroup 1 releases any slot
            raise ValueError(
                f"Sm90Gemm: stagger={knobs.stagger} needs more than the {self.ab_stage} A/B stages that fit"
            )
        # Epilogue sub-tiles: each must hold one M-repeat of every thread's accumulator, so that a
        # sub-tile's values are one contiguous run of the retiled fragment: 128 rows when two
        # warpgroups share the tile (64 each), 64 when one warpgroup owns it.
        rows = 128 if self.n_consumer_wg == 2 and not own_rows else 64
        self.epi_tile = (min(rows, knobs.tile_m), min(EPI_N, knobs.tile_n))
        self.epi_stages = epi_ring_depth(knobs)  # store-ring slots (per warpgroup in ping-pong)
        self.mcast_a = knobs.cga_n  # A tile shared by CTAs along N
        self.mcast_b = knobs.cga_m
        # the persistent grid: clusters of this shape resident at once on the card planned for
        # (compile_cache.resident_clusters, from the request's SM count); no default: no card assumed
        self.max_active_clusters = max_active_clusters
        row, col = LayoutEnum.ROW_MAJOR, LayoutEnum.COL_MAJOR
        self.a_layout = row if lay.a_major == "k" else col
        self.b_layout = row if lay.b_major == "k" else col
        self.c_layout = row if lay.c_major == "n" else col

    # ------------------------------------------------------------------ the CTA
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
    ):
        """Set up the CTA (descriptors, shared memory and its pipelines, the TMA views of A and B,
        the tile schedule) and run each warp's role."""
        tidx, _, _ = cute.arch.thread_idx()
        warp_idx = cute.arch.make_warp_uniform(cute.arch.warp_idx())
        if warp_idx == 0:
            cute.nvgpu.cpasync.prefetch_descriptor(tma_a)
            cute.nvgpu.cpasync.prefetch_descriptor(tma_b)
            cute.nvgpu.cpasync.prefetch_descriptor(tma_c)
            if const_expr(self.epi.aux_out):
                cute.nvgpu.cpasync.prefetch_descriptor(tma_x)

        rank_in_cluster = cute.arch.make_warp_uniform(cute.arch.block_idx_in_cluster())
        cl_coord = cta_layout_mnk.get_flat_coord(rank_in_cluster)
        a_mask = cute.make_layout_image_mask(cta_layout_mnk, cl_coord, mode=1)
        b_mask = cute.make_layout_image_mask(cta_layout_mnk, cl_coord, mode=0)
        a_mask = a_mask if const_expr(self.mcast_a > 1) else 0
        b_mask = b_mask if const_expr(self.mcast_b > 1) else 0

        storage, ab_pipe, bias_pipe, sBias = self._pipelines(cta_layout_mnk, sA_layout, sB_layout)
        sA = storage.sA.get_tensor(sA_layout.outer, swizzle=sA_layout.inner)
        sB = storage.sB.get_tensor(sB_layout.outer, swizzle=sB_layout.inner)
        sC = storage.sC.get_tensor(sC_layout.outer, swizzle=sC_layout.inner)

        gA = cute.local_tile(mA, (self.tile_mnk[0], self.tile_mnk[2]), (None, None, None))
        gB = cute.local_tile(mB, (self.tile_mnk[1], self.tile_mnk[2]), (None, None, None))
        gC = cute.local_tile(mC, self.tile_mnk[:2], (None, None, None))
        k_tiles = cute.size(gA, mode=[3])
        load_a = self._tma_load(tma_a, sA, gA, cl_coord[1], cute.slice_(cta_layout_mnk, (0, None, 0)), a_mask)
        load_b = self._tma_load(tma_b, sB, gB, cl_coord[0], cute.slice_(cta_layout_mnk, (None, 0, 0)), b_mask)

        wg_idx = cute.arch.make_warp_uniform(tidx // 128)
        work = self._work(n_units, rows, cols, k_tiles)
        pipeline_init_wait(cluster_shape_mn=self.cluster_mn)

        if wg_idx == 0:
            cute.arch.setmaxregister_decrease(40)
            if warp_idx == 0:
                self._load_ab(ab_pipe, load_a, load_b, work)
            if const_expr(self.bias_staged):
                if warp_idx == 1:
                    self._stage_bias(bias_pipe, sBias, mBiasN, work)
        else:
            cute.arch.setmaxregister_increase(232)
            roles = self._consumer_roles(tidx, wg_idx)
            self._consume(
                roles, warp_idx, ab_pipe, bias_pipe, sBias, storage, tiled_mma, sA, sB, sC, gC,
                tma_c, mC, tma_x, mX, sX_layout, (mBiasM, mBiasN, mScaleM, mScaleN, mRes), mWs, mCnt, work,
            )  # fmt: skip

    def _pipelines(self, cta_layout_mnk, sA_layout, sB_layout):
        """The CTA's shared memory and its pipelines: (storage, the A/B ring's full/empty barriers,
        the staged bias's and its two buffers, or None and None)."""
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
        bias_pipe, sBias = None, None
        if const_expr(self.bias_staged):
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
        return storage, ab_pipe, bias_pipe, sBias

    def _tma_load(self, atom, s, g, cl_rank, cl_line, mask) -> _Load:
        """An operand's TMA view: its ring ``s`` and tiles ``g`` partitioned for the CTA at
        ``cl_rank`` of the cluster line ``cl_line`` that shares them."""
        smem, gmem = cute.nvgpu.cpasync.tma_partition(
            atom,
            cl_rank,
            cute.make_layout(cl_line.shape),
            cute.group_modes(s, 0, 2),
            cute.group_modes(g, 0, 2),
        )
        return _Load(atom, smem, gmem, mask)

    def _work(self, n_units, rows, cols, k_tiles) -> _Work:
        """The CTA's walk: its cluster runs units bidz, bidz + grid_z, ... (renumbered GPC by GPC
        under knobs.place_order); grid x and y are the CTA's place in its cluster."""
        bidx, bidy, bidz = cute.arch.block_idx()
        _, _, n_resident = cute.arch.grid_dim()
        first_unit = Int32(bidz)
        if const_expr(self.knobs.place_order):
            first_unit = placed_rank(first_unit, n_resident)
        return _Work(first_unit, n_resident, n_units, rows, cols, (Int32(bidx), Int32(bidy)), k_tiles)

    # ------------------------------------------------------------------ the producer warpgroup
    @cute.jit
    def _load_ab(self, ab_pipe, a: _Load, b: _Load, work: _Work):
        """Warp 0: the A and B k-blocks of each of the CTA's tiles into the ring, in schedule order
        (under knobs.k_flip every other tile's last to first)."""
        unit = work.first_unit
        prod = pipeline.make_pipeline_state(pipeline.PipelineUserType.Producer, self.ab_stage)
        flip = Int32(0)  # knobs.k_flip: 1 on every other tile, whose k-blocks run last to first
        while unit < work.n_units:
            row, col, batch, kt0, n_kt, _, _, _ = cta_work(
                self.knobs, unit, work.rows, work.cols, work.cta_mn, work.k_tiles
            )
            la = 0 if const_expr(self.lay.a_bcast) else batch
            lb = 0 if const_expr(self.lay.b_bcast) else batch
            tAg = a.gmem[(None, row, None, la)]
            tBg = b.gmem[(None, col, None, lb)]
            for kt in cutlass.range(n_kt, unroll=1):
                k = kt0 + kt
                if const_expr(self.knobs.k_flip):
                    k = k + flip * (n_kt - 1 - 2 * kt)
                ab_pipe.producer_acquire(prod)
                bar = ab_pipe.producer_get_barrier(prod)
                cute.copy(
                    a.atom, tAg[(None, k)], a.smem[(None, prod.index)], tma_bar_ptr=bar, mcast_mask=a.mask
                )
                cute.copy(
                    b.atom, tBg[(None, k)], b.smem[(None, prod.index)], tma_bar_ptr=bar, mcast_mask=b.mask
                )
                ab_pipe.producer_commit(prod)
                prod.advance()
            unit = unit + work.n_resident
            if const_expr(self.knobs.k_flip):
                flip = 1 - flip
        ab_pipe.producer_tail(prod)

    @cute.jit
    def _stage_bias(self, bias_pipe, sBias, mBiasN, work: _Work):
        """Warp 1: the bias of each of the CTA's tiles (clamped to N, as fp32, halved under
        `gelu_from_half`) into one of two buffers, a tile ahead of the epilogue that reads it."""
        lane = cute.arch.lane_idx()
        n_max = cute.size(mBiasN) - 1
        fill = pipeline.make_pipeline_state(pipeline.PipelineUserType.Producer, 2)
        unit = work.first_unit
        while unit < work.n_units:
            n0 = cta_tile(self.knobs, unit, work.rows, work.cols, work.cta_mn)[1] * self.tile_mnk[1]
            bias_pipe.producer_acquire(fill)
            for j in cutlass.range_constexpr(self.tile_mnk[1] // 32):
                gn = cute.math.min(n0 + lane + 32 * j, n_max)
                b = cutlass.Float32(mBiasN[gn])
                if const_expr(self.gelu_from_half):
                    b = b * cutlass.Float32(0.5)
                sBias[(lane + 32 * j, fill.index)] = b
            bias_pipe.producer_commit(fill)
            fill.advance()
            unit = unit + work.n_resident

    # ------------------------------------------------------------------ the consumer warpgroups
    def _consumer_roles(self, tidx, wg_idx) -> _Roles:
        """This thread's `_Roles`: cooperative tiles are shared by all consumer threads, ping-pong
        tiles by one warpgroup; ping-pong and staggered warpgroups store their own rows through
        their own half of the store ring, on their own barrier."""
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
        epi_barrier = pipeline.NamedBarrier(barrier_id=1, num_threads=self.epi_threads)
        if const_expr(self.pingpong or self.stagger > 0):
            epi_barrier = pipeline.NamedBarrier(barrier_id=1 + cwg, num_threads=self.epi_threads)
        roles = _Roles(cwg, ctid, etid, ring0, epi_barrier)
        if const_expr(self.stagger > 0):
            # warpgroup 1 starts once warpgroup 0 has issued its first `stagger` k-blocks
            roles = roles._replace(wg_gap=pipeline.NamedBarrier(barrier_id=5, num_threads=256))
        if const_expr(self.pingpong):
            roles = roles._replace(
                my_turn=pipeline.NamedBarrier(barrier_id=3 + cwg, num_threads=256),
                their_turn=pipeline.NamedBarrier(barrier_id=4 - cwg, num_threads=256),
            )
        return roles

    def _mma_views(self, tiled_mma, sA, sB, gC, roles: _Roles):
        """(A's and B's wgmma views of the ring, the fp32 accumulators, their (m, n) coordinates in
        the tile). A and B are read from shared memory by the whole warpgroup (wgmma descriptors),
        so their views depend on the warpgroup alone: slicing at its first thread, a warp-uniform
        index, lets the descriptors live in uniform registers instead of being moved there per wgmma
        (8192^3 bf16 bias+gelu: 188.2 -> 156.7 M instructions)."""
        thr_mma = tiled_mma.get_slice(roles.ctid)
        wg_first = 0 if const_expr(self.pingpong) else roles.cwg * 128
        thr_mma_ab = tiled_mma.get_slice(wg_first)
        tCsA = thr_mma_ab.partition_A(sA)
        tCsB = thr_mma_ab.partition_B(sB)
        tCrA = tiled_mma.make_fragment_A(tCsA)
        tCrB = tiled_mma.make_fragment_B(tCsB)
        tCgC = thr_mma.partition_C(gC)
        acc = cute.make_rmem_tensor(tCgC.shape[:3], self.acc_dtype)
        tCcC = thr_mma.partition_C(cute.make_identity_tensor(self.tile_mnk[:2]))
        return tCrA, tCrB, acc, tCcC

    @cute.jit
    def _consume(
        self, roles: _Roles, warp_idx, ab_pipe, bias_pipe, sBias, storage, tiled_mma, sA, sB, sC, gC,
        tma_c, mC, tma_x, mX, sX_layout, operands, mWs, mCnt, work: _Work,
    ):  # fmt: skip
        """Each of this warpgroup's tiles: the k-loop, split-K's reduction, the epilogue's math
        (``operands``: bias along M and N, the scales, the residual) and its store."""
        epi = self.epi
        tCrA, tCrB, acc, tCcC = self._mma_views(tiled_mma, sA, sB, gC, roles)
        out = self._store_views(tiled_mma, roles, warp_idx, acc, storage, sC, sX_layout)
        m_max = mC.shape[0] - 1
        n_max = mC.shape[1] - 1

        unit = work.first_unit
        step = work.n_resident  # units between this warpgroup's tiles
        read = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, self.ab_stage)
        release = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, self.ab_stage)
        if const_expr(self.has_split):
            sFlag = storage.flag.get_tensor(cute.make_layout(4))
        if const_expr(self.bias_staged):
            bias_read = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, 2)
        epi_count = Int32(0)  # sub-tiles stored so far (split-K: only the tiles this CTA finished)
        tiles_done = Int32(0)  # tiles this warpgroup has run
        unit, step, read, release = self._first_tile(roles, work, unit, step, read, release)
        while unit < work.n_units:
            row, col, batch, _, n_kt, ks, n_slices, slot = cta_work(
                self.knobs, unit, work.rows, work.cols, work.cta_mn, work.k_tiles
            )
            read, release = self._mainloop(
                ab_pipe, tiled_mma, acc, tCrA, tCrB, read, release, n_kt, roles, tiles_done, unit, work
            )
            do_epi = True
            if const_expr(self.has_split):
                # publish this slice's fp32 partial; the CTA of the last slice to arrive reduces them
                do_epi = reduce_slices(
                    acc, mWs, mCnt, sFlag, slot, ks, n_slices, roles.ctid, self.n_mma_threads,
                    self.tile_mnk[0] * self.tile_mnk[1], roles.epi_barrier,
                )  # fmt: skip
            bias_tile = None  # the global loads, unless the bias is staged in shared memory
            if const_expr(self.bias_staged):
                bias_pipe.consumer_wait(bias_read)
                bias_tile = sBias[(None, bias_read.index)]
            if do_epi:
                if const_expr(epi.has_affine):
                    m0, n0 = row * self.tile_mnk[0], col * self.tile_mnk[1]
                    apply_affine(
                        acc, tCcC, m0, n0, batch, m_max, n_max, *operands, epi, bias_tile, self.gelu_from_half
                    )
            if const_expr(self.bias_staged):
                bias_pipe.consumer_release(bias_read)
                bias_read.advance()
            if do_epi:
                epi_count = self._store_tile(
                    out, roles, gC, sC, tma_c, tma_x, mX, (row, col), batch, epi_count
                )
            tiles_done = tiles_done + 1
            unit = unit + step
        out.pipe.producer_tail()

    @cute.jit
    def _first_tile(self, roles: _Roles, work: _Work, unit, step, read, release):
        """This warpgroup's (first unit, units between its tiles, read and release states of the A/B
        ring). Ping-pong: the CTA's tiles alternate between the warpgroups, so warpgroup 1 starts at
        the second, past the first tile's k-blocks in the ring (warpgroup 0 consumes those).
        Staggered: warpgroup 1 waits for warpgroup 0's first `stagger` k-blocks."""
        if const_expr(self.pingpong):
            step = 2 * work.n_resident
            if roles.cwg == 1:
                unit = unit + work.n_resident
                for _ in cutlass.range(work.k_tiles, unroll=1):
                    read.advance()
                    release.advance()
        if const_expr(self.stagger > 0):
            if roles.cwg == 1:
                if unit < work.n_units:
                    roles.wg_gap.arrive_and_wait()
        return unit, step, read, release

    @cute.jit
    def _mainloop(
        self, ab_pipe, tiled_mma, acc, tCrA, tCrB, read, release, n_kt, roles, tiles_done, unit, work
    ):
        """One tile's k-loop into ``acc`` (`mainloop.run_k_blocks`: one wgmma batch in flight, each
        slot released once the batch after it is issued), then the last batch waited for and its
        slot released; returns the advanced ``(read, release)``. Ping-pong: the warpgroup waits for
        its turn on the tensor cores, passes it on once its wgmma are issued, and skips the other
        warpgroup's tile in the ring."""
        gap_at = cutlass.min(n_kt, self.stagger) - 1  # the k-block after which warpgroup 1 starts
        if const_expr(self.pingpong):
            if roles.cwg + tiles_done > 0:  # all but the CTA's first tile wait for their turn
                roles.my_turn.arrive_and_wait()
        acc.fill(0.0)
        tiled_mma.set(cute.nvgpu.warpgroup.Field.ACCUMULATE, True)
        cute.nvgpu.warpgroup.fence()
        read, release = run_k_blocks(
            ab_pipe, tiled_mma, acc, tCrA, tCrB, read, release, n_kt, self.ab_stage, roles.wg_gap,
            roles.cwg, tiles_done, gap_at,
        )  # fmt: skip
        if const_expr(self.pingpong):
            # every wgmma of this tile is issued: the tensor cores pass to the other warpgroup if the
            # CTA has a next tile (then it is theirs, and so are its k-blocks)
            if unit + work.n_resident < work.n_units:
                roles.their_turn.arrive()
        cute.nvgpu.warpgroup.wait_group(0)
        ab_pipe.consumer_release(release)
        release.advance()
        if const_expr(self.pingpong):
            for _ in cutlass.range(work.k_tiles, unroll=1):
                read.advance()
                release.advance()
        return read, release
