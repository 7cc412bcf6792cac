"""The torch op of the ``gdn`` family: Gated DeltaNet as a ``torch.library`` custom op over pygraph graphs.

``torch.ops.pygraph_linear_attention.gated_delta_net(q, k, v, g, beta, cu_seqlens, scale=None,
initial_state=None, output_final_state=False, use_qk_l2norm_in_kernel=False,
use_beta_sigmoid_in_kernel=False, allow_neg_eigval=False, safe_gate=False, a_log=None, dt_bias=None,
max_seqlen=None)
-> (o, final_state)`` builds (once per key, `common.op_graphs`) and executes a ``gdn`` graph, so it runs
whatever plan the planner ranks first; its gradient executes a ``gdn_bwd`` graph the same way. A
fake kernel gives the outputs' shapes and dtypes, so the op traces under
``torch.compile(fullgraph=True)``. The arguments are checked (`common.op_arguments`) before anything runs.

The Python function `gated_delta_net` also takes [B, T, H, K] inputs, no cu_seqlens and half-precision
gates (`common.op_layout`), bringing them to the THD the custom op takes. A custom op cannot return None, so with ``output_final_state=False`` the op's second output is an
empty fp32 tensor (shape [0]); `gated_delta_net`, the Python function, returns None there. The
semantics are `gdn.reference.gated_delta_net_reference`'s; layout, dtypes and limits are in
``docs/linear-attention.md`` ("The torch op").
"""

from __future__ import annotations

from typing import Any

import torch

from pygraph.op_support import direct
from pygraph_linear_attention.common import op_graphs, op_layout
from pygraph_linear_attention.common.op_arguments import CALL, GdnProblem, check_backward, check_forward
from pygraph_linear_attention.common.op_graphs import none_state

__all__ = ["gated_delta_net"]

_FLAGS = (
    "output_final_state",
    "use_qk_l2norm_in_kernel",
    "use_beta_sigmoid_in_kernel",
    "allow_neg_eigval",
    "safe_gate",
)
Tensor = torch.Tensor


def _flags(*values: bool) -> dict[str, bool]:
    """The flags by name, in `_FLAGS`' order."""
    return dict(zip(_FLAGS, values))


def _problem(
    q, k, v, g, beta, cu_seqlens, scale, initial_state, a_log, dt_bias, flags, max_seqlen=None
) -> GdnProblem:
    return check_forward(
        q, k, v, g, beta, cu_seqlens, scale, initial_state, a_log, dt_bias, max_seqlen=max_seqlen, **flags
    )


# --- the forward ------------------------------------------------------------------------------------


@torch.library.custom_op("pygraph_linear_attention::gated_delta_net", mutates_args=())
def _forward_op(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    g: Tensor,
    beta: Tensor,
    cu_seqlens: Tensor,
    scale: float | None = None,
    initial_state: Tensor | None = None,
    output_final_state: bool = False,
    use_qk_l2norm_in_kernel: bool = False,
    use_beta_sigmoid_in_kernel: bool = False,
    allow_neg_eigval: bool = False,
    safe_gate: bool = False,
    a_log: Tensor | None = None,
    dt_bias: Tensor | None = None,
    max_seqlen: int | None = None,
) -> tuple[Tensor, Tensor]:
    tensors = (q, k, v, g, beta, None, cu_seqlens, initial_state, a_log, dt_bias)
    flags = (
        output_final_state,
        use_qk_l2norm_in_kernel,
        use_beta_sigmoid_in_kernel,
        allow_neg_eigval,
        safe_gate,
    )
    return op_graphs.forward("gdn", tensors, scale, flags, None, max_seqlen)


