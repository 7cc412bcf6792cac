"""The masks and lengths every sdpa_sm90 kernel applies, in one place (`pygraph_sdpa.reference`'s
rules): a query row ``i`` of a sequence has its diagonal at key ``i + offset`` (``offset`` 0, or
``rows_kv - rows_q`` bottom-right), and key ``j`` is visible when ``j < rows_kv``, ``i < rows_q``,
``j <= i + offset + window_right`` and ``j > i + offset - window_left`` (-1: that side unbounded).

Ragged (THD) operands: batch ``b``'s rows of an operand start at element ``offsets[b]`` of its
tensor (its ragged offsets, each a multiple of 8: 16-byte rows) and its batch stride is unused; a
store then writes only the sequence's own rows (the next sequence's follow them).

`SdpaMasks` is a mixin of the kernel classes: they set ``bottom_right``, ``window_left``,
``window_right``, ``padded`` and ``ragged``, and its methods are inlined where the kernels call them.
"""

from __future__ import annotations

import cutlass
import cutlass.cute as cute
from cutlass import Int32, const_expr

__all__ = ["SdpaMasks"]


class SdpaMasks:
    bottom_right: bool
    window_left: int
    window_right: int
    padded: bool
    ragged: bool

    @cute.jit
    def head_rows(self, m: cute.Tensor, offsets: cute.Tensor, b: Int32, h: Int32) -> cute.Tensor:
        """The (S, D) rows of batch ``b``, head ``h`` of ``m`` [B, H, S, D]: ragged, from element
        ``offsets[b]`` of the tensor (the batch stride unused); else ``m[b, h]``."""
        rows = m[b, h, None, None]
        if const_expr(self.ragged):
            rows = m[0, h, None, None]
            rows = cute.make_tensor(rows.iterator + cute.assume(Int32(offsets[b]), divby=8), rows.layout)
        return rows

    @cute.jit
    def stored(self, rows: Int32, s: Int32) -> Int32:
        """How many rows of a sequence (``rows`` long, in a tensor of ``s``) a store writes: ragged,
        its own only; else the tensor's (rows past the length get zeros)."""
        bound = s
        if const_expr(self.ragged):
            bound = rows
        return bound

    @cute.jit
    def length(self, mSeq: cute.Tensor, b: Int32, s: Int32) -> Int32:
        """Batch ``b``'s length along a sequence axis of ``s`` rows: ``mSeq[b]`` under padding (a length
        past the tensor's reads as the tensor's), else ``s``."""
        rows = s
        if const_expr(self.padded):
            rows = cutlass.min(Int32(mSeq[b]), s)
        return rows

    @cute.jit
    def lengths(self, mSeqQ: cute.Tensor, mSeqKv: cute.Tensor, b: Int32, s_q: Int32, s_kv: Int32):
        """(rows_q, rows_kv) of batch ``b`` (`length` of each)."""
        return self.length(mSeqQ, b, s_q), self.length(mSeqKv, b, s_kv)

    @cute.jit
    def offset(self, rows_q: Int32, rows_kv: Int32) -> Int32:
        """Where the diagonal sits: key ``i + offset`` for query row ``i``."""
        offset = Int32(0)
        if const_expr(self.bottom_right):
            offset = rows_kv - rows_q
        return offset

    @cute.jit
    def query_block(self, block: Int32) -> Int32:
        """The query block a CTA of grid x-index ``block`` takes: under a right bound the last blocks
        see the most keys, so they launch first and the short ones fill the tail."""
        if const_expr(self.window_right >= 0):
            block = cute.arch.grid_dim()[0] - 1 - block
        return block

    @cute.jit
    def key_blocks(
        self,
        row0: Int32,
        rows: cutlass.Constexpr,
        offset: Int32,
        rows_q: Int32,
        rows_kv: Int32,
        keys: cutlass.Constexpr,
    ):
        """[first, last) of the blocks of ``keys`` keys that query rows ``row0 .. row0 + rows - 1`` see
        (empty for a block past the sequence's length)."""
        key_end = rows_kv
        if const_expr(self.window_right >= 0):
            key_end = cutlass.min(key_end, row0 + rows + offset + self.window_right)
        key_begin = Int32(0)
        if const_expr(self.window_left >= 0):
            key_begin = cutlass.max(key_begin, row0 + offset - self.window_left + 1)
        first = key_begin // keys
        last = Int32(0)
        if key_end > 0 and row0 < rows_q:
            last = (key_end + keys - 1) // keys
        return first, last

    @cute.jit
    def query_blocks(
        self,
        n0: Int32,
        keys: cutlass.Constexpr,
        offset: Int32,
        rows_q: Int32,
        rows_kv: Int32,
        rows: cutlass.Constexpr,
    ):
        """(first, count) of the blocks of ``rows`` query rows that see a key of ``n0 .. n0 + keys - 1``
        (none for a block past the sequence's length)."""
        q_begin = Int32(0)
        if const_expr(self.window_right >= 0):
            q_begin = cutlass.max(q_begin, n0 - offset - self.window_right)
        q_end = rows_q
        if const_expr(self.window_left >= 0):
            q_end = cutlass.min(q_end, n0 + keys - 1 - offset + self.window_left)
        first = q_begin // rows
        count = Int32(0)
        if q_end > first * rows and n0 < rows_kv:
            count = (q_end + rows - 1) // rows - first
        return first, count

    @cute.jit
    def cuts(
        self,
        row0: Int32,
        rows: cutlass.Constexpr,
        n0: Int32,
        keys: cutlass.Constexpr,
        offset: Int32,
        rows_kv: Int32,
    ) -> Int32:
        """1 when the masks hide some key of ``n0 .. n0 + keys - 1`` from some query row of
        ``row0 .. row0 + rows - 1`` (the block needs `seen` per element), else 0."""
        cut = Int32(n0 + keys > rows_kv)
        if const_expr(self.window_right >= 0):
            if n0 + keys - 1 > row0 + offset + self.window_right:
                cut = Int32(1)
        if const_expr(self.window_left >= 0):
            if n0 <= row0 + rows - 1 + offset - self.window_left:
                cut = Int32(1)
        return cut

    @cute.jit
    def seen(self, row: Int32, key: Int32, offset: Int32, rows_q: Int32, rows_kv: Int32) -> Int32:
        """1 when query row ``row`` sees key ``key``, else 0."""
        seen = Int32(key < rows_kv) * Int32(row < rows_q)
        if const_expr(self.window_right >= 0):
            seen = seen * Int32(key <= row + offset + self.window_right)
        if const_expr(self.window_left >= 0):
            seen = seen * Int32(key > row + offset - self.window_left)
        return seen
