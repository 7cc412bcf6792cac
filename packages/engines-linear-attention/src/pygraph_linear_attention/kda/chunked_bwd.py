"""The chunked KDA and GDN-2 backward in plain torch: the executable spec of the kda_bwd / gdn2_bwd kernels.

`gdn.chunked_bwd` is GDN's; this is the same gradient with the decay per key channel (gamma
[C, K]). Per sequence, head and chunk (notation of `common.chunked`; ``dO`` already times the scale),
every per-channel decay-weighted product is written as a plain product of decayed factors,
``qd = q exp(gamma)``, ``kd = k exp(-gamma)``, ``kw = e exp(gamma)`` with the erase key
``e = beta k`` (beta per token for KDA, per channel for GDN-2), so that the scores are
``P = tril(qd kd^T)`` and ``A = tril(kw kd^T, -1)``:

1. Recompute per chunk: gamma, kd, kw, A, ``T = (I + A)^-1``, ``vw`` (KDA ``beta v``, GDN-2 the
   write gate times v), ``w = T kw``, ``u = T vw``; the forward's scan again, keeping the state
   entering each chunk, ``h_c``, and ``v_new_c = u - w h_c^T``.
2. In reverse, with ``dh`` the gradient of the state leaving the chunk, ``last`` gamma's last row
   and ``kt = k exp(last - gamma)``: ``dv_new = P^T dO + kt dh^T`` and the gradient of the state
   entering it ``dh_in = dh exp(last) + dO^T qd - dv_new^T w`` (columns scaled per channel).
3. In the same step, the chunk's gradients: ``dqd = dO h + tril(dO v_new^T) kd``,
   ``dkd = tril(dO v_new^T)^T qd``, the state write's ``dkt = v_new dh``, the WY solve's ``dw =
   -dv_new h``, ``dT = dv_new vw^T + dw kw^T``, ``dA = -tril(T^T dT T^T, -1)``, ``dvw = T^T
   dv_new``, ``dkw = T^T dw + dA kd`` and ``dkd += dA^T kw``; hence ``dq = exp(gamma) dqd``,
   ``dk = exp(-gamma) dkd + exp(last - gamma) dkt + beta exp(gamma) dkw``, beta's and the write
   gate's, and ``dgamma = qd dqd - kd dkd + kw dkw - kt dkt`` (elementwise) plus, on the last row,
   ``exp(last) sum_v (dh * h) + sum_r kt dkt``. The decay's gradient is dgamma's reverse cumulative
   sum down the chunk, channel by channel.
4. The options' chain rules: the bounded safe gate ``lower_bound * sigmoid(exp(a_log) (g +
   dt_bias))`` (to the raw g, a_log and dt_bias), the beta sigmoid and 2x scaling, the q/k L2 norm,
   then the grouped heads summed.

``exp(-gamma)`` is what the kernels must not form over a whole chunk in fp32 (at the safe gate's
bound it reaches exp(320)); here in float64 it is exact, and the kernels take the same products by
sub-chunks (`common.chunked._attenuated_by_sub_chunks`). Tested in float64 against autograd through
`kda.reference`.
"""

from __future__ import annotations

import torch

from pygraph_linear_attention.common.chunked import CHUNK, to_chunks
from pygraph_linear_attention.common.chunked_bwd import beta_backward, group_sum, qkv_backward
from pygraph_linear_attention.common.reference import PreparedInputs, prepare_inputs, reference_error

__all__ = ["chunked_gated_delta_net_v2_backward", "chunked_kimi_delta_attention_backward"]

_GRADS = ("dq", "dk", "dv", "d_decay", "d_write", "d_value_gate")


def _chunk_forward(k, v, decay, write, value_gate) -> dict[str, torch.Tensor]:
    """Step 1's per-chunk quantities: k [.., C, K], v [.., C, V], decay [.., C, K], write [.., C] or
    [.., C, K], value_gate [.., C, V] or None."""
    gamma = decay.cumsum(-2)
    size = k.shape[-2]
    beta = write[..., None] if write.dim() < k.dim() else write
    kd, kw = k * torch.exp(-gamma), beta * k * torch.exp(gamma)
    a = torch.tril(kw @ kd.transpose(-1, -2), -1)
    eye = torch.eye(size, dtype=a.dtype, device=a.device).expand(a.shape)
    t = torch.linalg.solve_triangular(eye + a, eye, upper=False, unitriangular=True)
    vw = (beta if value_gate is None else value_gate) * v
    return {"gamma": gamma, "beta": beta, "kd": kd, "kw": kw, "t": t, "vw": vw, "w": t @ kw, "u": t @ vw}


