"""Compile the CuTe DSL linear-attention kernels the device runs use, on any machine (no GPU needed).

    source scripts/device/env.sh && PYGRAPH_GDN_SM90_CACHE_DIR=.lacache \\
      python3 scripts/device/precompile_linear_attention.py [--only cases,bench,ops,bwd]

On a CPU machine without CuTe DSL installed, `scripts/cpu_dsl_env.sh` provides it (and torch) from
the device bundle: ``PYGRAPH_GDN_SM90_CACHE_DIR=.lacache bash scripts/cpu_dsl_env.sh python
scripts/device/precompile_linear_attention.py --only gdn``.

Each graph is planned and built exactly as the device run builds it (`kda_cases.build_graph` on the
kda_sm90 / gdn2_sm90 engine), so `build_plan` compiles each configuration (about 14 s a key on a CPU
core) into the CuTe DSL kernels' disk cache (`common.sm90_compile`, keyed by the kernel sources' digest and CuTe DSL's
version); carry that folder to the device with the same variable set and the runs load instead of
compiling. ``gdn``: bench_gdn's shapes, gdn's first forward and first backward plans and, with
``--gdn-modes``, gdn_sm90's forward scans by name (bench_gdn's ``--sm90-modes``, BLOCK_V 64), with
``--gdn-bwd SEG:ST:BV:WG,...``, gdn_sm90_bwd at those knobs (bench_gdn's ``--sm90-bwd-segments``
columns); ``--gdn-cases WG,...``: every gdn_sm90_bwd case of the device suite (`gdn_cases.sm90_bwd_cases`)
at those WGMMA values, built as its test builds it. ``cases``: every case of `kda_cases.CASES`; ``bench``: bench_kda_gdn2's forward shapes;
``ops``: test_kda_ops_sm90's layer (the bounded safe gate, sigmoid beta, L2 norm); ``bwd``: every
case's and bench shape's backward on kda_sm90_bwd / gdn2_sm90_bwd (`kda_cases.build_bwd_graph`, about
25-45 s a key), and the layer's with ``ops`` too.
Prints one line per graph and the cache's size.
"""

from __future__ import annotations

import argparse
import time

import kda_cases  # the tests' case table (on PYTHONPATH through scripts/device/env.sh)

# the graphs' device: an H100 SXM's or H200's (the hook's ranking, WGMMA 3's persistent grid)
HOPPER = {"sm_version": 90, "sm_count": 132}


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


def _gdn(modes: list[str], bwd_plans: list[str]) -> None:
    """bench_gdn's graphs (its shapes, H16 D128): the first forward and backward plans, the forward
    scans named in ``modes`` and the backward plans ``SEG:ST:BV:WG`` in ``bwd_plans``, built as its
    timing columns build them (on CPU tensors: planning reads their metadata only)."""
    import dataclasses

    import torch

    import gdn_cases
    from benchmarks.linear_attention import bench_gdn
    from gdn_cases import build_bwd_graph, build_graph, make_inputs

    gdn_cases.GRAPH_DEVICE = HOPPER
    for shape, lengths in bench_gdn.SHAPES.items():
        case = dataclasses.replace(bench_gdn._timing_case(shape, lengths), engine=None)  # the hook's pick
        tensors, _ = make_inputs(case, device="cpu")
        variants = [("fwd first", case, False)]
        for mode in modes:  # at both STAGES where the scan has them, as bench_gdn's columns
            split, wgmma, segment = bench_gdn.SM90_MODES[mode]
            for stages in (2,) if wgmma == 4 else (1, 2):
                knobs = {"block_v": 64, "split": split, "wgmma": wgmma, "segment": segment, "stages": stages}
                variants.append(
                    (f"fwd {mode} ST{stages}", dataclasses.replace(case, engine="gdn_sm90", **knobs), False)
                )
        variants.append(("bwd first", case, True))
        for plan in bwd_plans:
            segment, stages, block_v, wgmma = (int(x) for x in plan.split(":"))
            knobs = {"engine": "gdn_sm90_bwd", "segment": segment, "stages": stages, "block_v": block_v}
            variants.append((f"bwd {plan}", dataclasses.replace(case, wgmma=wgmma, **knobs), True))
        for label, variant, backward in variants:
            t0 = time.perf_counter()
            if backward:
                d_o = torch.zeros_like(tensors["v"])
                g, _ = build_bwd_graph(variant, {**tensors, "dO": d_o}, bench_gdn._hint(variant))
            else:
                g, _ = build_graph(variant, tensors, bench_gdn._hint(variant))
            plan = g.selected_plan.name
            print(f"gdn {shape:10s} {label:18s} {plan:44s} {time.perf_counter() - t0:6.1f} s", flush=True)


def _gdn_cases(wgmma: set[int]) -> None:
    """gdn_sm90_bwd's device cases at the WGMMA values ``wgmma``, planned and built as
    `gdn_cases.execute_bwd` builds them (on CPU tensors, for `HOPPER`)."""
    import gdn_cases

    gdn_cases.GRAPH_DEVICE = HOPPER
    for case in gdn_cases.sm90_bwd_cases():
        if case.wgmma not in wgmma:
            continue
        t0 = time.perf_counter()
        tensors, options = gdn_cases.make_bwd_inputs(case, device="cpu")
        g, _ = gdn_cases.build_bwd_graph(case, tensors, options)
        print(
            f"gdn bwd {case.name:32s} {g.selected_plan.name:52s} {time.perf_counter() - t0:6.1f} s",
            flush=True,
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--only", default="cases,bench,ops,bwd", help="comma list: gdn, cases, bench, ops, bwd"
    )
    parser.add_argument("--gdn-modes", default="", help="comma list of bench_gdn's SM90_MODES (with gdn)")
    parser.add_argument("--gdn-bwd", default="", help="comma list of SEG:ST:BV:WG backward plans (with gdn)")
    parser.add_argument(
        "--gdn-cases", default="", help="comma list of WGMMA values: gdn_sm90_bwd's device cases"
    )
    args = parser.parse_args()
    kda_cases.DEVICE = "cpu"  # the inputs' metadata is all the planning reads
    started = time.perf_counter()
    parts = set(args.only.split(","))
    if "gdn" in parts:
        _gdn([m for m in args.gdn_modes.split(",") if m], [p for p in args.gdn_bwd.split(",") if p])
    if args.gdn_cases:
        _gdn_cases({int(w) for w in args.gdn_cases.split(",")})
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
