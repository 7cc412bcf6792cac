"""The cuTile building blocks gdn's and kda's kernels share (`gdn.cutile_fwd`, `gdn.cutile_bwd`,
`kda.cutile_fwd`, `kda.cutile_bwd`): the chunk table and the chunk offsets built on the device from
``cu_seqlens``, the tile loads of a sequence's rows, the rows' l2 normalization, the inverse of a
chunk's unit lower-triangular ``I + A``, the io-dtype matrix product, and the backward's sums of the
per-output-head gradients over the heads each input head serves.

Every tile is CHUNK = 64 tokens of one sequence (`common.host.CHUNK`, passed as the kernels' C). The
inverse of the 64 x 64 ``I + A`` is blocked: its four 16 x 16 diagonal blocks by forward
substitution (the four at once, 15 row steps on a [4, 16, 16] tile), then merged pairwise,
``inv([[P, 0], [B, Q]]) = [[P^-1, 0], [-Q^-1 B P^-1, Q^-1]]``, into 32 x 32 and then 64 x 64.
"""

from __future__ import annotations

import cuda.tile as ct

from pygraph.environment import switch

__all__ = [
    "SUB",
    "TMA",
    "chunk_offsets_kernel",
    "chunk_table_kernel",
    "gate_sum_kernel",
    "group_sum_kernel",
    "l2_normalized",
    "mm",
    "param_sum_kernel",
    "rows_at",
    "unit_lower_inverse",
]

ConstInt = ct.Constant[int]
_ZERO = ct.PaddingMode.ZERO

SUB = 16  # the diagonal blocks the inverse starts from


# PYGRAPH_CUTILE_TMA=0 compiles the tile accesses of sliced views (the KDA kernels': every one) without
# TMA, for compute-sanitizer: memcheck reports the TMA accesses of a sliced view (warp-wide 4-byte
# atomics over 128-byte ranges, at addresses in no allocation; partial tail chunks) while the results
# are exact and the hardware clips TMA at the view's bounds; with TMA off the same cases run clean
# (scripts/device/run.sh linear-attention memcheck). Read at import: it changes the compiled kernels.
TMA_ENV = "PYGRAPH_CUTILE_TMA"
TMA = switch(TMA_ENV, default=True)


def _block_counts(cu_seqlens, step, N, C: ConstInt, BN: ConstInt):
    """The blocks of C tokens of sequences step * BN .. step * BN + BN - 1 (0 past the last)."""
    m = step * BN + ct.arange(BN, dtype=ct.int32)
    inside = m < N
    lo = ct.astype(ct.gather(cu_seqlens, m, mask=inside, padding_value=0), ct.int32)
    hi = ct.astype(ct.gather(cu_seqlens, m + 1, mask=inside, padding_value=0), ct.int32)
    return ct.cdiv(hi - lo, C)


@ct.kernel
def chunk_table_kernel(cu_seqlens, table, N, C: ConstInt, BJ: ConstInt, BN: ConstInt):
    """table[j] = (sequence, chunk within it) for the chunk slots j of this program; (-1, -1) past the last."""
    slot = ct.bid(0) * BJ + ct.arange(BJ, dtype=ct.int32)
    seq = ct.zeros((BJ,), dtype=ct.int32)  # sequences that end at or before the slot
    before = ct.zeros((BJ,), dtype=ct.int32)  # their chunks
    carry = ct.zeros((), dtype=ct.int32)  # chunks of the sequences of earlier steps
    for step in range(ct.cdiv(N, BN)):
        counts = _block_counts(cu_seqlens, step, N, C, BN)
        ends = ct.cumsum(counts, 0) + carry
        done = ct.expand_dims(ends, 0) <= ct.expand_dims(slot, 1)  # [BJ, BN]
        seq = seq + ct.sum(ct.astype(done, ct.int32), axis=1)
        before = before + ct.sum(ct.where(done, ct.expand_dims(counts, 0), 0), axis=1)
        carry = carry + ct.sum(counts)
    used = seq < N
    ct.store(table, (ct.bid(0), 0), ct.reshape(ct.where(used, seq, -1), (BJ, 1)), allow_tma=TMA)
    ct.store(table, (ct.bid(0), 1), ct.reshape(ct.where(used, slot - before, -1), (BJ, 1)), allow_tma=TMA)


