"""ncu target: one launch each of gemm_sm90's fused bias+gelu (one per knob label given), cuBLAS's mm,
cuBLASLt's fused bias+gelu and cuBLAS's addmm (bias only), bf16, inside cudaProfilerStart/Stop (warm-up launches stay outside).
The shape is 8192^3 unless PYGRAPH_NCU_SHAPE says otherwise (e.g. 16384x4096x4096);
PYGRAPH_NCU_EPILOGUE=plain (or bias, bias+relu) builds ours without the epilogue (or with the bias
alone, or the bias and relu: no MUFU work);
cuBLASLt's fused kernel still runs.

    ncu --clock-control none --profile-from-start off --section SpeedOfLight \
        python3 scripts/device/ncu_gemm_target.py [128x256c21 128x256c21z4 ...]
"""

from __future__ import annotations

import os
import sys

import torch

from benchmarks.gemm.bench_gemm import anchor_calls, make_call
from benchmarks.gemm.shapes import parse_shape
from pygraph_gemm.kernels.config import EpilogueSpec
from pygraph_gemm.knob_labels import parse_knob_label

m, n, k = parse_shape(os.environ.get("PYGRAPH_NCU_SHAPE", "8192x8192x8192"))
torch.manual_seed(0)
a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
b = torch.randn(n, k, device="cuda", dtype=torch.bfloat16).t()
bias = torch.randn(n, device="cuda", dtype=torch.bfloat16)
c = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
# PYGRAPH_NCU_EPILOGUE: ours without the epilogue, with the bias alone, or with bias and relu (no
# MUFU work); bias+gelu otherwise
EPILOGUES = {
    "plain": EpilogueSpec(),
    "bias": EpilogueSpec(bias=True, vec_dtype="bf16"),
    "bias+relu": EpilogueSpec(bias=True, activation="relu", vec_dtype="bf16"),
}
spec = EPILOGUES.get(
    os.environ.get("PYGRAPH_NCU_EPILOGUE", ""),
    EpilogueSpec(bias=True, activation="gelu_approx_tanh", vec_dtype="bf16"),
)
labels = sys.argv[1:] or ["128x256c21"]
calls = [make_call(parse_knob_label(lab), spec, a, b, c, bias) for lab in labels]
anchors = anchor_calls(a, b, bias, c)
calls += [anchors["mm"], anchors["lt_fused"], anchors["addmm"]]
for _ in range(20):  # warm the clocks and every lazy init
    for f in calls:
        f()
torch.cuda.synchronize()
torch.cuda.profiler.start()
for f in calls:
    f()
torch.cuda.synchronize()
torch.cuda.profiler.stop()
