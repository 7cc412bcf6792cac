"""The user frame to the kernel frame: majors, the static layout, and the argument mapping.

ONE source for how a problem's user-frame (batch, row, col) strides and pointers become the compiled
function's arguments; the engine's per-call closure, `Plan.kernel_args` and the SM80 runner all use it.
"""

from __future__ import annotations

from collections.abc import Callable

from .config import KernelLayout, dtype_name


def _major(strides: tuple, rows: int, cols: int, row_name: str, col_name: str) -> tuple[str, int]:
    """Which mode is contiguous and the other mode's stride (the leading dimension)."""
    _, sr, sc = strides
    if sc == 1 or cols == 1:
        return col_name, (sr if rows > 1 else max(cols, 8))
    if sr == 1 or rows == 1:
        return row_name, (sc if cols > 1 else max(rows, 8))
    raise ValueError(f"strides {strides}: neither rows nor columns are contiguous")


# User-frame pointer roles, in ``Plan.kernel_args`` order.
POINTER_ROLES = ("a", "b", "c", "bias", "row_scale", "col_scale", "residual", "aux")


def kernel_frame(
    lay: KernelLayout, swap: bool, lean: bool = False
) -> tuple[tuple[int, ...], Callable[..., tuple]]:
    """The argument mapping from the user frame to the compiled function's frame; ONE source.

    Returns ``(pointer_order, geometry)``: kernel pointer slot ``j`` takes user pointer
    ``POINTER_ROLES[pointer_order[j]]``, and ``geometry(m, n, k, l, a_strides, b_strides,
    c_strides, residual_strides, aux_strides)`` is the 15 sizes/strides that follow the pointers
    (user-frame (batch, row, col) element strides in; l == 1 zeroes the batch strides, and a zero
    batch stride becomes the dense one). The compiled function's arguments are the 8 pointers,
    the geometry, then the stream. ``lean`` (`is_lean`): the 3 pointers of A, B, C and the first 10
    sizes/strides (theirs). Everything ``lay``/``swap``/``lean`` decide is settled here, once.
    """
    c_row = lay.c_major == "n"
    a_row = lay.a_major == "k"  # kernel A (M, K) with K contiguous: leading dim is the row stride
    b_row = lay.b_major == "n"  # kernel B seen as (K, N) with N contiguous
    b_k = lay.b_major == "k"

    def geometry(
        m: int,
        n: int,
        k: int,
        l: int,
        a_strides: tuple,
        b_strides: tuple,
        c_strides: tuple,
        residual_strides: tuple,
        aux_strides: tuple,
    ) -> tuple:
        abs_, ar, ac = a_strides
        bbs, br, bc = b_strides
        cbs, cr, cc = c_strides
        xbs, xr, xc = aux_strides
        if l == 1:  # batch strides unused; keep them TMA-legal
            abs_ = bbs = cbs = xbs = 0
        a_ld = ar if a_row else ac
        b_ld = br if b_row else bc
        c_ld = cr if c_row else cc
        cm = m if c_row else n
        core = (
            m,
            n,
            k,
            l,
            a_ld,
            abs_ or a_ld * (m if a_row else k),
            b_ld,
            bbs or b_ld * (n if b_k else k),
            c_ld,
            cbs or c_ld * cm,
        )
        if lean:
            return core
        x_ld = xr if c_row else xc
        return (*core, residual_strides[1], residual_strides[2], residual_strides[0], x_ld, xbs or x_ld * cm)

    n_pointers = 3 if lean else 8
    if not swap:
        return (0, 1, 2, 3, 4, 5, 6, 7)[:n_pointers], geometry

    # Swapped: C^T = B^T A^T, i.e. the same problem with M and N exchanged, A and B exchanged, and
    # every matrix transposed (a transpose swaps its row and column strides).
    def swapped(
        m: int,
        n: int,
        k: int,
        l: int,
        a_strides: tuple,
        b_strides: tuple,
        c_strides: tuple,
        residual_strides: tuple,
        aux_strides: tuple,
    ) -> tuple:
        return geometry(
            n, m, k, l, _transposed(b_strides), _transposed(a_strides), _transposed(c_strides),
            _transposed(residual_strides), _transposed(aux_strides),
        )  # fmt: skip

    return (1, 0, 2, 3, 5, 4, 6, 7)[:n_pointers], swapped


def _transposed(strides: tuple) -> tuple:
    """(batch, row, col) strides of the transposed matrix."""
    batch, row, col = strides
    return batch, col, row


def user_majors(a_strides: tuple, b_strides: tuple, c_strides: tuple, m: int, n: int, k: int) -> tuple:
    """(A, B, C) majors in the user frame, as `Plan` reads them; ValueError when neither mode is contiguous."""
    return (
        _major(a_strides, m, k, "m", "k")[0],
        _major(b_strides, k, n, "k", "n")[0],
        _major(c_strides, m, n, "m", "n")[0],
    )


def kernel_layout(
    swap: bool,
    ab_dtype,
    c_dtype,
    a_strides: tuple,
    b_strides: tuple,
    c_strides: tuple,
    m: int,
    n: int,
    k: int,
    l: int,
) -> KernelLayout:
    """The problem's static layout in the KERNEL's frame (the compile key with the knobs), from
    user-frame (batch, row, col) strides. Swapped (``swap``): kernel A = B^T (N x K), kernel B = A
    (M x K), kernel C = C^T."""
    ad, cd = dtype_name(ab_dtype), dtype_name(c_dtype)
    # user frame: A (M, K) major 'k' if K contiguous else 'm'; B (K, N): 'n' if N contiguous
    a_maj, b_maj, c_maj = user_majors(a_strides, b_strides, c_strides, m, n, k)
    a_bc = l > 1 and a_strides[0] == 0
    b_bc = l > 1 and b_strides[0] == 0
    if swap:
        return KernelLayout(
            ad,
            cd,
            "k" if b_maj == "k" else "m",
            "k" if a_maj == "k" else "n",
            "n" if c_maj == "m" else "m",
            b_bc,
            a_bc,
        )
    return KernelLayout(ad, cd, a_maj, "k" if b_maj == "k" else "n", c_maj, a_bc, b_bc)
