"""Host side of the SM90 GEMM (`gemm_sm90.Sm90Gemm`), traced once inside each compiled entry point:
global tensor views in the kernel frame, the TMA atoms, the epilogue's operand views, the persistent
tile schedule's extent (and split-K's semaphores and workspace), the CTA's shared-memory
struct, and the launch of ``self.kernel``."""

from __future__ import annotations

import cutlass
import cutlass.cute as cute
import cutlass.utils.hopper_helpers as sm90_utils
from cutlass import const_expr

from .entry import GemmEntry, HostArgs
from .tile_schedule import schedule_extent


def _shared_storage(self, sA_layout, sB_layout, sC_layout, sX_layout):
    """The CTA's shared-memory struct (plain Python, called while tracing; annotations built
    explicitly because this module uses postponed annotations)."""
    R, A = cute.struct.MemRange, cute.struct.Align
    fields = {"mbar": R[cutlass.Int64, self.ab_stage * 2]}
    if self.has_split:
        fields["flag"] = R[cutlass.Int32, 4]  # split-K: the semaphore's old value, broadcast
    if self.bias_staged:
        fields["bias_mbar"] = R[cutlass.Int64, 4]  # full and empty barriers of the two bias buffers
        fields["sBias"] = A[R[cutlass.Float32, 2 * self.tile_mnk[1]], 16]
    fields["sA"] = A[R[self.ab_dtype, cute.cosize(sA_layout)], 1024]
    fields["sB"] = A[R[self.ab_dtype, cute.cosize(sB_layout)], 1024]
    fields["sC"] = A[R[self.c_dtype, cute.cosize(sC_layout)], 1024]
    if self.epi.aux_out:
        fields["sX"] = A[R[self.aux_dtype, cute.cosize(sX_layout)], 1024]
    return cute.struct(type("SharedStorage", (), {"__annotations__": fields}))


class Sm90Host(GemmEntry):
    """The host half of ``Sm90Gemm``: it reads the configuration ``Sm90Gemm.__init__`` derives
    (tile, stages, rings, cluster, layouts, epilogue) and launches its ``kernel``."""

    def _host(self, args: HostArgs):
        """Host-side body of every entry point (`entry.GemmEntry`, the split one; traced inside them)."""
        epi = self.epi
        mA, mB, mC = self._tensors(args)
        a_layout, b_layout, c_layout = self.a_layout, self.b_layout, self.c_layout

        tiled_mma = sm90_utils.make_trivial_tiled_mma(
            self.ab_dtype,
            self.ab_dtype,
            a_layout.sm90_mma_major_mode(),
            b_layout.sm90_mma_major_mode(),
            self.acc_dtype,
            self.atom_mnk,
            tiler_mn=(64, self.tile_mnk[1]),
        )
        cta_layout_mnk = cute.make_layout((*self.cluster_mn, 1))
        sA_layout = sm90_utils.make_smem_layout_a(a_layout, self.tile_mnk, self.ab_dtype, self.ab_stage)
        sB_layout = sm90_utils.make_smem_layout_b(b_layout, self.tile_mnk, self.ab_dtype, self.ab_stage)
        epi_stages = self.epi_stages * self.epi_rings
        sC_layout = sm90_utils.make_smem_layout_epi(self.c_dtype, c_layout, self.epi_tile, epi_stages)
        sX_layout = sC_layout
        if const_expr(epi.aux_out):
            sX_layout = sm90_utils.make_smem_layout_epi(self.aux_dtype, c_layout, self.epi_tile, epi_stages)

        def g2s_atom(mT, s_layout, tile, mcast):
            op = cute.nvgpu.cpasync.CopyBulkTensorTileG2SOp()
            if const_expr(mcast > 1):
                op = cute.nvgpu.cpasync.CopyBulkTensorTileG2SMulticastOp()
            return cute.nvgpu.cpasync.make_tiled_tma_atom(
                op, mT, cute.slice_(s_layout, (None, None, 0)), tile, num_multicast=mcast
            )

        tma_a, tA = g2s_atom(mA, sA_layout, (self.tile_mnk[0], self.tile_mnk[2]), self.mcast_a)
        tma_b, tB = g2s_atom(mB, sB_layout, (self.tile_mnk[1], self.tile_mnk[2]), self.mcast_b)
        tma_c, tC = cute.nvgpu.cpasync.make_tiled_tma_atom(
            cute.nvgpu.cpasync.CopyBulkTensorTileS2GOp(),
            mC,
            cute.slice_(sC_layout, (None, None, 0)),
            self.epi_tile,
        )
        tma_x, tX = tma_c, tC
        if const_expr(epi.aux_out):
            mX = self._aux(args)
            tma_x, tX = cute.nvgpu.cpasync.make_tiled_tma_atom(
                cute.nvgpu.cpasync.CopyBulkTensorTileS2GOp(),
                mX,
                cute.slice_(sX_layout, (None, None, 0)),
                self.epi_tile,
            )

        mBiasM, mBiasN, mScaleM, mScaleN, mRes = self._epilogue_tensors(args)

        # persistent tile schedule over the output tiles
        gc = cute.zipped_divide(mC, tiler=self.tile_mnk[:2])
        n_tiles_mnl = gc[(0, (None, None, None))].shape
        # split-K: the K slices ride on the L mode of the schedule (tile l * S + slice); the
        # workspace holds S fp32 partial tiles per (cluster-padded) tile; sem_ptr one int32
        # semaphore per tile (zero at launch, left zero)
        mWs, mCnt = mRes, mRes  # unused placeholders when split_k == 1
        if const_expr(self.split_k > 1):
            n_tiles_mnl = (n_tiles_mnl[0], n_tiles_mnl[1], n_tiles_mnl[2] * self.split_k)
        rows, cols, n_units, n_resident = schedule_extent(
            n_tiles_mnl, self.cluster_mn, self.max_active_clusters
        )
        cluster_size = self.cluster_mn[0] * self.cluster_mn[1]
        if const_expr(self.split_k > 1):
            # one semaphore per cluster-padded tile: units / S clusters of cluster_m x cluster_n tiles
            n_sem = n_units // self.split_k * cluster_size
            mCnt = cute.make_tensor(args.sem_ptr, cute.make_layout(n_sem))
            mWs = cute.make_tensor(args.ws_ptr, cute.make_layout(1))
        grid = (*self.cluster_mn, n_resident)

        self.shared_storage = _shared_storage(self, sA_layout, sB_layout, sC_layout, sX_layout)

        self.kernel(
            tma_a,
            tA,
            tma_b,
            tB,
            tma_c,
            tC,
            tma_x,
            tX,
            mBiasM,
            mBiasN,
            mScaleM,
            mScaleN,
            mRes,
            mWs,
            mCnt,
            tiled_mma,
            cta_layout_mnk,
            sA_layout,
            sB_layout,
            sC_layout,
            sX_layout,
            rows,
            cols,
            n_units,
        ).launch(
            grid=grid,
            block=[self.threads, 1, 1],
            cluster=(*self.cluster_mn, 1),
            min_blocks_per_mp=1,
            stream=args.stream,
        )
