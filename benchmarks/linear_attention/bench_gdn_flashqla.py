"""FlashQLA's and FLA's Triton GDN timed side by side in FlashQLA's own process: the bridge from
FlashQLA to `bench_gdn`'s FLA column.

    PYTHONPATH=/tmp/fq:/tmp/site FLA_FLASH_QLA=0 \\
      python -m benchmarks.linear_attention.bench_gdn_flashqla [--rounds 3] [--shapes B4xT4096,...]
        [--gates strong,weak] [--skip bwd] [--json PATH]

FlashQLA (TileLang) pins an apache-tvm-ffi that conflicts with CuTe DSL's, so it cannot share a
process with our kernels; FLA's Triton kernels run in both processes. This one times, at
`bench_gdn`'s shapes (H16, D128, bf16 q/k/v with unit k rows, fp32 g = logsigmoid(N(mean, 1)) with
mean 0 for strong gates and 4 for weak ones, beta uniform in (0, 1) in bf16), the forward and the
forward+backward (``.backward(dO)``) of ``flash_qla.chunk_gated_delta_rule`` and of FLA's
``chunk_gated_delta_rule`` with FLA_FLASH_QLA=0 (its Triton path), each from a cold L2
(`benchmarks.harness.device_time`), in interleaved rounds; per round the ratio FLA / FlashQLA, and
the median. ``ours / FlashQLA`` = (FLA / ours in bench_gdn's run) / (FLA / FlashQLA here), both on
one warm machine (`flashqla_bridge` reads both runs' JSON and prints that table). Before timing
it prints FlashQLA's output error against FLA's.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import statistics

from benchmarks.harness import device_time, rotated

SHAPES = {
    "B4xT4096": (4096,) * 4,
    "B1xT32768": (32768,),
    "varlen8": (1024, 8192, 2048, 4096, 512, 7680, 3072, 6144),
}
GATES = {"strong": 0.0, "weak": 4.0}
HEADS, DIM = 16, 128


def _inputs(lengths: tuple[int, ...], gate_mean: float, seed: int = 1) -> dict:
    import torch
    import torch.nn.functional as F

    gen = torch.Generator(device="cuda").manual_seed(seed)
    t = sum(lengths)

    def normal(*shape):
        return torch.randn(*shape, device="cuda", generator=gen)

    cu = torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], device="cuda", dtype=torch.long)
    return {
        "q": F.normalize(normal(t, HEADS, DIM), dim=-1).bfloat16(),
        "k": F.normalize(normal(t, HEADS, DIM), dim=-1).bfloat16(),
        "v": normal(t, HEADS, DIM).bfloat16(),
        "g": F.logsigmoid(normal(t, HEADS) + gate_mean),
        "beta": torch.rand(t, HEADS, device="cuda", generator=gen).bfloat16(),
        "cu_seqlens": cu,
        "dO": normal(t, HEADS, DIM).bfloat16(),
    }


def _column(fn, x: dict, lengths: tuple[int, ...], backward: bool):
    """(call, holder) of ``fn`` (FLA's API) on ``x``: the dense [B, T, H, D] form for equal lengths,
    else one row with cu_seqlens; with ``backward`` the call is forward then ``.backward(dO)``."""
    names = ("q", "k", "v", "g", "beta")
    if len(set(lengths)) == 1:
        b, t = len(lengths), lengths[0]
        leaves = [x[n].view(b, t, *x[n].shape[1:]).detach().requires_grad_(backward) for n in names]
        kwargs, d_o = {}, x["dO"].view(b, t, HEADS, DIM)
    else:
        leaves = [x[n][None].detach().requires_grad_(backward) for n in names]
        kwargs, d_o = {"cu_seqlens": x["cu_seqlens"]}, x["dO"][None]
    holder = {}

    def call():
        o, _ = fn(*leaves, scale=DIM**-0.5, **kwargs)
        if backward:
            o.backward(d_o)
        holder["o"] = o.detach()

    return call, holder


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--shapes", default=",".join(SHAPES))
    parser.add_argument("--gates", default=",".join(GATES))
    parser.add_argument("--skip", default="", help="bwd: the forward only")
    parser.add_argument("--json", default="", help="where to write the medians (flashqla_bridge reads them)")
    args = parser.parse_args()
    if os.environ.get("FLA_FLASH_QLA") != "0":
        raise SystemExit("bench_gdn_flashqla: set FLA_FLASH_QLA=0, so FLA's column is its Triton path")
    import torch
    from fla.ops.gated_delta_rule import chunk_gated_delta_rule as fla_gdn
    from flash_qla import chunk_gated_delta_rule as qla_gdn

    print(f"device: {torch.cuda.get_device_name()}")
    passes = [False] if "bwd" in args.skip else [False, True]
    medians: dict = {}
    for gates in args.gates.split(","):
        for shape in args.shapes.split(","):
            lengths = SHAPES[shape]
            x = _inputs(lengths, GATES[gates])
            for backward in passes:
                what = f"{shape} {gates} {'fwd+bwd' if backward else 'fwd'}"
                columns, outs = {}, {}
                for name, fn in (("flashqla", qla_gdn), ("fla", fla_gdn)):
                    call, holder = _column(fn, x, lengths, backward)
                    call()  # first calls compile / autotune
                    call()
                    torch.cuda.synchronize()
                    columns[name], outs[name] = call, holder
                ref = outs["fla"]["o"].float()
                err = ((outs["flashqla"]["o"].float() - ref).norm() / ref.norm()).item()
                per_round = {name: [] for name in columns}
                for r in range(args.rounds):
                    for name in rotated(list(columns), r):
                        per_round[name].append(device_time(columns[name]))
                ratios = [f / q for f, q in zip(per_round["fla"], per_round["flashqla"])]
                med = {name: statistics.median(ts) for name, ts in per_round.items()}
                key = f"{gates} {shape} {'fwd+bwd' if backward else 'fwd'}"
                medians[key] = {**med, "rel_err_vs_fla": err, "fla_over_flashqla_rounds": ratios}
                print(
                    f"{what}: flashqla {med['flashqla']:.3f} ms, fla {med['fla']:.3f} ms; fla/flashqla per round "
                    f"{' '.join(f'{r:.2f}' for r in ratios)}, median {statistics.median(ratios):.2f}; "
                    f"O rel err flashqla vs fla {err:.1e}",
                    flush=True,
                )
    if args.json:
        pathlib.Path(args.json).write_text(
            json.dumps({"device": torch.cuda.get_device_name(), "cells": medians}, indent=1)
        )


if __name__ == "__main__":
    main()
