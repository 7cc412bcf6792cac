"""The torch op of the SDPA families: attention as a ``torch.library`` custom op over pygraph graphs.

``pygraph_sdpa.sdpa(query, key, value, *, scale=None, is_causal=False, causal_bottom_right=False,
window_left=-1, window_right=-1, seq_len_q=None, seq_len_kv=None, cu_seqlens_q=None,
cu_seqlens_kv=None, max_seqlen_q=0, max_seqlen_kv=0, return_lse=False)`` builds (once per key,
`op_graphs`) and executes an ``sdpa`` graph, so it runs whatever plan the planner ranks first (the
cuDNN backend's where a cuDNN runtime is installed, else ``sdpa_fwd_sm90``'s); its gradient executes
an ``sdpa_backward`` graph the same way. The custom ops are ``torch.ops.pygraph_sdpa.sdpa_forward``
(O and lse) and ``torch.ops.pygraph_sdpa.sdpa_backward`` (dQ, dK, dV); fake kernels give their
outputs' shapes and dtypes, so the op traces under ``torch.compile(fullgraph=True)``. Arguments are
checked (`op_arguments`) before anything runs. Semantics: `reference.sdpa_reference`'s; layout,
dtypes and limits: ``docs/sdpa.md`` ("The torch op").
"""

from __future__ import annotations

from typing import Any

import torch

from pygraph.errors import OpInputError
from pygraph.op_support import direct, execute, launcher
from pygraph_sdpa import op_arguments as _arguments
from pygraph_sdpa import op_graphs
from pygraph_sdpa.op_arguments import CALL, SdpaMasks, SdpaProblem, check_backward, check_call, check_forward

__all__ = ["sdpa"]

Tensor = torch.Tensor


def _lengths(t: Tensor | None) -> Tensor | None:
    return None if t is None else t.reshape(-1, 1, 1, 1).contiguous()


def _aligned(t: Tensor) -> Tensor:
    """``t`` contiguous and starting on a 16-byte boundary (the engines copy rows 16 bytes at a time
    and refuse another start): a view starting inside its storage elsewhere is copied."""
    t = t.contiguous()
    return t.clone() if t.data_ptr() % 16 else t


def _bound(names: dict[str, Tensor | None]) -> dict[str, Tensor]:
    return {name: _aligned(t) for name, t in names.items() if t is not None}


Ragged = tuple  # (cu_seqlens_q, cu_seqlens_kv, max_seqlen_q, max_seqlen_kv)


def _ragged_ports(ragged: Ragged, ports: dict[str, Tensor]) -> dict[str, Tensor]:
    """A ragged call's graph inputs beside its tensors: each sequence's lengths (the padding mask's)
    and each THD tensor's ragged offsets (the element offset of each sequence's first token)."""
    cu_q, cu_kv = (t.reshape(-1, 1, 1, 1) for t in ragged[:2])
    bound = {
        "seq_len_q": (cu_q[1:] - cu_q[:-1]).contiguous(),
        "seq_len_kv": (cu_kv[1:] - cu_kv[:-1]).contiguous(),
    }
    for name, t in ports.items():
        cu = cu_q if name in ("q", "o", "dO", "dQ") else cu_kv
        bound[f"{name}_offset"] = (cu * (t.shape[1] * t.shape[2])).to(torch.int32).contiguous()
    return bound


def _lse_of_tokens(lse: Tensor, cu_seqlens_q: Tensor, tokens: int) -> Tensor:
    """The graph's per-sequence stats [N, H, S, 1] as the THD layout's [T, H, 1]: token t of sequence
    n (cu_seqlens_q[n] <= t < cu_seqlens_q[n + 1]) at row t - cu_seqlens_q[n]."""
    token = torch.arange(tokens, device=lse.device, dtype=torch.int32)
    # a token past cu_seqlens_q[-1] (the buffer longer than its sequences: its rows unspecified)
    # reads the last sequence's last row instead of indexing past the stats
    seq = torch.searchsorted(cu_seqlens_q[1:], token, right=True).clamp_(max=lse.shape[0] - 1)
    row = (token - cu_seqlens_q[seq]).clamp_(max=lse.shape[2] - 1)
    return lse[seq, :, row, :]