@ct.kernel
def chunk_offsets_kernel(cu_seqlens, offsets, N, C: ConstInt, BN: ConstInt):
    """offsets[n] = the slot of sequence n's first block of C tokens (the blocks of the sequences
    before it): the chunk offsets of the backward, and the segment offsets of the split scan."""
    carry = ct.zeros((), dtype=ct.int32)
    for step in range(ct.cdiv(N, BN)):
        counts = _block_counts(cu_seqlens, step, N, C, BN)
        ct.store(offsets, (step,), ct.cumsum(counts, 0) + carry - counts, allow_tma=TMA)
        carry = carry + ct.sum(counts)


def l2_normalized(x):
    """Rows of ``x`` [R, D] over their norm (as torch's F.normalize: the norm floored at 1e-12)."""
    xf = ct.astype(x, ct.float32)
    norm = ct.sqrt(ct.sum(xf * xf, axis=1, keepdims=True))
    return ct.astype(xf / ct.maximum(norm, 1e-12), x.dtype)


def rows_at(view, index, C: ConstInt, D: ConstInt):
    """The [C, D] tile of ``view`` ([T, H, D'] sliced to a sequence) at ``index`` (chunk, head,
    block), zero past the view's end."""
    return ct.reshape(ct.load(view, index, shape=(C, 1, D), padding_mode=_ZERO, allow_tma=TMA), (C, D))


def unit_lower_inverse(a):
    """(I + a)^-1 for ``a`` [64, 64] fp32, strictly lower triangular (see the module docstring)."""
    r = ct.arange(SUB, dtype=ct.int32)
    rows = ct.reshape(r, (1, SUB, 1))
    cols = ct.reshape(r, (1, 1, SUB))
    # the four diagonal blocks as one [4, SUB, SUB] tile: block (b, b) of a [4, SUB, 4, SUB] view
    blocks = ct.permute(ct.reshape(a, (4, SUB, 4, SUB)), (0, 2, 1, 3))
    b4 = ct.arange(4, dtype=ct.int32)
    same = ct.reshape(ct.expand_dims(b4, 1) == ct.expand_dims(b4, 0), (4, 4, 1, 1))
    diag = ct.sum(ct.where(same, blocks, 0.0), axis=1)
    inv = ct.broadcast_to(ct.astype(rows == cols, ct.float32), (4, SUB, SUB))
    # row i of the inverse is e_i - sum_{m < i} a[i, m] inv[m, :]; rows before i are final
    for i in range(1, SUB):
        a_row = ct.sum(ct.where(rows == i, diag, 0.0), axis=1)  # [4, SUB]: a[i, m]
        step = ct.sum(ct.expand_dims(a_row, 2) * inv, axis=1)  # [4, SUB]
        inv = ct.where(rows == i, inv - ct.expand_dims(step, 1), inv)
    zero16 = ct.zeros((SUB, SUB), dtype=ct.float32)
    d0 = ct.reshape(ct.extract(inv, (0, 0, 0), (1, SUB, SUB)), (SUB, SUB))
    d1 = ct.reshape(ct.extract(inv, (1, 0, 0), (1, SUB, SUB)), (SUB, SUB))
    d2 = ct.reshape(ct.extract(inv, (2, 0, 0), (1, SUB, SUB)), (SUB, SUB))
    d3 = ct.reshape(ct.extract(inv, (3, 0, 0), (1, SUB, SUB)), (SUB, SUB))
    x10 = -ct.mma(d1, ct.mma(ct.extract(a, (1, 0), (SUB, SUB)), d0, zero16), zero16)
    x32 = -ct.mma(d3, ct.mma(ct.extract(a, (3, 2), (SUB, SUB)), d2, zero16), zero16)
    p0 = ct.cat((ct.cat((d0, zero16), 1), ct.cat((x10, d1), 1)), 0)  # [32, 32]
    p1 = ct.cat((ct.cat((d2, zero16), 1), ct.cat((x32, d3), 1)), 0)
    zero32 = ct.zeros((2 * SUB, 2 * SUB), dtype=ct.float32)
    y = -ct.mma(p1, ct.mma(ct.extract(a, (1, 0), (2 * SUB, 2 * SUB)), p0, zero32), zero32)
    return ct.cat((ct.cat((p0, zero32), 1), ct.cat((y, p1), 1)), 0)


