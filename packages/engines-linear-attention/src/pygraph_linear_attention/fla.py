"""flash-linear-attention's chunked ops with its signatures, over pygraph's plan list.

A user of flash-linear-attention (FLA) 0.6 changes one import::

    from fla.ops.gated_delta_rule import chunk_gated_delta_rule   # before
    from pygraph_linear_attention.fla import chunk_gated_delta_rule  # after

and the call runs whatever plan pygraph's planner ranks first for the graph (the CuTe DSL kernels on
Hopper, the cuTile ones elsewhere; ``pygraph explain`` says which and why), instead of FLA's own
dispatch (FLA 0.6 sends GDN to FlashQLA when FlashQLA is installed, else to its Triton kernels). The
front door is for users who want pygraph's plan list.

`chunk_gated_delta_rule` (also `chunk_gdn`), `chunk_kda` and `chunk_gdn2` take FLA's arguments by
FLA's names and defaults, on FLA's layout: q, k [B, T, H, K], v [B, T, HV, V], the gates [B, T, ...],
``cu_seqlens`` optional (packed sequences with B = 1), and return ``(o, final_state)``: o
[B, T, HV, V] in q's dtype, final_state fp32 in FLA's layout [N, HV, K, V] (or None without
``output_final_state``). pygraph keeps its states as [N, HV, V, K] (FLA's ``state_v_first=True``):
an FLA-layout initial_state is passed as a transposed view, which the op copies into its layout
(one copy of N x HV x K x V fp32 per call), and the final state comes back as a transposed view of
pygraph's (no copy; ``.contiguous()`` where a contiguous [N, HV, K, V] is needed). With
``state_v_first=True`` both go through untouched.

Conversions (each a copy per call, differentiable): g in bfloat16 or float16 to fp32 (the kernels
read fp32 gates); an initial_state not in fp32 to fp32; A_log and dt_bias to fp32; GDN-2's write
gate w to q's dtype (the kernels read it in the io dtype: an fp32 w is rounded to bfloat16 or
float16). Arguments that change only how FLA computes, not what (``chunk_size`` where FLA accepts
it, ``cu_seqlens_cpu``, ``chunk_indices``, ``disable_recompute``, KDA's and GDN-2's ``safe_gate``
without ``use_gate_in_kernel``, which selects FLA's M=16 kernel for gates already within
[lower_bound, 0)), are accepted and not used. ``A_log`` / ``dt_bias`` without ``use_gate_in_kernel``
are not read, as FLA does not read them.

FLA's ``cp_context`` (``fla.ops.cp.FLACPContext``, `chunk_gated_delta_rule` and `chunk_kda`) runs
the call context-parallel over the context's group (`context_parallel.fla_context_call`): this
rank's [1, T_rank, ...] shard, the context's rank-local ``cu_seqlens``, ``is_first_rank``,
``pre_num_ranks`` and ``is_last_rank``; as in FLA, without initial_state or a final state
(`pygraph_linear_attention.context_parallel` takes both, with the group's cu_seqlens).

What FLA accepts and pygraph cannot serve raises `pygraph.errors.OpInputError` naming the function,
FLA's argument and the value: ``cp_context`` with initial_state or output_final_state, ``return_intermediate_states``,
``use_gate_in_kernel=True`` without ``lower_bound`` for KDA and GDN-2 (FLA's unbounded
``-exp(A_log) * softplus(g + dt_bias)`` per key channel; pygraph's KDA / GDN-2 gate is the bounded
one), q/k/v in float32 (the kernels take bfloat16 or float16), ``head_first``, an argument FLA's
signature does not name (FLA ignores one silently). FLA's own refusals are kept with FLA's rules
(``allow_neg_eigval`` without ``use_beta_sigmoid_in_kernel``, B != 1 with ``cu_seqlens``,
``chunk_size`` outside FLA's values, ``lower_bound`` outside [-5, 0) under ``safe_gate`` and
``use_gate_in_kernel``, ``use_gate_in_kernel`` without ``A_log`` where it is required). What the
planner cannot serve (a head dim no kernel takes) is the planner's
`pygraph.GraphNotSupportedError`. Semantics and differences: ``docs/migrating.md``.
"""

from __future__ import annotations

import warnings
from typing import Any