# --- the forward ------------------------------------------------------------------------------------


# A call's signature: everything `check_forward` (and `check_backward`) read of a call, so a call of a
# remembered signature passed the same checks and has the same graph (op_support.GraphCache.call):
# each tensor's shape, stride, dtype and device (None where absent), each scalar with its type (True
# equals 1 in a tuple; the checks refuse a flag that is not a bool) and the devices the op serves.
# Measured with benchmarks.ops.host_cost_cpu: a remembered call skips the checks (7 us), the key's
# construction and the graph lookup (3.6 us) and the ports' dicts.


def _tensor_signature(t: Tensor | None) -> tuple | None:
    return None if t is None else (t.shape, t.stride(), t.dtype, t.device)


def _optional_signature(seq_len_q, seq_len_kv, cu_seqlens_q, cu_seqlens_kv, max_seqlen_q, max_seqlen_kv):
    """The padding and ragged arguments' part of a signature (None for a dense call without them)."""
    if seq_len_q is None and seq_len_kv is None and cu_seqlens_q is None and cu_seqlens_kv is None:
        return None if max_seqlen_q == 0 == max_seqlen_kv else (max_seqlen_q, max_seqlen_kv)
    return (
        _tensor_signature(seq_len_q), _tensor_signature(seq_len_kv), _tensor_signature(cu_seqlens_q),
        _tensor_signature(cu_seqlens_kv), max_seqlen_q, type(max_seqlen_q), max_seqlen_kv, type(max_seqlen_kv),
    )  # fmt: skip


@torch.library.custom_op("pygraph_sdpa::sdpa_forward", mutates_args=())
def _forward_op(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    scale: float | None,
    is_causal: bool = False,
    causal_bottom_right: bool = False,
    window_left: int = -1,
    seq_len_q: Tensor | None = None,
    seq_len_kv: Tensor | None = None,
    cu_seqlens_q: Tensor | None = None,
    cu_seqlens_kv: Tensor | None = None,
    max_seqlen_q: int = 0,
    max_seqlen_kv: int = 0,
) -> tuple[Tensor, Tensor]:
    args = (query, key, value, scale, is_causal, causal_bottom_right, window_left, seq_len_q, seq_len_kv)
    args += (cu_seqlens_q, cu_seqlens_kv, max_seqlen_q, max_seqlen_kv)
    signature = _forward_signature(*args)
    prepared = None if signature is None else op_graphs.GRAPHS.call(signature)
    if prepared is None:
        return _forward_checked(signature, *args)
    return prepared(query, key, value, seq_len_q, seq_len_kv, cu_seqlens_q, cu_seqlens_kv)


def _forward_signature(
    query, key, value, scale, is_causal, causal_bottom_right, window_left, seq_len_q, seq_len_kv, cu_seqlens_q,
    cu_seqlens_kv, max_seqlen_q, max_seqlen_kv,
) -> tuple | None:  # fmt: skip
    """The forward call's signature; None where an argument has none (not a tensor): the checks
    name it."""
    try:
        signature = (
            "sdpa", query.shape, query.stride(), query.dtype, query.device, key.shape, key.stride(), key.dtype,
            key.device, value.shape, value.stride(), value.dtype, value.device, scale, type(scale), is_causal,
            type(is_causal), causal_bottom_right, type(causal_bottom_right), window_left, type(window_left),
            _optional_signature(seq_len_q, seq_len_kv, cu_seqlens_q, cu_seqlens_kv, max_seqlen_q, max_seqlen_kv),
            _arguments.DEVICE_TYPES,
        )  # fmt: skip
    except (AttributeError, TypeError, RuntimeError):  # RuntimeError: a sparse or nested tensor's strides
        return None
    return signature


