"""Where the H200 puts a persistent GEMM grid's clusters, and when each one starts.

    source /tmp/site/env.sh && source scripts/device/env.sh && \
      python3 scripts/device/cluster_placement.py --knobs 64x128c21 --shape 1024x1024x4096

Why: nvjet's kernels get 5-10x more of their identical L2 requests merged by
the L2 request coalescer than ours, for the same TMA traffic. Merging needs the CTAs that share an
operand tile to ask for it close together: close in time, and perhaps close in place (one GPC). This
probe reads both for the grid gemm_sm90 launches.

1. A kernel shaped like gemm_sm90's grid: grid (cm, cn, clusters), clusters (cm, cn, 1), one CTA
   per SM (200 KB of shared memory each), `clusters` from the occupancy query the GEMM uses
   (compile_cache.resident_clusters). Thread 0 of each CTA records %smid and %globaltimer on entry.
2. The same kernel with 8-CTA clusters, several launches. A cluster never spans GPCs, so SMs seen
   together in one cluster share a GPC. The union of those pairs groups the SMs; on the H200 a GPC
   of 16-18 SMs comes out as two groups of 8 (gpc_map.cu's 16-CTA clusters join them).
3. The GEMM's first round (`tile_schedule.unit_coord`: cluster c runs unit c first). For each A row
   panel and each B column panel, the clusters that read it, how many GPC groups they span, and
   how far apart they start.
"""

# No `from __future__ import annotations`: the DSL reads the jit functions' annotations as objects.
import argparse
import functools
from collections import defaultdict

SMEM_BYTES = 200 * 1024  # > half an SM's 228 KB: one CTA per SM, as the GEMM's shared memory makes it
THREADS = 128


@functools.cache
def build(cm: int, cn: int, clusters: int):
    """The compiled recorder for grid (cm, cn, clusters) in clusters of (cm, cn): it takes an
    int64 tensor of (cm * cn * clusters, 2) and writes each CTA's (SM, entry time in ns)."""
    import cutlass.cute as cute
    import torch
    from cutlass import Int64
    from cutlass.cute.runtime import from_dlpack

    @cute.kernel
    def record(out: cute.Tensor):
        tidx, _, _ = cute.arch.thread_idx()
        bx, by, bz = cute.arch.block_idx()
        if tidx == 0:
            cta = (bz * cn + by) * cm + bx
            out[cta, 0] = Int64(cute.arch.smid())
            out[cta, 1] = cute.arch.globaltimer()

    @cute.jit
    def launch(out: cute.Tensor):
        record(out).launch(
            grid=(cm, cn, clusters), block=(THREADS, 1, 1), cluster=(cm, cn, 1), smem=SMEM_BYTES
        )

    # compiled against a tensor like the one it will get: on the GPU when there is one (a CPU-only
    # machine compiles it for the tests)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    probe = torch.zeros(cm * cn * clusters, 2, dtype=torch.int64, device=device)
    return cute.compile(launch, from_dlpack(probe))


def run(cm: int, cn: int, clusters: int):
    """[(SM, start ns relative to the first CTA)] per CTA, CTA index = (z * cn + y) * cm + x."""
    import torch
    from cutlass.cute.runtime import from_dlpack

    fn = build(cm, cn, clusters)
    out = torch.full((cm * cn * clusters, 2), -1, dtype=torch.int64, device="cuda")
    fn(from_dlpack(out))
    torch.cuda.synchronize()
    rows = out.cpu().tolist()
    if any(sm < 0 for sm, _ in rows):
        raise RuntimeError(f"cluster_placement: a CTA of the {cm}x{cn} x {clusters} grid did not record")
    t0 = min(t for _, t in rows)
    return [(sm, t - t0) for sm, t in rows]


