"""The chunked Gated DeltaNet backward in plain torch: the executable spec of what gdn's backward kernels compute.

`gdn.chunked` is the forward chunk by chunk; this module is its gradient written out (no autograd),
the way the engines compute it, recomputing everything from the forward's inputs (the graph's
``gdn_bwd`` carries no forward intermediates). Per sequence and head, with the notation of
`common.chunked` (chunk of C tokens, gamma the in-chunk cumulative log decay, ``e = exp(gamma)``,
``tail = exp(gamma_last - gamma)``, ``M[r, j] = exp(gamma_r - gamma_j)`` for j <= r, ``T`` the WY
inverse, ``kw = beta e k``, ``vw = beta v``, ``w = T kw``, ``u = T vw``, and ``dO`` already times
the scale):

1. Recompute, per chunk in parallel: gamma, A, T, kw, vw (`chunk_wy`); then the forward's state
   scan again, keeping the state entering each chunk, ``h_c``, and ``v_new_c = u - w h_c^T``.
2. The reverse-time state gradient (`chunk_state_step`), chunk after chunk from the last, starting
   at d_final_state (or 0): with ``dh`` the gradient of the state leaving the chunk,
   ``dv_new = (q k^T * M)^T dO + tail * (k dh^T)`` and the gradient of the state entering it
   ``dh_in = exp(gamma_last) dh + (e dO)^T q - dv_new^T w``. After the first chunk it is
   d_initial_state.
3. Per chunk in parallel (`chunk_grads`), from h_c, dh_c, v_new_c, dv_new_c: the output's
   ``dq = e (dO h) + (dO v_new^T * M) k``, ``dk`` from the scores, the state write and the WY
   solve, ``dw = -dv_new h``; through ``u = T vw``, ``w = T kw``: ``dT = dv_new vw^T + dw kw^T``
   and ``dA = -(T^T dT T^T)`` strictly below the diagonal; hence dv, dbeta, and every term's
   derivative in gamma, summed into dgamma. The decay's gradient is dgamma's reverse cumulative
   sum within the chunk (gamma_r = g_0 + ... + g_r).
4. The options' chain rules (`_options_backward`, on `common.chunked_bwd`'s): safe_gate (to the raw g, a_log and dt_bias),
   the beta sigmoid and the negative-eigenvalue scaling, the q/k L2 norm; then the gradients of
   grouped heads (GQA/GVA, per-head gates) summed over the output heads each serves.

The padding of a sequence's last chunk is zero tokens, as in the forward: they add nothing to any
gradient. Tested in float64 against autograd through `gdn.reference`.
"""

from __future__ import annotations

import torch

from pygraph_linear_attention.common.chunked import CHUNK, to_chunks
from pygraph_linear_attention.common.chunked_bwd import beta_backward, group_sum, qkv_backward
from pygraph_linear_attention.common.reference import prepare_inputs, reference_error

__all__ = [
    "chunk_grads",
    "chunk_state_step",
    "chunk_wy",
    "chunked_gated_delta_net_backward",
]


def chunk_wy(
    k: torch.Tensor, v: torch.Tensor, decay: torch.Tensor, write: torch.Tensor
) -> dict[str, torch.Tensor]:
    """The forward's per-chunk quantities, kept for the backward: gamma [.., C], gram = k k^T and
    att = exp(gamma_r - gamma_j) below the diagonal [.., C, C], A, T = (I + A)^-1, kw, vw, w, u."""
    gamma = decay.cumsum(-1)
    size = k.shape[-2]
    below = torch.ones(size, size, dtype=torch.bool, device=k.device).tril(-1)
    gap = gamma[..., :, None] - gamma[..., None, :]
    att = torch.exp(torch.where(below, gap, torch.full_like(gap, -torch.inf)))
    gram = k @ k.transpose(-1, -2)
    a = write[..., :, None] * gram * att
    solve_dtype = torch.promote_types(a.dtype, torch.float32)
    eye = torch.eye(size, dtype=solve_dtype, device=k.device).expand(a.shape)
    t = torch.linalg.solve_triangular(eye + a.to(solve_dtype), eye, upper=False, unitriangular=True).to(
        a.dtype
    )
    kw = (write * torch.exp(gamma))[..., None] * k
    vw = write[..., None] * v
    return {
        "gamma": gamma,
        "gram": gram,
        "att": att,
        "a": a,
        "t": t,
        "kw": kw,
        "vw": vw,
        "w": t @ kw,
        "u": t @ vw,
    }


