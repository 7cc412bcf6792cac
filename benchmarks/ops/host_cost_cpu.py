"""Host cost of one torch-op call on the CPU: the ops' Python path with a stand-in plan.

The ops (`pygraph_sdpa.sdpa` at [1, 1, 128, 64], `gated_delta_net` and `kimi_delta_attention` at
T=64) run on host tensors with their graphs planned onto one stand-in engine that launches nothing
(the manifest replaced, the cuDNN backend absent, the ops' device rule widened to the CPU), so what
is timed is everything the op does around a kernel. A repeated call (under torch.no_grad, plain
tensors) runs the op's prepared call without torch's dispatcher (`op_support.direct`): its
signature, the lookup, the outputs' allocation and the launch (`Graph.execute`'s per-call path with
the variant pack). The same rows split the call: through the custom op (torch's dispatch, then the
prepared call), the op's body without torch's dispatch, the checks and graph lookup a first call
of a signature runs, `op_support.execute` and `Graph.execute` alone. The backward rows call each op's backward as autograd
does (the autograd function with the forward's saved tensors), and its custom op directly. What the device adds (the stream
read, CUDA allocations, the kernel launch) is `benchmarks.ops.host_cost`'s to measure. Method:
`benchmarks.harness.burst_cost` (min of 25 bursts; bursts 1, 8, 64). No GPU needed:

    python -m benchmarks.ops.host_cost_cpu
"""

from __future__ import annotations

import sys
from types import SimpleNamespace
from typing import Any

from benchmarks.harness import burst_cost
from pygraph.engines.base import BaseEngine, Capabilities, CompiledPlan, EngineRequest, PlanConfig

REPS, BURSTS = 25, (1, 8, 64)


class _Plan(CompiledPlan):
    """Launches nothing: the per-call path up to the plan's own call is what is timed."""

    checks_geometry = True  # as the ops' engines: the plan holds the buffers to its geometry itself

    def execute(self, graph: Any, pack: Any, ctx: Any) -> None:
        pack.buffers  # noqa: B018 (what a plan reads first)


class NoopEngine(BaseEngine):
    name = "noop_op_plan"
    capabilities = Capabilities(sm_lo=0, sm_hi=1000)

    def check_support(self, request: EngineRequest) -> None:
        return None

    def build_plan(self, request: EngineRequest, plan: PlanConfig, ctx: Any) -> CompiledPlan:
        return _Plan()


class _Ctx(SimpleNamespace):
    """An autograd context stand-in, filled by the op's own setup_context (so it holds whatever the
    op saves, as autograd's would)."""

    def save_for_backward(self, *tensors: Any) -> None:
        self.saved_tensors = tensors

    def set_materialize_grads(self, value: bool) -> None:
        pass


def _ctx(setup: Any, inputs: tuple, output: tuple) -> _Ctx:
    ctx = _Ctx()
    setup(ctx, inputs, output)
    return ctx


def _cost(call: Any) -> dict[int, float]:
    call()
    return {n: burst_cost(call, n, reps=REPS) for n in BURSTS}


