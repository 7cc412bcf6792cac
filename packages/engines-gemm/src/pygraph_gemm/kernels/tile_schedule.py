"""The persistent tile schedule of the SM90 GEMM: which output tile a cluster runs at each step.

Work units are clusters of output tiles, numbered 0 .. units-1 over (cluster rows, cluster columns,
batch); the persistent grid has one CTA per SM in ``resident`` clusters, and cluster ``c`` runs units
c, c + resident, c + 2 * resident, ... Units map to cluster coordinates in raster order along M
(rows fastest) or along N. With ``swizzle = s > 1`` the grid is walked in bands s clusters wide
(s columns when rastering along M, s rows along N), band by band, so the clusters resident together
cover a compact block whose A rows and B columns stay in L2. The last band is as wide as what is
left of the grid: no unit falls outside it, so a grid that s does not divide wastes nothing.

Host side: `schedule_extent` (traced in the JIT host function). Device side: `unit_coord`,
`placed_rank`, and a CTA's view of them, `cta_tile` and `cta_work` (traced in the kernel). Sizes are
runtime Int32 values; ``swizzle`` and the raster order are compile-time. All of them also run on
plain Python ints, which is how the tests check the order.
"""

from __future__ import annotations


def _min(a, b):
    """min() for Python ints and traced values alike (the DSL is imported only when tracing)."""
    if isinstance(a, int) and isinstance(b, int):
        return min(a, b)
    import cutlass

    return cutlass.min(a, b)


def _pick(cond, if_true, if_false):
    """`if_true if cond else if_false` for Python values and for traced Int32 values alike."""
    if isinstance(cond, bool):
        return if_true if cond else if_false
    import cutlass

    return cutlass.Int32(cutlass.select_(cond, if_true, if_false))


def schedule_extent(n_tiles_mnl, cluster_mn: tuple[int, int], resident: int):
    """(cluster rows, cluster columns, work units, clusters launched) for a grid of output tiles."""
    rows = (n_tiles_mnl[0] + cluster_mn[0] - 1) // cluster_mn[0]
    cols = (n_tiles_mnl[1] + cluster_mn[1] - 1) // cluster_mn[1]
    units = rows * cols * n_tiles_mnl[2]
    return rows, cols, units, _min(units, resident)


def unit_coord(u, rows, cols, swizzle: int, raster_m: bool, serpentine: bool = False):
    """Cluster coordinates (row, column, batch) of work unit ``u``. With ``serpentine`` every other
    band (every other line, unswizzled) walks the raster axis backward, so a band starts where the
    one before it ended: the operand tiles of its first round (A's rows along M) were just read."""
    per_batch = rows * cols
    batch = u // per_batch
    r = u - batch * per_batch
    # `along`: the raster axis (rows when rastering along M); `across`: the other one
    along, across = (rows, cols) if raster_m else (cols, rows)
    if swizzle == 1:  # down the raster axis, then the next line across
        j = r // along
        i = r - j * along
        band = j
    else:  # bands `swizzle` lines wide: across the band first, then down the raster axis
        band_units = along * swizzle
        band = r // band_units
        off = r - band * band_units
        width = _min(across - band * swizzle, swizzle)
        i = off // width
        j = band * swizzle + off - i * width
    if serpentine:
        i = _pick(band % 2 == 1, along - 1 - i, i)
    return (i, j, batch) if raster_m else (j, i, batch)