@_forward_op.register_fake
def _forward_fake(q, k, v, g, beta, cu_seqlens, scale=None, initial_state=None, output_final_state=False,
                  use_qk_l2norm_in_kernel=False, use_beta_sigmoid_in_kernel=False, allow_neg_eigval=False,
                  safe_gate=False, a_log=None, dt_bias=None, max_seqlen=None):  # fmt: skip
    flags = _flags(
        output_final_state, use_qk_l2norm_in_kernel, use_beta_sigmoid_in_kernel, allow_neg_eigval, safe_gate
    )
    p = _problem(q, k, v, g, beta, cu_seqlens, scale, initial_state, a_log, dt_bias, flags, max_seqlen)
    o = q.new_empty((p.tokens, p.heads_out, p.value_dim))
    final = q.new_empty(p.state_shape, dtype=torch.float32) if output_final_state else none_state(q)
    return o, final


# --- the backward -----------------------------------------------------------------------------------


@torch.library.custom_op("pygraph_linear_attention::gated_delta_net_backward", mutates_args=())
def _backward_op(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    g: Tensor,
    beta: Tensor,
    cu_seqlens: Tensor,
    d_o: Tensor,
    d_final_state: Tensor | None = None,
    scale: float | None = None,
    initial_state: Tensor | None = None,
    use_qk_l2norm_in_kernel: bool = False,
    use_beta_sigmoid_in_kernel: bool = False,
    allow_neg_eigval: bool = False,
    safe_gate: bool = False,
    a_log: Tensor | None = None,
    dt_bias: Tensor | None = None,
    max_seqlen: int | None = None,
) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor]:
    """(dq, dk, dv, dg, dbeta, d_initial_state, d_a_log, d_dt_bias); an absent one is an empty fp32
    tensor (shape [0]). Checked once per signature, then served prepared (`op_graphs.backward`)."""
    tensors = (q, k, v, g, beta, None, cu_seqlens, d_o, d_final_state, initial_state, a_log, dt_bias)
    options = (use_qk_l2norm_in_kernel, use_beta_sigmoid_in_kernel, allow_neg_eigval, safe_gate)

    def checked() -> tuple[GdnProblem, dict[str, bool], dict[str, Tensor]]:
        return _checked_backward(
            q, k, v, g, beta, cu_seqlens, d_o, d_final_state, scale, initial_state, options, a_log, dt_bias,
            max_seqlen,
        )  # fmt: skip

    return op_graphs.backward("gdn", tensors, scale, options, None, checked, max_seqlen)


def _checked_backward(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    g: Tensor,
    beta: Tensor,
    cu_seqlens: Tensor,
    d_o: Tensor,
    d_final_state: Tensor | None,
    scale: float | None,
    initial_state: Tensor | None,
    options: tuple[bool, bool, bool, bool],
    a_log: Tensor | None,
    dt_bias: Tensor | None,
    max_seqlen: int | None = None,
) -> tuple[GdnProblem, dict[str, bool], dict[str, Tensor]]:
    """The backward's problem (checked, the output gradients' included), its flags and its new
    gradients: what the op and its fake kernel both start from. ``options``: (use_qk_l2norm_in_kernel,
    use_beta_sigmoid_in_kernel, allow_neg_eigval, safe_gate)."""
    flags = _flags(d_final_state is not None, *options)
    p = _problem(q, k, v, g, beta, cu_seqlens, scale, initial_state, a_log, dt_bias, flags, max_seqlen)
    check_backward(p, d_o, d_final_state)
    return p, flags, _new_gradients(p, q, g, beta)


def _new_gradients(p: GdnProblem, q: Tensor, g: Tensor, beta: Tensor) -> dict[str, Tensor]:
    """The backward's outputs by gdn_bwd port name, each shaped and typed like its input."""
    grads = {
        "dQ": q.new_empty((p.tokens, p.heads_qk, p.key_dim)),
        "dK": q.new_empty((p.tokens, p.heads_qk, p.key_dim)),
        "dV": q.new_empty((p.tokens, p.heads_v, p.value_dim)),
        "dG": g.new_empty((p.tokens, p.heads_out)),
        "dBeta": beta.new_empty((p.tokens, p.heads_out)),
    }
    if p.has_initial_state:
        grads["d_initial_state"] = q.new_empty(p.state_shape, dtype=torch.float32)
    if p.has_a_log:
        grads["d_a_log"] = q.new_empty((p.heads_out,), dtype=torch.float32)
    if p.has_dt_bias:
        grads["d_dt_bias"] = q.new_empty((p.heads_out,), dtype=torch.float32)
    return grads