def _forward_checked(
    signature, query, key, value, scale, is_causal, causal_bottom_right, window_left, seq_len_q, seq_len_kv,
    cu_seqlens_q, cu_seqlens_kv, max_seqlen_q, max_seqlen_kv,
) -> tuple[Tensor, Tensor]:  # fmt: skip
    """A call of a signature not remembered: checked, its graph built or looked up, its prepared
    call remembered (where the call runs a graph) and run."""
    ragged = (cu_seqlens_q, cu_seqlens_kv, max_seqlen_q, max_seqlen_kv)
    p, masks = check_forward(
        query, key, value, scale, is_causal, causal_bottom_right, window_left, seq_len_q, seq_len_kv, *ragged
    )
    if p.empty or query.numel() == 0 or key.numel() == 0:  # O is 0 and lse -inf, as the reference's
        o, lse = _forward_outputs(p, query)
        o.zero_()
        lse.fill_(float("-inf"))
        return o, lse
    built = op_graphs.forward_graph(p, masks, p.scale(scale))
    prepared = _prepare_forward(p, built, query, key, value, causal_bottom_right, max_seqlen_q, max_seqlen_kv)
    if signature is not None:
        op_graphs.GRAPHS.remember(signature, built, prepared)
    return prepared(query, key, value, seq_len_q, seq_len_kv, cu_seqlens_q, cu_seqlens_kv)


def _prepare_forward(
    p: SdpaProblem, built: Any, query: Tensor, key: Tensor, value: Tensor, causal_bottom_right: bool,
    max_seqlen_q: int, max_seqlen_kv: int,
) -> Any:  # fmt: skip
    """The forward's call of ``p``'s graph with what the signature fixes settled: O's and lse's
    shapes, whether the operands need their contiguous copy, whether a row can see no key (O 0
    there) and, for a dense call, the bound launch of the graph's ports."""
    o_shape = (*query.shape[:-1], p.head_dim_v) if p.ragged else p.out_shape
    lse_shape, f32, device = p.lse_shape, torch.float32, p.device
    # the query rows of a sequence with no key: cuDNN returned lse -inf there and O of order 1e36 (on
    # the H200); the reference's O there is 0 (the same for a dense row that sees no key)
    unseen = p.padded or (causal_bottom_right and p.seq_q > p.seq_kv)
    if p.ragged or p.padded:

        def padded_or_ragged(query, key, value, seq_len_q, seq_len_kv, cu_seqlens_q, cu_seqlens_kv):
            o, lse = query.new_empty(o_shape), query.new_empty(lse_shape, dtype=f32)
            tensors = _bound({"q": query, "k": key, "v": value})
            tensors |= _bound({"seq_len_q": _lengths(seq_len_q), "seq_len_kv": _lengths(seq_len_kv)})
            tensors |= {"o": o, "lse": lse}
            if p.ragged:
                ragged = (cu_seqlens_q, cu_seqlens_kv, max_seqlen_q, max_seqlen_kv)
                tensors |= _ragged_ports(ragged, {"q": query, "k": key, "v": value, "o": o})
            execute(built, tensors, device)
            if p.ragged:
                o.masked_fill_(torch.isneginf(_lse_of_tokens(lse, cu_seqlens_q, query.shape[0])), 0.0)
            elif unseen:
                o.masked_fill_(torch.isneginf(lse), 0.0)
            return o, lse

        return padded_or_ragged
    launch = launcher(built, ("q", "k", "v", "o", "lse"), device, execute)
    copy = not (query.is_contiguous() and key.is_contiguous() and value.is_contiguous())

    def dense(query, key, value, *_):
        if copy:
            query, key, value = query.contiguous(), key.contiguous(), value.contiguous()
        if (query.data_ptr() | key.data_ptr() | value.data_ptr()) % 16:  # a view off 16 bytes: copied
            query, key, value = _aligned(query), _aligned(key), _aligned(value)
        o, lse = query.new_empty(o_shape), query.new_empty(lse_shape, dtype=f32)
        launch(query, key, value, o, lse)
        if unseen:
            o.masked_fill_(torch.isneginf(lse), 0.0)
        return o, lse

    return dense


