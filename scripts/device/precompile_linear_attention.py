"""Compile the CuTe DSL linear-attention kernels the device runs use, on any machine (no GPU needed).

    source scripts/device/env.sh && PYGRAPH_GDN_SM90_CACHE_DIR=.lacache \\
      python3 scripts/device/precompile_linear_attention.py [--only cases,bench,ops,bwd]

Each graph is planned and built exactly as the device run builds it (`kda_cases.build_graph` on the
kda_sm90 / gdn2_sm90 engine), so `build_plan` compiles each configuration (about 14 s a key on a CPU
core) into the CuTe DSL kernels' disk cache (`common.sm90_compile`, keyed by the kernel sources' digest and CuTe DSL's
version); carry that folder to the device with the same variable set and the runs load instead of
compiling. ``cases``: every case of `kda_cases.CASES`; ``bench``: bench_kda_gdn2's forward shapes;
``ops``: test_kda_ops_sm90's layer (the bounded safe gate, sigmoid beta, L2 norm); ``bwd``: every
case's and bench shape's backward on kda_sm90_bwd / gdn2_sm90_bwd (`kda_cases.build_bwd_graph`, about
25-45 s a key), and the layer's with ``ops`` too.
Prints one line per graph and the cache's size.
"""

from __future__ import annotations

import argparse
import time

import kda_cases  # the tests' case table (on PYTHONPATH through scripts/device/env.sh)


def _graphs(parts: set[str]):
    from benchmarks.linear_attention import bench_kda_gdn2

    if "cases" in parts:
        yield from kda_cases.CASES
    for op in ("kda", "gdn2"):
        if "bench" in parts:
            for shape, lengths in bench_kda_gdn2.SHAPES.items():
                heads, dim = bench_kda_gdn2.HEADS, bench_kda_gdn2.DIM
                yield kda_cases.KdaCase(op, f"bench-{shape}", lengths, heads, heads, dim, dim, options=())
                if len(lengths) == 1:  # one long sequence: BLOCK_V 16's plans too, for kda_kernel_times
                    yield kda_cases.KdaCase(
                        op, f"bench-{shape}-v16", lengths, heads, heads, dim, dim, options=(), block_v=16
                    )
        if "ops" in parts:  # the compiled training step's layer: 2 heads, every gate option
            options = ("qk_l2norm", "beta_sigmoid", "safe_gate")
            yield kda_cases.KdaCase(op, "ops-layer", (63, 1, 136), 2, 2, options=options)


def _inputs(case):
    """The case's CPU inputs and options as the device run makes them."""
    tensors, options = kda_cases.make_inputs(case, device="cpu")
    if case.name.startswith("ops-"):  # the layer passes its beta logits in float32
        tensors["beta"] = tensors["beta"].float()
    return tensors, options


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="cases,bench,ops,bwd", help="comma list: cases, bench, ops, bwd")
    args = parser.parse_args()
    kda_cases.DEVICE = "cpu"  # the inputs' metadata is all the planning reads
    started = time.perf_counter()
    parts = set(args.only.split(","))
    if "bwd" in parts:
        import torch

        # the bench shapes first: a timing run needs them
        for case in [*_graphs({"bench"}), *kda_cases.CASES, *_graphs({"ops"} & parts)]:
            t0 = time.perf_counter()
            tensors, options = _inputs(case)
            final = options.pop("output_final_state")
            t, n = sum(case.lengths), len(case.lengths)
            extra = {"dO": torch.zeros(t, case.heads_out, case.value_dim, dtype=tensors["q"].dtype)}
            if final:
                extra["d_final_state"] = torch.zeros(n, case.heads_out, case.value_dim, case.key_dim)
            g, _ = kda_cases.build_bwd_graph(case, tensors, extra, options, engine="sm90")
            print(
                f"bwd-{case.id:28s} {g.graph.selected_plan.name:36s} {time.perf_counter() - t0:6.1f} s",
                flush=True,
            )
    for case in _graphs(parts):
        t0 = time.perf_counter()
        tensors, options = _inputs(case)
        g, _ = kda_cases.build_graph(case, tensors, options, engine="sm90")
        print(f"{case.id:32s} {g.selected_plan.name:36s} {time.perf_counter() - t0:6.1f} s", flush=True)
    from pygraph.disk_cache import cache_dir

    folder = cache_dir("gdn_sm90", "PYGRAPH_GDN_SM90_CACHE_DIR")
    size = sum(p.stat().st_size for p in folder.rglob("*") if p.is_file()) if folder else 0
    print(f"{time.perf_counter() - started:.0f} s; cache {folder}: {size / 2**20:.1f} MiB")


if __name__ == "__main__":
    main()