@_backward_op.register_fake
def _backward_fake(q, k, v, g, beta, cu_seqlens, d_o, d_final_state=None, scale=None, initial_state=None,
                   use_qk_l2norm_in_kernel=False, use_beta_sigmoid_in_kernel=False, allow_neg_eigval=False,
                   safe_gate=False, a_log=None, dt_bias=None, max_seqlen=None):  # fmt: skip
    _, _, grads = _checked_backward(
        q, k, v, g, beta, cu_seqlens, d_o, d_final_state, scale, initial_state,
        (use_qk_l2norm_in_kernel, use_beta_sigmoid_in_kernel, allow_neg_eigval, safe_gate), a_log, dt_bias,
        max_seqlen,
    )  # fmt: skip
    return tuple(grads.get(name, none_state(q)) for name, _ in op_graphs.GRADIENTS)


# --- autograd: the forward's gradient is the backward op ----------------------------------------------


def _setup_context(ctx: Any, inputs: tuple, output: tuple) -> None:
    (q, k, v, g, beta, cu_seqlens, scale, initial_state, output_final_state, l2norm, sigmoid, neg_eigval,
     safe_gate, a_log, dt_bias, max_seqlen) = inputs  # fmt: skip
    ctx.save_for_backward(q, k, v, g, beta, cu_seqlens, initial_state, a_log, dt_bias)
    ctx.scale, ctx.output_final_state, ctx.max_seqlen = scale, output_final_state, max_seqlen
    ctx.flags = (l2norm, sigmoid, neg_eigval, safe_gate)
    ctx.set_materialize_grads(False)  # an unused output's gradient stays None: no d_final_state to pass


def _backward(ctx: Any, grad_o: Tensor | None, grad_final: Tensor | None) -> tuple:
    q, k, v, g, beta, cu_seqlens, initial_state, a_log, dt_bias = ctx.saved_tensors
    if grad_o is None:  # only the final state was used
        grad_o = q.new_zeros((q.shape[0], max(q.shape[1], v.shape[1]), v.shape[2]))
    d_final = grad_final if ctx.output_final_state else None
    # a remembered call with nothing for torch's dispatcher to do runs without it (op_support.direct)
    tensors = (q, k, v, g, beta, None, cu_seqlens, grad_o, d_final, initial_state, a_log, dt_bias)
    prepared = (
        op_graphs.prepared_backward("gdn", tensors, ctx.scale, ctx.flags, None, ctx.max_seqlen)
        if direct(tensors)
        else None
    )
    if prepared is not None:
        dq, dk, dv, dg, dbeta, dh0, d_a_log, d_dt_bias = prepared(*tensors, placeholders=False)
    else:
        dq, dk, dv, dg, dbeta, dh0, d_a_log, d_dt_bias = _backward_op(
            q, k, v, g, beta, cu_seqlens, grad_o, d_final, ctx.scale, initial_state, *ctx.flags, a_log, dt_bias,
            ctx.max_seqlen,
        )  # fmt: skip
    return (
        dq, dk, dv, dg, dbeta, None, None,
        dh0 if initial_state is not None else None, None, None, None, None, None,
        d_a_log if a_log is not None else None, d_dt_bias if dt_bias is not None else None, None,
    )  # fmt: skip


_forward_op.register_autograd(_backward, setup_context=_setup_context)


# --- the Python function --------------------------------------------------------------------------------


