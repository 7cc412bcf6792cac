"""The chunked algorithm in plain torch, shared by the ops' executable specs (`gdn.chunked`,
`kda.chunked`): what the kernels compute.

The references (`gdn.reference`, `kda.reference`) run the recurrence token by token; the chunked
specs compute the same outputs the way the engines do, a chunk of ``C`` tokens at a time, and are
tested against the references in float64.
Per sequence, head and chunk (tokens r = 0..C-1 of the chunk, state ``S`` [V, K] entering it):

1. ``gamma = cumsum(g)`` within the chunk: the log decay from the chunk's start through token r.
2. The delta rule's writes inside the chunk solve one triangular system. With
   ``A[r, j] = beta_r * exp(gamma_r - gamma_j) * (k_r . k_j)`` for j < r (strictly lower) and
   ``T = (I + A)^-1`` (the WY/UT transform), the chunk's new values are
   ``v_new = u - w S^T`` with ``u = T (beta v)`` and ``w = T (beta exp(gamma) k)``: what each token
   writes once the earlier tokens of the chunk and the entering state are accounted for.
3. Output: ``o = scale * (exp(gamma) * (q S^T) + (q k^T * exp(gamma_r - gamma_j), j <= r) v_new)``.
4. State passing: ``S = exp(gamma_last) S + (v_new * exp(gamma_last - gamma))^T k``.

A chunk shorter than ``C`` (a sequence's tail) is padded with zero tokens: zero k, v and beta
write nothing and zero g decays nothing, so the padded chunk's last gamma is its last real
token's, and the padding needs no other care. Steps 1-2 are independent per chunk (the engines run
them in parallel); steps 3-4 run chunk after chunk per sequence. The options (`use_qk_l2norm`,
`use_beta_sigmoid`, `allow_neg_eigval`, `safe_gate`) transform the inputs exactly as in
the references', whose checks, layout and GQA/GVA head mapping the specs share (`common.reference.prepare_inputs`). Autograd through
it is a backward (the engines' backward will recompute the same quantities).

KDA (`kda.chunked.chunked_kimi_delta_attention`) runs the same steps with gamma per key channel ([..., C, K]):
every ``exp(gamma_r - gamma_j)`` above sits inside the dot product, channel by channel
(``A[r, j] = beta_r * sum_c k_r[c] exp(gamma_r[c] - gamma_j[c]) k_j[c]``, the same for the output's
scores), ``exp(gamma) * k`` and ``exp(gamma) * q`` scale each channel, and the state passing decays
S's columns: ``S = S exp(gamma_last) + v_new^T (k * exp(gamma_last - gamma))``. With one gamma per
token these are GDN's formulas.

The per-channel products as matrix products (``sub_chunk``, the kernels' form): within a chunk,
``sum_c x_r[c] exp(gamma_r[c] - gamma_j[c]) y_j[c]`` is ``(x_r * exp(gamma_r - gamma_ref)) .
(y_j * exp(gamma_ref - gamma_j))`` for any reference row. For rows r of sub-chunk i and keys j of an
earlier sub-chunk, the reference is sub-chunk i's first row, so both factors are decays (<= 1 for
g <= 0) and nothing overflows; inside a diagonal sub-chunk the key-side factor grows, up to
``exp(-(sub_chunk - 1) * min g)``: under fp32's exp limit (about 88) for gates of at least -5
(the safe gate's bound) at a sub-chunk of 16, which is why that pairing is the one the kernels use
for bounded gates (flash-linear-attention's KDA makes the same split).

GDN-2 (`kda.chunked.chunked_gated_delta_net_v2`) moves beta inside the erase read, channel by channel, and
writes ``w * v``: with ``e = beta * k`` ([..., C, K]), ``A[r, j] = sum_c e_r[c] exp(gamma_r[c] -
gamma_j[c]) k_j[c]`` (j < r), ``u = T (w * v)`` and ``w_wy = T (e * exp(gamma))``; steps 3-4 are
KDA's (what a token writes lands along its own k). With beta and w one value per head these are
KDA's formulas.
"""

