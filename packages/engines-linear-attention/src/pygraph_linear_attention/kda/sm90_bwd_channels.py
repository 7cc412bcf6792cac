"""The per-channel pass of the KDA and GDN-2 backward's chunk kernels (`kda.sm90_bwd`'s
`grad_output_kda` and `grad_wy_kda`): the decay-weighted products, one key channel a thread, by
sub-chunks of 16 rows (columns) against one reference gamma, in fp32 on the CUDA cores, with the
staged fp32 terms they add to read ahead from the workspace (that module's docstring says why).
"""

from __future__ import annotations

from typing import Any

import cutlass
import cutlass.cute as cute
from cutlass import Float32, Int32, const_expr

from pygraph_linear_attention.common.sm90_tiles import CHUNK, fast_exp
from pygraph_linear_attention.kda.sm90_fwd import SUB

__all__ = ["AHEAD", "KdaChannelPass"]

# The per-channel pass reads each row's staged fp32 terms from the workspace: read in the row's own
# iteration, every row waited a global round trip (64 in a row a pass). They are read AHEAD rows
# ahead instead, into a ring of registers (a row's sum of up to 64 multiply-adds covers about a
# quarter of a round trip); the reverse sum, whose rows are a few instructions each, reads them
# REVERSE at a time.
AHEAD = 4
REVERSE = 16


@cute.jit
def read_staged(
    m: cute.Tensor, r0: Int32, base: Int32, last_row: Int32, h: Int32, col: Int32, n: int = AHEAD
):
    """``m[r0 + base + u, h, col]`` for u < n as fp32 registers, every load issued before any is
    used; rows past ``last_row`` (the chunk's last real row) read that row instead, in bounds, for
    the caller to ignore."""
    out = cute.make_rmem_tensor((n,), Float32)
    for u in cutlass.range_constexpr(n):
        out[u] = Float32(m[r0 + cutlass.min(base + u, last_row), h, col])
    return out


@cute.jit
def _advance(ring: cute.Tensor, m: cute.Tensor, r0: Int32, row: Int32, last_row: Int32, h: Int32, col: Int32):
    """Shift the ring (`read_staged`) by one row, reading ``m`` at ``row`` (clamped) into its end: its
    first entry is then the next row's term."""
    for u in cutlass.range_constexpr(AHEAD - 1):
        ring[u] = ring[u + 1]
    ring[AHEAD - 1] = Float32(m[r0 + cutlass.min(row, last_row), h, col])


_PARTS = 4  # partial sums of a weighted sum: one chain of dependent multiply-adds made the pass wait
# on the FMA latency (the "wait" stall, 23-25% of the gradient kernels' samples, ncu on the H200)


@cute.jit
def _dot(sM: cute.Tensor, row: Int32, f: cute.Tensor, lo: int, n: int):
    """``sum_u sM[row, lo + u] f[u]`` over u < n, in _PARTS interleaved partial sums. A row: every lane
    of a warp reads the same words, four at a time (16-byte loads); the columns-weighted sums read
    the transposed copy's rows (`lower_to_smem`), where reading the matrix's columns took one 4-byte
    load a term."""
    parts = [Float32(0.0) for _ in range(_PARTS)]
    for u in cutlass.range_constexpr(n):
        parts[u % _PARTS] = parts[u % _PARTS] + sM[row, lo + u] * f[u]
    return (parts[0] + parts[1]) + (parts[2] + parts[3])


@cute.jit
def lower_to_smem(
    acc: cute.Tensor,
    crd: Any,
    sM: cute.Tensor,
    sMT: cute.Tensor,
    scale: Float32,
    diagonal: cutlass.Constexpr,
    rows_left: Int32,
):
    """An accumulator of a [C, C] product into ``sM`` and its transpose ``sMT`` (fp32), times ``scale``,
    on and below the diagonal (strictly below unless ``diagonal``) in rows before ``rows_left``, 0
    elsewhere."""
    for e in cutlass.range_constexpr(cute.size(acc)):
        row, col = crd[e][0], crd[e][1]
        val = Float32(0.0)
        keep = row > col
        if const_expr(diagonal):
            keep = row >= col
        if keep and row < rows_left:
            val = acc[e] * scale
        sM[row, col] = val
        sMT[col, row] = val


