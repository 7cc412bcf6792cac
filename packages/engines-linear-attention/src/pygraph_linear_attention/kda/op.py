"""The torch ops of the ``kda`` and ``gdn2`` families: Kimi Delta Attention and Gated DeltaNet-2 as
``torch.library`` custom ops over pygraph graphs.

``torch.ops.pygraph_linear_attention.kimi_delta_attention(q, k, v, g, beta, cu_seqlens, scale=None,
initial_state=None, output_final_state=False, use_qk_l2norm_in_kernel=False,
use_beta_sigmoid_in_kernel=False, allow_neg_eigval=False, safe_gate=False, a_log=None, dt_bias=None,
gate_lower_bound=None) -> (o, final_state)``, and ``gated_delta_net_v2`` with the write gate ``w``
after ``beta``. As ``gdn.op.gated_delta_net``: the first call of a key builds and plans the ``kda`` /
``gdn2`` graph (`common.op_graphs`), later calls execute it, so each runs whatever plan the planner ranks
first; the gradient executes the ``kda_bwd`` / ``gdn2_bwd`` graph the same way (where no engine
serves it, the planner's `pygraph.GraphNotSupportedError` names each reason); fake kernels give
the outputs for ``torch.compile(fullgraph=True)``; the arguments are checked (`common.op_arguments`, op
"kda" / "gdn2") before anything runs. The Python functions also take [B, T, H, K] inputs, no cu_seqlens and
half-precision gates (`common.op_layout`). With ``output_final_state=False`` the custom op's second
output is an empty fp32 tensor and the Python functions return None there. Semantics:
`kda.reference.kimi_delta_attention_reference` and `kda.reference.gated_delta_net_v2_reference`.
"""

from __future__ import annotations

from typing import Any

import torch

from pygraph.op_support import direct
from pygraph_linear_attention.common import op_arguments, op_graphs, op_layout
from pygraph_linear_attention.common.op_arguments import GdnProblem, check_backward, check_forward
from pygraph_linear_attention.common.op_graphs import none_state

__all__ = ["gated_delta_net_v2", "kimi_delta_attention"]

Tensor = torch.Tensor
_OPTIONS = ("use_qk_l2norm_in_kernel", "use_beta_sigmoid_in_kernel", "allow_neg_eigval", "safe_gate")


def _flags(output_final_state: bool, options: tuple[bool, ...]) -> dict[str, bool]:
    return {"output_final_state": output_final_state, **dict(zip(_OPTIONS, options))}


def _problem(op: str, x: dict[str, Any], scale: Any, flags: dict[str, bool], glb: Any) -> GdnProblem:
    return check_forward(
        x["q"], x["k"], x["v"], x["g"], x["beta"], x["cu_seqlens"], scale, x.get("initial_state"),
        x.get("a_log"), x.get("dt_bias"), op=op, w=x.get("w"), gate_lower_bound=glb, **flags,
    )  # fmt: skip


def _forward_outputs(p: GdnProblem, q: Tensor, output_final_state: bool) -> tuple[Tensor, Tensor]:
    o = q.new_empty((p.tokens, p.heads_out, p.value_dim))
    final = q.new_empty(p.state_shape, dtype=torch.float32) if output_final_state else none_state(q)
    return o, final


def _new_gradients(p: GdnProblem, x: dict[str, Any]) -> dict[str, Tensor]:
    """The backward's outputs by graph port name, each shaped and typed like its input (a_log and
    dt_bias are given only under safe_gate, `check_forward`)."""
    return {
        name: x[like].new_empty(x[like].shape)
        for name, like in op_graphs.gradients(p.op)
        if x.get(like) is not None
    }


def _backward(
    op: str, x: dict[str, Any], d_o: Tensor, d_final: Tensor | None, scale: Any, options: tuple, glb: Any
) -> tuple[Tensor, ...]:
    """Both ops' backward: every gradient of `op_graphs.gradients` in order (absent: empty fp32);
    checked once per signature, then served prepared (`op_graphs.backward`)."""
    tensors = _backward_tensors(x, d_o, d_final)
    return op_graphs.backward(
        op, tensors, scale, options, glb, lambda: _checked_backward(op, x, d_o, d_final, scale, options, glb)
    )


