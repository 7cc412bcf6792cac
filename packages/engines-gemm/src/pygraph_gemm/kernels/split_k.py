"""Split-K's reduction inside the SM90 GEMM: the K slices of a tile run on different CTAs, each
publishes its fp32 partial to the caller's workspace, and the CTA of the last slice to arrive (a
per-tile semaphore counts them) sums every slice and runs the tile's epilogue. The entry point that
takes the workspace and the semaphores is `gemm_sm90_split.Sm90GemmSplitK`; their sizes are
`config.workspace_bytes` and `config.semaphore_words`."""

from __future__ import annotations

import cutlass
import cutlass.cute as cute
from cutlass import Int32, Int64


@cute.jit
def reduce_slices(
    acc,  # this thread's fp32 accumulators of the tile; the sum of every slice on return (last slice)
    mWs,  # the workspace: [tile slot][slice][fragment element][thread] fp32 partials
    mCnt,  # one int32 semaphore per tile slot, zero at launch and left zero
    sFlag,  # a shared int32 that broadcasts the semaphore's old value to the tile's threads
    slot,  # the tile's slot in the workspace and the semaphores
    ks,  # this CTA's K slice of the tile
    n_slices,  # the tile's K slices (knobs.split_k)
    tid,  # this thread's index among the tile's threads
    n_threads,  # the tile's threads
    tile_elems,  # tile_m * tile_n
    barrier,  # the named barrier of the tile's threads
):
    """Publish this slice's partial and count it in; returns whether this CTA's slice came last, in
    which case ``acc`` holds the sum of every slice, in slice order (deterministic, independent of
    arrival), and the tile's semaphore is zero again for the next launch."""
    n_frag = cute.size(acc)
    frag = cute.make_layout(n_frag, stride=n_threads)
    # [slice][element][thread] per tile: each fragment element is one coalesced row
    t_base = Int64(slot) * Int64(n_slices * tile_elems) + Int64(tid)
    ws_mine = cute.make_tensor(mWs.iterator + (t_base + Int64(ks) * tile_elems), frag)
    for i in cutlass.range_constexpr(n_frag):
        ws_mine[i] = acc[i]
    cute.arch.fence_acq_rel_gpu()
    barrier.arrive_and_wait()
    if tid == 0:
        sFlag[0] = cute.arch.atomic_add(mCnt.iterator + slot, Int32(1), sem="acq_rel", scope="gpu")
    barrier.arrive_and_wait()
    last = sFlag[0] == n_slices - 1
    if last:
        cute.arch.fence_acq_rel_gpu()
        ws_first = cute.make_tensor(mWs.iterator + t_base, frag)
        for i in cutlass.range_constexpr(n_frag):
            acc[i] = ws_first[i]
        for j in cutlass.range(1, n_slices, unroll=1):
            ws_j = cute.make_tensor(mWs.iterator + (t_base + Int64(j) * tile_elems), frag)
            for i in cutlass.range_constexpr(n_frag):
                acc[i] = acc[i] + ws_j[i]
        if tid == 0:
            mCnt[slot] = Int32(0)  # leave the semaphore zeroed for the next launch
    return last