class KdaChannelPass:
    """The per-channel pass's steps, methods of `kda.sm90_bwd.KdaSm90Bwd` (they read its options:
    ``gdn2``, ``direct_qk``, ``beta_sigmoid``, ``neg_eigval``)."""

    @cute.jit
    def _rows_weighted(
        self,
        i: cutlass.Constexpr,
        col: Int32,
        tiles: Any,
        mStaged: cute.Tensor,
        mDQ: cute.Tensor,
        mDgp: cute.Tensor,
        at: Any,
        is_dq: cutlass.Constexpr,
    ):
        """Sub-chunk ``i``'s rows of channel ``col``: ``mStaged`` += the rows-weighted ``sM`` k, the
        lower-triangular sM being dp (``is_dq``: mStaged holds dq's state term; dq goes to dQ where it
        needs no head sum, and d gamma's q dq to ``mDgp``) or dA (mStaged holds the erase key's first
        term: dkw = T^T dw + dA kd). No staged row past the sub-chunk is read (the other group writes
        those); a sub-chunk past the sequence is skipped. ``tiles``: the shared (q, k, gamma, sM);
        ``at``: (first token, rows left, last real row, output head) of the chunk."""
        sQ, sK, sGam, sM = tiles
        r0, rows_left, last_row, h = at
        if Int32(i * SUB) < rows_left:
            ref = sGam[i * SUB, col]
            f = cute.make_rmem_tensor(((i + 1) * SUB,), Float32)
            for j in cutlass.range_constexpr((i + 1) * SUB):
                f[j] = sK[j, col].to(Float32) * fast_exp(ref - sGam[j, col])
            sub_last = cutlass.min(last_row, Int32(i * SUB + SUB - 1))
            ring = read_staged(mStaged, r0, i * SUB, sub_last, h, col)
            for rr in cutlass.range(SUB, unroll=1):
                r = i * SUB + rr
                staged = ring[0]
                _advance(ring, mStaged, r0, r + AHEAD, sub_last, h, col)
                s = _dot(sM, r, f, 0, (i + 1) * SUB)  # sM is 0 above the diagonal
                if r < rows_left:
                    total = staged + s * fast_exp(sGam[r, col] - ref)
                    if const_expr(is_dq and self.direct_qk):
                        mDQ[r0 + r, h, col] = total.to(mDQ.element_type)
                    else:
                        mStaged[r0 + r, h, col] = total
                    if const_expr(is_dq):
                        mDgp[r0 + r, h, col] = sQ[r, col].to(Float32) * total

    @cute.jit
    def _dk_first_cols(
        self,
        i: cutlass.Constexpr,
        col: Int32,
        tiles: Any,
        mDk: cute.Tensor,
        mDgp: cute.Tensor,
        at: Any,
    ):
        """Sub-chunk ``i``'s columns of channel ``col``: dk's first terms = the passed state's + the
        columns-weighted dp^T q, d gamma's -k dk; returns the sub-chunk's share of the passed
        state's d gamma term (sum of k times that state's dk term)."""
        sQ, sK, sGam, sMT = tiles
        r0, rows_left, last_row, h = at
        passed = Float32(0.0)
        if Int32(i * SUB) < rows_left:
            ref = sGam[i * SUB + SUB - 1, col]
            f = cute.make_rmem_tensor((CHUNK - i * SUB,), Float32)
            for r in cutlass.range_constexpr(i * SUB, CHUNK):
                f[r - i * SUB] = sQ[r, col].to(Float32) * fast_exp(sGam[r, col] - ref)
            sub_last = cutlass.min(last_row, Int32(i * SUB + SUB - 1))
            ring_k = read_staged(mDk, r0, i * SUB, sub_last, h, col)
            ring_g = read_staged(mDgp, r0, i * SUB, sub_last, h, col)
            for jj in cutlass.range(SUB, unroll=1):
                j = i * SUB + jj
                kt_j, dgp = ring_k[0], ring_g[0]
                _advance(ring_k, mDk, r0, j + AHEAD, sub_last, h, col)
                _advance(ring_g, mDgp, r0, j + AHEAD, sub_last, h, col)
                s = _dot(sMT, j, f, i * SUB, CHUNK - i * SUB)  # dp is 0 above the diagonal
                if j < rows_left:
                    kv = sK[j, col].to(Float32)
                    dk = kt_j + s * fast_exp(ref - sGam[j, col])
                    mDk[r0 + j, h, col] = dk
                    mDgp[r0 + j, h, col] = dgp - kv * dk
                    passed = passed + kv * kt_j
        return passed

    @cute.jit
    def _dk_cols(
        self,
        i: cutlass.Constexpr,
        col: Int32,
        sK: cute.Tensor,
        sGam: cute.Tensor,
        sMT: cute.Tensor,
        sBeta: cute.Tensor,
        sDwrite: cute.Tensor,
        mBeta: cute.Tensor,
        mDe: cute.Tensor,
        mDk: cute.Tensor,
        mDgp: cute.Tensor,
        mDK: cute.Tensor,
        mDb: cute.Tensor,
        at: Any,
        bh: Int32,
    ):
        """Sub-chunk ``i``'s columns of channel ``col``: dk = its first terms + the columns-weighted
        dA^T e + beta de, d gamma's e de - k (dA^T e), and beta's term (KDA: summed over the warp's
        channels into ``sDwrite``, so every lane of a warp takes part; GDN-2: stored per channel).
        ``sMT``: dA transposed; ``at`` as `_rows_weighted`'s."""
        r0, rows_left, last_row, h = at
        if Int32(i * SUB) < rows_left:
            lane = col % 32  # the channels of a warp are consecutive
            ref = sGam[i * SUB + SUB - 1, col]
            f = cute.make_rmem_tensor((CHUNK - i * SUB,), Float32)
            for r in cutlass.range_constexpr(i * SUB, CHUNK):
                erase = sK[r, col].to(Float32) * self._erase_beta(sBeta, r, col)
                f[r - i * SUB] = erase * fast_exp(sGam[r, col] - ref)
            sub_last = cutlass.min(last_row, Int32(i * SUB + SUB - 1))
            ring_e = read_staged(mDe, r0, i * SUB, sub_last, h, col)
            ring_k = read_staged(mDk, r0, i * SUB, sub_last, h, col)
            ring_g = read_staged(mDgp, r0, i * SUB, sub_last, h, col)
            for jj in cutlass.range(SUB, unroll=1):
                j = i * SUB + jj
                de_j, kt_j, dgp = ring_e[0], ring_k[0], ring_g[0]
                _advance(ring_e, mDe, r0, j + AHEAD, sub_last, h, col)
                _advance(ring_k, mDk, r0, j + AHEAD, sub_last, h, col)
                _advance(ring_g, mDgp, r0, j + AHEAD, sub_last, h, col)
                s = _dot(sMT, j, f, i * SUB, CHUNK - i * SUB)  # dA is 0 on and above the diagonal
                written = Float32(0.0)  # beta's term of this channel
                if j < rows_left:
                    kv = sK[j, col].to(Float32)
                    b = self._erase_beta(sBeta, j, col)
                    through = s * fast_exp(ref - sGam[j, col])
                    dk = kt_j + through + b * de_j
                    if const_expr(self.direct_qk):
                        mDK[r0 + j, h, col] = dk.to(mDK.element_type)
                    else:
                        mDk[r0 + j, h, col] = dk
                    dgp = dgp + b * kv * de_j - kv * through
                    mDgp[r0 + j, h, col] = dgp
                    written = de_j * kv
                    if const_expr(self.gdn2):
                        d_beta = self._write_chain(mBeta, r0 + j, bh, col, written)
                        mDb[r0 + j, h, col] = d_beta.to(mDb.element_type)
                if const_expr(not self.gdn2):
                    for off in cutlass.range_constexpr(5):
                        written = written + cute.arch.shuffle_sync_bfly(written, 1 << off)
                    if lane == 0:
                        cute.arch.atomic_add(sDwrite.iterator + j, written)

    @cute.jit
    def _erase_beta(self, sBeta: cute.Tensor, r: Int32, col: Int32):
        """beta of the erase key at row ``r`` of the chunk and key channel ``col``, from shared memory
        (KDA: the row's, [C]; GDN-2: the channel's after the options, [C, K]); 0 past the sequence."""
        if const_expr(self.gdn2):
            return sBeta[r, col]
        return sBeta[r]

    @cute.jit
    def _write_chain(self, mBeta: cute.Tensor, tok: Int32, bh: Int32, col: Int32, d_write: Float32):
        """The gradient of beta's raw input from that of beta after the options (x2, sigmoid)."""
        if const_expr(self.neg_eigval):
            d_write = d_write * 2.0
        if const_expr(self.beta_sigmoid):
            raw = Float32(0.0)
            if const_expr(self.gdn2):
                raw = Float32(mBeta[tok, bh, col].to(Float32))
            else:
                raw = Float32(mBeta[tok, bh].to(Float32))
            s = 1.0 / (1.0 + fast_exp(-raw))
            d_write = d_write * s * (1.0 - s)
        return d_write