def _backward_tensors(x: dict[str, Any], d_o: Tensor, d_final: Tensor | None) -> tuple:
    """The backward's operands in `op_graphs.BACKWARD_INPUTS`' order."""
    return (
        x["q"], x["k"], x["v"], x["g"], x["beta"], x["w"], x["cu_seqlens"], d_o, d_final, x["initial_state"],
        x["a_log"], x["dt_bias"],
    )  # fmt: skip


def _grad_call(op: str, x: dict[str, Any], d_o: Tensor, d_final: Tensor | None, ctx: Any) -> Any:
    """The prepared backward call autograd may run directly (a remembered signature with nothing
    for torch's dispatcher to do, op_support.direct), or None."""
    tensors = _backward_tensors(x, d_o, d_final)
    if not direct(tensors):
        return None
    prepared = op_graphs.prepared_backward(op, tensors, ctx.scale, ctx.options, ctx.glb)
    return None if prepared is None else (prepared, tensors)


def _checked_backward(
    op: str, x: dict[str, Any], d_o: Tensor, d_final: Tensor | None, scale: Any, options: tuple, glb: Any
) -> tuple[GdnProblem, dict[str, bool], dict[str, Tensor]]:
    """The backward's problem (the incoming gradients checked too), its flags and its new gradients:
    what the op and its fake kernel both start from."""
    flags = _flags(d_final is not None, options)
    p = _problem(op, x, scale, flags, glb)
    check_backward(p, d_o, d_final)
    return p, flags, _new_gradients(p, x)


def _backward_fake(op: str, x: dict[str, Any], d_o: Tensor, d_final: Tensor | None, scale, options, glb):
    _, _, grads = _checked_backward(op, x, d_o, d_final, scale, options, glb)
    return tuple(grads.get(name, none_state(x["q"])) for name, _ in op_graphs.gradients(op))


def _inputs(q, k, v, g, beta, w, cu_seqlens, initial_state, a_log, dt_bias) -> dict[str, Any]:
    return {"q": q, "k": k, "v": v, "g": g, "beta": beta, "w": w, "cu_seqlens": cu_seqlens,
            "initial_state": initial_state, "a_log": a_log, "dt_bias": dt_bias}  # fmt: skip


# --- KDA ------------------------------------------------------------------------------------------


@torch.library.custom_op("pygraph_linear_attention::kimi_delta_attention", mutates_args=())
def _kda_op(
    q: Tensor, k: Tensor, v: Tensor, g: Tensor, beta: Tensor, cu_seqlens: Tensor, scale: float | None = None,
    initial_state: Tensor | None = None, output_final_state: bool = False,
    use_qk_l2norm_in_kernel: bool = False, use_beta_sigmoid_in_kernel: bool = False,
    allow_neg_eigval: bool = False, safe_gate: bool = False, a_log: Tensor | None = None,
    dt_bias: Tensor | None = None, gate_lower_bound: float | None = None,
) -> tuple[Tensor, Tensor]:  # fmt: skip
    tensors = (q, k, v, g, beta, None, cu_seqlens, initial_state, a_log, dt_bias)
    flags = (
        output_final_state,
        use_qk_l2norm_in_kernel,
        use_beta_sigmoid_in_kernel,
        allow_neg_eigval,
        safe_gate,
    )
    return op_graphs.forward("kda", tensors, scale, flags, gate_lower_bound)


