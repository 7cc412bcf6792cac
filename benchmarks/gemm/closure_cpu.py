"""Host cost of gemm_sm90's per-call closure on the CPU, with the compiled kernel stood in for.

The real `kernels.plan.Plan` and `GemmSm90Plan` are built; only the compiled CuTe function is replaced
by a no-op Python function, so the number is what the engine's own Python costs per call (the
operand checks and the argument list), not the TVM-FFI call or the launch. Method as
host_cost_cpu (min over 25 reps of bursts of 1, 8 and 64 calls).

    .venv/bin/python -m benchmarks.gemm.closure_cpu
"""

from __future__ import annotations

from types import SimpleNamespace

from benchmarks.harness import burst_cost
from pygraph.execution.variant_pack import OperandBuffer
from pygraph.ir.dtypes import data_type
from pygraph_gemm.engines import sm90 as engine_sm90
from pygraph_gemm.kernels import plan as launch_plan
from pygraph_gemm.kernels.config import EpilogueSpec, GemmKnobs

M, N, K = 256, 256, 128


def _plan(epilogue: bool) -> tuple[engine_sm90.GemmSm90Plan, SimpleNamespace]:
    """A gemm_sm90 plan for A (M, K) row-major, B (K, N) column-major, C (M, N), [bias (1, N)]."""
    launch_plan.get_compiled = lambda *args, **kwargs: lambda *a: None  # the stand-in kernel
    bf16 = data_type.BFLOAT16
    declared = {
        "a": OperandBuffer(0x10000, (M, K), (K, 1), bf16, 0),
        "b": OperandBuffer(0x20000, (K, N), (1, K), bf16, 0),
        "out": OperandBuffer(0x30000, (M, N), (N, 1), bf16, 0),
    }
    if epilogue:
        declared["bias"] = OperandBuffer(0x40000, (1, N), (N, 1), data_type.FLOAT, 0)
    spec = EpilogueSpec(bias=epilogue, activation="gelu_approx_tanh" if epilogue else "none")
    kp = launch_plan.Plan(GemmKnobs(), spec, "bf16", "bf16", (0, K, 1), (0, 1, K), (0, N, 1), M, N, K, 1)
    tensor = SimpleNamespace(data_type=bf16)
    facts = SimpleNamespace(m=M, n=N, k=K, a=tensor, b=tensor, out=tensor)
    positions = {role: i for i, role in enumerate(declared)}
    plan = engine_sm90.GemmSm90Plan(SimpleNamespace(name="bench"), facts, kp, positions, spec, declared)
    pack = SimpleNamespace(buffers=list(declared.values()), device=0)
    return plan, pack


def main() -> int:
    ctx = SimpleNamespace(stream=0xBEEF, workspace=0)
    print("gemm_sm90 closure per call on the CPU, us (stand-in kernel; min of 25 reps)")
    print(f"{'plan':28s} {'burst 1':>8s} {'burst 8':>8s} {'burst 64':>8s}")
    for label, epilogue in (("plain", False), ("bias+gelu", True)):
        plan, pack = _plan(epilogue)
        call = lambda plan=plan, pack=pack: plan.execute(None, pack, ctx)  # noqa: E731
        costs = [burst_cost(call, n) for n in (1, 8, 64)]
        print(f"{label:28s} " + " ".join(f"{c:8.2f}" for c in costs))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
