"""The numerics of kda_sm90 / gdn2_sm90 (`kda.sm90_fwd`), modelled in torch on the CPU.

The CuTe DSL kernels cannot run here, so this models their dataflow with the same rounding points:
the decay-weighted products by sub-chunks of 16 rows with bf16 factors (whatever the io dtype),
A and the scores P in fp32 accumulators, P, ``T diag(beta)`` (GDN-2: ``T``), w, u, ``q exp(gamma)``,
``k exp(last - gamma)``, the state's copy and v_new rounded to the io dtype where the kernels store
them, the state carried in fp32. Against the float64 recurrence on every device case
(`kda_cases.CASES` (this folder): varlen odd lengths, each option, GQA and GVA, head dim
64, fp16, gates down to the safe gate's bound), O and the final state must be within the device
suite's tolerance. What this proves is the design's precision (bf16 factors, the sub-chunk
references), not the kernels' code: that is the device suite's (`test_kda_cutile_sm90.py`).
The second half does the same for the CuTe DSL backward (`kda.sm90_bwd`: every gradient
against autograd through the float64 recurrence).
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import kda_cases  # noqa: E402
from pygraph_linear_attention.reference import (  # noqa: E402
    gated_delta_net_v2_reference,
    kimi_delta_attention_reference,
    prepare_inputs,
)

C, SUB = 64, 16
FACTORS = torch.bfloat16  # the forward's decay-weighted products' factors (the kernels' _PAIR)
# the backward's weighted products run in fp32 on the CUDA cores (one key channel a thread): bf16
# factors there put dG at 1.1e-2 to 2.1e-2 (cancellation in dgamma), TF32 ones within 7.3e-3
BWD_FACTORS = torch.float32


def _round(x: torch.Tensor, dtype) -> torch.Tensor:
    """x rounded to ``dtype`` and back to fp32; "tf32": to 10 mantissa bits, as a TF32 MMA reads it."""
    if dtype == "tf32":
        bits = x.float().view(torch.int32)
        return ((bits + 0x1000) & ~0x1FFF).view(torch.float32)
    return x.to(dtype).float()


def _chunk_recompute(p, lo, rows, h, io, state):
    """One chunk of one head through prepare_kda and the scan's step, with their rounding points: the
    values the output and the backward read (gamma, the bf16-factor products A and P, T, w, u, the
    decayed q and k, the entering state's io copy, v_new) and the state after the chunk."""
    gdn2 = p.value_gate is not None

    def padded(x):
        out = x.new_zeros((C, *x.shape[2:]))
        out[:rows] = x[lo : lo + rows, h]
        return out

    q, k, v = (_round(padded(x), io) for x in (p.q, p.k, p.v))
    gamma = padded(p.decay).cumsum(0)
    beta = padded(p.write)
    value_gate = padded(p.value_gate) if gdn2 else None
    a, scores = torch.zeros(C, C), torch.zeros(C, C)
    for i in range(C // SUB):
        rows_i, end, ref = slice(i * SUB, (i + 1) * SUB), (i + 1) * SUB, gamma[i * SUB]
        x = k[rows_i] * torch.exp(gamma[rows_i] - ref) * (beta[rows_i] if gdn2 else 1.0)
        y = torch.zeros(C, k.shape[-1])
        y[:end] = _round(k[:end] * torch.exp(ref - gamma[:end]), FACTORS)
        a[rows_i] = _round(x, FACTORS) @ y.T
        scores[rows_i] = _round(q[rows_i] * torch.exp(gamma[rows_i] - ref), FACTORS) @ y.T
    a = torch.tril(a if gdn2 else a * beta[:, None], -1)
    live = torch.tril(torch.ones(C, C, dtype=torch.bool)) & (torch.arange(C) < rows)[:, None]
    t = torch.linalg.solve_triangular(torch.eye(C) + a, torch.eye(C), upper=False, unitriangular=True)
    t_scaled = _round(t if gdn2 else t * beta[None, :], io)
    value = _round(v * value_gate, io) if gdn2 else v
    u = _round(t_scaled @ value, io)
    w = _round(t_scaled @ _round(k * torch.exp(gamma) * (beta if gdn2 else 1.0), io), io)
    last = gamma[min(rows, C) - 1]
    h_io = _round(state, io)
    v_new = _round(u - w @ h_io.T, io)
    f = {
        "q": q, "k": k, "v": v, "gamma": gamma, "last": last, "beta": beta, "value_gate": value_gate,
        "scores": _round(torch.where(live, scores, 0.0), io), "t": _round(t, io), "w": w, "h": h_io,
        "v_new": v_new, "qd": _round(q * torch.exp(gamma), io), "kd": _round(k * torch.exp(last - gamma), io),
    }  # fmt: skip
    return f, state * torch.exp(last)[None, :] + v_new.T @ f["kd"]


def _chunk(p, lo, rows, h, io, state):
    """One chunk of one head through the kernels' steps: (O rows [rows, V], the state after it)."""
    f, after = _chunk_recompute(p, lo, rows, h, io, state)
    o = _round(p.scale * (f["qd"] @ f["h"].T + f["scores"] @ f["v_new"]), io)
    return o[:rows], after


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


# --- the CuTe DSL backward (kda.sm90_bwd): its terms in their four forms (plain products
# on io operands, rows weighted, columns weighted, elementwise), with the kernels' rounding points.
# It fixed one choice: the weighted products' factors are not bf16 (BWD_FACTORS).


def _weighted_rows(m, y, gamma):
    """[C, D]: row r = sum_j m[r, j] y_j exp(gamma_r - gamma_j) for a lower-triangular m, by sub-chunks
    of rows against their first gamma (bf16 factors and m, fp32 accumulation and scaling)."""
    out = torch.zeros(C, y.shape[-1])
    for i in range(C // SUB):
        rows_i, end, ref = slice(i * SUB, (i + 1) * SUB), (i + 1) * SUB, gamma[i * SUB]
        right = _round(y[:end] * torch.exp(ref - gamma[:end]), BWD_FACTORS)
        out[rows_i] = torch.exp(gamma[rows_i] - ref) * (_round(m[rows_i, :end], BWD_FACTORS) @ right)
    return out


def _weighted_cols(m, x, gamma):
    """[C, D]: row j = sum_r m[r, j] x_r exp(gamma_r - gamma_j) for a lower-triangular m, by sub-chunks
    of columns against their last gamma (as `grad_output_kda` and `grad_wy_kda` take them)."""
    out = torch.zeros(C, x.shape[-1])
    for j in range(C // SUB):
        cols_j, start, ref = slice(j * SUB, (j + 1) * SUB), j * SUB, gamma[(j + 1) * SUB - 1]
        left = _round(x[start:] * torch.exp(gamma[start:] - ref), BWD_FACTORS)
        out[cols_j] = torch.exp(ref - gamma[cols_j]) * (_round(m[start:, cols_j], BWD_FACTORS).T @ left)
    return out


def _chunk_backward(p, lo, rows, h, io, f, d_state, do):
    """One chunk's gradients (per output head, fp32) and the gradient of the state entering it; ``f``:
    the chunk's recomputed forward (`_chunk_recompute`), ``d_state`` the gradient of the state leaving
    it (fp32), ``do`` its scale dO rows [rows, V]."""
    gdn2 = p.value_gate is not None
    gamma, last, beta, k, q, v = f["gamma"], f["last"], f["beta"], f["k"], f["q"], f["v"]
    dot = torch.zeros(C, v.shape[-1])
    dot[:rows] = do
    dot = _round(dot, io)
    dh = _round(d_state, io)  # the gradient of the state leaving the chunk, as stored
    # the gradient scan's step: plain products of prepare's operands
    dv_new = _round(f["scores"].T @ dot + f["kd"] @ dh.T, io)
    d_in = d_state * torch.exp(last)[None, :] - dv_new.T @ f["w"] + dot.T @ f["qd"]
    # the chunk gradient kernel
    live = torch.tril(torch.ones(C, C, dtype=torch.bool))
    dp = torch.where(live, dot @ f["v_new"].T, 0.0)
    dw = -(dv_new @ f["h"])
    erase = k * beta if gdn2 else k * beta[:, None]
    kw = _round(erase * torch.exp(gamma), io)
    vw = _round(v * f["value_gate"], io) if gdn2 else _round(v * beta[:, None], io)
    t = f["t"]  # io, as prepare stores it for the products
    d_t = _round(dv_new @ vw.T + _round(dw, io) @ kw.T, io)
    da = -torch.tril(_round(t.T @ d_t, io) @ t.T, -1)
    dvw = t.T @ dv_new
    t_dw = t.T @ _round(dw, io)
    dq = torch.exp(gamma) * (dot @ f["h"]) + _weighted_rows(dp, k, gamma)
    dk_kd = _weighted_cols(dp, q, gamma) + _weighted_cols(da, erase, gamma)  # exp(-gamma) dkd
    dk_kt = torch.exp(last - gamma) * (f["v_new"] @ dh)  # exp(last - gamma) dkt
    de = torch.exp(gamma) * t_dw + _weighted_rows(da, k, gamma)  # exp(gamma) dkw
    dk = dk_kd + dk_kt + (beta if gdn2 else beta[:, None]) * de
    dgamma = q * dq - k * dk_kd + erase * de - k * dk_kt
    dgamma[min(rows, C) - 1] += torch.exp(last) * (dh * f["h"]).sum(0) + (k * dk_kt).sum(0)
    out = {"dq": dq, "dk": dk, "d_decay": dgamma.flip(0).cumsum(0).flip(0)}
    if gdn2:
        out |= {"dv": f["value_gate"] * dvw, "d_write": de * k, "d_value_gate": dvw * v}
    else:
        out |= {"dv": beta[:, None] * dvw, "d_write": (de * k).sum(-1) + (dvw * v).sum(-1)}
    return {name: x[:rows] for name, x in out.items()}, d_in


def _backward_model(case, tensors, options, d_o, d_final):
    """The graph's gradients as the kernels compute them (per-head terms in fp32 with
    the rounding above, the options' chain rules and head sums in float64)."""
    from pygraph_linear_attention.kda.chunked_bwd import _options_backward

    io = tensors["q"].dtype
    extra = {n: tensors[n] for n in ("a_log", "dt_bias") if n in tensors}
    flags = {n: options[n] for n in ("use_qk_l2norm", "use_beta_sigmoid", "allow_neg_eigval", "safe_gate")}
    p = prepare_inputs(
        tensors["q"], tensors["k"], tensors["v"], tensors["g"], tensors["beta"], tensors["cu_seqlens"],
        scale=options.get("scale"), dtype=torch.float32, channel_gate=True, w=tensors.get("w"), **flags, **extra,
    )  # fmt: skip
    names = ("dq", "dk", "dv", "d_decay", "d_write", *(("d_value_gate",) if case.op == "gdn2" else ()))
    like = {
        "dq": p.q,
        "dk": p.k,
        "dv": p.v,
        "d_decay": p.decay,
        "d_write": p.write,
        "d_value_gate": p.value_gate,
    }
    per_head = {n: torch.zeros(like[n].shape) for n in names}
    d_initial = []
    for n in range(len(p.bounds) - 1):
        start, end = p.bounds[n], p.bounds[n + 1]
        heads = []
        for h in range(p.heads):
            state = p.start_state(n, tensors.get("initial_state"))[h].float()
            chunks = []
            for lo in range(start, end, C):
                f, state = _chunk_recompute(p, lo, min(C, end - lo), h, io, state)
                chunks.append((lo, f))
            d_state = d_final[n, h].float() if d_final is not None else torch.zeros_like(state)
            for lo, f in reversed(chunks):
                rows = min(C, end - lo)
                do = d_o[lo : lo + rows, h].float() * p.scale
                grads, d_state = _chunk_backward(p, lo, rows, h, io, f, d_state, do)
                for name, x in grads.items():
                    per_head[name][lo : lo + rows, h] = x
            heads.append(d_state)
        d_initial.append(torch.stack(heads))
    w = tensors.get("w")
    out = _options_backward(
        {n: x.double() for n, x in per_head.items()}, p, tensors["q"], tensors["k"], tensors["v"], tensors["g"],
        tensors["beta"], w, **flags, a_log=tensors.get("a_log"), dt_bias=tensors.get("dt_bias"),
        gate_lower_bound=None, dtype=torch.float64,
    )  # fmt: skip
    if "initial_state" in tensors:
        out["d_initial_state"] = torch.stack(d_initial)
    return out


BWD_CASES = [c for c in kda_cases.CASES if c.name != "long-4097"]


def _reference_backward(case, tensors: dict, options: dict, d_o, d_final=None) -> dict:
    """The float64 reference's gradients of ``case``'s op on ``tensors``."""
    from pygraph_linear_attention.reference import (
        gated_delta_net_v2_backward_reference,
        kimi_delta_attention_backward_reference,
    )

    ref = (
        gated_delta_net_v2_backward_reference
        if case.op == "gdn2"
        else kimi_delta_attention_backward_reference
    )
    gates = [tensors["g"], tensors["beta"], *([tensors["w"]] if case.op == "gdn2" else [])]
    kw = {k: v for k, v in tensors.items() if k in ("initial_state", "a_log", "dt_bias")}
    return ref(tensors["q"], tensors["k"], tensors["v"], *gates, tensors["cu_seqlens"], d_o,
               grad_final_state=d_final, **kw, **options)  # fmt: skip


@pytest.mark.parametrize("case", BWD_CASES, ids=[c.id for c in BWD_CASES])
def test_the_backwards_precision_meets_the_device_tolerance(case):
    tensors, options = kda_cases.make_inputs(case, device="cpu")
    final = options.pop("output_final_state")
    gen = torch.Generator().manual_seed(1)
    t, n, ho = sum(case.lengths), len(case.lengths), case.heads_out
    d_o = torch.randn(t, ho, case.value_dim, generator=gen).to(tensors["q"].dtype)
    d_final = torch.randn(n, ho, case.value_dim, case.key_dim, generator=gen) if final else None
    got = _backward_model(case, tensors, options, d_o, d_final)
    want = _reference_backward(case, tensors, options, d_o, d_final)
    errors = {
        name: kda_cases.gradient_error(name, got[name], want[name], tensors, want["dG"]) for name in want
    }
    print(case.id, {k: f"{v:.1e}" for k, v in errors.items()})
    assert all(err <= case.tolerance for err in errors.values()), errors


@pytest.mark.parametrize("op", ["kda", "gdn2"])
def test_the_gate_parameters_gradients_are_the_sums_of_their_terms(op):
    """`kda_cases.gate_parameter_terms` (what the device suites measure d_a_log and d_dt_bias against)
    sums to the float64 reference's gradients, and its magnitudes bound the sums."""
    case = next(c for c in kda_cases.CASES if c.op == op and c.name == "all-options-gva")
    tensors, options = kda_cases.make_inputs(case, seed=3, device="cpu")
    options.pop("output_final_state")
    gen = torch.Generator().manual_seed(4)
    d_o = torch.randn(sum(case.lengths), case.heads_out, case.value_dim, generator=gen).to(tensors["q"].dtype)
    want = _reference_backward(case, tensors, options, d_o)
    for name in kda_cases.GATE_PARAMETERS.values():
        terms, dims = kda_cases.gate_parameter_terms(name, tensors, want["dG"])
        grad = want[f"d_{name}"].double()
        torch.testing.assert_close(terms.sum(dims).reshape(grad.shape), grad, rtol=1e-9, atol=1e-12)
        assert (terms.abs().sum(dims).reshape(grad.shape) >= grad.abs()).all()
        assert kda_cases.gate_parameter_error(name, grad, grad, tensors, want["dG"]) == 0.0
    with pytest.raises(ValueError, match="gate_parameter_terms: name must be 'a_log' or 'dt_bias', got 'g'"):
        kda_cases.gate_parameter_terms("g", tensors, want["dG"])