def _chunk_backward(q, k, v, value_gate, f, state, v_new, d_state, do) -> tuple[dict, torch.Tensor]:
    """Steps 2 and 3 for one chunk: (its gradients, the gradient of the state entering it)."""
    gamma, beta, kd, kw, t, vw, w = (f[n] for n in ("gamma", "beta", "kd", "kw", "t", "vw", "w"))
    last = gamma[..., -1:, :]  # [.., 1, K]: the padding decays nothing, so the last real token's
    qd = q * torch.exp(gamma)
    kt = k * torch.exp(last - gamma)
    scores = torch.tril(qd @ kd.transpose(-1, -2))
    dv_new = scores.transpose(-1, -2) @ do + kt @ d_state.transpose(-1, -2)
    d_in = d_state * torch.exp(last) + do.transpose(-1, -2) @ qd - dv_new.transpose(-1, -2) @ w

    dp = torch.tril(do @ v_new.transpose(-1, -2))
    dqd = do @ state + dp @ kd
    dkd = dp.transpose(-1, -2) @ qd
    dkt = v_new @ d_state
    dw = -(dv_new @ state)
    tr = t.transpose(-1, -2)
    dt = dv_new @ vw.transpose(-1, -2) + dw @ kw.transpose(-1, -2)
    da = -torch.tril(tr @ dt @ tr, -1)
    dvw = tr @ dv_new
    dkw = tr @ dw + da @ kd
    dkd = dkd + da.transpose(-1, -2) @ kw

    dgamma = qd * dqd - kd * dkd + kw * dkw - kt * dkt
    d_last = torch.exp(last[..., 0, :]) * (d_state * state).sum(-2) + (kt * dkt).sum(-2)  # [.., K]
    dgamma = torch.cat([dgamma[..., :-1, :], dgamma[..., -1:, :] + d_last[..., None, :]], -2)
    de = torch.exp(gamma) * dkw  # the erase key's gradient (e = beta k)
    out = {
        "dq": torch.exp(gamma) * dqd,
        "dk": torch.exp(-gamma) * dkd + torch.exp(last - gamma) * dkt + beta * de,
        "d_decay": dgamma.flip(-2).cumsum(-2).flip(-2),  # gamma = cumsum(decay) down the chunk
    }
    d_erase_beta = de * k  # [.., C, K]
    if value_gate is None:  # KDA: beta per token scales the erase key and the value
        out["dv"] = beta * dvw
        out["d_write"] = d_erase_beta.sum(-1) + (dvw * v).sum(-1)
    else:  # GDN-2: beta per channel in the erase key, the write gate on the value
        out["dv"] = value_gate * dvw
        out["d_write"] = d_erase_beta
        out["d_value_gate"] = dvw * v
    return out, d_in