def mm(x, y, dtype):
    """x @ y with ``dtype`` operands and fp32 accumulation."""
    acc = ct.zeros((x.shape[0], y.shape[1]), dtype=ct.float32)
    return ct.mma(ct.astype(x, dtype), ct.astype(y, dtype), acc)


# --- the backward's sums over head groups and tokens


def _l2norm_backward(x, dy):
    """Gradient through y = x / max(|x|, 1e-12), rows of ``x`` [R, D] (raw) and ``dy`` fp32."""
    xf = ct.astype(x, ct.float32)
    norm = ct.sqrt(ct.sum(xf * xf, axis=1, keepdims=True))
    floored = ct.maximum(norm, 1e-12)
    y = xf / floored
    return ct.where(norm > 1e-12, (dy - y * ct.sum(dy * y, axis=1, keepdims=True)) / floored, dy / 1e-12)


@ct.kernel
def group_sum_kernel(src, raw, dst, GROUP, L2NORM, D: ConstInt, TB: ConstInt):
    """dst[t, j] = sum of src[t, j * GROUP + i] over i < GROUP: src [T, HO, D] fp32, dst [T, HO // GROUP, D];
    with L2NORM, the sum taken back through the rows' l2 normalization (``raw`` [T, HO // GROUP, D]:
    the rows before it; one Jacobian per input row serves the heads it feeds, so it follows the sum)."""
    tb, j = ct.bid(0), ct.bid(1)
    acc = ct.zeros((TB, 1, D), dtype=ct.float32)
    for i in range(GROUP):
        acc = acc + ct.load(src, (tb, j * GROUP + i, 0), shape=(TB, 1, D), padding_mode=_ZERO, allow_tma=TMA)
    if L2NORM != 0:
        x = ct.reshape(ct.load(raw, (tb, j, 0), shape=(TB, 1, D), padding_mode=_ZERO, allow_tma=TMA), (TB, D))
        acc = ct.reshape(_l2norm_backward(x, ct.reshape(acc, (TB, D))), (TB, 1, D))
    ct.store(dst, (tb, j, 0), ct.astype(acc, dst.dtype), allow_tma=TMA)


@ct.kernel
def gate_sum_kernel(src, dst, GROUP, TB: ConstInt):
    """`group_sum_kernel` for [T, heads] gates: src [T, HO] fp32, dst [T, HO // GROUP]."""
    tb, j = ct.bid(0), ct.bid(1)
    acc = ct.zeros((TB, 1), dtype=ct.float32)
    for i in range(GROUP):
        acc = acc + ct.load(src, (tb, j * GROUP + i), shape=(TB, 1), padding_mode=_ZERO, allow_tma=TMA)
    ct.store(dst, (tb, j), ct.astype(acc, dst.dtype), allow_tma=TMA)


@ct.kernel
def param_sum_kernel(src, dst, T, GROUP, TB: ConstInt):
    """dst[p] = sum over all tokens and the heads p serves of src: src [T, HO] fp32, dst [HO // GROUP]."""
    p = ct.bid(0)
    acc = ct.zeros((TB, 1), dtype=ct.float32)
    for step in range(ct.cdiv(T, TB)):
        for i in range(GROUP):
            acc = acc + ct.load(src, (step, p * GROUP + i), shape=(TB, 1), padding_mode=_ZERO, allow_tma=TMA)
    ct.store(dst, (p,), ct.reshape(ct.astype(ct.sum(acc), dst.dtype), (1,)), allow_tma=TMA)
