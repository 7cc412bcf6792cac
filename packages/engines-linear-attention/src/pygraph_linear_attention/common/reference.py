"""The token loop the plain-torch references share (`gdn.reference`, `kda.reference`): one recurrence
with a decay per head (GDN) or per key channel (KDA, GDN-2), beta per head or per key channel with
GDN-2's write gate, and the checks, head mapping and options every reference and chunked spec
applies to its inputs (`prepare_inputs`).

Layout (THD, as the graph's ops): q, k [T, H, K]; v [T, HV, V]; the gates [T, HG] (KDA, GDN-2:
[T, HG, K], GDN-2's write gate w [T, HG, V]) with HG dividing HO = max(H, HV); ``cu_seqlens`` [N + 1]
prefix sums (int32 or int64; a dense batch of B sequences of length L is [0, L, 2L, ...]).
GQA/GVA: output head ``h`` reads q/k head ``h // (HO // H)``, v head ``h // (HO // HV)``, and the
same for every per-head input. O is [T, HO, V]; states are [N, HO, V, K]. Everything is computed
in ``dtype`` (float64 by default; any floating dtype runs) from the inputs converted to it.

Options:

- ``use_qk_l2norm``: q and k rows are L2-normalised (over K) inside.
- ``use_beta_sigmoid``: beta is given as logits; ``beta = sigmoid(beta)``.
- ``allow_neg_eigval``: beta is scaled to [0, 2) (``beta = 2 * beta``, after the sigmoid), so the
  write ``I - beta k k^T`` may have a negative eigenvalue.
- ``safe_gate``: g is given as raw logits. GDN's per-head ``a_log`` and ``dt_bias`` [HG] make the
  decay ``-exp(a_log) * softplus(g + dt_bias)``; KDA's and GDN-2's is bounded below:
  ``g = gate_lower_bound * sigmoid(exp(a_log) * (g + dt_bias))``, in (gate_lower_bound, 0), with
  ``gate_lower_bound`` a negative float (default -5.0), ``a_log`` [HG] optional (absent: exp(a_log)
  = 1) and ``dt_bias`` per head and channel ([HG, K] or [HG * K], optional: absent is 0).

A bad argument raises `ValueError` naming the call, the argument and the value (`reference_error`).
"""

from __future__ import annotations

import itertools
from typing import NamedTuple

import torch
import torch.nn.functional as F

__all__ = ["PreparedInputs", "autograd_backward", "prepare_inputs", "recurrence", "reference_error"]

_CALL = "pygraph_linear_attention.reference.gated_delta_net_reference"


def reference_error(message: str) -> ValueError:
    """The error a reference or chunked spec raises for a bad argument (it names the call)."""
    return ValueError(f"{_CALL}: {message}")


def _boundaries(cu_seqlens: torch.Tensor, tokens: int) -> list[int]:
    if cu_seqlens.dtype not in (torch.int32, torch.int64) or cu_seqlens.dim() != 1:
        raise reference_error(
            f"cu_seqlens must be a 1-d int32 or int64 tensor, got {cu_seqlens.dtype} {list(cu_seqlens.shape)}"
        )
    values = [int(x) for x in cu_seqlens.tolist()]
    if not values or values[0] != 0 or values[-1] != tokens:
        raise reference_error(f"cu_seqlens must run from 0 to the token count {tokens}, got {values}")
    if any(b < a for a, b in itertools.pairwise(values)):
        raise reference_error(f"cu_seqlens must not decrease, got {values}")
    return values