import torch

from pygraph.errors import OpInputError
from pygraph_linear_attention.gdn.op import gated_delta_net
from pygraph_linear_attention.kda.op import gated_delta_net_v2, kimi_delta_attention

__all__ = ["chunk_gated_delta_rule", "chunk_gdn", "chunk_gdn2", "chunk_kda"]

Tensor = torch.Tensor
_IO = (torch.bfloat16, torch.float16)
_CALLS = {
    "gdn": "pygraph_linear_attention.fla.chunk_gated_delta_rule()",
    "kda": "pygraph_linear_attention.fla.chunk_kda()",
    "gdn2": "pygraph_linear_attention.fla.chunk_gdn2()",
}
_CHUNK_SIZES = {"gdn": (16, 32, 64), "kda": (32, 64), "gdn2": (64,)}
# FLA's keyword-only extras (read from **kwargs) by op
_EXTRA = {
    "gdn": ("use_gate_in_kernel", "A_log", "dt_bias", "chunk_size", "transpose_state_layout"),
    "kda": ("A_log", "dt_bias", "chunk_size", "transpose_state_layout"),
    "gdn2": ("A_log", "dt_bias", "chunk_size", "transpose_state_layout"),
}


def _fail(op: str, message: str) -> OpInputError:
    return OpInputError(f"{_CALLS[op]}: {message}")


def _extras(op: str, kwargs: dict[str, Any], state_v_first: bool) -> tuple[dict[str, Any], bool]:
    """FLA's **kwargs of ``op``, checked: (the extras by name, state_v_first after FLA's deprecated
    ``transpose_state_layout``)."""
    if "head_first" in kwargs:
        raise _fail(op, f"head_first={kwargs['head_first']!r}: FLA removed it; inputs are [B, T, H, ...]")
    unknown = sorted(set(kwargs) - set(_EXTRA[op]))
    if unknown:
        raise _fail(
            op,
            f"{', '.join(unknown)}: not an argument of FLA's function (FLA ignores it; the front door "
            "refuses it rather than run something other than what was asked)",
        )
    if "transpose_state_layout" in kwargs:
        if state_v_first:
            raise _fail(op, "Cannot pass both `state_v_first` and the deprecated `transpose_state_layout`.")
        warnings.warn(
            "`transpose_state_layout` is deprecated and renamed to `state_v_first`.",
            DeprecationWarning,
            stacklevel=3,
        )
        state_v_first = bool(kwargs["transpose_state_layout"])
    chunk_size = kwargs.get("chunk_size", 64)
    if chunk_size not in _CHUNK_SIZES[op]:
        sizes = " or ".join(map(str, _CHUNK_SIZES[op]))
        raise _fail(op, f"chunk_size={chunk_size!r}: FLA takes {sizes} here")
    return kwargs, state_v_first


