"""The persistent tile schedule of the SM90 GEMM: which output tile a cluster runs at each step.

Work units are clusters of output tiles, numbered 0 .. units-1 over (cluster rows, cluster columns,
batch); the persistent grid has one CTA per SM in ``resident`` clusters, and cluster ``c`` runs units
c, c + resident, c + 2 * resident, ... Units map to cluster coordinates in raster order along M
(rows fastest) or along N. With ``swizzle = s > 1`` the grid is walked in bands s clusters wide
(s columns when rastering along M, s rows along N), band by band, so the clusters resident together
cover a compact block whose A rows and B columns stay in L2. The last band is as wide as what is
left of the grid: no unit falls outside it, so a grid that s does not divide wastes nothing.

Host side: `schedule_extent` (traced in the JIT host function). Device side: `unit_coord` (traced in
the kernel). Sizes are runtime Int32 values; ``swizzle`` and the raster order are compile-time. Both
also run on plain Python ints, which is how the tests check the order.
"""

from __future__ import annotations

import cutlass


def schedule_extent(n_tiles_mnl, cluster_mn: tuple[int, int], resident: int):
    """(cluster rows, cluster columns, work units, clusters launched) for a grid of output tiles."""
    rows = (n_tiles_mnl[0] + cluster_mn[0] - 1) // cluster_mn[0]
    cols = (n_tiles_mnl[1] + cluster_mn[1] - 1) // cluster_mn[1]
    units = rows * cols * n_tiles_mnl[2]
    return rows, cols, units, cutlass.min(units, resident)


def unit_coord(u, rows, cols, swizzle: int, raster_m: bool):
    """Cluster coordinates (row, column, batch) of work unit ``u``."""
    per_batch = rows * cols
    batch = u // per_batch
    r = u - batch * per_batch
    # `along`: the raster axis (rows when rastering along M); `across`: the other one
    along, across = (rows, cols) if raster_m else (cols, rows)
    if swizzle == 1:  # down the raster axis, then the next line across
        j = r // along
        i = r - j * along
    else:  # bands `swizzle` lines wide: across the band first, then down the raster axis
        band_units = along * swizzle
        band = r // band_units
        off = r - band * band_units
        width = cutlass.min(across - band * swizzle, swizzle)
        i = off // width
        j = band * swizzle + off - i * width
    return (i, j, batch) if raster_m else (j, i, batch)