def gpc_groups(launches: list[list[tuple[int, int]]], size: int = 8) -> dict[int, int]:
    """SM -> group index from the records of launches in ``size``-CTA clusters (`run`): the SMs one
    cluster held together share a GPC, and the union of those pairs groups the SMs."""
    parent: dict[int, int] = {}

    def find(x):
        parent.setdefault(x, x)
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for rec in launches:
        if len(rec) % size:
            raise ValueError(f"a launch of {len(rec)} CTAs is not whole {size}-CTA clusters")
        for c in range(len(rec) // size):
            sms = [sm for sm, _ in rec[c * size : (c + 1) * size]]
            for sm in sms[1:]:
                parent[find(sm)] = find(sms[0])
    roots = sorted({find(sm) for sm in parent})
    return {sm: roots.index(find(sm)) for sm in parent}


def grid_extent(kn, m: int, n: int, resident: int):
    """`tile_schedule.schedule_extent` of knob set ``kn``'s grid at M x N (kernel frame, batch 1):
    (cluster rows, cluster columns, work units, clusters launched)."""
    from pygraph_gemm.kernels.tile_schedule import schedule_extent

    tiles = (-(-m // kn.tile_m), -(-n // kn.tile_n), 1)
    return schedule_extent(tiles, (kn.cga_m, kn.cga_n), resident)


def report(kn, m: int, n: int, rec, groups: dict[int, int], resident: int) -> list[str]:
    """The printed lines for knob set ``kn`` at M x N: per cluster its SMs, their groups and its
    start; then per A row panel and B column panel of the first round (cluster c runs unit c), the
    clusters that read it, the groups they span and how far apart they start. ``rec``: `run`'s
    records of the grid; ``groups``: `gpc_groups`."""
    from pygraph_gemm.kernels.tile_schedule import unit_coord

    cm, cn = kn.cga_m, kn.cga_n
    size = cm * cn
    rows, cols, units, launched = grid_extent(kn, m, n, resident)
    if len(rec) != launched * size:
        raise ValueError(f"{len(rec)} CTA records for {launched} clusters of {size}")
    start = [min(t for _, t in rec[c * size : (c + 1) * size]) for c in range(launched)]
    lines = [
        f"{launched} clusters of {cm}x{cn} ({resident} resident), {len(set(groups.values()))} SM groups",
        "cluster  SMs            groups  start ns",
    ]
    for c in range(launched):
        sms = [sm for sm, _ in rec[c * size : (c + 1) * size]]
        in_groups = sorted({groups.get(sm, -1) for sm in sms})
        lines.append(f"{c:7d}  {sms!s:14s} {in_groups!s:7s} {start[c]:8d}")
    sharers = defaultdict(list)
    for c in range(min(launched, units)):
        row, col, _ = unit_coord(c, rows, cols, kn.swizzle, kn.raster == "m", kn.serpentine)
        sharers[("A rows", row)].append(c)
        sharers[("B cols", col)].append(c)
    lines += ["", "panel        clusters  groups spanned  start spread ns"]
    for (what, idx), cs in sorted(sharers.items()):
        if len(cs) < 2:
            continue
        spanned = {groups.get(rec[c * size][0], -1) for c in cs}
        spread = max(start[c] for c in cs) - min(start[c] for c in cs)
        lines.append(f"{what} {idx:3d}  {len(cs):8d}  {len(spanned):14d}  {spread:15d}")
    return lines


def main(argv=None) -> int:
    from benchmarks.gemm.shapes import parse_shape
    from pygraph_gemm.kernels.compile_cache import resident_clusters
    from pygraph_gemm.knob_labels import parse_knob_label

    ap = argparse.ArgumentParser()
    ap.add_argument("--knobs", default="64x128c21", help="the GEMM's knob label (its tile, cluster, order)")
    ap.add_argument("--shape", default="1024x1024x4096", help="MxNxK of the grid to place")
    ap.add_argument("--group-launches", type=int, default=6, help="8-CTA launches to group SMs by GPC")
    args = ap.parse_args(argv)
    kn = parse_knob_label(args.knobs)
    m, n, _ = parse_shape(args.shape)
    resident = resident_clusters(kn.cga_m * kn.cga_n)
    launched = grid_extent(kn, m, n, resident)[3]
    rec = run(kn.cga_m, kn.cga_n, launched)
    groups = gpc_groups([run(8, 1, resident_clusters(8)) for _ in range(args.group_launches)])
    print(f"{args.knobs} at {args.shape}")
    print("\n".join(report(kn, m, n, rec, groups, resident)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
