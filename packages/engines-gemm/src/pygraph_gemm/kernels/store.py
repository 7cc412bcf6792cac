"""The SM90 GEMM's epilogue store: each tile's fp32 accumulators, after the epilogue math
(`epilogue.apply_affine`), leave the registers sub-tile by sub-tile through a small shared-memory
ring (stmatrix for 16-bit outputs) and a TMA store to C, with the optional pre-activation output
beside it.

A mixin of `gemm_sm90.Sm90Gemm`: it reads the configuration ``Sm90Gemm.__init__`` derives (dtypes,
layouts, the epilogue's sub-tile, ring depth and activation, the stagger).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import cutlass
import cutlass.cute as cute
import cutlass.pipeline as pipeline
import cutlass.utils.hopper_helpers as sm90_utils
from cutlass import const_expr

from .epilogue import activate


class StoreViews(NamedTuple):
    """A consumer thread's side of the store path: the register -> shared copies of C (and of the
    aux output) with their ring views and register fragments, the accumulators retiled for them,
    the TMA store ring and whether this thread's warp issues the stores."""

    r2s_c: Any
    tRS_sC: Any
    tRS_acc: Any
    tRS_r: Any  # one sub-tile's fp32 values
    tRS_rC: Any  # the same in C's dtype
    frag_size: int
    sX: Any = None  # the aux output's ring, copy, view and fragment (aux_out only)
    r2s_x: Any = None
    tRS_sX: Any = None
    tRS_rX: Any = None
    pipe: Any = None
    is_store_warp: Any = None


class Sm90Epilogue:
    """The store half of ``Sm90Gemm``'s epilogue (see the module docstring)."""

    def _store_views(self, tiled_mma, roles, warp_idx, acc, storage, sC, sX_layout) -> StoreViews:
        """The store path of the thread of ``roles`` for the accumulators ``acc``."""
        stm_atom = cute.make_copy_atom(
            cute.nvgpu.warp.StMatrix8x8x16bOp(self.c_layout.is_m_major_c(), 4), self.c_dtype
        )
        epi_mma = tiled_mma
        if const_expr(self.stagger > 0):
            # one warpgroup's rows (one 64-row wgmma): its threads hold the same fragment as in the
            # two-warpgroup MMA, so the copy partitions it for the warpgroup alone
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
        thr_r2s_c = r2s_c.get_slice(roles.etid)
        tRS_sC = thr_r2s_c.partition_D(sC)
        tRS_acc = r2s_c.retile(acc)
        frag_shape = cute.shape(thr_r2s_c.partition_S(sC))[:3]
        tRS_r = cute.make_rmem_tensor(frag_shape, self.acc_dtype)
        views = StoreViews(
            r2s_c, tRS_sC, tRS_acc, tRS_r, cute.make_rmem_tensor(frag_shape, self.c_dtype), cute.size(tRS_r)
        )
        if const_expr(self.epi.aux_out):
            sX = storage.sX.get_tensor(sX_layout.outer, swizzle=sX_layout.inner)
            r2s_x = cute.make_tiled_copy_S(
                sm90_utils.sm90_get_smem_store_op(
                    self.c_layout, elem_ty_d=self.aux_dtype, elem_ty_acc=self.acc_dtype
                ),
                tiled_copy_c_atom,
            )
            views = views._replace(
                sX=sX,
                r2s_x=r2s_x,
                tRS_sX=r2s_x.get_slice(roles.etid).partition_D(sX),
                tRS_rX=cute.make_rmem_tensor(frag_shape, self.aux_dtype),
            )
        store_pipe = pipeline.PipelineTmaStore.create(
            num_stages=self.epi_stages,
            producer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread, self.epi_threads),
        )
        is_store_warp = warp_idx == 4
        if const_expr(self.pingpong or self.stagger > 0):
            is_store_warp = warp_idx == 4 + 4 * roles.cwg
        return views._replace(pipe=store_pipe, is_store_warp=is_store_warp)

    @cute.jit
    def _store_tile(self, views: StoreViews, roles, gC, sC, tma_c, tma_x, mX, crd, batch, epi_count):
        """Store tile ``crd`` of batch ``batch`` (its accumulators hold the epilogue's pre-activation)
        sub-tile by sub-tile: activation, conversion, stmatrix into the next ring slot, then one warp
        issues the slot's TMA store; returns ``epi_count`` plus the sub-tiles stored (the ring's
        position). A staggered warpgroup stores its own 64-row bands only."""
        epi = self.epi
        # unpacked: the runtime branch below carries the names it calls methods on (the pipe, not
        # the whole record)
        r2s_c, tRS_sC, tRS_acc, tRS_r, tRS_rC, frag_size = views[:6]
        r2s_x, tRS_sX, tRS_rX = views.r2s_x, views.tRS_sX, views.tRS_rX
        store_pipe, is_store_warp = views.pipe, views.is_store_warp
        epi_barrier, cwg = roles.epi_barrier, roles.cwg
        gC_tile = cute.zipped_divide(gC[(None, None, crd[0], crd[1], batch)], self.epi_tile)
        bSG_sC, bSG_gC = cute.nvgpu.cpasync.tma_partition(
            tma_c, 0, cute.make_layout(1), cute.group_modes(sC, 0, 2), gC_tile
        )
        if const_expr(epi.aux_out):
            gX = cute.local_tile(mX, self.tile_mnk[:2], (None, None, None))
            gX_tile = cute.zipped_divide(gX[(None, None, crd[0], crd[1], batch)], self.epi_tile)
            bSG_sX, bSG_gX = cute.nvgpu.cpasync.tma_partition(
                tma_x, 0, cute.make_layout(1), cute.group_modes(views.sX, 0, 2), gX_tile
            )
        n_sub = cute.size(gC_tile, mode=[1])
        sub_shape = gC_tile.shape[1]
        sub_layout = cute.make_layout(sub_shape, stride=(sub_shape[1], 1))
        if const_expr(self.stagger > 0):
            n_sub = n_sub // 2  # the sub-tiles of this warpgroup's rows (64 per M-repeat)
        for s in cutlass.range_constexpr(n_sub):
            for v in cutlass.range_constexpr(frag_size):
                tRS_r[v] = tRS_acc[s * frag_size + v]
            buf = roles.ring0 + (epi_count + s) % self.epi_stages
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
                cute.copy(tma_c, bSG_sC[(None, buf)], bSG_gC[(None, gcrd)])
                if const_expr(epi.aux_out):
                    cute.copy(tma_x, bSG_sX[(None, buf)], bSG_gX[(None, gcrd)])
                store_pipe.producer_commit()
                store_pipe.producer_acquire()
            epi_barrier.arrive_and_wait()
        return epi_count + n_sub
