"""DRAM reads of a persistent GEMM's tile schedule under a least-recently-used L2: a model, no GPU.

    PYTHONPATH=packages/engines-gemm/src python benchmarks/l2_reuse_model.py --shape 8192x8192x8192

The resident clusters run their i-th work units together (one round), k-block by k-block in
lockstep; each k-block a cluster reads its A rows and B columns of that k-block (one chunk each,
multicast inside the cluster), and each finished unit writes its C tile through L2. The L2 is one
LRU pool of ``--l2-mb``. Printed per schedule variant (the knob-label suffixes of
`pygraph_gemm.knob_labels`: v serpentine bands, f every other tile's k-blocks last to first, n the
raster along N): DRAM bytes read per launch, and the share of the operand reads that miss. It
ignores the hardware's real replacement policy, the two L2 halves and the clusters' drift out of
lockstep, so it ranks schedules; the ncu counter (`dram__bytes_read.sum`,
scripts/device/ab_gemm_knobs.sh NCU_L2_SHAPES) is what measures them. With 40 MB (the default) it
reproduces ncu's three readings of the rule's tiles: 1.22 GB at 8192^3 with swizzle 8 (ncu 1.23),
1.49 with swizzle 4 (1.49), 0.56 at 16384x4096x4096 (0.56). With the H200's full 50 MB the last
reads 0.33: the L2 holds less of one launch's lines than its size.
"""

from __future__ import annotations

import argparse
from collections import OrderedDict

from pygraph_gemm.kernels.tile_schedule import unit_coord


def dram_reads(
    m: int,
    n: int,
    k: int,
    *,
    cluster_mn=(256, 256),
    tile_k=64,
    elem_bytes=2,
    resident=66,
    swizzle=8,
    raster_m=True,
    serpentine=False,
    k_flip=False,
    l2_bytes=40 << 20,
) -> tuple[int, float]:
    """(DRAM bytes read, miss share of the A/B chunk reads) for one launch of the schedule."""
    rows, cols = -(-m // cluster_mn[0]), -(-n // cluster_mn[1])
    k_blocks = -(-k // tile_k)
    a_chunk = cluster_mn[0] * tile_k * elem_bytes  # one cluster's A rows of one k-block
    b_chunk = cluster_mn[1] * tile_k * elem_bytes
    c_tile = cluster_mn[0] * cluster_mn[1] * elem_bytes
    lru: OrderedDict = OrderedDict()
    held = 0
    missed = 0
    reads = misses = 0

    def touch(key, size, count_read=True):
        nonlocal held, missed, reads, misses
        if key in lru:
            lru.move_to_end(key)
        else:
            lru[key] = size
            held += size
            if count_read:
                missed += size
                misses += 1
            while held > l2_bytes:
                _, s = lru.popitem(last=False)
                held -= s
        if count_read:
            reads += 1

    units = rows * cols
    for first in range(0, units, resident):
        rnd = first // resident
        batch = [
            unit_coord(u, rows, cols, swizzle, raster_m, serpentine)
            for u in range(first, min(first + resident, units))
        ]
        order = range(k_blocks - 1, -1, -1) if k_flip and rnd % 2 else range(k_blocks)
        for t in order:
            for i, j, _ in batch:
                touch(("a", i, t), a_chunk)
                touch(("b", j, t), b_chunk)
        for i, j, _ in batch:  # the finished tiles' C lines take L2 space; they are not reads
            touch(("c", i, j), c_tile, count_read=False)
    return missed, misses / reads


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", default="8192x8192x8192", help="MxNxK")
    ap.add_argument("--l2-mb", type=float, default=40.0, help="LRU capacity (40 fits ncu's readings)")
    ap.add_argument("--swizzle", type=int, default=8)
    args = ap.parse_args(argv)
    m, n, k = (int(x) for x in args.shape.split("x"))
    print(f"{args.shape}, 128x256 tiles in 2x1 clusters, swizzle {args.swizzle}, {args.l2_mb:g} MB LRU L2")
    print(f"{'schedule':10s} {'DRAM read':>10s} {'miss share':>11s}")
    variants = {
        "rule": {},
        "v": dict(serpentine=True),
        "f": dict(k_flip=True),
        "vf": dict(serpentine=True, k_flip=True),
        "n": dict(raster_m=False),
        "n vf": dict(raster_m=False, serpentine=True, k_flip=True),
    }
    for label, kw in variants.items():
        bytes_read, miss = dram_reads(
            m, n, k, swizzle=args.swizzle, l2_bytes=int(args.l2_mb * (1 << 20)), **kw
        )
        print(f"{label:10s} {bytes_read / 1e9:9.2f}G {miss:11.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