def _forward_outputs(p: SdpaProblem, query: Tensor) -> tuple[Tensor, Tensor]:
    """O (dense [B, H, S_q, D_v]; ragged query's [T, H, D_v]) and the stats [B, H, S_q, 1] fp32."""
    o_shape = (*query.shape[:-1], p.head_dim_v) if p.ragged else p.out_shape
    return query.new_empty(o_shape), query.new_empty(p.lse_shape, dtype=torch.float32)


@_forward_op.register_fake
def _forward_fake(query, key, value, scale, is_causal=False, causal_bottom_right=False, window_left=-1,
                  seq_len_q=None, seq_len_kv=None, cu_seqlens_q=None, cu_seqlens_kv=None, max_seqlen_q=0,
                  max_seqlen_kv=0):  # fmt: skip
    p, _ = check_forward(
        query, key, value, scale, is_causal, causal_bottom_right, window_left, seq_len_q, seq_len_kv,
        cu_seqlens_q, cu_seqlens_kv, max_seqlen_q, max_seqlen_kv,
    )  # fmt: skip
    return _forward_outputs(p, query)


# --- the backward -----------------------------------------------------------------------------------


@torch.library.custom_op("pygraph_sdpa::sdpa_backward", mutates_args=())
def _backward_op(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    out: Tensor,
    grad_out: Tensor,
    lse: Tensor,
    scale: float | None,
    is_causal: bool = False,
    causal_bottom_right: bool = False,
    window_left: int = -1,
    seq_len_q: Tensor | None = None,
    seq_len_kv: Tensor | None = None,
    cu_seqlens_q: Tensor | None = None,
    cu_seqlens_kv: Tensor | None = None,
    max_seqlen_q: int = 0,
    max_seqlen_kv: int = 0,
) -> tuple[Tensor, Tensor, Tensor]:
    args = (
        query, key, value, out, grad_out, lse, scale, is_causal, causal_bottom_right, window_left, seq_len_q,
        seq_len_kv, cu_seqlens_q, cu_seqlens_kv, max_seqlen_q, max_seqlen_kv,
    )  # fmt: skip
    signature = _backward_signature(*args)
    prepared = None if signature is None else op_graphs.GRAPHS.call(signature)
    if prepared is None:
        return _backward_checked(signature, *args)
    return prepared(query, key, value, out, grad_out, lse, seq_len_q, seq_len_kv, cu_seqlens_q, cu_seqlens_kv)


# The backward call's signature: the forward's (everything `check_forward` reads) and O's, dO's and
# lse's shape, stride, dtype and device (what `check_backward` reads), so a remembered backward call
# skips both checks, the graph's key and lookup and the ports' dicts (benchmarks.ops.host_cost_cpu,
# the backward rows).


def _backward_signature(
    query, key, value, out, grad_out, lse, scale, is_causal, causal_bottom_right, window_left, seq_len_q,
    seq_len_kv, cu_seqlens_q, cu_seqlens_kv, max_seqlen_q, max_seqlen_kv,
) -> tuple | None:  # fmt: skip
    """The backward call's signature; None where an argument has none (not a tensor): the checks
    name it."""
    forward = _forward_signature(
        query, key, value, scale, is_causal, causal_bottom_right, window_left, seq_len_q, seq_len_kv, cu_seqlens_q,
        cu_seqlens_kv, max_seqlen_q, max_seqlen_kv,
    )  # fmt: skip
    if forward is None:
        return None
    try:
        return (
            "sdpa_backward", forward, out.shape, out.stride(), out.dtype, out.device, grad_out.shape,
            grad_out.stride(), grad_out.dtype, grad_out.device, lse.shape, lse.stride(), lse.dtype, lse.device,
        )  # fmt: skip
    except (AttributeError, TypeError, RuntimeError):  # RuntimeError: a sparse or nested tensor's strides
        return None