def main() -> int:
    import torch

    from pygraph.engines.manifest import EngineFamily, EngineSlot
    from pygraph.op_support import execute
    from pygraph.planning import backend as backend_mod
    from pygraph.testing import manifest_override
    from pygraph_linear_attention import gated_delta_net, kimi_delta_attention
    from pygraph_linear_attention.common import op_arguments as la_arguments
    from pygraph_sdpa import op_arguments as sdpa_arguments
    from pygraph_sdpa import op_graphs as sdpa_graphs
    from pygraph_sdpa import ops as sdpa_ops
    from pygraph_sdpa import sdpa

    # the ops' device rule widened to host tensors, the backend absent: only the stand-in plans
    sdpa_arguments.DEVICE_TYPES = la_arguments.DEVICE_TYPES = ("cuda", "cpu")
    backend_mod.open_backend = lambda graph, refused=None: (None, "no cuDNN backend in this benchmark")
    family = EngineFamily(
        name="noop_ops",
        engine_id=20900,
        package="benchmarks.ops.host_cost_cpu",
        slots={"noop_op_plan": EngineSlot(0, impl=("benchmarks.ops.host_cost_cpu", "NoopEngine"))},
        anchors=("SDPA", "SDPA_BWD", "GDN", "GDN_BWD", "KDA", "KDA_BWD"),
    )
    rows: list[tuple[str, dict[int, float]]] = []
    with manifest_override([family]), torch.no_grad():
        q = torch.randn(1, 1, 128, 64, dtype=torch.bfloat16)
        rows.append(("pygraph_sdpa.sdpa 1x1x128x64", _cost(lambda: sdpa(q, q, q))))
        rows.append(("  through the custom op", _cost(lambda: sdpa_ops._forward_op(q, q, q, None))))
        body = sdpa_ops._forward_op._init_fn  # the custom op's Python body, without torch's dispatch
        rows.append(("  the op's body alone", _cost(lambda: body(q, q, q, None))))
        args = (q, q, q, None, False, False, -1, None, None, None, None, 0, 0)
        p, masks = sdpa_arguments.check_forward(*args)
        rows.append(("  its argument checks", _cost(lambda: sdpa_arguments.check_forward(*args))))
        rows.append(("  its graph lookup", _cost(lambda: sdpa_graphs.forward_graph(p, masks, p.scale(None)))))
        built = sdpa_graphs.forward_graph(p, masks, p.scale(None))
        o, lse = sdpa_ops._forward_outputs(p, q)
        tensors = {"q": q, "k": q, "v": q, "o": o, "lse": lse}
        rows.append(("  op_support.execute", _cost(lambda: execute(built, tensors, p.device))))
        pack = {built.ports[n]: t for n, t in tensors.items()}
        rows.append(("  Graph.execute", _cost(lambda: built.graph.execute(pack))))
        sdpa_ctx = _ctx(sdpa_ops._setup_context, args, (o, lse))
        t, h, d = 64, 4, 128
        x = {
            "q": torch.randn(t, h, d).bfloat16(), "k": torch.randn(t, h, d).bfloat16(),
            "v": torch.randn(t, h, d).bfloat16(), "g": -torch.rand(t, h), "beta": torch.rand(t, h),
            "cu_seqlens": torch.tensor([0, t], dtype=torch.int32),
        }  # fmt: skip
        rows.append(("gated_delta_net T=64", _cost(lambda: gated_delta_net(**x))))
        xk = dict(x, g=-torch.rand(t, h, d))
        rows.append(("kimi_delta_attention T=64", _cost(lambda: kimi_delta_attention(**xk))))
        # the backward ops as autograd calls them, with the forward's saved tensors (a ctx stand-in),
        # and through the custom op (torch's dispatch, then the op's body)
        rows.append(("sdpa backward 1x1x128x64", _cost(lambda: sdpa_ops._backward(sdpa_ctx, o, None))))
        sdpa_bwd = (q, q, q, o, o, lse, None)
        rows.append(("  through the custom op", _cost(lambda: sdpa_ops._backward_op(*sdpa_bwd))))
        from pygraph_linear_attention.gdn import op as gdn_op
        from pygraph_linear_attention.kda import op as kda_op

        saved = (x["q"], x["k"], x["v"], x["g"], x["beta"], x["cu_seqlens"], None, None, None)
        # the custom ops' inputs: q k v g beta cu_seqlens scale initial_state output_final_state, the
        # four flags, a_log dt_bias, then max_seqlen (gdn) or the gate's lower bound (kda)
        gdn_ctx = _ctx(
            gdn_op._setup_context, (*saved[:6], None, None, False, *(False,) * 4, None, None, None), ()
        )
        d_o = torch.randn(t, h, d).bfloat16()
        rows.append(("gated_delta_net backward T=64", _cost(lambda: gdn_op._backward(gdn_ctx, d_o, None))))
        gdn_bwd = (*saved[:6], d_o)
        rows.append(("  through the custom op", _cost(lambda: gdn_op._backward_op(*gdn_bwd))))
        saved_k = (xk["q"], xk["k"], xk["v"], xk["g"], xk["beta"], xk["cu_seqlens"], None, None, None)
        kda_ctx = _ctx(
            kda_op._kda_setup, (*saved_k[:6], None, None, False, *(False,) * 4, None, None, None), ()
        )
        rows.append(
            ("kimi_delta_attention backward T=64", _cost(lambda: kda_op._kda_grad(kda_ctx, d_o, None)))
        )
        kda_bwd = (*saved_k[:6], d_o)
        rows.append(("  through the custom op", _cost(lambda: kda_op._kda_backward_op(*kda_bwd))))
    print(f"\nhost cost per call on the CPU, us (min of {REPS} bursts; a stand-in plan, host tensors)")
    print(f"{'call':40s}" + "".join(f"{'burst ' + str(n):>11s}" for n in BURSTS))
    for label, cells in rows:
        print(f"{label:40s}" + "".join(f"{cells[n]:11.2f}" for n in BURSTS))
    return 0


if __name__ == "__main__":
    sys.exit(main())