def gated_delta_net(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    g: Tensor,
    beta: Tensor,
    cu_seqlens: Tensor | None = None,
    scale: float | None = None,
    initial_state: Tensor | None = None,
    output_final_state: bool = False,
    use_qk_l2norm_in_kernel: bool = False,
    use_beta_sigmoid_in_kernel: bool = False,
    allow_neg_eigval: bool = False,
    safe_gate: bool = False,
    a_log: Tensor | None = None,
    dt_bias: Tensor | None = None,
    *,
    cp_group: Any = None,
    max_seqlen: int | None = None,
) -> tuple[Tensor, Tensor | None]:
    """Gated DeltaNet over variable-length sequences: ``(o [T, HO, V], final_state [N, HO, V, K]
    fp32, or None when output_final_state is False)``, HO = max(H, HV). Differentiable in q, k, v,
    g, beta, initial_state, a_log and dt_bias.

    q, k [T, H, K] and v [T, HV, V], all bfloat16 or all float16, H dividing HV (GVA) or HV dividing
    H (GQA); g [T, HO] fp32 (the log decay; raw logits under safe_gate; bfloat16 or float16 is
    converted to fp32, a copy per call); beta [T, HO] fp32 or the io dtype; cu_seqlens [N + 1] int32
    or int64 (None: one sequence); initial_state [N, HO, V, K] fp32; a_log, dt_bias [HO] fp32
    (safe_gate only). [B, T, H, K] inputs (every per-token tensor [B, T, ...]) are B sequences of T
    tokens without cu_seqlens, or packed sequences with B = 1 and cu_seqlens; o is then [B, T, HO, V]
    (`common.op_layout`). Raises `pygraph.errors.OpInputError` naming the tensor for a bad shape,
    dtype or device, and `pygraph.GraphNotSupportedError` (the planner's reasons) where no engine
    serves the graph.

    ``cp_group`` (a ``torch.distributed`` ProcessGroup): context parallelism, q, k, v, g, beta this
    rank's shard of the group's tokens and cu_seqlens the group's; the call is
    `context_parallel.gated_delta_net`'s (final states on the last rank; that function takes the
    other choices). None: this rank's tokens are the whole problem.

    ``max_seqlen``: the longest sequence's tokens where the caller knows them (flash-attn's varlen
    argument): a hint to the plans' ranking (a batch whose longest sequences outlast the rest runs the
    backward's segmented scans), never to correctness; an int >= 1 or None. Ignored with ``cp_group``.
    """
    if cp_group is not None:  # routed before the per-call fast path, which it never takes
        from pygraph_linear_attention import context_parallel

        return context_parallel.gated_delta_net(
            q, k, v, g, beta, cu_seqlens, scale, initial_state, output_final_state, use_qk_l2norm_in_kernel,
            use_beta_sigmoid_in_kernel, allow_neg_eigval, safe_gate, a_log, dt_bias, cp_group=cp_group,
        )  # fmt: skip
    x = [q, k, v, g, beta, None]
    batch, cu_seqlens = op_layout.thd(CALL, x, cu_seqlens)
    q, k, v, g, beta, _ = x
    tensors = (q, k, v, g, beta, None, cu_seqlens, initial_state, a_log, dt_bias)
    flags = (
        output_final_state,
        use_qk_l2norm_in_kernel,
        use_beta_sigmoid_in_kernel,
        allow_neg_eigval,
        safe_gate,
    )
    args = (q, k, v, g, beta, cu_seqlens, scale, initial_state, *flags, a_log, dt_bias, max_seqlen)

    def check() -> None:
        _problem(
            q, k, v, g, beta, cu_seqlens, scale, initial_state, a_log, dt_bias, _flags(*flags), max_seqlen
        )

    return op_graphs.call_forward(
        _forward_op, "gdn", tensors, scale, flags, None, args, batch, check, max_seqlen=max_seqlen
    )
