"""The numerics of kda_sm90 / gdn2_sm90 (`kernels/kda_sm90_fwd.py`), modelled in torch on the CPU.

The CuTe DSL kernels cannot run here, so this models their dataflow with the same rounding points:
the decay-weighted products by sub-chunks of 16 rows with bf16 factors (whatever the io dtype),
A and the scores P in fp32 accumulators, P, ``T diag(beta)`` (GDN-2: ``T``), w, u, ``q exp(gamma)``,
``k exp(last - gamma)``, the state's copy and v_new rounded to the io dtype where the kernels store
them, the state carried in fp32. Against the float64 recurrence on every device case
(`benchmarks.linear_attention.kda_cases.CASES`: varlen odd lengths, each option, GQA and GVA, head dim
64, fp16, gates down to the safe gate's bound), O and the final state must be within the device
suite's tolerance. What this proves is the design's precision (bf16 factors, the sub-chunk
references), not the kernels' code: that is the device suite's (`test_kda_cutile_sm90.py`).
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from benchmarks.linear_attention import kda_cases  # noqa: E402
from pygraph_linear_attention.reference import (  # noqa: E402
    gated_delta_net_v2_reference,
    kimi_delta_attention_reference,
    prepare_inputs,
)

C, SUB = 64, 16


def _round(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    return x.to(dtype).float()


def _chunk(p, lo, rows, h, io, state):
    """One chunk of one head through the kernels' steps: (O rows [rows, V], the state after it)."""
    gdn2 = p.value_gate is not None
    kdim = p.k.shape[-1]

    def padded(x):
        out = x.new_zeros((C, *x.shape[2:]))
        out[:rows] = x[lo : lo + rows, h]
        return out

    q, k, v = (_round(padded(x), io) for x in (p.q, p.k, p.v))
    gamma = padded(p.decay).cumsum(0)  # rows past the sequence: the last real row's gamma
    beta = padded(p.write)
    bf16 = torch.bfloat16
    a, scores = torch.zeros(C, C), torch.zeros(C, C)
    for i in range(C // SUB):
        rows_i = slice(i * SUB, (i + 1) * SUB)
        ref = gamma[i * SUB]
        x = k[rows_i] * torch.exp(gamma[rows_i] - ref)
        if gdn2:
            x = x * beta[rows_i]
        qx = _round(q[rows_i] * torch.exp(gamma[rows_i] - ref), bf16)
        y = torch.zeros(C, kdim)
        end = (i + 1) * SUB
        y[:end] = _round(k[:end] * torch.exp(ref - gamma[:end]), bf16)
        a[rows_i] = _round(x, bf16) @ y.T
        scores[rows_i] = qx @ y.T
    if not gdn2:
        a = a * beta[:, None]
    a = torch.tril(a, -1)
    live = torch.tril(torch.ones(C, C, dtype=torch.bool)) & (torch.arange(C) < rows)[:, None]
    scores = _round(torch.where(live, scores, 0.0), io)
    t = torch.linalg.solve_triangular(torch.eye(C) + a, torch.eye(C), upper=False, unitriangular=True)
    t = _round(t if gdn2 else t * beta[None, :], io)
    value = _round(v * padded(p.value_gate), io) if gdn2 else v
    u = _round(t @ value, io)
    kg = k * torch.exp(gamma) * (beta if gdn2 else 1.0)
    w = _round(t @ _round(kg, io), io)
    last = gamma[min(rows, C) - 1]
    qd, kd = _round(q * torch.exp(gamma), io), _round(k * torch.exp(last - gamma), io)
    entering = _round(state, io)  # [V, K]
    v_new = _round(u - w @ entering.T, io)
    o = _round(p.scale * (qd @ entering.T + scores @ v_new), io)
    return o[:rows], state * torch.exp(last)[None, :] + v_new.T @ kd


def _model(case, tensors, options):
    """(O [T, HO, V], final states [N, HO, V, K]) as the kernels compute them."""
    io = tensors["q"].dtype
    extra = {n: tensors[n] for n in ("a_log", "dt_bias") if n in tensors}
    p = prepare_inputs(
        tensors["q"], tensors["k"], tensors["v"], tensors["g"], tensors["beta"], tensors["cu_seqlens"],
        scale=options.get("scale"), use_qk_l2norm=options["use_qk_l2norm"],
        use_beta_sigmoid=options["use_beta_sigmoid"], allow_neg_eigval=options["allow_neg_eigval"],
        safe_gate=options["safe_gate"], dtype=torch.float32, channel_gate=True, w=tensors.get("w"), **extra,
    )  # fmt: skip
    out = torch.zeros(p.v.shape)
    finals = []
    for n in range(len(p.bounds) - 1):
        start, end = p.bounds[n], p.bounds[n + 1]
        heads = []
        for h in range(p.heads):
            state = p.start_state(n, tensors.get("initial_state"))[h].float()
            for lo in range(start, end, C):
                o, state = _chunk(p, lo, min(C, end - lo), h, io, state)
                out[lo : lo + o.shape[0], h] = o
            heads.append(state)
        finals.append(torch.stack(heads))
    return out, torch.stack(finals)


@pytest.mark.parametrize("case", kda_cases.CASES, ids=[c.id for c in kda_cases.CASES])
def test_the_kernels_precision_meets_the_device_tolerance(case):
    tensors, options = kda_cases.make_inputs(case, device="cpu")
    got_o, got_state = _model(case, tensors, options)
    ref = gated_delta_net_v2_reference if case.op == "gdn2" else kimi_delta_attention_reference
    gates = [tensors["g"], tensors["beta"], *([tensors["w"]] if case.op == "gdn2" else [])]
    extra = {k: v for k, v in tensors.items() if k not in ("q", "k", "v", "g", "beta", "w", "cu_seqlens")}
    want_o, want_state = ref(
        tensors["q"], tensors["k"], tensors["v"], *gates, tensors["cu_seqlens"], **extra,
        **{**options, "output_final_state": True},
    )  # fmt: skip

    def rel(got, want):
        return float((got.double() - want).norm() / want.norm().clamp_min(1e-30))

    errors = {"o": rel(got_o, want_o), "state": rel(got_state, want_state)}
    print(case.id, errors)
    assert all(err <= case.tolerance for err in errors.values()), errors


@pytest.mark.parametrize("op", ["kda", "gdn2"])
@pytest.mark.parametrize("io", ["bfloat16", "float16"])
def test_gates_at_the_safe_gates_bound_keep_the_factors_finite(op, io):
    """Every gate at -5 a token: the key-side factors of a sub-chunk's diagonal block reach exp(75),
    past fp16's range (so they are bf16) and inside bf16's."""
    case = kda_cases.KdaCase(op, "bound", (130, 33), io=io, options=("initial_state", "final_state"))
    tensors, options = kda_cases.make_inputs(case, device="cpu")
    tensors["g"] = torch.full_like(tensors["g"], -5.0)
    got_o, got_state = _model(case, tensors, options)
    ref = gated_delta_net_v2_reference if op == "gdn2" else kimi_delta_attention_reference
    gates = [tensors["g"], tensors["beta"], *([tensors["w"]] if op == "gdn2" else [])]
    want_o, want_state = ref(
        tensors["q"], tensors["k"], tensors["v"], *gates, tensors["cu_seqlens"],
        initial_state=tensors["initial_state"], **options,
    )  # fmt: skip
    assert torch.isfinite(got_o).all() and torch.isfinite(got_state).all()
    assert float((got_o.double() - want_o).norm() / want_o.norm()) <= case.tolerance
    assert float((got_state.double() - want_state).norm() / want_state.norm()) <= case.tolerance
