"""The CuTe DSL building blocks of the sm90 kernels, gdn's and kda's (`gdn.sm90_fwd`, `gdn.sm90_bwd`,
`kda.sm90_fwd`, `kda.sm90_bwd`): the shared ones of `pygraph.engines.cute_tiles` (swizzled row-major
tiles, 16-byte copies with row predicates, warpgroup MMAs) at these kernels' 128 threads, and the
family's own: warp-level (mma.sync) products over shared operands, accumulator moves, the chunk-slot
search, the WY inverse's forward substitution, and the backward's row and column sums. Trace-time
helpers take everything explicitly.

`cute_tiles.acc` is re-exported as `zeroed_acc`: the kernels name their accumulators ``acc``.
"""

from __future__ import annotations

import cutlass
import cutlass.cute as cute
from cutlass import Float32, Int32, const_expr

from pygraph.engines.cute_tiles import (
    VEC,
    g2s_copy,
    load_rows,
    row_major,
    s2g_copy,
    store_rows,
    transposed,
    wg_gemm,
    wg_mma,
)
from pygraph.engines.cute_tiles import acc as zeroed_acc
from pygraph_linear_attention.common.host import CHUNK  # 64 tokens, as the cuTile kernels

__all__ = [
    "CHUNK", "DTYPES", "INVERSE_STRIDE", "MERGE_STRIDE", "THREADS", "VEC", "acc_to_gmem", "acc_to_smem",
    "acc_to_smem_packed", "aliased_smem_tiles", "aligned_stride", "async_visible", "block_sum", "blocked_inverse", "chunk_rows", "col_sums_sub", "cta_g2s", "cta_s2g", "fast_exp",
    "gamma_row", "grad_rows_to_gmem", "l2_normalize_rows", "load_chunk", "load_rows", "matmul", "row_inv_norms",
    "row_major", "row_pair", "row_sums", "scale_row_pair", "scaled_rows", "slot_chunk", "smem_gemm", "smem_tile", "smem_vector",
    "store_rows", "tail_decay", "trans", "transposed", "warp_mma", "wg_gemm", "wg_mma", "wy_rows_to_gmem",
    "zero_vector", "zeroed_acc",
]  # fmt: skip

THREADS = 128
DTYPES = {"bfloat16": cutlass.BFloat16, "float16": cutlass.Float16, "float32": cutlass.Float32}


def cta_g2s(dtype, cols: int):
    """The CTA's 128 threads x 16-byte cp.async over a row-major tile (`cute_tiles.g2s_copy`)."""
    return g2s_copy(dtype, cols, THREADS)


def cta_s2g(dtype, cols: int):
    """The CTA's 128 threads x 16-byte stores over a row-major tile (`cute_tiles.s2g_copy`)."""
    return s2g_copy(dtype, cols, THREADS)


_LOG2E = 1.4426950408889634


def fast_exp(x):
    return cute.math.exp2(x * _LOG2E, fastmath=True)


def aligned_stride(stride):
    """A row stride the 16-byte copies may rely on (the engine checks it: head dims are multiples of 8)."""
    return cute.assume(stride, divby=VEC)