@_kda_op.register_fake
def _kda_fake(q, k, v, g, beta, cu_seqlens, scale=None, initial_state=None, output_final_state=False,
              use_qk_l2norm_in_kernel=False, use_beta_sigmoid_in_kernel=False, allow_neg_eigval=False,
              safe_gate=False, a_log=None, dt_bias=None, gate_lower_bound=None):  # fmt: skip
    x = _inputs(q, k, v, g, beta, None, cu_seqlens, initial_state, a_log, dt_bias)
    options = (use_qk_l2norm_in_kernel, use_beta_sigmoid_in_kernel, allow_neg_eigval, safe_gate)
    p = _problem("kda", x, scale, _flags(output_final_state, options), gate_lower_bound)
    return _forward_outputs(p, q, output_final_state)


@torch.library.custom_op("pygraph_linear_attention::kimi_delta_attention_backward", mutates_args=())
def _kda_backward_op(
    q: Tensor, k: Tensor, v: Tensor, g: Tensor, beta: Tensor, cu_seqlens: Tensor, d_o: Tensor,
    d_final_state: Tensor | None = None, scale: float | None = None, initial_state: Tensor | None = None,
    use_qk_l2norm_in_kernel: bool = False, use_beta_sigmoid_in_kernel: bool = False,
    allow_neg_eigval: bool = False, safe_gate: bool = False, a_log: Tensor | None = None,
    dt_bias: Tensor | None = None, gate_lower_bound: float | None = None,
) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor]:  # fmt: skip
    """(dq, dk, dv, dg, dbeta, d_initial_state, d_a_log, d_dt_bias); an absent one is an empty fp32
    tensor (shape [0])."""
    x = _inputs(q, k, v, g, beta, None, cu_seqlens, initial_state, a_log, dt_bias)
    options = (use_qk_l2norm_in_kernel, use_beta_sigmoid_in_kernel, allow_neg_eigval, safe_gate)
    return _backward("kda", x, d_o, d_final_state, scale, options, gate_lower_bound)


@_kda_backward_op.register_fake
def _kda_backward_fake(q, k, v, g, beta, cu_seqlens, d_o, d_final_state=None, scale=None, initial_state=None,
                       use_qk_l2norm_in_kernel=False, use_beta_sigmoid_in_kernel=False, allow_neg_eigval=False,
                       safe_gate=False, a_log=None, dt_bias=None, gate_lower_bound=None):  # fmt: skip
    x = _inputs(q, k, v, g, beta, None, cu_seqlens, initial_state, a_log, dt_bias)
    options = (use_qk_l2norm_in_kernel, use_beta_sigmoid_in_kernel, allow_neg_eigval, safe_gate)
    return _backward_fake("kda", x, d_o, d_final_state, scale, options, gate_lower_bound)


def _kda_setup(ctx: Any, inputs: tuple, output: tuple) -> None:
    (q, k, v, g, beta, cu_seqlens, scale, initial_state, output_final_state, *options, a_log, dt_bias,
     glb) = inputs  # fmt: skip
    ctx.save_for_backward(q, k, v, g, beta, cu_seqlens, initial_state, a_log, dt_bias)
    ctx.scale, ctx.output_final_state, ctx.options, ctx.glb = scale, output_final_state, tuple(options), glb
    ctx.set_materialize_grads(False)  # an unused output's gradient stays None: no d_final_state to pass


def _kda_grad(ctx: Any, grad_o: Tensor | None, grad_final: Tensor | None) -> tuple:
    q, k, v, g, beta, cu_seqlens, initial_state, a_log, dt_bias = ctx.saved_tensors
    if grad_o is None:  # only the final state was used
        grad_o = q.new_zeros((q.shape[0], max(q.shape[1], v.shape[1]), v.shape[2]))
    d_final = grad_final if ctx.output_final_state else None
    x = _inputs(q, k, v, g, beta, None, cu_seqlens, initial_state, a_log, dt_bias)
    call = _grad_call("kda", x, grad_o, d_final, ctx)
    if call is not None:
        dq, dk, dv, dg, dbeta, dh0, d_a_log, d_dt_bias = call[0](*call[1], placeholders=False)
    else:
        dq, dk, dv, dg, dbeta, dh0, d_a_log, d_dt_bias = _kda_backward_op(
            q, k, v, g, beta, cu_seqlens, grad_o, d_final, ctx.scale, initial_state, *ctx.options, a_log,
            dt_bias, ctx.glb,
        )  # fmt: skip
    return (
        dq, dk, dv, dg, dbeta, None, None, dh0 if initial_state is not None else None, None, None, None, None,
        None, d_a_log if a_log is not None else None, d_dt_bias if dt_bias is not None else None, None,
    )  # fmt: skip


