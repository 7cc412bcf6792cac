"""Registers, spill frame and shared memory of the cuTile kernels, compiled without a GPU.

    .venv/bin/python scripts/cutile_resources.py [--op gdn|kda|gdn2] [--dim 128] [--target sm_90]
        [--only chunk_grad_wy,prepare] [--occupancy 2]

Each kernel is compiled with ``cuda.tile.compilation.export_kernel`` for the named target, from the
signatures the engine's launches have (the forward's and the backward's ``export_signatures``), and
its cubin's ELF is read: the register count and the per-thread stack frame (spills) from the
``.nv.info`` attributes, the static shared memory from the kernel's ``.nv.shared`` section. A frame
above zero means local-memory traffic; shared memory over ~114 KB leaves one CTA per SM on Hopper.
It needs cuTile and its compiler (tileiras, ptxas and libnvvm of CUDA 13.2 or newer:
``bash scripts/cpu_dsl_env.sh python scripts/cutile_resources.py ...`` provides them from the
device toolchain); a configuration's first compile takes seconds (at most about 20 s at K = V = 128).
"""

from __future__ import annotations

import argparse
import io
import time

from pygraph.cubin_resources import resources


def main() -> None:
    from pygraph_linear_attention.gdn import cutile_bwd, cutile_fwd
    from pygraph_linear_attention.gdn.cutile_bwd_host import GdnCutileBwdConfig

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dim", type=int, default=128, help="K = V")
    parser.add_argument("--target", default="sm_90")
    parser.add_argument("--block-v", type=int, default=64)
    parser.add_argument("--only", default="", help="comma list of launch names (default: every kernel)")
    parser.add_argument("--occupancy", type=int, default=0, help="cuTile's occupancy hint (0: none)")
    parser.add_argument("--op", default="gdn", choices=("gdn", "kda", "gdn2"), help="whose kernels")
    args = parser.parse_args()
    if args.op != "gdn":
        return _channel_gates(args)
    cfg = GdnCutileBwdConfig(
        tokens=16384, sequences=4, heads_qk=16, heads_v=16, heads_g=16, heads_beta=16, heads_a_log=1,
        heads_dt_bias=1, key_dim=args.dim, value_dim=args.dim, io_dtype="bfloat16", scale=args.dim**-0.5,
        block_v=args.block_v,
    )  # fmt: skip
    launches = {"scan": (cutile_fwd.KERNELS["scan"], cutile_fwd.export_signatures(cfg)["scan"])}
    launches |= cutile_bwd.export_signatures(cfg)
    print(f"gdn_cutile kernels for {args.target}, K = V = {args.dim}, BLOCK_V {args.block_v}, bf16")
    _report(launches, args)


def _channel_gates(args: argparse.Namespace) -> None:
    """The kda / gdn2 cuTile forward's and backward's kernels (every option on)."""
    from pygraph_linear_attention.kda import cutile_bwd, cutile_fwd
    from pygraph_linear_attention.kda.cutile_bwd_host import KdaCutileBwdConfig

    cfg = KdaCutileBwdConfig(
        op=args.op, tokens=16384, sequences=4, heads_qk=16, heads_v=16, key_dim=args.dim, value_dim=args.dim,
        io_dtype="bfloat16", scale=args.dim**-0.5, use_qk_l2norm=True, safe_gate=True, has_a_log=True,
        has_dt_bias=True, has_initial_state=True, has_d_final_state=True, block_v=args.block_v,
    )  # fmt: skip
    forward = cutile_fwd.export_signatures(cfg)
    launches = {"output": (cutile_fwd.KERNELS["output"], forward["output"])}
    launches |= cutile_bwd.export_signatures(cfg)  # the forward's other kernels among them
    print(f"{args.op}_cutile kernels for {args.target}, K = V = {args.dim}, BLOCK_V {args.block_v}, bf16")
    _report(launches, args)


def _report(launches: dict, args: argparse.Namespace) -> None:
    import cuda.tile as ct

    from pygraph_linear_attention.gdn.cutile_fwd import hinted

    wanted = {n for n in args.only.split(",") if n}
    seen = set()
    for name, (kernel, signature) in launches.items():
        if (wanted and name not in wanted) or kernel in seen:
            continue
        seen.add(kernel)
        started, out = time.perf_counter(), io.BytesIO()
        if args.occupancy:
            kernel = hinted(kernel, occupancy=args.occupancy)
        ct.compilation.export_kernel(kernel, [signature], out, gpu_code=args.target, output_format="cubin")
        r = resources(out.getvalue())
        print(
            f"  {kernel._pyfunc.__name__:22s} registers {r['registers']:3d}  spill frame {r['frame']:6d} B"
            f"  shared {r['shared'] / 1024:6.1f} KB  ({time.perf_counter() - started:.0f} s to compile)",
            flush=True,
        )


if __name__ == "__main__":
    main()