from __future__ import annotations

import torch

from pygraph_linear_attention.common.host import CHUNK
from pygraph_linear_attention.common.reference import PreparedInputs, reference_error

__all__ = ["CHUNK", "chunk_by_chunk", "chunk_prepare", "to_chunks"]


def chunk_prepare(
    k: torch.Tensor,
    v: torch.Tensor,
    decay: torch.Tensor,
    write: torch.Tensor,
    value_gate: torch.Tensor | None = None,
    sub_chunk: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Steps 1-2 for a batch of padded chunks: (gamma, w, u).

    ``k`` [..., C, K], ``v`` [..., C, V], ``decay`` (log, g after the options; KDA's and GDN-2's per
    key channel, [..., C, K]) and ``write`` (beta after the options) [..., C] (GDN-2: [..., C, K],
    with its write gate ``value_gate`` [..., C, V]); returns gamma (decay's shape), w [..., C, K],
    u [..., C, V]. ``sub_chunk``: a per-channel decay's products by sub-chunks of that size.
    """
    per_channel = decay.dim() == k.dim()
    gamma = decay.cumsum(-2 if per_channel else -1)
    size = k.shape[-2]
    below = torch.ones(size, size, dtype=torch.bool, device=k.device).tril(-1)
    beta = write if write.dim() == k.dim() else write[..., None]
    erase = beta * k  # the erase read's key: beta scales it per token, or per channel (GDN-2)
    a = _pairs(erase, k, gamma, below, sub_chunk)
    # the solve in float32 at least, as the kernels invert in fp32 (torch has no half-precision solve)
    solve_dtype = torch.promote_types(a.dtype, torch.float32)
    eye = torch.eye(size, dtype=solve_dtype, device=k.device).expand(a.shape)
    t = torch.linalg.solve_triangular(eye + a.to(solve_dtype), eye, upper=False, unitriangular=True).to(
        a.dtype
    )
    w = t @ _decayed(erase, gamma)
    u = t @ ((beta if value_gate is None else value_gate) * v)
    return gamma, w, u


def _attenuated(x: torch.Tensor, y: torch.Tensor, gamma: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """[..., C, C]: ``sum_c x_r[c] exp(gamma_r - gamma_j) y_j[c]`` where ``mask`` holds, else 0; gamma
    one per token ([..., C]) or per channel ([..., C, K])."""
    if gamma.dim() == x.dim() - 1:
        gap = gamma[..., :, None] - gamma[..., None, :]
        # masked before the exp: above the diagonal gap is a growth, which may overflow
        return (x @ y.transpose(-1, -2)) * torch.exp(torch.where(mask, gap, torch.full_like(gap, -torch.inf)))
    gap = gamma[..., :, None, :] - gamma[..., None, :, :]  # [..., C, C, K]
    weight = torch.exp(torch.where(mask[..., None], gap, torch.full_like(gap, -torch.inf)))
    return torch.einsum("...rc,...rjc,...jc->...rj", x, weight, y)


def _pairs(x, y, gamma, mask, sub: int | None) -> torch.Tensor:
    """`_attenuated`, or by sub-chunks of ``sub`` where the decay is per key channel and ``sub`` is set."""
    if sub is not None and gamma.dim() == x.dim():
        return _attenuated_by_sub_chunks(x, y, gamma, mask, sub)
    return _attenuated(x, y, gamma, mask)


def _attenuated_by_sub_chunks(
    x: torch.Tensor, y: torch.Tensor, gamma: torch.Tensor, mask: torch.Tensor, sub: int
) -> torch.Tensor:
    """`_attenuated` for gamma per key channel as sub-chunk matrix products (module docstring): block
    (i, j) of ``sub`` x ``sub``, j <= i, is ``(x_i exp(gamma_i - ref_i)) (y_j exp(ref_i - gamma_j))^T``
    with ``ref_i`` sub-chunk i's first gamma; ``mask`` then applies."""
    size = x.shape[-2]
    if size % sub:
        raise reference_error(f"sub_chunk={sub} must divide the chunk size {size}")
    out = x.new_zeros((*x.shape[:-1], size))
    for i in range(0, size, sub):
        ref = gamma[..., i : i + 1, :]
        left = x[..., i : i + sub, :] * torch.exp(gamma[..., i : i + sub, :] - ref)
        right = y[..., : i + sub, :] * torch.exp(ref - gamma[..., : i + sub, :])
        out[..., i : i + sub, : i + sub] = left @ right.transpose(-1, -2)
    return torch.where(mask, out, torch.zeros_like(out))


def _decayed(x: torch.Tensor, gamma: torch.Tensor) -> torch.Tensor:
    """``x * exp(gamma)`` row by row (gamma per token) or channel by channel (per key channel)."""
    return x * torch.exp(gamma if gamma.dim() == x.dim() else gamma[..., None])


def to_chunks(x: torch.Tensor, count: int, size: int) -> torch.Tensor:
    """[L, HO, ...] tokens -> [HO, count, size, ...] chunks, zero-padded at the end."""
    pad = count * size - x.shape[0]
    if pad:
        x = torch.cat([x, x.new_zeros((pad, *x.shape[1:]))])
    x = x.reshape(count, size, *x.shape[1:])
    return x.movedim(2, 0)


def chunk_by_chunk(
    prepared: PreparedInputs,
    initial_state: torch.Tensor | None,
    output_final_state: bool,
    chunk_size: int,
    sub_chunk: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Steps 1-4 of the module docstring per sequence (a decay per head or per key channel)."""
    q, k, v, decay, write = prepared.q, prepared.k, prepared.v, prepared.decay, prepared.write
    bounds, heads, scale = prepared.bounds, prepared.heads, prepared.scale
    sequences, value_dim = len(bounds) - 1, prepared.state_shape[2]

    outputs, finals = [], []
    for n in range(sequences):
        lo, hi = bounds[n], bounds[n + 1]
        state = prepared.start_state(n, initial_state)
        count = -(-(hi - lo) // chunk_size)
        if count:
            cq, ck, cv = (to_chunks(x[lo:hi], count, chunk_size) for x in (q, k, v))  # [HO, NC, C, D]
            cg, cb = (to_chunks(x[lo:hi], count, chunk_size) for x in (decay, write))  # [HO, NC, C(, K)]
            cw = (
                None
                if prepared.value_gate is None
                else to_chunks(prepared.value_gate[lo:hi], count, chunk_size)
            )
            gamma, w, u = chunk_prepare(ck, cv, cg, cb, cw, sub_chunk)
            size = chunk_size
            causal = torch.ones(size, size, dtype=torch.bool, device=q.device).tril()
            chunk_out = []
            for c in range(count):
                qc, kc, gc = cq[:, c], ck[:, c], gamma[:, c]  # [HO, C, K], [HO, C(, K)]
                v_new = u[:, c] - w[:, c] @ state.transpose(-1, -2)  # [HO, C, V]
                scores = _pairs(qc, kc, gc, causal, sub_chunk)
                inter = _decayed(qc, gc) @ state.transpose(-1, -2)
                chunk_out.append(scale * (inter + scores @ v_new))
                last = gc[
                    :, -1:
                ]  # [HO, 1(, K)]: the padding decays nothing, so this is the last real token's
                # S's columns decay by exp(last) (one value per head, or per key channel)
                state = _decayed(state, last)
                state = state + v_new.transpose(-1, -2) @ _decayed(kc, last - gc)
            o = torch.stack(chunk_out, 1).reshape(heads, count * size, value_dim)[:, : hi - lo]
            outputs.append(o.transpose(0, 1))
        finals.append(state)
    out = torch.cat(outputs) if outputs else q.new_zeros((0, heads, value_dim))
    return prepared.result(out, finals, output_final_state, initial_state)