def warp_mma(dtype, m: int, n: int):
    """4 warps over an (m, n) product: m / 16 of them along M (at most 4), the rest along N; each warp
    takes two n8 atoms side by side, so one x4 ldmatrix feeds its B."""
    wm = min(4, m // 16)
    wn = THREADS // 32 // wm
    return cute.make_tiled_mma(
        cute.nvgpu.warp.MmaF16BF16Op(dtype, Float32, (16, 8, 16)),
        cute.make_layout((wm, wn, 1)),
        permutation_mnk=(wm * 16, wn * 16, 16),
    )


def async_visible():
    """This thread's shared-memory writes (stores, completed cp.async) visible to wgmma's reads
    (the async proxy); a barrier after it makes every thread's so."""
    cute.arch.fence_proxy("async.shared", space="cta")


def row_pair(crd):
    """The two rows a thread's fragment of a 64-row wgmma accumulator holds (each warp 16 rows, a
    lane rows l/4 and l/4 + 8), from its coordinates: a per-row value is then computed twice per
    thread instead of once per element."""
    return crd[0][0], crd[cute.size(crd) - 1][0]


@cute.jit
def scale_row_pair(acc, crd, row_a, a, b):
    """``acc`` (a 64-row wgmma accumulator, coordinates ``crd``) scaled per row, in place: by ``a``
    on row ``row_a`` and by ``b`` on the thread's other row (`row_pair`)."""
    for i in cutlass.range_constexpr(cute.size(acc)):
        s = b
        if crd[i][0] == row_a:
            s = a
        acc[i] = acc[i] * s


@cute.jit
def tail_decay(row, rows_left, last, sGamma):
    """exp(last - gamma[row]) for a row before ``rows_left``, else 0 (a row past the sequence)."""
    t = Float32(0.0)
    if row < rows_left:
        t = fast_exp(last - sGamma[row])
    return t


def chunk_rows(m, r0, head, width: int, block: int = 0):
    """The (CHUNK, width) tile of ``m`` [T, heads, dim] from token ``r0``, head ``head``, column block
    ``block`` (rows past the sequence are the caller's to predicate)."""
    return cute.local_tile(cute.domain_offset((r0, 0), m[None, head, None]), (CHUNK, width), (0, block))


def load_chunk(g2s_k, g2s_v, tidx, tiles, r0, rows_left, buffers, buf, with_q=True, u_rows=None):
    """cp.async the chunk of rows from ``r0`` of q (unless not ``with_q``), k (head hk), w and u (head
    h, value block vb) into stage ``buf`` of the shared buffers, rows at or past ``rows_left``
    (u's: ``u_rows``, where given) zero-filled (no commit)."""
    mQ, mK, mW, mU, hk, h, vb, K, BV = tiles
    sQ, sK, sW, sU = buffers

    if with_q:
        load_rows(g2s_k, tidx, chunk_rows(mQ, r0, hk, K), sQ[None, None, buf], rows_left)
    load_rows(g2s_k, tidx, chunk_rows(mK, r0, hk, K), sK[None, None, buf], rows_left)
    load_rows(g2s_k, tidx, chunk_rows(mW, r0, h, K), sW[None, None, buf], rows_left)
    load_rows(
        g2s_v,
        tidx,
        chunk_rows(mU, r0, h, BV, vb),
        sU[None, None, buf],
        rows_left if u_rows is None else u_rows,
    )


@cute.jit
def slot_chunk(mCu, slot, sequences, search_steps, size: cutlass.Constexpr = CHUNK):
    """(first token, length, chunk) of the sequence whose chunk slots hold ``slot``: the last n with
    cu[n] // size + n <= slot (binary search); the chunk may lie past the sequence's end (idle slot).
    ``size``: the tokens a slot covers (a chunk; a segment of chunks for the segmented scan, whose
    slots are laid out the same way: ``T // size + N + 1`` of them hold any lengths)."""
    lo = Int32(0)
    hi = sequences
    for _ in cutlass.range(search_steps, unroll=1):
        mid = (lo + hi) // 2
        take = Int32(Int32(mCu[mid]) // size + mid <= slot)
        lo = lo + take * (mid - lo)
        hi = hi + (1 - take) * (mid - hi)
    bos = Int32(mCu[lo])
    length = Int32(mCu[lo + 1]) - bos
    return bos, length, slot - (bos // size + lo)


@cute.jit
def t_column(sA, tidx, mT, slot, h, store_t: cutlass.Constexpr, io: cutlass.Constexpr):
    """Column ``tidx`` % 64 of the chunk's T (rows ``tidx`` // 64, + 2, ...) from ``sA`` into registers,
    and with ``store_t`` into chunk slot ``slot`` of ``mT`` (the backward reads it): the prepares' read
    of the inverse before its scaled copies overwrite it."""
    tcol = tidx % CHUNK
    col = cute.make_rmem_tensor((CHUNK // 2,), Float32)
    for e in cutlass.range_constexpr(CHUNK // 2):
        col[e] = sA[tidx // CHUNK + 2 * e, tcol]
    if const_expr(store_t):
        for e in cutlass.range_constexpr(CHUNK // 2):
            mT[slot, h, tidx // CHUNK + 2 * e, tcol] = col[e].to(io)
    return col


@cute.jit
def segment_span(mCu, slot, sequences, search_steps, segment: cutlass.Constexpr):
    """Segment slot ``slot`` of the segmented scans (``segment`` chunks a segment): (sequence n, its
    first token, its length, the segment's index in it, the segment's first chunk, the chunk past its
    last, whether it is the sequence's last, whether it starts inside the sequence)."""
    tokens_per = CHUNK * segment
    bos, length, seg = slot_chunk(mCu, slot, sequences, search_steps, tokens_per)
    n = slot - bos // tokens_per - seg
    c_begin = seg * segment
    c_end = cute.ceil_div(length, CHUNK)
    if c_end > c_begin + segment:
        c_end = c_begin + segment
    is_last = Int32((seg + 1) * tokens_per >= length)
    starts = Int32(seg * tokens_per < length)
    return n, bos, length, seg, c_begin, c_end, is_last, starts


@cute.jit
def gamma_row(mGamma, r0, rows_left, h, tidx):
    """gamma of the chunk's row ``tidx`` (from token ``r0``, head ``h``); 0 at or past ``rows_left``."""
    gam = Float32(0.0)
    if tidx < rows_left:
        gam = Float32(mGamma[r0 + tidx, h])
    return gam


def smem_gemm(tiled_mma, tidx, acc, sA, sB, a_mn_major: bool, b_mn_major: bool, dtype):
    """acc += sA (M, K) @ sB (N, K)^T, operands from shared memory by ldmatrix (transposed for an
    operand whose M / N mode is the contiguous one)."""
    thr = tiled_mma.get_slice(tidx)
    rA = tiled_mma.make_fragment_A(thr.partition_A(sA))
    rB = tiled_mma.make_fragment_B(thr.partition_B(sB))
    cp_a = cute.make_tiled_copy_A(
        cute.make_copy_atom(cute.nvgpu.warp.LdMatrix8x8x16bOp(a_mn_major, 4), dtype), tiled_mma
    )
    cp_b = cute.make_tiled_copy_B(
        cute.make_copy_atom(cute.nvgpu.warp.LdMatrix8x8x16bOp(b_mn_major, 4), dtype), tiled_mma
    )
    ta, tb = cp_a.get_slice(tidx), cp_b.get_slice(tidx)
    src_a, dst_a = ta.partition_S(sA), ta.retile(rA)
    src_b, dst_b = tb.partition_S(sB), tb.retile(rB)
    for kb in range(cute.size(rA, mode=[2])):
        cute.copy(cp_a, src_a[None, None, kb], dst_a[None, None, kb])
        cute.copy(cp_b, src_b[None, None, kb], dst_b[None, None, kb])
        cute.gemm(tiled_mma, acc, rA[None, None, kb], rB[None, None, kb], acc)


def acc_to_smem(tiled_mma, tidx, acc, s_tile, dtype):
    """The accumulator, converted to ``dtype``, into the shared tile of its shape."""
    dst = tiled_mma.get_slice(tidx).partition_C(s_tile)
    for i in range(cute.size(acc)):
        dst[i] = acc[i].to(dtype)


def acc_to_smem_packed(tiled_mma, tidx, acc, s_tile, dtype):
    """`acc_to_smem` through a converted register copy and `cute.autovec_copy`: the pairs of adjacent
    columns an MMA accumulator holds leave as one 32-bit store each instead of two 16-bit ones."""
    dst = tiled_mma.get_slice(tidx).partition_C(s_tile)
    frag = cute.make_rmem_tensor_like(acc, dtype)
    frag.store(acc.load().to(dtype))
    cute.autovec_copy(frag, dst)


@cute.jit
def acc_to_gmem(tiled_mma, tidx, acc, crd, g_tile, rows_left, dtype: cutlass.Constexpr):
    """The accumulator, converted, into the global tile of its shape: rows before ``rows_left`` only."""
    dst = tiled_mma.get_slice(tidx).partition_C(g_tile)
    for i in cutlass.range_constexpr(cute.size(acc)):
        if crd[i][0] < rows_left:
            dst[i] = acc[i].to(dtype)


@cute.jit
def grad_rows_to_gmem(
    tiled_mma,
    tidx,
    acc,
    crd,
    direct: cutlass.Constexpr,
    m_direct,
    m_heads,
    r0,
    h,
    width: cutlass.Constexpr,
    rows_left,
    io: cutlass.Constexpr,
    block=0,
):
    """A chunk's rows of a q, k or v gradient (the accumulator: column block ``block`` of ``width``
    columns): into the op's own gradient in the io dtype where ``direct`` (one output head per
    input head, nothing to sum), else into the fp32 per-output-head rows the head sum reads."""
    if const_expr(direct):
        acc_to_gmem(tiled_mma, tidx, acc, crd, chunk_rows(m_direct, r0, h, width, block), rows_left, io)
    else:
        acc_to_gmem(tiled_mma, tidx, acc, crd, chunk_rows(m_heads, r0, h, width, block), rows_left, Float32)


def wy_rows_to_gmem(tidx, sT, s_rows, g_tile, rows_left, io, n: int):
    """``g_tile`` = sT [C, C] @ s_rows [C, n] (the WY transform's w or u: T, scaled, times the chunk's
    rows as loaded, read column-wise), its rows before ``rows_left`` stored in the io dtype."""
    mma = warp_mma(io, CHUNK, n)
    acc, crd = zeroed_acc(mma, tidx, CHUNK, n)
    smem_gemm(mma, tidx, acc, sT, transposed(s_rows), False, True, io)
    acc_to_gmem(mma, tidx, acc, crd, g_tile, rows_left, io)


def _row_inv_norm(s_tile, row, lane, D: int):
    """1 / max(||row||, 1e-12) of row ``row`` of the shared (C, D) tile (torch's F.normalize floor),
    in every lane of the warp: each lane sums D / 32 columns, then a butterfly over the warp."""
    per = D // 32
    ss = Float32(0.0)
    for e in range(per):
        x = s_tile[row, lane * per + e].to(Float32)
        ss = ss + x * x
    for off in range(5):
        ss = ss + cute.arch.shuffle_sync_bfly(ss, 1 << off)
    return 1.0 / cute.math.max(cute.math.sqrt(ss), Float32(1e-12))


def l2_normalize_rows(s_tile, tidx, D: int):
    """Each row of the shared (C, D) tile over its L2 norm (`_row_inv_norm`), rounded back to the
    tile's dtype: each warp 16 rows, each lane D / 32 columns."""
    warp, lane = tidx // 32, tidx % 32
    per = D // 32
    for rr in range(CHUNK // 4):
        row = warp * (CHUNK // 4) + rr
        inv = _row_inv_norm(s_tile, row, lane, D)
        for e in range(per):
            col = lane * per + e
            s_tile[row, col] = (s_tile[row, col].to(Float32) * inv).to(s_tile.element_type)


@cute.jit
def row_inv_norms(s_tile, tidx, D: cutlass.Constexpr, dst):
    """dst[row] = `_row_inv_norm` of every row of the shared (C, D) tile (each warp 16 rows), for a
    caller that scales the rows later, or in parts."""
    warp, lane = tidx // 32, tidx % 32
    for rr in cutlass.range_constexpr(CHUNK // 4):
        row = warp * (CHUNK // 4) + rr
        inv = _row_inv_norm(s_tile, row, lane, D)
        if lane == 0:
            dst[row] = inv


# --- the backward's products and sums


def trans(tile):
    """The operand ``tile`` transposed (a marker `matmul` reads)."""
    return (tile, True)


def matmul(tiled_mma, tidx, acc, x, y, io):
    """acc += x @ y, each operand a row-major shared tile or `trans(tile)` (its transpose)."""
    xt, x_tr = x if isinstance(x, tuple) else (x, False)
    yt, y_tr = y if isinstance(y, tuple) else (y, False)
    # smem_gemm reads A as (M, K) and B as (N, K): B is y transposed
    a = transposed(xt) if x_tr else xt
    b = yt if y_tr else transposed(yt)
    smem_gemm(tiled_mma, tidx, acc, a, b, x_tr, not y_tr, io)


def smem_tile(smem, io, rows: int, cols: int):
    layout, swizzle = row_major(rows, cols)
    return smem.allocate_tensor(io, layout, 1024, swizzle)


def aliased_smem_tiles(smem, io, *shapes):
    """Row-major shared tiles of the given (rows, cols) over one allocation (the largest's bytes), for
    tiles whose lives do not overlap: the caller puts a barrier between the last read of one and the
    first write of the next."""
    raw = smem.allocate(max(r * c for r, c in shapes) * io.width // 8, 1024)
    tiles = []
    for rows, cols in shapes:
        layout, swizzle = row_major(rows, cols)
        tiles.append(cute.make_tensor(cute.recast_ptr(raw, swizzle, dtype=io), layout))
    return tiles


def smem_vector(smem, n: int = CHUNK):
    return smem.allocate_tensor(Float32, cute.make_layout((n,)), 16)


@cute.jit
def row_sums(vals, crd, dst):
    """dst[row] += the sum of the fp32 fragment ``vals`` over each row it holds (a 64-row product's
    fragment holds two rows per thread: each warp 16 rows, a lane rows l/4 and l/4 + 8)."""
    first = crd[0][0]
    other = first
    s0 = Float32(0.0)
    s1 = Float32(0.0)
    for i in cutlass.range_constexpr(cute.size(vals)):
        if crd[i][0] == first:
            s0 = s0 + vals[i]
        else:
            s1 = s1 + vals[i]
            other = crd[i][0]
    cute.arch.atomic_add(dst.iterator + first, s0)
    if other != first:
        cute.arch.atomic_add(dst.iterator + other, s1)


@cute.jit
def col_sums_sub(vals, crd, dst, tidx):
    """dst[col] -= the sum of the fp32 fragment ``vals`` over each column, over the CTA: in an mma.sync
    C fragment the 8 lanes of equal lane % 4 hold the same columns (rows lane / 4 and lane / 4 + 8),
    so each element is summed over them by shuffles and lanes 0-3 add it to ``dst`` (a shared
    vector; the atomics commute with `row_sums`' into the same vector)."""
    lane = tidx % 32
    for i in cutlass.range_constexpr(cute.size(vals)):
        s = vals[i]
        for off in cutlass.range_constexpr(2, 5):
            s = s + cute.arch.shuffle_sync_bfly(s, 1 << off)
        if lane < 4:
            cute.arch.atomic_add(dst.iterator + crd[i][1], -s)


@cute.jit
def zero_vector(vec, tidx):
    if tidx < cute.size(vec):
        vec[tidx] = Float32(0.0)


def scaled_rows(src, dst, scale_of, tidx, rows: int, cols: int):
    """dst[r, c] = src[r, c] * scale_of(r), rounded to dst's dtype (all threads, strided)."""
    for e in range(rows * cols // THREADS):
        flat = tidx + e * THREADS
        r, c = flat // cols, flat % cols
        dst[r, c] = (src[r, c].to(Float32) * scale_of(r)).to(dst.element_type)


@cute.jit
def block_sum(x, tidx, red):
    """The sum of ``x`` over the CTA's 128 threads (``red``: 4 shared fp32), in every thread."""
    for off in cutlass.range_constexpr(5):
        x = x + cute.arch.shuffle_sync_bfly(x, 1 << off)
    cute.arch.sync_threads()
    if tidx % 32 == 0:
        red[tidx // 32] = x
    cute.arch.sync_threads()
    return red[0] + red[1] + red[2] + red[3]


# --- the WY inverse


def _inverse_sync(barrier_id: int):
    """The inverse's barrier among its 128 threads: the CTA's (``barrier_id`` 0) or a named one (a
    CTA whose other threads work on beside it)."""
    if barrier_id:
        cute.arch.barrier(barrier_id=barrier_id, number_of_threads=THREADS)
    else:
        cute.arch.sync_threads()


@cute.jit
def _diagonal_block_inverse(sA: cute.Tensor, tidx: Int32, barrier_id: cutlass.Constexpr):
    """Threads 0-63: (I + A)^-1 of each diagonal 16 x 16 block of the fp32 ``sA`` (A strictly lower),
    in place: thread t solves column t % 16 of block t // 16 by forward substitution (15 rows)."""
    B = 16
    x = cute.make_rmem_tensor((B,), Float32)
    if tidx < 4 * B:
        base = (tidx // B) * B
        j = tidx % B
        for i in cutlass.range_constexpr(B):
            acc = Float32(j == i)
            for m in cutlass.range_constexpr(i):
                acc = acc - sA[base + i, base + m] * x[m]
            x[i] = acc
    _inverse_sync(barrier_id)  # every block's A read
    if tidx < 4 * B:
        base = (tidx // B) * B
        j = tidx % B
        for i in cutlass.range_constexpr(B):
            sA[base + i, base + j] = x[i]
    _inverse_sync(barrier_id)


# the merges' products on tensor cores (mma.sync tf32, m16n8k8): as scalar fp32 FMAs over shared
# operands they were most of the fused scan's prepare's shared-memory wavefronts (about 4600 of some
# 7000 a chunk, one an SM cycle), which bounded that kernel; as MMAs they are about 350 (prepare at
# B4 T4096: 0.104 ms on an H200 before, 0.061 on an H100 after). tf32 keeps
# 10 mantissa bits of the operands (relative 2^-11): at most the rounding T is stored with (bf16
# 2^-9, fp16 2^-11); the fp16 cases check the latter.
INVERSE_STRIDE = CHUNK + 4  # sA's row stride (floats): a tf32 A fragment's 32 lanes in 32 banks
MERGE_STRIDE = 32 + 8  # sX's: a B fragment read from it in 32 banks


def tf32_mma(warps_m: int, warps_n: int):
    """``warps_m x warps_n`` warps over a (16 warps_m, 16 warps_n) tf32 product, each warp two n8
    atoms side by side (the layout of `warp_mma`)."""
    return cute.make_tiled_mma(
        cute.nvgpu.warp.MmaTF32Op((16, 8, 8)),
        cute.make_layout((warps_m, warps_n, 1)),
        permutation_mnk=(warps_m * 16, warps_n * 16, 8),
    )


def _tf32_product(tiled_mma, thr_idx, sA, sB, dst, sign: float):
    """``dst`` = sign * sA (M, K) @ sB (N, K)^T, fp32 shared operands rounded to tf32 in registers,
    the fp32 result stored into the shared tile ``dst`` (M, N)."""
    thr = tiled_mma.get_slice(thr_idx)
    out = thr.partition_C(dst)
    acc = cute.make_rmem_tensor(out.shape, Float32)
    acc.fill(0.0)
    src_a, src_b = thr.partition_A(sA), thr.partition_B(sB)
    # register fragments compact by shape: `make_rmem_tensor_like` of these shared-memory partitions
    # (a size-1, stride-0 M mode) gave an aliasing layout, so a 16-row A fragment took row g's
    # next k-block for row g + 8 (its sm_90a PTX: 6 distinct loads of 8), which left T's merged
    # blocks 5% to 26% wrong in O under weak decay while strong gates hid them (docs/linear-attention.md)
    ra = cute.make_rmem_tensor(src_a.shape, cutlass.TFloat32)
    rb = cute.make_rmem_tensor(src_b.shape, cutlass.TFloat32)
    fa = cute.make_rmem_tensor(src_a.shape, Float32)
    fb = cute.make_rmem_tensor(src_b.shape, Float32)
    cute.autovec_copy(src_a, fa)
    cute.autovec_copy(src_b, fb)
    ra.store(fa.load().to(cutlass.TFloat32))
    rb.store(fb.load().to(cutlass.TFloat32))
    for kb in range(cute.size(ra, mode=[2])):
        cute.gemm(tiled_mma, acc, ra[None, None, kb], rb[None, None, kb], acc)
    for i in range(cute.size(acc)):
        out[i] = acc[i] * sign


@cute.jit
def _merge_16(sA: cute.Tensor, sX: cute.Tensor, tidx: Int32, barrier_id: cutlass.Constexpr):
    """Both pairs of 16-row blocks: warp w takes pair w // 2 (rows and columns from 32 (w // 2)) and
    the 8 columns 8 (w % 2) of its lower-left block: X = A21 T11, then T21 = -T22 X in place of A21."""
    warp = cute.arch.make_warp_uniform(cute.arch.warp_idx())
    lane = tidx % 32
    p, nh = warp // 2, warp % 2
    mma = cute.make_tiled_mma(cute.nvgpu.warp.MmaTF32Op((16, 8, 8)), cute.make_layout((1, 1, 1)))
    _tf32_product(
        mma, lane, cute.local_tile(sA, (16, 16), (2 * p + 1, 2 * p)),
        transposed(cute.local_tile(sA, (16, 8), (2 * p, 4 * p + nh))),
        cute.local_tile(sX, (16, 8), (p, nh)), 1.0,
    )  # fmt: skip
    _inverse_sync(barrier_id)  # X complete; every read of A21 done
    _tf32_product(
        mma, lane, cute.local_tile(sA, (16, 16), (2 * p + 1, 2 * p + 1)),
        transposed(cute.local_tile(sX, (16, 8), (p, nh))),
        cute.local_tile(sA, (16, 8), (2 * p + 1, 4 * p + nh)), -1.0,
    )  # fmt: skip
    _inverse_sync(barrier_id)


@cute.jit
def _merge_32(sA: cute.Tensor, sX: cute.Tensor, tidx: Int32, barrier_id: cutlass.Constexpr):
    """The two 32-row halves on all four warps (2 x 2, m16 n16 each): X = A21 T11, then
    T21 = -T22 X in place of A21."""
    mma = tf32_mma(2, 2)
    _tf32_product(
        mma, tidx, cute.local_tile(sA, (32, 32), (1, 0)), transposed(cute.local_tile(sA, (32, 32), (0, 0))),
        sX, 1.0,
    )  # fmt: skip
    _inverse_sync(barrier_id)
    _tf32_product(
        mma, tidx, cute.local_tile(sA, (32, 32), (1, 1)), transposed(sX), cute.local_tile(sA, (32, 32), (1, 0)),
        -1.0,
    )  # fmt: skip
    _inverse_sync(barrier_id)


def blocked_inverse(sA: cute.Tensor, sX: cute.Tensor, tidx: Int32, barrier_id: int = 0):
    """(I + A)^-1 of the chunk's strictly lower fp32 A [64, 64] in ``sA`` (row stride
    ``INVERSE_STRIDE``), in place, on all 128 threads: the four diagonal 16 x 16 blocks by forward
    substitution (15 dependent rows, not 63), then merged pairwise, 16 -> 32 -> 64, by
    ``[[T11, 0], [A21, T22]]^-1 = [[T11, 0], [-T22 A21 T11, T22]]`` on tf32 MMAs. ``sX``: fp32
    [32, 32] scratch of row stride ``MERGE_STRIDE``. The full T (ones on the diagonal, zeros
    above) is in ``sA`` after it; entered and left at a barrier: the CTA's, or with ``barrier_id``
    the named barrier of threads 0-127 (the CTA's other threads free meanwhile)."""
    _diagonal_block_inverse(sA, tidx, barrier_id)
    _merge_16(sA, sX, tidx, barrier_id)
    _merge_32(sA, sX, tidx, barrier_id)
