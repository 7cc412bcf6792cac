"""gdn_cutile's forward against flash-linear-attention's on the same inputs, on the H200.

Where the two serve the same features (varlen THD through cu_seqlens, T = 1, initial and final
state, q/k l2 norm in the kernel, an explicit scale; q/k and v with the same heads, beta in the io
dtype), O and the final state of our first-ranked plan against FLA's `chunk_gated_delta_rule`,
and both against the float64 token loop. FLA keeps the state as [N, H, K, V], ours [N, H, V, K].
Its backward is compared in `benchmarks/linear_attention/bench_gdn.py` only: on Hopper it runs
with a guard lifted that FLA keeps for a Triton bug, so it is timed there, not trusted here.
"""

from __future__ import annotations

import dataclasses

import pytest

torch = pytest.importorskip("torch")

from gdn_cases import CASES, execute_case, make_inputs  # noqa: E402

pytestmark = pytest.mark.sm90

_SHARED = ("varlen-odd", "t1", "initial-final", "qk-l2norm", "scale", "long-4097")
FLA_CASES = [dataclasses.replace(c, beta="io") for c in CASES if c.name in _SHARED]


def _rel(got, want) -> float:
    return float((got.double() - want.double()).norm() / want.double().norm().clamp_min(1e-30))


@pytest.mark.parametrize("case", FLA_CASES, ids=[c.name for c in FLA_CASES])
def test_the_forward_matches_flash_linear_attention(case):
    fla = pytest.importorskip("fla.ops.gated_delta_rule", reason="flash-linear-attention is not installed")
    from pygraph_linear_attention.reference import gated_delta_net_reference

    tensors, options = make_inputs(case, seed=3)
    plan, o, final = execute_case(case, tensors, options)
    h0 = tensors.get("initial_state")
    fla_o, fla_final = fla.chunk_gated_delta_rule(
        *(tensors[n][None] for n in ("q", "k", "v", "g", "beta")),
        scale=options.get("scale"),
        initial_state=None if h0 is None else h0.transpose(-1, -2).contiguous(),
        output_final_state=options["output_final_state"],
        cu_seqlens=tensors["cu_seqlens"].long(),
        use_qk_l2norm_in_kernel=options["use_qk_l2norm"],
    )
    torch.cuda.synchronize()
    ref_args = {k: v for k, v in tensors.items() if k not in ("q", "k", "v", "g", "beta", "cu_seqlens")}
    want_o, want_s = gated_delta_net_reference(
        *(tensors[n] for n in ("q", "k", "v", "g", "beta")),
        tensors["cu_seqlens"].cpu(),
        **ref_args,
        **options,
    )
    result = {
        "plan": plan,
        "o vs fla": _rel(o, fla_o[0]),
        "o vs ref": _rel(o, want_o),
        "fla o vs ref": _rel(fla_o[0], want_o),
    }
    if want_s is not None:
        fla_state = fla_final.transpose(-1, -2)
        result |= {"state vs fla": _rel(final, fla_state), "state vs ref": _rel(final, want_s)}
        result["fla state vs ref"] = _rel(fla_state, want_s)
    print(f"{case.name}: {result}")
    assert all(err <= case.tolerance for name, err in result.items() if name != "plan"), result