_kda_op.register_autograd(_kda_grad, setup_context=_kda_setup)


# --- GDN-2 ----------------------------------------------------------------------------------------


@torch.library.custom_op("pygraph_linear_attention::gated_delta_net_v2", mutates_args=())
def _gdn2_op(
    q: Tensor, k: Tensor, v: Tensor, g: Tensor, beta: Tensor, w: Tensor, cu_seqlens: Tensor,
    scale: float | None = None, initial_state: Tensor | None = None, output_final_state: bool = False,
    use_qk_l2norm_in_kernel: bool = False, use_beta_sigmoid_in_kernel: bool = False,
    allow_neg_eigval: bool = False, safe_gate: bool = False, a_log: Tensor | None = None,
    dt_bias: Tensor | None = None, gate_lower_bound: float | None = None,
) -> tuple[Tensor, Tensor]:  # fmt: skip
    tensors = (q, k, v, g, beta, w, cu_seqlens, initial_state, a_log, dt_bias)
    flags = (
        output_final_state,
        use_qk_l2norm_in_kernel,
        use_beta_sigmoid_in_kernel,
        allow_neg_eigval,
        safe_gate,
    )
    return op_graphs.forward("gdn2", tensors, scale, flags, gate_lower_bound)


@_gdn2_op.register_fake
def _gdn2_fake(q, k, v, g, beta, w, cu_seqlens, scale=None, initial_state=None, output_final_state=False,
               use_qk_l2norm_in_kernel=False, use_beta_sigmoid_in_kernel=False, allow_neg_eigval=False,
               safe_gate=False, a_log=None, dt_bias=None, gate_lower_bound=None):  # fmt: skip
    x = _inputs(q, k, v, g, beta, w, cu_seqlens, initial_state, a_log, dt_bias)
    options = (use_qk_l2norm_in_kernel, use_beta_sigmoid_in_kernel, allow_neg_eigval, safe_gate)
    p = _problem("gdn2", x, scale, _flags(output_final_state, options), gate_lower_bound)
    return _forward_outputs(p, q, output_final_state)


@torch.library.custom_op("pygraph_linear_attention::gated_delta_net_v2_backward", mutates_args=())
def _gdn2_backward_op(
    q: Tensor, k: Tensor, v: Tensor, g: Tensor, beta: Tensor, w: Tensor, cu_seqlens: Tensor, d_o: Tensor,
    d_final_state: Tensor | None = None, scale: float | None = None, initial_state: Tensor | None = None,
    use_qk_l2norm_in_kernel: bool = False, use_beta_sigmoid_in_kernel: bool = False,
    allow_neg_eigval: bool = False, safe_gate: bool = False, a_log: Tensor | None = None,
    dt_bias: Tensor | None = None, gate_lower_bound: float | None = None,
) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor]:  # fmt: skip
    """(dq, dk, dv, dg, dbeta, dw, d_initial_state, d_a_log, d_dt_bias); an absent one is an empty
    fp32 tensor (shape [0])."""
    x = _inputs(q, k, v, g, beta, w, cu_seqlens, initial_state, a_log, dt_bias)
    options = (use_qk_l2norm_in_kernel, use_beta_sigmoid_in_kernel, allow_neg_eigval, safe_gate)
    return _backward("gdn2", x, d_o, d_final_state, scale, options, gate_lower_bound)