def _decay_mask(gamma: torch.Tensor) -> torch.Tensor:
    """M[r, j] = exp(gamma_r - gamma_j) for j <= r, else 0 (masked before the exp)."""
    size = gamma.shape[-1]
    causal = torch.ones(size, size, dtype=torch.bool, device=gamma.device).tril()
    gap = gamma[..., :, None] - gamma[..., None, :]
    return torch.exp(torch.where(causal, gap, torch.full_like(gap, -torch.inf)))


def chunk_state_step(
    q: torch.Tensor,
    k: torch.Tensor,
    w: torch.Tensor,
    gamma: torch.Tensor,
    do: torch.Tensor,
    d_state: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Step 2 for one chunk: (dv_new [.., C, V], the gradient of the state entering the chunk [.., V, K]).

    ``do`` is dO times the scale; ``d_state`` the gradient of the state leaving the chunk.
    """
    last = gamma[..., -1:]
    scores = (q @ k.transpose(-1, -2)) * _decay_mask(gamma)
    dv_new = scores.transpose(-1, -2) @ do + torch.exp(last - gamma)[..., None] * (
        k @ d_state.transpose(-1, -2)
    )
    d_in = (
        torch.exp(last)[..., None] * d_state
        + (torch.exp(gamma)[..., None] * do).transpose(-1, -2) @ q
        - dv_new.transpose(-1, -2) @ w
    )
    return dv_new, d_in


def chunk_grads(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    write: torch.Tensor,
    wy: dict[str, torch.Tensor],
    state: torch.Tensor,
    d_state: torch.Tensor,
    v_new: torch.Tensor,
    dv_new: torch.Tensor,
    do: torch.Tensor,
) -> dict[str, torch.Tensor]:
    """Step 3 for one chunk: dq, dk [.., C, K], dv [.., C, V], d_decay and d_write [.., C], all
    with respect to the effective inputs (after the options, per output head).

    ``state`` enters the chunk, ``d_state`` is the gradient of the state leaving it; ``do`` is dO
    times the scale.
    """
    gamma, t, kw, vw, gram, att, a = (wy[n] for n in ("gamma", "t", "kw", "vw", "gram", "att", "a"))
    e = torch.exp(gamma)
    last = gamma[..., -1:]
    tail = torch.exp(last - gamma)
    size = gamma.shape[-1]
    below = torch.ones(size, size, dtype=torch.bool, device=q.device).tril(-1)
    tr = t.transpose(-1, -2)

    # the output: o = e (q h^T) + (q k^T * M) v_new
    dq = e[..., None] * (do @ state)
    dgamma = (q * dq).sum(-1)
    qk = q @ k.transpose(-1, -2)
    dp = (do @ v_new.transpose(-1, -2)) * _decay_mask(gamma)
    dq = dq + dp @ k
    dk = dp.transpose(-1, -2) @ q
    dgamma = dgamma + (dp * qk).sum(-1) - (dp * qk).sum(-2)

    # the state passed on: h_out = exp(gamma_last) h + (tail v_new)^T k
    dk_state = tail[..., None] * (v_new @ d_state)
    dk = dk + dk_state
    dgamma = dgamma - (k * dk_state).sum(-1)
    d_last = torch.exp(last[..., 0]) * (d_state * state).sum((-1, -2)) + (k * dk_state).sum((-1, -2))
    dgamma = torch.cat([dgamma[..., :-1], dgamma[..., -1:] + d_last[..., None]], -1)

    # v_new = u - w h^T; u = T vw, w = T kw; T = (I + A)^-1
    dw = -(dv_new @ state)
    dvw, dkw = tr @ dv_new, tr @ dw
    dt = dv_new @ vw.transpose(-1, -2) + dw @ kw.transpose(-1, -2)
    da = -(tr @ dt @ tr) * below
    dv = write[..., None] * dvw
    d_write = (dvw * v).sum(-1) + (dkw * e[..., None] * k).sum(-1) + (da * gram * att).sum(-1)
    dk = dk + (write * e)[..., None] * dkw
    dgamma = dgamma + (dkw * kw).sum(-1)
    daa = da * a
    dgamma = dgamma + daa.sum(-1) - daa.sum(-2)
    dgram = da * write[..., :, None] * att
    dk = dk + dgram @ k + dgram.transpose(-1, -2) @ k

    # gamma_r = g_0 + ... + g_r: the decay's gradient is dgamma's reverse cumulative sum
    d_decay = dgamma.flip(-1).cumsum(-1).flip(-1)
    return {"dq": dq, "dk": dk, "dv": dv, "d_decay": d_decay, "d_write": d_write}


def chunked_gated_delta_net_backward(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    cu_seqlens: torch.Tensor,
    grad_out: torch.Tensor,
    *,
    grad_final_state: torch.Tensor | None = None,
    initial_state: torch.Tensor | None = None,
    scale: float | None = None,
    use_qk_l2norm: bool = False,
    use_beta_sigmoid: bool = False,
    allow_neg_eigval: bool = False,
    safe_gate: bool = False,
    a_log: torch.Tensor | None = None,
    dt_bias: torch.Tensor | None = None,
    chunk_size: int = CHUNK,
    dtype: torch.dtype = torch.float64,
) -> dict[str, torch.Tensor]:
    """The graph's ``gdn_bwd`` outputs in ``dtype``, chunk by chunk; same keys and arguments as
    `reference.gated_delta_net_backward_reference` (``grad_out`` is dO, ``grad_final_state`` the
    gradient flowing into the final state, 0 when None), plus ``chunk_size``."""
    if chunk_size < 1:
        raise reference_error(f"chunk_size must be positive, got {chunk_size}")
    prepared = prepare_inputs(
        q, k, v, g, beta, cu_seqlens, scale=scale, initial_state=initial_state,
        use_qk_l2norm=use_qk_l2norm, use_beta_sigmoid=use_beta_sigmoid, allow_neg_eigval=allow_neg_eigval,
        safe_gate=safe_gate, a_log=a_log, dt_bias=dt_bias, dtype=dtype,
    )  # fmt: skip
    qe, ke, ve, decay, write = prepared.q, prepared.k, prepared.v, prepared.decay, prepared.write
    bounds, heads, scale = prepared.bounds, prepared.heads, prepared.scale
    sequences, _, value_dim, key_dim = prepared.state_shape
    do_all = grad_out.to(dtype) * scale
    grads = {n: [] for n in ("dq", "dk", "dv", "d_decay", "d_write")}
    d_initial = []
    for n in range(sequences):
        lo, hi = bounds[n], bounds[n + 1]
        state = prepared.start_state(n, initial_state)
        d_state = grad_final_state[n].to(dtype) if grad_final_state is not None else qe.new_zeros(state.shape)
        count = -(-(hi - lo) // chunk_size)
        if count:
            cq, ck, cv, cdo = (to_chunks(x[lo:hi], count, chunk_size) for x in (qe, ke, ve, do_all))
            cg, cb = (to_chunks(x[lo:hi], count, chunk_size) for x in (decay, write))
            wy = chunk_wy(ck, cv, cg, cb)  # [HO, NC, ...]
            states, v_news = [], []  # step 1: the forward's scan again
            for c in range(count):
                gamma = wy["gamma"][:, c]
                v_new = wy["u"][:, c] - wy["w"][:, c] @ state.transpose(-1, -2)
                states.append(state)
                v_news.append(v_new)
                last = gamma[:, -1:]
                state = (
                    torch.exp(last)[..., None] * state
                    + (v_new * torch.exp(last - gamma)[..., None]).transpose(-1, -2) @ ck[:, c]
                )
            per_chunk = {n: [None] * count for n in grads}
            for c in reversed(range(count)):  # steps 2 and 3
                d_out = d_state
                dv_new, d_state = chunk_state_step(
                    cq[:, c], ck[:, c], wy["w"][:, c], wy["gamma"][:, c], cdo[:, c], d_out
                )
                wy_c = {name: x[:, c] for name, x in wy.items()}
                found = chunk_grads(
                    cq[:, c],
                    ck[:, c],
                    cv[:, c],
                    cb[:, c],
                    wy_c,
                    states[c],
                    d_out,
                    v_news[c],
                    dv_new,
                    cdo[:, c],
                )
                for name, x in found.items():
                    per_chunk[name][c] = x
            for name, xs in per_chunk.items():  # [HO, C, ...] chunks -> [L, HO, ...] tokens
                x = torch.stack(xs, 1).flatten(1, 2)[:, : hi - lo]
                grads[name].append(x.movedim(0, 1))
        d_initial.append(d_state)
    empty = {"dq": (key_dim,), "dk": (key_dim,), "dv": (value_dim,), "d_decay": (), "d_write": ()}
    per_head = {
        name: torch.cat(xs) if xs else qe.new_zeros((0, heads, *empty[name])) for name, xs in grads.items()
    }
    out = _options_backward(
        per_head, q, k, g, beta, prepared.decay, heads, use_qk_l2norm=use_qk_l2norm,
        use_beta_sigmoid=use_beta_sigmoid, allow_neg_eigval=allow_neg_eigval, safe_gate=safe_gate,
        a_log=a_log, dt_bias=dt_bias, v_heads=v.shape[1], dtype=dtype,
    )  # fmt: skip
    if initial_state is not None:
        out["d_initial_state"] = torch.stack(d_initial) if d_initial else initial_state.to(dtype) * 0
    return out


def _options_backward(
    per_head: dict[str, torch.Tensor],
    q: torch.Tensor,
    k: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    decay: torch.Tensor,
    heads: int,
    *,
    use_qk_l2norm: bool,
    use_beta_sigmoid: bool,
    allow_neg_eigval: bool,
    safe_gate: bool,
    a_log: torch.Tensor | None,
    dt_bias: torch.Tensor | None,
    v_heads: int,
    dtype: torch.dtype,
) -> dict[str, torch.Tensor]:
    """Step 4: the per-output-head gradients of the effective inputs to the graph's inputs."""
    out = qkv_backward(per_head, q, k, v_heads, heads, use_qk_l2norm=use_qk_l2norm, dtype=dtype)
    out["dBeta"] = beta_backward(
        per_head["d_write"], beta, heads, use_beta_sigmoid=use_beta_sigmoid, allow_neg_eigval=allow_neg_eigval,
        dtype=dtype,
    )  # fmt: skip

    d_decay = per_head["d_decay"]
    if safe_gate:
        raw_g = g.to(dtype).repeat_interleave(heads // g.shape[1], dim=1)
        rate = torch.exp(a_log.to(dtype).reshape(-1)).repeat_interleave(heads // a_log.numel())
        bias = 0.0
        if dt_bias is not None:
            bias = dt_bias.to(dtype).reshape(-1).repeat_interleave(heads // dt_bias.numel())
        d_raw = d_decay * -rate * torch.sigmoid(raw_g + bias)  # decay = -rate softplus(g + bias)
        out["d_a_log"] = group_sum((d_decay * decay).sum(0), a_log.numel(), axis=0).reshape(a_log.shape)
        if dt_bias is not None:
            out["d_dt_bias"] = group_sum(d_raw.sum(0), dt_bias.numel(), axis=0).reshape(dt_bias.shape)
        d_decay = d_raw
    out["dG"] = group_sum(d_decay, g.shape[1])
    return out