def _sequence_grads(p: PreparedInputs, n: int, initial_state, grad_final_state, do_all, chunk_size):
    """Steps 1-3 for sequence ``n``: ({gradient: [L, HO, ..]}, d_initial_state [HO, V, K])."""
    lo, hi = p.bounds[n], p.bounds[n + 1]
    state = p.start_state(n, initial_state)
    d_state = grad_final_state[n].to(p.q.dtype) if grad_final_state is not None else torch.zeros_like(state)
    count = -(-(hi - lo) // chunk_size)
    if not count:
        return None, d_state
    cq, ck, cv, cdo, cg, cb = (
        to_chunks(x[lo:hi], count, chunk_size) for x in (p.q, p.k, p.v, do_all, p.decay, p.write)
    )
    cwg = None if p.value_gate is None else to_chunks(p.value_gate[lo:hi], count, chunk_size)
    f = _chunk_forward(ck, cv, cg, cb, cwg)  # [HO, NC, ...]
    states, v_news = [], []
    for c in range(count):  # the forward's scan again
        gamma = f["gamma"][:, c]
        last = gamma[:, -1:, :]
        v_new = f["u"][:, c] - f["w"][:, c] @ state.transpose(-1, -2)
        states.append(state)
        v_news.append(v_new)
        state = state * torch.exp(last) + v_new.transpose(-1, -2) @ (ck[:, c] * torch.exp(last - gamma))
    per_chunk: dict[str, list] = {name: [None] * count for name in _GRADS}
    for c in reversed(range(count)):
        chunk_f = {name: x[:, c] for name, x in f.items()}
        gate_c = None if cwg is None else cwg[:, c]
        found, d_state = _chunk_backward(
            cq[:, c], ck[:, c], cv[:, c], gate_c, chunk_f, states[c], v_news[c], d_state, cdo[:, c]
        )
        for name, x in found.items():
            per_chunk[name][c] = x
    grads = {
        name: torch.stack(xs, 1).flatten(1, 2)[:, : hi - lo].movedim(0, 1)  # [HO, NC, C, ..] -> [L, HO, ..]
        for name, xs in per_chunk.items()
        if xs[0] is not None
    }
    return grads, d_state


def _backward(
    q, k, v, g, beta, w, cu_seqlens, grad_out, *, grad_final_state=None, initial_state=None, scale=None,
    use_qk_l2norm=False, use_beta_sigmoid=False, allow_neg_eigval=False, safe_gate=False, a_log=None,
    dt_bias=None, gate_lower_bound=None, chunk_size=CHUNK, dtype=torch.float64,
) -> dict[str, torch.Tensor]:  # fmt: skip
    if chunk_size < 1:
        raise reference_error(f"chunk_size must be positive, got {chunk_size}")
    p = prepare_inputs(
        q, k, v, g, beta, cu_seqlens, scale=scale, initial_state=initial_state, use_qk_l2norm=use_qk_l2norm,
        use_beta_sigmoid=use_beta_sigmoid, allow_neg_eigval=allow_neg_eigval, safe_gate=safe_gate, a_log=a_log,
        dt_bias=dt_bias, dtype=dtype, channel_gate=True, gate_lower_bound=gate_lower_bound, w=w,
    )  # fmt: skip
    do_all = grad_out.to(dtype) * p.scale
    collected: dict[str, list] = {name: [] for name in _GRADS}
    d_initial = []
    for n in range(len(p.bounds) - 1):
        grads, d_state = _sequence_grads(p, n, initial_state, grad_final_state, do_all, chunk_size)
        for name, x in (grads or {}).items():
            collected[name].append(x)
        d_initial.append(d_state)
    like = {
        "dq": p.q,
        "dk": p.k,
        "dv": p.v,
        "d_decay": p.decay,
        "d_write": p.write,
        "d_value_gate": p.value_gate,
    }
    per_head = {
        name: torch.cat(xs) if xs else like[name].new_zeros(like[name].shape)
        for name, xs in collected.items()
        if like[name] is not None
    }
    out = _options_backward(
        per_head, p, q, k, v, g, beta, w, use_qk_l2norm=use_qk_l2norm, use_beta_sigmoid=use_beta_sigmoid,
        allow_neg_eigval=allow_neg_eigval, safe_gate=safe_gate, a_log=a_log, dt_bias=dt_bias,
        gate_lower_bound=gate_lower_bound, dtype=dtype,
    )  # fmt: skip
    if initial_state is not None:
        out["d_initial_state"] = torch.stack(d_initial)
    return out


def _options_backward(
    per_head, p, q, k, v, g, beta, w, *, use_qk_l2norm, use_beta_sigmoid, allow_neg_eigval, safe_gate, a_log,
    dt_bias, gate_lower_bound, dtype,
) -> dict[str, torch.Tensor]:  # fmt: skip
    """Step 4: the per-output-head gradients of the effective inputs to the graph's inputs."""
    heads = p.heads
    out = qkv_backward(per_head, q, k, v.shape[1], heads, use_qk_l2norm=use_qk_l2norm, dtype=dtype)
    out["dBeta"] = beta_backward(
        per_head["d_write"], beta, heads, use_beta_sigmoid=use_beta_sigmoid, allow_neg_eigval=allow_neg_eigval,
        dtype=dtype,
    )  # fmt: skip
    if w is not None:
        out["dW"] = group_sum(per_head["d_value_gate"], w.shape[1])

    d_decay = per_head["d_decay"]  # [T, HO, K]
    if safe_gate:  # decay = bound * sigmoid(z), z = exp(a_log) (g + dt_bias)
        bound = -5.0 if gate_lower_bound is None else float(gate_lower_bound)
        raw = g.to(dtype).repeat_interleave(heads // g.shape[1], dim=1)
        rate = torch.ones((heads, 1), dtype=dtype, device=raw.device)
        if a_log is not None:
            rate = torch.exp(a_log.to(dtype).reshape(-1)).repeat_interleave(heads // a_log.numel())[:, None]
        bias = 0.0
        if dt_bias is not None:
            per = dt_bias.to(dtype).reshape(-1, raw.shape[-1])
            bias = per.repeat_interleave(heads // per.shape[0], dim=0)
        z = rate * (raw + bias)
        s = torch.sigmoid(z)
        d_z = d_decay * bound * s * (1 - s)
        if a_log is not None:  # dz / d a_log = z
            out["d_a_log"] = group_sum((d_z * z).sum((0, 2)), a_log.numel(), axis=0).reshape(a_log.shape)
        if dt_bias is not None:
            d_bias = (d_z * rate).sum(0)  # [HO, K]
            out["d_dt_bias"] = group_sum(d_bias, dt_bias.reshape(-1, raw.shape[-1]).shape[0], axis=0).reshape(
                dt_bias.shape
            )
        d_decay = d_z * rate
    out["dG"] = group_sum(d_decay, g.shape[1])
    return out


def chunked_kimi_delta_attention_backward(
    q, k, v, g, beta, cu_seqlens, grad_out, **options
) -> dict[str, torch.Tensor]:
    """The graph's ``kda_bwd`` outputs chunk by chunk: `reference.kimi_delta_attention_backward_reference`'s
    arguments, keys and result (``grad_final_state``, ``initial_state``, the options, ``dtype``),
    plus ``chunk_size``."""
    return _backward(q, k, v, g, beta, None, cu_seqlens, grad_out, **options)


def chunked_gated_delta_net_v2_backward(
    q, k, v, g, beta, w, cu_seqlens, grad_out, **options
) -> dict[str, torch.Tensor]:
    """The graph's ``gdn2_bwd`` outputs chunk by chunk (dW among them), as
    `reference.gated_delta_net_v2_backward_reference`, plus ``chunk_size``."""
    return _backward(q, k, v, g, beta, w, cu_seqlens, grad_out, **options)