@_gdn2_backward_op.register_fake
def _gdn2_backward_fake(q, k, v, g, beta, w, cu_seqlens, d_o, d_final_state=None, scale=None,
                        initial_state=None, use_qk_l2norm_in_kernel=False, use_beta_sigmoid_in_kernel=False,
                        allow_neg_eigval=False, safe_gate=False, a_log=None, dt_bias=None,
                        gate_lower_bound=None):  # fmt: skip
    x = _inputs(q, k, v, g, beta, w, cu_seqlens, initial_state, a_log, dt_bias)
    options = (use_qk_l2norm_in_kernel, use_beta_sigmoid_in_kernel, allow_neg_eigval, safe_gate)
    return _backward_fake("gdn2", x, d_o, d_final_state, scale, options, gate_lower_bound)


def _gdn2_setup(ctx: Any, inputs: tuple, output: tuple) -> None:
    (q, k, v, g, beta, w, cu_seqlens, scale, initial_state, output_final_state, *options, a_log, dt_bias,
     glb) = inputs  # fmt: skip
    ctx.save_for_backward(q, k, v, g, beta, w, cu_seqlens, initial_state, a_log, dt_bias)
    ctx.scale, ctx.output_final_state, ctx.options, ctx.glb = scale, output_final_state, tuple(options), glb
    ctx.set_materialize_grads(False)


def _gdn2_grad(ctx: Any, grad_o: Tensor | None, grad_final: Tensor | None) -> tuple:
    q, k, v, g, beta, w, cu_seqlens, initial_state, a_log, dt_bias = ctx.saved_tensors
    if grad_o is None:
        grad_o = q.new_zeros((q.shape[0], max(q.shape[1], v.shape[1]), v.shape[2]))
    d_final = grad_final if ctx.output_final_state else None
    x = _inputs(q, k, v, g, beta, w, cu_seqlens, initial_state, a_log, dt_bias)
    call = _grad_call("gdn2", x, grad_o, d_final, ctx)
    if call is not None:
        dq, dk, dv, dg, dbeta, dw, dh0, d_a_log, d_dt_bias = call[0](*call[1], placeholders=False)
    else:
        dq, dk, dv, dg, dbeta, dw, dh0, d_a_log, d_dt_bias = _gdn2_backward_op(
            q, k, v, g, beta, w, cu_seqlens, grad_o, d_final, ctx.scale, initial_state, *ctx.options, a_log,
            dt_bias, ctx.glb,
        )  # fmt: skip
    return (
        dq, dk, dv, dg, dbeta, dw, None, None, dh0 if initial_state is not None else None, None, None, None,
        None, None, d_a_log if a_log is not None else None, d_dt_bias if dt_bias is not None else None, None,
    )  # fmt: skip


_gdn2_op.register_autograd(_gdn2_grad, setup_context=_gdn2_setup)


# --- the Python functions ---------------------------------------------------------------------------