def _backward_checked(
    signature, query, key, value, out, grad_out, lse, scale, is_causal, causal_bottom_right, window_left,
    seq_len_q, seq_len_kv, cu_seqlens_q, cu_seqlens_kv, max_seqlen_q, max_seqlen_kv,
) -> tuple[Tensor, Tensor, Tensor]:  # fmt: skip
    """A backward call of a signature not remembered: checked, its graph built or looked up, its
    prepared call remembered (where the call runs a graph) and run."""
    ragged = (cu_seqlens_q, cu_seqlens_kv, max_seqlen_q, max_seqlen_kv)
    p, masks = _checked_backward(
        query, key, value, out, grad_out, lse, scale, is_causal, causal_bottom_right, window_left, seq_len_q,
        seq_len_kv, ragged,
    )  # fmt: skip
    if p.empty or query.numel() == 0 or key.numel() == 0:
        dq, dk, dv = _gradient_outputs(query, key, value)
        for t in (dq, dk, dv):
            t.zero_()
        return dq, dk, dv
    built = op_graphs.backward_graph(p, masks, p.scale(scale))
    prepared = _prepare_backward(p, built, query, key, value, out, grad_out, lse, ragged)
    if signature is not None:
        op_graphs.GRAPHS.remember(signature, built, prepared)
    return prepared(query, key, value, out, grad_out, lse, seq_len_q, seq_len_kv, cu_seqlens_q, cu_seqlens_kv)


def _prepare_backward(
    p: SdpaProblem, built: Any, query: Tensor, key: Tensor, value: Tensor, out: Tensor, grad_out: Tensor,
    lse: Tensor, ragged: Ragged,
) -> Any:  # fmt: skip
    """The backward's call of ``p``'s graph with what the signature fixes settled: dQ's, dK's and
    dV's shapes (query's, key's, value's; contiguous, in their dtype), whether the operands need
    their contiguous copy and, for a dense call, the bound launch of the graph's ports."""
    shapes, device = (query.shape, key.shape, value.shape), p.device
    if p.ragged or p.padded:
        max_seqlen_q, max_seqlen_kv = ragged[2:]

        def padded_or_ragged(query, key, value, out, grad_out, lse, seq_len_q, seq_len_kv, cu_q, cu_kv):
            dq, dk, dv = (query.new_empty(shape) for shape in shapes)
            tensors = _bound({"q": query, "k": key, "v": value, "o": out, "dO": grad_out, "lse": lse})
            tensors |= _bound({"seq_len_q": _lengths(seq_len_q), "seq_len_kv": _lengths(seq_len_kv)})
            tensors |= {"dQ": dq, "dK": dk, "dV": dv}
            if p.ragged:
                thd = {
                    "q": query,
                    "k": key,
                    "v": value,
                    "o": out,
                    "dO": grad_out,
                    "dQ": dq,
                    "dK": dk,
                    "dV": dv,
                }
                tensors |= _ragged_ports((cu_q, cu_kv, max_seqlen_q, max_seqlen_kv), thd)
            execute(built, tensors, device)
            return dq, dk, dv

        return padded_or_ragged
    launch = launcher(built, ("q", "k", "v", "o", "dO", "lse", "dQ", "dK", "dV"), device, execute)
    copy = not all(t.is_contiguous() for t in (query, key, value, out, grad_out, lse))
    q_shape, k_shape, v_shape = shapes

    def dense(query, key, value, out, grad_out, lse, *_):
        operands = (query, key, value, out, grad_out, lse)
        if copy:
            operands = tuple(t.contiguous() for t in operands)
        q, k, v, o, d_o, s = operands
        if (q.data_ptr() | k.data_ptr() | v.data_ptr() | o.data_ptr() | d_o.data_ptr() | s.data_ptr()) % 16:
            operands = tuple(_aligned(t) for t in operands)  # a view off 16 bytes: copied
        dq, dk, dv = query.new_empty(q_shape), query.new_empty(k_shape), query.new_empty(v_shape)
        launch(*operands, dq, dk, dv)
        return dq, dk, dv

    return dense


def _checked_backward(
    query,
    key,
    value,
    out,
    grad_out,
    lse,
    scale,
    is_causal,
    causal_bottom_right,
    window_left,
    seq_len_q,
    seq_len_kv,
    ragged,
) -> tuple[SdpaProblem, SdpaMasks]:
    p, masks = check_forward(
        query, key, value, scale, is_causal, causal_bottom_right, window_left, seq_len_q, seq_len_kv, *ragged
    )
    check_backward(p, query, out, grad_out, lse)
    return p, masks