def _per_head(t: torch.Tensor, heads: int, name: str, axis: int) -> torch.Tensor:
    """``t`` with its head axis repeated to ``heads`` (each head serving ``heads // H_t`` outputs)."""
    have = t.shape[axis]
    if have == 0 or heads % have:
        raise reference_error(f"{name} has {have} heads, which does not divide the output's {heads}")
    return t.repeat_interleave(heads // have, dim=axis)


def _gates(
    g: torch.Tensor,
    beta: torch.Tensor,
    heads: int,
    *,
    use_beta_sigmoid: bool,
    allow_neg_eigval: bool,
    safe_gate: bool,
    a_log: torch.Tensor | None,
    dt_bias: torch.Tensor | None,
    dtype: torch.dtype,
    gate_lower_bound: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(log decay [T, HO] or, per key channel, [T, HO, K]; beta [T, HO] or [T, HO, K]) after the
    options. A gate per key channel (KDA, GDN-2) takes the bounded safe gate."""
    if gate_lower_bound is not None and (
        isinstance(gate_lower_bound, bool)
        or not isinstance(gate_lower_bound, (int, float))
        or not gate_lower_bound < 0
    ):
        raise reference_error(
            f"gate_lower_bound must be a negative float (the decay's lower bound), got {gate_lower_bound!r}"
        )
    channels = g.shape[2:]  # () for GDN, (K,) for KDA and GDN-2
    g, beta = _per_head(g.to(dtype), heads, "g", 1), _per_head(beta.to(dtype), heads, "beta", 1)
    if safe_gate:
        if a_log is None and not channels:
            raise reference_error("safe_gate needs a_log (the per-head log decay rate)")
        rate = 0.0
        if a_log is not None:
            rate = _per_head(a_log.to(dtype).reshape(-1), heads, "a_log", 0).reshape(
                heads, *[1] * len(channels)
            )
        bias = 0.0
        if dt_bias is not None:
            bias = _per_head(dt_bias.to(dtype).reshape(-1, *channels), heads, "dt_bias", 0)
        if channels:  # KDA, GDN-2: bounded below, -5 unless given
            bound = -5.0 if gate_lower_bound is None else gate_lower_bound
            g = bound * torch.sigmoid(torch.exp(torch.as_tensor(rate, dtype=dtype)) * (g + bias))
        elif gate_lower_bound is not None:
            raise reference_error(
                f"gate_lower_bound={gate_lower_bound} applies to a gate per key channel (KDA, GDN-2)"
            )
        else:
            g = -torch.exp(rate) * F.softplus(g + bias)
    elif a_log is not None or dt_bias is not None:
        raise reference_error("a_log and dt_bias are read only with safe_gate=True")
    elif gate_lower_bound is not None:
        raise reference_error(
            f"gate_lower_bound={gate_lower_bound} bounds the gate safe_gate computes: set safe_gate=True"
        )
    if use_beta_sigmoid:
        beta = torch.sigmoid(beta)
    if allow_neg_eigval:
        beta = 2 * beta
    return g, beta


class PreparedInputs(NamedTuple):
    """The inputs after validation, the head mapping and the options, in the compute dtype."""

    q: torch.Tensor  # [T, HO, K] (L2-normalised under use_qk_l2norm)
    k: torch.Tensor  # [T, HO, K]
    v: torch.Tensor  # [T, HO, V]
    decay: torch.Tensor  # [T, HO] (KDA, GDN-2: [T, HO, K]): the log decay g after safe_gate
    write: torch.Tensor  # [T, HO] (GDN-2: [T, HO, K]): beta after the sigmoid and the 2x scaling
    bounds: list[int]  # cu_seqlens as ints
    heads: int  # HO
    scale: float
    state_shape: tuple[int, int, int, int]  # [N, HO, V, K]
    value_gate: torch.Tensor | None = None  # GDN-2's w [T, HO, V] (else beta scales the value)

    def start_state(self, n: int, initial_state: torch.Tensor | None) -> torch.Tensor:
        """Sequence ``n``'s state [HO, V, K] before its first token, in the compute dtype."""
        if initial_state is not None:
            return initial_state[n].to(self.q.dtype)
        return self.q.new_zeros(self.state_shape[1:])

    def result(
        self, out: torch.Tensor, finals: list[torch.Tensor], output_final_state: bool, initial_state
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """(O, the final states stacked in the initial state's dtype, or None when not requested)."""
        if not output_final_state:
            return out, None
        final = torch.stack(finals) if finals else self.q.new_zeros(self.state_shape)
        return out, final.to(initial_state.dtype) if initial_state is not None else final


def prepare_inputs(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    cu_seqlens: torch.Tensor,
    *,
    scale: float | None = None,
    initial_state: torch.Tensor | None = None,
    use_qk_l2norm: bool = False,
    use_beta_sigmoid: bool = False,
    allow_neg_eigval: bool = False,
    safe_gate: bool = False,
    a_log: torch.Tensor | None = None,
    dt_bias: torch.Tensor | None = None,
    dtype: torch.dtype = torch.float64,
    channel_gate: bool = False,
    gate_lower_bound: float | None = None,
    w: torch.Tensor | None = None,
) -> PreparedInputs:
    """Check the arguments (raising `ValueError` naming the call, the argument and the value) and
    apply the head mapping and the options; shared by the token loop and the chunked specs. ``channel_gate``:
    KDA's g, one value per key channel ([T, HG, K]); with ``w`` (GDN-2's write gate [T, HG, V]) beta
    is per key channel too."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        if t.dim() != 3:
            raise reference_error(f"{name} must be [T, heads, dim], got shape {list(t.shape)}")
    tokens = q.shape[0]
    for name, t in (("k", k), ("v", v), ("g", g), ("beta", beta)):
        if t.shape[0] != tokens:
            raise reference_error(f"{name} has {t.shape[0]} tokens, q has {tokens}")
    if q.shape[1:] != k.shape[1:]:
        raise reference_error(
            f"q {list(q.shape)} and k {list(k.shape)} must have the same heads and head dim"
        )
    if channel_gate and (g.dim() != 3 or g.shape[2] != q.shape[2]):
        raise reference_error(
            f"g must be [T, heads, K] (one value per key channel), K = {q.shape[2]}, got shape {list(g.shape)}"
        )
    if w is not None:
        if not channel_gate:
            raise reference_error("w (the write gate) belongs to GDN-2, whose g is per key channel")
        if beta.dim() != 3 or beta.shape[0] != tokens or beta.shape[2] != q.shape[2]:
            raise reference_error(
                f"beta must be [T, heads, K] (one value per key channel), K = {q.shape[2]}, got shape {list(beta.shape)}"
            )
        if w.dim() != 3 or w.shape[0] != tokens or w.shape[2] != v.shape[2]:
            raise reference_error(
                f"w must be [T, heads, V] (one value per value channel), V = {v.shape[2]}, got shape {list(w.shape)}"
            )
        if w.shape[1] != beta.shape[1] or g.shape[1] != beta.shape[1]:
            raise reference_error(
                f"g, beta and w must have the same heads, got {g.shape[1]}, {beta.shape[1]} and {w.shape[1]}"
            )
    for name, t in () if w is not None else (("beta", beta),) if channel_gate else (("g", g), ("beta", beta)):
        if t.dim() != 2:
            raise reference_error(
                f"{name} must be [T, heads] (one value per token and head), got shape {list(t.shape)}"
            )
    heads = max(q.shape[1], v.shape[1])
    key_dim, value_dim = q.shape[2], v.shape[2]
    bounds = _boundaries(cu_seqlens, tokens)
    scale = key_dim**-0.5 if scale is None else float(scale)

    q, k = _per_head(q.to(dtype), heads, "q", 1), _per_head(k.to(dtype), heads, "k", 1)
    v = _per_head(v.to(dtype), heads, "v", 1)
    if use_qk_l2norm:
        q, k = F.normalize(q, dim=-1), F.normalize(k, dim=-1)
    decay, write = _gates(
        g, beta, heads, use_beta_sigmoid=use_beta_sigmoid, allow_neg_eigval=allow_neg_eigval,
        safe_gate=safe_gate, a_log=a_log, dt_bias=dt_bias, dtype=dtype, gate_lower_bound=gate_lower_bound,
    )  # fmt: skip
    state_shape = (len(bounds) - 1, heads, value_dim, key_dim)
    if initial_state is not None and tuple(initial_state.shape) != state_shape:
        raise reference_error(
            f"initial_state must be [N, HO, V, K] = {list(state_shape)}, got {list(initial_state.shape)}"
        )
    value_gate = None if w is None else _per_head(w.to(dtype), heads, "w", 1)
    return PreparedInputs(q, k, v, decay, write, bounds, heads, scale, state_shape, value_gate)


def recurrence(
    prepared: PreparedInputs, initial_state: torch.Tensor | None, output_final_state: bool
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The token loop over ``prepared`` (`gdn.reference`, `kda.reference` state it): a decay per head
    or per key channel, beta per head (scaling the erase read and the value) or per key channel with
    GDN-2's write gate."""
    q, k, v, decay, write = prepared.q, prepared.k, prepared.v, prepared.decay, prepared.write
    bounds, heads, scale = prepared.bounds, prepared.heads, prepared.scale
    sequences, value_dim = len(bounds) - 1, prepared.state_shape[2]

    outputs, finals = [], []
    for n in range(sequences):
        state = prepared.start_state(n, initial_state)
        for t in range(bounds[n], bounds[n + 1]):
            state = torch.exp(decay[t]).reshape(heads, 1, -1) * state  # columns: one or K decays
            beta = write[t].reshape(heads, -1)  # [HO, 1] or, GDN-2, [HO, K]
            recalled = torch.einsum("hvk,hk->hv", state, beta * k[t])
            written = (beta if prepared.value_gate is None else prepared.value_gate[t]) * v[t]
            state = state + torch.einsum("hv,hk->hvk", written - recalled, k[t])
            outputs.append(scale * torch.einsum("hvk,hk->hv", state, q[t]))
        finals.append(state)
    out = torch.stack(outputs) if outputs else q.new_zeros((0, heads, value_dim))
    return prepared.result(out, finals, output_final_state, initial_state)


def autograd_backward(
    forward: object,
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
    a_log: torch.Tensor | None = None,
    dt_bias: torch.Tensor | None = None,
    dtype: torch.dtype = torch.float64,
    w: torch.Tensor | None = None,
    **options: object,
) -> dict[str, torch.Tensor]:
    """Autograd through ``forward`` (a reference: `gdn.reference`, `kda.reference`) at the given inputs and options (``w``: GDN-2's
    write gate, whose gradient is dW)."""
    named = {"dQ": q, "dK": k, "dV": v, "dG": g, "dBeta": beta}
    if w is not None:
        named["dW"] = w
    if initial_state is not None:
        named["d_initial_state"] = initial_state
    if options.get("safe_gate"):
        named.update({n: t for n, t in (("d_a_log", a_log), ("d_dt_bias", dt_bias)) if t is not None})
    leaves = {name: t.detach().to(dtype).requires_grad_(True) for name, t in named.items()}
    with torch.enable_grad():
        gates = (leaves["dG"], leaves["dBeta"], *([leaves["dW"]] if w is not None else []))
        out, final = forward(  # type: ignore[operator]
            leaves["dQ"], leaves["dK"], leaves["dV"], *gates, cu_seqlens,
            initial_state=leaves.get("d_initial_state"),
            a_log=leaves.get("d_a_log", a_log), dt_bias=leaves.get("d_dt_bias", dt_bias),
            output_final_state=grad_final_state is not None, dtype=dtype, **options,
        )  # fmt: skip
        results, grads = [out], [grad_out.to(dtype)]
        if grad_final_state is not None:
            results.append(final)
            grads.append(grad_final_state.to(final.dtype))
        values = torch.autograd.grad(results, list(leaves.values()), grads, allow_unused=True)
    return {
        name: grad if grad is not None else torch.zeros_like(leaf)
        for (name, leaf), grad in zip(leaves.items(), values)
    }
