"""Do two knob sets give bit-identical outputs? For kernel changes meant to move no value (an
instruction rewrite, a reordering that keeps every sum's order): bias+gelu_tanh, both dtypes, a
ragged shape and 8192^3, fresh random inputs, each output poisoned with NaN first.

    source scripts/device/env.sh && python3 scripts/device/bitwise_gemm.py 128x256c21z8g2vf 128x256c21z8g2vfo
"""

from __future__ import annotations

import sys

import torch

from benchmarks.gemm.bench_gemm import make_call
from pygraph_gemm.kernels.config import EpilogueSpec
from pygraph_gemm.knob_labels import parse_knob_label

SHAPES = ((2900, 3000, 4104), (8192, 8192, 8192))


def main(ref_label: str, new_label: str) -> int:
    ref, new = parse_knob_label(ref_label), parse_knob_label(new_label)
    failed = 0
    for dt in (torch.bfloat16, torch.float16):
        spec = EpilogueSpec(
            bias=True, activation="gelu_approx_tanh", vec_dtype="bf16" if dt == torch.bfloat16 else "fp16"
        )
        for m, n, k in SHAPES:
            a = torch.randn(m, k, device="cuda", dtype=dt)
            b = torch.randn(n, k, device="cuda", dtype=dt).t()
            bias = torch.randn(n, device="cuda", dtype=dt)
            outs = []
            for kn in (ref, new):
                c = torch.full((m, n), float("nan"), device="cuda", dtype=dt)
                make_call(kn, spec, a, b, c, bias)()
                outs.append(c)
            torch.cuda.synchronize()
            same = torch.equal(outs[0].view(torch.int16), outs[1].view(torch.int16))
            differ = int((outs[0].view(torch.int16) != outs[1].view(torch.int16)).sum())
            nan = int(torch.isnan(outs[1]).sum())
            failed += not same or nan > 0
            print(
                f"{str(dt)[6:]} {m}x{n}x{k}: {'identical' if same else f'{differ} elements differ'}, NaN {nan}"
            )
    print(
        f"SUMMARY bitwise {ref_label} vs {new_label}: {'identical' if not failed else f'{failed} cases differ'}"
    )
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main(*sys.argv[1:3]))