@_backward_op.register_fake
def _backward_fake(query, key, value, out, grad_out, lse, scale, is_causal=False, causal_bottom_right=False,
                   window_left=-1, seq_len_q=None, seq_len_kv=None, cu_seqlens_q=None, cu_seqlens_kv=None,
                   max_seqlen_q=0, max_seqlen_kv=0):  # fmt: skip
    _checked_backward(
        query, key, value, out, grad_out, lse, scale, is_causal, causal_bottom_right, window_left, seq_len_q,
        seq_len_kv, (cu_seqlens_q, cu_seqlens_kv, max_seqlen_q, max_seqlen_kv),
    )  # fmt: skip
    return _gradient_outputs(query, key, value)


def _gradient_outputs(query: Tensor, key: Tensor, value: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """dQ, dK, dV: contiguous, shaped and typed as query, key and value."""
    return tuple(torch.empty_like(t, memory_format=torch.contiguous_format) for t in (query, key, value))


# --- autograd: the forward's gradient is the backward op ----------------------------------------------


def _setup_context(ctx: Any, inputs: tuple, output: tuple) -> None:
    query, key, value, scale, is_causal, causal_bottom_right, window_left, seq_len_q, seq_len_kv, *ragged = (
        inputs
    )
    cu_q, cu_kv, max_q, max_kv = ragged
    o, lse = output
    ctx.save_for_backward(query, key, value, o, lse, seq_len_q, seq_len_kv, cu_q, cu_kv)
    ctx.options = (scale, is_causal, causal_bottom_right, window_left, max_q, max_kv)
    ctx.set_materialize_grads(False)  # lse's gradient stays None where lse is not used


def _backward(ctx: Any, grad_o: Tensor | None, grad_lse: Tensor | None) -> tuple:
    query, key, value, o, lse, seq_len_q, seq_len_kv, cu_q, cu_kv = ctx.saved_tensors
    if grad_lse is not None:
        raise OpInputError(
            f"{CALL}: a gradient reached lse (return_lse=True and lse used in the loss); the backward "
            "takes the gradient of O only"
        )
    if grad_o is None:
        grad_o = torch.zeros_like(o)
    scale, is_causal, bottom_right, window_left, max_q, max_kv = ctx.options
    args = (
        query,
        key,
        value,
        o,
        grad_o.contiguous(),
        lse,
        scale,
        is_causal,
        bottom_right,
        window_left,
        seq_len_q,
    )
    args += (seq_len_kv, cu_q, cu_kv, max_q, max_kv)
    # a remembered call with nothing for torch's dispatcher to do runs without it (op_support.direct)
    prepared = None
    if direct((query, key, value, o, args[4], lse, seq_len_q, seq_len_kv, cu_q, cu_kv)):
        signature = _backward_signature(*args)
        prepared = None if signature is None else op_graphs.GRAPHS.call(signature)
    if prepared is not None:
        dq, dk, dv = prepared(query, key, value, o, args[4], lse, seq_len_q, seq_len_kv, cu_q, cu_kv)
    else:
        dq, dk, dv = _backward_op(*args)
    return dq, dk, dv, *([None] * 10)


_forward_op.register_autograd(_backward, setup_context=_setup_context)


# --- the Python function --------------------------------------------------------------------------------


def _gqa(enable_gqa: Any, query: Any, key: Any) -> None:
    """torch's ``enable_gqa``: a bool; False refuses key/value heads other than query's."""
    if not isinstance(enable_gqa, bool):
        raise OpInputError(
            f"{CALL}: enable_gqa must be a bool or None, got {type(enable_gqa).__name__} {enable_gqa!r}"
        )
    if enable_gqa or not (isinstance(query, Tensor) and isinstance(key, Tensor)):
        return
    if query.dim() >= 3 and key.dim() == query.dim() and query.shape[1] != key.shape[1]:
        raise OpInputError(
            f"{CALL}: enable_gqa=False with key/value heads H_kv = {key.shape[1]} and query heads H = "
            f"{query.shape[1]} (torch's scaled_dot_product_attention refuses this too); pass enable_gqa=True "
            "for grouped-query attention"
        )


def sdpa(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    *,
    scale: float | None = None,
    is_causal: bool = False,
    causal_bottom_right: bool = False,
    window_left: int = -1,
    window_right: int = -1,
    seq_len_q: Tensor | None = None,
    seq_len_kv: Tensor | None = None,
    cu_seqlens_q: Tensor | None = None,
    cu_seqlens_kv: Tensor | None = None,
    max_seqlen_q: int = 0,
    max_seqlen_kv: int = 0,
    return_lse: bool = False,
    enable_gqa: bool | None = None,
) -> Tensor | tuple[Tensor, Tensor]:
    """Scaled dot-product attention: O [B, H, S_q, D_v] in query's dtype (and lse [B, H, S_q, 1]
    fp32, the natural-log sum of each row's exponentials, with ``return_lse``). Differentiable in
    query, key and value (through O).

    query [B, H, S_q, D], key [B, H_kv, S_kv, D] and value [B, H_kv, S_kv, D_v], all bfloat16 or all
    float16, H_kv dividing H (GQA; 1 is MQA). ``scale`` defaults to D ** -0.5. Masks: ``is_causal``
    (top-left; with ``causal_bottom_right`` aligned to the bottom right), ``window_left`` (a sliding
    window of that many keys up to the diagonal, with is_causal), ``window_right`` -1 or 0 (0 is the
    causal mask). Padding: ``seq_len_q`` and ``seq_len_kv`` ([B] int32): keys past a sequence's
    length are masked, and O's rows past it are unspecified. A row that sees no key has O 0 and lse
    -inf. Ragged (THD): query [T, H, D], key and
    value [T_kv, H_kv, D(_v)] with ``cu_seqlens_q`` / ``cu_seqlens_kv`` ([N + 1] int32 prefix sums)
    and the longest sequences' lengths ``max_seqlen_q`` / ``max_seqlen_kv``; O is [T, H, D_v] and lse
    [T, H, 1]. ``enable_gqa`` as torch's ``scaled_dot_product_attention`` names it: False refuses
    H_kv != H (as torch does), True serves GQA; None (the default) serves whatever the heads say.
    Raises `pygraph.errors.OpInputError` naming the argument for a bad shape, dtype, device or mask,
    and `pygraph.GraphNotSupportedError` (the planner's reasons) where nothing serves the graph.
    """
    check_call(
        scale,
        is_causal,
        causal_bottom_right,
        window_left,
        window_right,
        max_seqlen_q,
        max_seqlen_kv,
        return_lse,
    )
    if enable_gqa is not None:
        _gqa(enable_gqa, query, key)
    args = (query, key, value, scale, is_causal, causal_bottom_right, window_left, seq_len_q, seq_len_kv)
    args += (cu_seqlens_q, cu_seqlens_kv, max_seqlen_q, max_seqlen_kv)
    # a remembered call with nothing for torch's dispatcher to do runs without it (op_support.direct)
    prepared = None
    if direct((query, key, value, seq_len_q, seq_len_kv, cu_seqlens_q, cu_seqlens_kv)):
        signature = _forward_signature(*args)
        prepared = None if signature is None else op_graphs.GRAPHS.call(signature)
    try:
        if prepared is not None:
            o, lse = prepared(query, key, value, seq_len_q, seq_len_kv, cu_seqlens_q, cu_seqlens_kv)
        else:
            o, lse = _forward_op(*args)
    except (TypeError, RuntimeError):
        # the dispatcher's own schema check refused an argument before the op's check ran: the op's
        # check, run here, raises the typed error naming it (under torch.compile the fake kernel checks)
        if not torch.compiler.is_compiling():
            check_forward(*args)
        raise
    if not return_lse:
        return o
    if cu_seqlens_q is not None:  # the graph's stats per sequence, as the THD layout's [T, H, 1]
        lse = _lse_of_tokens(lse, cu_seqlens_q, query.shape[0])
    return o, lse