# ---------------------------------------------------------------------------- placement order
# Where the H200 puts a full persistent grid of 2-CTA clusters (read by two probes kept in git,
# `git show fba67cc5e32e:scripts/device/cluster_placement.py` for the clusters and gpc_map.cu there
# for the GPCs):
# clusters 0-3 go to TPCs 62-65 (SMs 124-131) and cluster c >= 4 to TPC c - 4 (SMs 2t, 2t + 1).
# TPCs are numbered across the GPCs: TPC t < 32 sits in GPC t % 8, TPC 32 <= t < 60 in GPC
# (t - 32) % 7 + 1, so GPCs 1-7 hold eight TPCs each below 60 and GPC 0 four. `placed_rank`
# numbers the clusters GPC by GPC (GPCs 1-7, eight each; then GPC 0's four; then TPCs 60-65), so
# eight consecutive units run on one GPC, and the L2 request coalescer merges the operand reads of
# CTAs that share a tile there. It is a permutation of 0 .. resident-1 whatever the placement is:
# only its locality rests on the placement seen. Applied at 64 and 66 resident clusters (the full
# grid and the one-wave 8x8 grid of 2-CTA clusters), the identity elsewhere.
_PLACED_FRONT = 4  # clusters the hardware puts on the last TPCs first
_PLACED_FULL = 66  # TPCs of the H200 (132 SMs)
_PLACED_LOW = 32  # TPCs 0..31: four in each of 8 GPCs
_PLACED_HIGH = 60  # TPCs 32..59: four in each of GPCs 1..7
_PLACED_GPC = 8  # clusters per GPC run (GPCs 1..7)


def placed_rank(c, resident):
    """The unit cluster ``c`` of ``resident`` starts at under `GemmKnobs.place_order`."""
    t = _pick(c >= _PLACED_FRONT, c - _PLACED_FRONT, c + _PLACED_FULL - _PLACED_FRONT)
    gpc, j = t % 8, t // 8  # below TPC 32: GPC t % 8, the j-th of its four there
    low = _pick(gpc >= 1, (gpc - 1) * _PLACED_GPC + j, 7 * _PLACED_GPC + j)
    hi = t - _PLACED_LOW  # TPCs 32..59: GPC hi % 7 + 1, the (4 + j)-th of its eight
    high = (hi % 7) * _PLACED_GPC + 4 + hi // 7
    rest = t - (_PLACED_FULL - resident)  # TPCs 60..65 last, in order (60, 61 idle at 64)
    v = _pick(t < _PLACED_LOW, low, _pick(t < _PLACED_HIGH, high, rest))
    full = _pick(resident == _PLACED_FULL, 1, 0) + _pick(resident == _PLACED_FULL - 2, 1, 0)
    return _pick(full > 0, v, c)


# ---------------------------------------------------------------------------- one CTA's work
def cta_tile(knobs, unit, rows, cols, cta_mn):
    """(tile row, tile column, L index) of the CTA at ``cta_mn`` in its cluster, in work unit ``unit``
    (``knobs``: the kernel's GemmKnobs; the L index carries the K slice under split-K)."""
    row, col, batch = unit_coord(unit, rows, cols, knobs.swizzle, knobs.raster == "m", knobs.serpentine)
    return row * knobs.cga_m + cta_mn[0], col * knobs.cga_n + cta_mn[1], batch


def cta_work(knobs, unit, rows, cols, cta_mn, k_tiles):
    """Work item ``unit`` of the CTA at ``cta_mn``: (tile row, tile column, batch, first k-tile,
    k-tiles, K slice, slices, semaphore slot). The slot indexes the tile's semaphore and partials
    (split-K only)."""
    row, col, lmode = cta_tile(knobs, unit, rows, cols, cta_mn)
    if knobs.split_k > 1:
        S = knobs.split_k  # the slices ride on the schedule's L mode: l * S + slice
        batch = lmode // S
        ks = lmode - batch * S
        kt0 = ks * k_tiles // S
        n_kt = (ks + 1) * k_tiles // S - kt0
        # the cluster-padded tile grid the semaphores are laid out on (the schedule's extent)
        slot = (batch * (rows * knobs.cga_m) + row) * (cols * knobs.cga_n) + col
        return row, col, batch, kt0, n_kt, ks, S, slot
    return row, col, lmode, _zero_like(k_tiles), k_tiles, 0, 1, 0


def _zero_like(x):
    """0 as a Python int beside Python ints, else as a traced Int32 (the first k-tile of the other
    branches is a runtime value)."""
    if isinstance(x, int):
        return 0
    import cutlass

    return cutlass.Int32(0)
