"""Context parallelism's algebra on one Hopper GPU: several ranks' shards in one process
(`context_parallel.simulate`, the device kernels computing every transition and every shard) against
the single-GPU op on the group's tokens — outputs, final states and every gradient, the CPU suite's
cases (`cp_inputs.CASES`). The shards' chunk grids differ from the whole sequence's, so the kernels'
own rounding differs: each relative error is bounded by 2e-2, the numbers printed.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from cp_inputs import CASES, compare, make_problem, simulated, single  # noqa: E402

from pygraph_linear_attention import context_parallel as cp  # noqa: E402
from pygraph_linear_attention.gdn.op import gated_delta_net  # noqa: E402
from pygraph_linear_attention.kda.op import gated_delta_net_v2, kimi_delta_attention  # noqa: E402

pytestmark = pytest.mark.sm90
OPS = {"gdn": gated_delta_net, "kda": kimi_delta_attention, "gdn2": gated_delta_net_v2}


@pytest.mark.parametrize("case", list(CASES))
def test_simulated_ranks_on_the_device_equal_the_single_gpu_op(case):
    op, lengths, sizes, state, flags, final_states, shape = CASES[case]
    x, weights = make_problem(op, lengths, state=state, device="cuda", **shape)
    want = single(OPS[op], op, x, weights, dict(flags))
    got = simulated(cp, op, x, weights, sizes, dict(flags), final_states)
    errors, _ = compare(op, got, want, flags)
    print(case, {k: f"{v:.1e}" for k, v in errors.items()})
    assert max(errors.values()) <= 2e-2, errors