def _common(
    op: str,
    q: Any,
    k: Any,
    v: Any,
    initial_state: Any,
    cu_seqlens: Any,
    cp_context: Any,
    state_v_first: bool,
) -> Any:
    """The checks every front door shares; the initial state in pygraph's layout (fp32)."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, Tensor):
            raise _fail(op, f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.dim() != 4:
            raise _fail(op, f"{name} must be [B, T, H, D] (FLA's layout), got shape {list(t.shape)}")
    if q.dtype not in _IO:
        raise _fail(
            op,
            f"q is {q.dtype}: pygraph's kernels take bfloat16 or float16 q, k and v (cast them; FLA "
            "computes in fp32 inside either way)",
        )
    if cu_seqlens is not None and q.shape[0] != 1:
        raise _fail(
            op,
            f"The batch size is expected to be 1 rather than {q.shape[0]} when using `cu_seqlens` "
            f"(q {list(q.shape)}): flatten variable-length inputs before processing",
        )
    if cp_context is not None:
        _check_cp_context(op, q, initial_state, cu_seqlens)
    if initial_state is None:
        return None
    if not isinstance(initial_state, Tensor):
        raise _fail(op, f"initial_state must be a torch.Tensor or None, got {type(initial_state).__name__}")
    heads = max(q.shape[2], v.shape[2])
    n = q.shape[0] if cu_seqlens is None else cu_seqlens.shape[0] - 1
    layout = (n, heads, v.shape[3], q.shape[3]) if state_v_first else (n, heads, q.shape[3], v.shape[3])
    if tuple(initial_state.shape) != layout:
        name = "[N, HV, V, K] (state_v_first=True)" if state_v_first else "[N, HV, K, V]"
        raise _fail(
            op, f"initial_state must be {name} = {list(layout)}, got shape {list(initial_state.shape)}"
        )
    state = initial_state if initial_state.dtype == torch.float32 else initial_state.float()
    return state if state_v_first else state.transpose(-1, -2)


def _check_cp_context(op: str, q: Tensor, initial_state: Any, cu_seqlens: Any) -> None:
    """FLA's rules of a ``cp_context`` call: B = 1, the rank-local cu_seqlens taken from the context,
    no initial state (FLA's CP mode takes none, and its context numbers no sequence across ranks;
    `pygraph_linear_attention.context_parallel` takes initial and final states with the group's
    cu_seqlens)."""
    if q.shape[0] != 1:
        raise _fail(op, f"cp_context: the batch size must be 1 (packed sequences), got q {list(q.shape)}")
    if cu_seqlens is not None:
        raise _fail(op, "cp_context with cu_seqlens: the rank-local cu_seqlens are cp_context.cu_seqlens")
    if initial_state is not None:
        raise _fail(
            op,
            "cp_context with initial_state: FLA's context parallelism takes no states (its context numbers "
            "no sequence across ranks); pygraph_linear_attention.context_parallel takes initial and final "
            "states with the group's cu_seqlens",
        )


def _op(op: str, fn: Any, cp_context: Any, output_final_state: Any) -> Any:
    """The op a front door calls: ``fn``, or under FLA's ``cp_context`` the context-parallel call of
    its group, rank-local sequences and chain (`context_parallel.fla_context_call`)."""
    if cp_context is None:
        return fn
    if output_final_state:
        raise _fail(
            op,
            "cp_context with output_final_state=True: FLA's context parallelism returns no final state; "
            "pygraph_linear_attention.context_parallel does, with the group's cu_seqlens",
        )
    from pygraph_linear_attention import context_parallel

    def call(*tensors: Tensor, cu_seqlens: Any = None, initial_state: Any = None, **options: Any) -> tuple:
        options.pop("output_final_state", None)
        names = ("q", "k", "v", "g", "beta", "w")[: len(tensors)]
        return context_parallel.fla_context_call(op, cp_context, dict(zip(names, tensors)), options)

    return call


def _through(op: str, fn: Any, *args: Any, **kwargs: Any) -> tuple:
    """``fn(*args, **kwargs)``, its refusal named by the front door too (FLA's ``b`` is the op's
    ``beta``)."""
    try:
        return fn(*args, **kwargs)
    except OpInputError as err:
        alias = " (FLA's b is its beta)" if op == "gdn2" else ""
        raise _fail(op, f"{err}{alias}") from err


def _fp32(t: Any) -> Any:
    return t.float() if isinstance(t, Tensor) and t.dtype != torch.float32 else t


def _result(o: Tensor, final: Tensor | None, state_v_first: bool) -> tuple[Tensor, Tensor | None]:
    if final is None or state_v_first:
        return o, final
    return o, final.transpose(-1, -2)


def chunk_gated_delta_rule(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    g: Tensor,
    beta: Tensor,
    scale: float | None = None,
    initial_state: Tensor | None = None,
    output_final_state: bool = False,
    use_qk_l2norm_in_kernel: bool = False,
    use_beta_sigmoid_in_kernel: bool = False,
    allow_neg_eigval: bool = False,
    state_v_first: bool = False,
    cu_seqlens: Tensor | None = None,
    cu_seqlens_cpu: Tensor | None = None,
    chunk_indices: Tensor | None = None,
    cp_context: Any = None,
    **kwargs: Any,
) -> tuple[Tensor, Tensor | None]:
    """FLA's ``fla.ops.gated_delta_rule.chunk_gated_delta_rule`` over `gdn.op.gated_delta_net`.

    q, k [B, T, H, K]; v [B, T, HV, V] (HV a multiple of H); g [B, T, HV] (the log decay, or with
    ``use_gate_in_kernel=True`` the raw input of ``-exp(A_log) * softplus(g + dt_bias)``); beta
    [B, T, HV]; initial_state [N, HV, K, V] ([N, HV, V, K] with ``state_v_first``). Returns
    ``(o [B, T, HV, V], final_state [N, HV, K, V] fp32 or None)``. The module docstring has the
    conversions and the refusals.
    """
    op = "gdn"
    kwargs, state_v_first = _extras(op, kwargs, state_v_first)
    h0 = _common(op, q, k, v, initial_state, cu_seqlens, cp_context, state_v_first)
    if allow_neg_eigval and not use_beta_sigmoid_in_kernel:
        raise _fail(op, "`allow_neg_eigval=True` requires `use_beta_sigmoid_in_kernel=True`.")
    gate = bool(kwargs.get("use_gate_in_kernel", False))
    a_log, dt_bias = None, None
    if gate:
        a_log, dt_bias = kwargs.get("A_log"), kwargs.get("dt_bias")
        if a_log is None:
            raise _fail(op, "A_log must be provided when use_gate_in_kernel=True.")
        a_log, dt_bias = _fp32(a_log), _fp32(dt_bias)
    o, final = _through(
        op, _op(op, gated_delta_net, cp_context, output_final_state), q, k, v, g, beta, cu_seqlens=cu_seqlens,
        scale=scale, initial_state=h0,
        output_final_state=output_final_state, use_qk_l2norm_in_kernel=use_qk_l2norm_in_kernel,
        use_beta_sigmoid_in_kernel=use_beta_sigmoid_in_kernel, allow_neg_eigval=allow_neg_eigval,
        safe_gate=gate, a_log=a_log, dt_bias=dt_bias,
    )  # fmt: skip
    return _result(o, final, state_v_first)


chunk_gdn = chunk_gated_delta_rule


def _bounded_gate(
    op: str,
    use_gate_in_kernel: bool,
    safe_gate: bool,
    lower_bound: Any,
    kwargs: dict,
    heads: int,
    key_dim: int,
) -> dict[str, Any]:
    """KDA's and GDN-2's gate arguments as pygraph's op takes them (safe_gate, gate_lower_bound,
    a_log, dt_bias [HV, K])."""
    if not use_gate_in_kernel:
        return {}
    a_log, dt_bias = kwargs.get("A_log"), kwargs.get("dt_bias")
    if a_log is None and lower_bound is None:
        raise _fail(
            op, "`A_log` must be provided when `use_gate_in_kernel=True` and `lower_bound` is not set."
        )
    if safe_gate and lower_bound is None:
        raise _fail(
            op, "`lower_bound` must be specified when `safe_gate=True` and `use_gate_in_kernel=True`."
        )
    if safe_gate and not -5 <= lower_bound < 0:
        raise _fail(op, f"`lower_bound` must be in the safe range [-5, 0), got {lower_bound}.")
    if lower_bound is None:
        raise _fail(
            op,
            "use_gate_in_kernel=True with lower_bound=None asks for FLA's unbounded gate "
            "-exp(A_log) * softplus(g + dt_bias) per key channel, which pygraph's kernels do not compute; "
            "pygraph serves the bounded one (pass lower_bound, e.g. -5: lower_bound * sigmoid(exp(A_log) "
            "* (g + dt_bias))) or a g already in log space (use_gate_in_kernel=False)",
        )
    if isinstance(dt_bias, Tensor) and dt_bias.dim() == 1 and dt_bias.numel() == heads * key_dim:
        dt_bias = dt_bias.view(heads, key_dim)  # FLA's [HV * K]
    return {
        "safe_gate": True,
        "gate_lower_bound": float(lower_bound),
        "a_log": _fp32(a_log),
        "dt_bias": _fp32(dt_bias),
    }


def _not_served_intermediates(op: str, return_intermediate_states: bool) -> None:
    if return_intermediate_states:
        raise _fail(
            op,
            "return_intermediate_states=True: the per-chunk states are not returned (the kernels keep them "
            "in their workspace)",
        )


def chunk_kda(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    g: Tensor,
    beta: Tensor,
    scale: float | None = None,
    initial_state: Tensor | None = None,
    output_final_state: bool = False,
    use_qk_l2norm_in_kernel: bool = False,
    use_gate_in_kernel: bool = False,
    use_beta_sigmoid_in_kernel: bool = False,
    allow_neg_eigval: bool = False,
    safe_gate: bool = False,
    lower_bound: float | None = None,
    disable_recompute: bool = False,
    return_intermediate_states: bool = False,
    state_v_first: bool = False,
    cu_seqlens: Tensor | None = None,
    cu_seqlens_cpu: Tensor | None = None,
    cp_context: Any = None,
    **kwargs: Any,
) -> tuple[Tensor, Tensor | None]:
    """FLA's ``fla.ops.kda.chunk_kda`` over `kda.op.kimi_delta_attention`.

    q, k [B, T, H, K]; v [B, T, HV, V]; g [B, T, HV, K] (the log decay per key channel, or with
    ``use_gate_in_kernel=True`` and ``lower_bound`` the raw input of ``lower_bound *
    sigmoid(exp(A_log) * (g + dt_bias))``, A_log [HV] optional, dt_bias [HV * K]); beta [B, T, HV].
    Returns ``(o [B, T, HV, V], final_state [N, HV, K, V] fp32 or None)``.
    """
    op = "kda"
    kwargs, state_v_first = _extras(op, kwargs, state_v_first)
    _not_served_intermediates(op, return_intermediate_states)
    h0 = _common(op, q, k, v, initial_state, cu_seqlens, cp_context, state_v_first)
    gate = _bounded_gate(op, use_gate_in_kernel, safe_gate, lower_bound, kwargs, v.shape[2], q.shape[3])
    if allow_neg_eigval and not use_beta_sigmoid_in_kernel:
        raise _fail(op, "`allow_neg_eigval=True` requires `use_beta_sigmoid_in_kernel=True`.")
    o, final = _through(
        op, _op(op, kimi_delta_attention, cp_context, output_final_state), q, k, v, g, beta,
        cu_seqlens=cu_seqlens, scale=scale, initial_state=h0,
        output_final_state=output_final_state, use_qk_l2norm_in_kernel=use_qk_l2norm_in_kernel,
        use_beta_sigmoid_in_kernel=use_beta_sigmoid_in_kernel, allow_neg_eigval=allow_neg_eigval, **gate,
    )  # fmt: skip
    return _result(o, final, state_v_first)


def chunk_gdn2(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    g: Tensor,
    b: Tensor,
    w: Tensor,
    scale: float | None = None,
    initial_state: Tensor | None = None,
    output_final_state: bool = False,
    use_qk_l2norm_in_kernel: bool = False,
    use_gate_in_kernel: bool = False,
    cu_seqlens: Tensor | None = None,
    cu_seqlens_cpu: Tensor | None = None,
    safe_gate: bool = False,
    lower_bound: float | None = None,
    disable_recompute: bool = False,
    return_intermediate_states: bool = False,
    state_v_first: bool = False,
    **kwargs: Any,
) -> tuple[Tensor, Tensor | None]:
    """FLA's ``fla.ops.gdn2.chunk_gdn2`` over `kda.op.gated_delta_net_v2` (FLA's erase gate ``b`` is
    pygraph's ``beta``).

    q, k, g, b [B, T, H, K]; v, w [B, T, H, V]; the gate as `chunk_kda`'s. Returns ``(o [B, T, H, V],
    final_state [N, H, K, V] fp32 or None)``.
    """
    op = "gdn2"
    kwargs, state_v_first = _extras(op, kwargs, state_v_first)
    _not_served_intermediates(op, return_intermediate_states)
    h0 = _common(op, q, k, v, initial_state, cu_seqlens, None, state_v_first)
    gate = _bounded_gate(op, use_gate_in_kernel, safe_gate, lower_bound, kwargs, v.shape[2], q.shape[3])
    if isinstance(w, Tensor) and w.dtype != q.dtype:
        w = w.to(q.dtype)
    o, final = _through(
        op, gated_delta_net_v2, q, k, v, g, b, w, cu_seqlens=cu_seqlens, scale=scale, initial_state=h0,
        output_final_state=output_final_state, use_qk_l2norm_in_kernel=use_qk_l2norm_in_kernel, **gate,
    )  # fmt: skip
    return _result(o, final, state_v_first)