def kimi_delta_attention(
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
    gate_lower_bound: float | None = None,
    *,
    cp_group: Any = None,
) -> tuple[Tensor, Tensor | None]:
    """Kimi Delta Attention over variable-length sequences: ``(o [T, HO, V], final_state
    [N, HO, V, K] fp32, or None when output_final_state is False)``, HO = max(H, HV).
    Differentiable in q, k, v, g, beta, initial_state, a_log and dt_bias.

    q, k [T, H, K] and v [T, HV, V], all bfloat16 or all float16, H dividing HV (GVA) or HV dividing
    H (GQA); g [T, HO, K] fp32 (the log decay per key channel; raw logits under safe_gate; bfloat16
    or float16 is converted to fp32, a copy per call); beta [T, HO] fp32 or the io dtype; cu_seqlens
    [N + 1] int32 or int64 (None: one sequence); initial_state [N, HO, V, K] fp32; under safe_gate
    a_log [HO] and dt_bias [HO, K] fp32 (each optional) and gate_lower_bound (negative, -5 when
    None). [B, T, H, K] inputs as `gdn.op.gated_delta_net`'s (`common.op_layout`). Raises
    `pygraph.errors.OpInputError` naming the tensor for a bad shape, dtype or device, and
    `pygraph.GraphNotSupportedError` (the planner's reasons) where no engine serves the graph.
    ``cp_group``: context parallelism, as `gdn.op.gated_delta_net`'s (`context_parallel`).
    """
    if cp_group is not None:  # routed before the per-call fast path, which it never takes
        from pygraph_linear_attention import context_parallel

        return context_parallel.kimi_delta_attention(
            q, k, v, g, beta, cu_seqlens, scale, initial_state, output_final_state, use_qk_l2norm_in_kernel,
            use_beta_sigmoid_in_kernel, allow_neg_eigval, safe_gate, a_log, dt_bias, gate_lower_bound,
            cp_group=cp_group,
        )  # fmt: skip
    x = [q, k, v, g, beta, None]
    batch, cu_seqlens = op_layout.thd(op_arguments.CALLS["kda"], x, cu_seqlens)
    q, k, v, g, beta, _ = x
    flags = (
        output_final_state,
        use_qk_l2norm_in_kernel,
        use_beta_sigmoid_in_kernel,
        allow_neg_eigval,
        safe_gate,
    )
    tensors = (q, k, v, g, beta, None, cu_seqlens, initial_state, a_log, dt_bias)
    args = (q, k, v, g, beta, cu_seqlens, scale, initial_state, *flags, a_log, dt_bias, gate_lower_bound)
    x = dict(zip(op_graphs.FORWARD_INPUTS, tensors))
    check = lambda: _problem("kda", x, scale, _flags(flags[0], flags[1:]), gate_lower_bound)  # noqa: E731
    return op_graphs.call_forward(_kda_op, "kda", tensors, scale, flags, gate_lower_bound, args, batch, check)


def gated_delta_net_v2(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    g: Tensor,
    beta: Tensor,
    w: Tensor,
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
    gate_lower_bound: float | None = None,
    *,
    cp_group: Any = None,
) -> tuple[Tensor, Tensor | None]:
    """Gated DeltaNet-2 over variable-length sequences: as `kimi_delta_attention`, with beta per key
    channel [T, HO, K] (fp32 or the io dtype; flash-linear-attention's erase gate ``b``) and the
    write gate w [T, HO, V] (the io dtype, post-activation) scaling what is written into the state.
    Differentiable in q, k, v, g, beta, w, initial_state, a_log and dt_bias. ``cp_group``: context
    parallelism, as `gdn.op.gated_delta_net`'s (`context_parallel`)."""
    if cp_group is not None:  # routed before the per-call fast path, which it never takes
        from pygraph_linear_attention import context_parallel

        return context_parallel.gated_delta_net_v2(
            q, k, v, g, beta, w, cu_seqlens, scale, initial_state, output_final_state,
            use_qk_l2norm_in_kernel, use_beta_sigmoid_in_kernel, allow_neg_eigval, safe_gate, a_log, dt_bias,
            gate_lower_bound, cp_group=cp_group,
        )  # fmt: skip
    x = [q, k, v, g, beta, w]
    batch, cu_seqlens = op_layout.thd(op_arguments.CALLS["gdn2"], x, cu_seqlens)
    q, k, v, g, beta, w = x
    flags = (
        output_final_state,
        use_qk_l2norm_in_kernel,
        use_beta_sigmoid_in_kernel,
        allow_neg_eigval,
        safe_gate,
    )
    tensors = (q, k, v, g, beta, w, cu_seqlens, initial_state, a_log, dt_bias)
    args = (q, k, v, g, beta, w, cu_seqlens, scale, initial_state, *flags, a_log, dt_bias, gate_lower_bound)
    x = dict(zip(op_graphs.FORWARD_INPUTS, tensors))
    check = lambda: _problem("gdn2", x, scale, _flags(flags[0], flags[1:]), gate_lower_bound)  # noqa: E731
    return op_graphs.call_forward(
        _gdn2_op, "gdn2", tensors, scale, flags, gate_lower_bound, args, batch, check
    )
