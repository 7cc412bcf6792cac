"""The torch ops' argument rules: every shape, dtype and device of a ``gated_delta_net`` call (and of
``kimi_delta_attention`` and ``gated_delta_net_v2``, ``op`` "kda" and "gdn2": their gates per key
channel, GDN-2's write gate, the bounded safe gate), checked before anything runs (in eager mode
and while ``torch.compile`` traces the fake kernel).

The rules are the op's documented contract (``docs/linear-attention.md``, "The torch op"), stricter
than the graph's ``gdn`` node: THD layout (the Python functions flatten [B, T, H, D] inputs first,
`common.op_layout`), q/k heads dividing v heads (GVA, as flash-linear-attention's
``chunk_gated_delta_rule``) or v heads dividing q/k heads (GQA), the gates, states and safe-gate
parameters one per output head (HO = max(H, HV)), fp32 gates, states and safe-gate parameters.
What an engine serves beyond them (head dims, arch) is the planner's to say. Each refusal is an
`pygraph.errors.OpInputError` naming the call, the tensor and the value it saw. ``cu_seqlens``'
values are not read: that would wait on the device (the kernels build their chunk tables from it
on the device); its shape, dtype and device are checked.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import torch

from pygraph.errors import OpInputError
from pygraph.op_support import require_bool, require_tensor

__all__ = ["CALL", "CALLS", "DEVICE_TYPES", "GdnProblem", "check_backward", "check_forward"]

CALLS = {
    "gdn": "pygraph_linear_attention.gated_delta_net()",
    "kda": "pygraph_linear_attention.kimi_delta_attention()",
    "gdn2": "pygraph_linear_attention.gated_delta_net_v2()",
}
CALL = CALLS["gdn"]
# where the op's tensors may live: the engines read device memory, and a graph declares no device
# type the planner could decline a host buffer by (the CPU tests widen this for their host stand-in)
DEVICE_TYPES = ("cuda",)
IO_DTYPES = (torch.bfloat16, torch.float16)
INDEX_DTYPES = (torch.int32, torch.int64)


@dataclasses.dataclass(frozen=True)
class GdnProblem:
    """What a call's tensors say: the static part of its graphs' key."""

    tokens: int  # T
    sequences: int  # N = len(cu_seqlens) - 1
    heads_qk: int  # H
    heads_v: int  # HV (v's heads; the output's HO = max(H, HV), one dividing the other)
    key_dim: int  # K
    value_dim: int  # V
    io_dtype: torch.dtype  # q, k, v, o
    beta_dtype: torch.dtype  # fp32 or the io dtype
    cu_dtype: torch.dtype  # int32 or int64
    device: torch.device
    has_initial_state: bool
    has_a_log: bool
    has_dt_bias: bool
    op: str = "gdn"  # gdn | kda | gdn2
    gate_lower_bound: float | None = None  # kda, gdn2 under safe_gate (None: -5)
    max_seqlen: int | None = None  # the longest sequence's tokens, the caller's ranking hint (gdn)

    @property
    def channel_gate(self) -> bool:
        """g (and, GDN-2, beta) one value per key channel."""
        return self.op != "gdn"

    @property
    def heads_out(self) -> int:
        """HO: the output's heads (and the gates', the states' and the parameters'), max(H, HV)."""
        return max(self.heads_qk, self.heads_v)

    @property
    def state_shape(self) -> tuple[int, int, int, int]:
        return (self.sequences, self.heads_out, self.value_dim, self.key_dim)


def _finite(value: Any) -> bool:
    """A real number a float holds finitely (an int past float's range is not: it overflows)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:
        return False


class _Rules:
    """The checks of one op's call, each refusal an `OpInputError` naming the call."""

    def __init__(self, op: str) -> None:
        self.call = CALLS[op]

    def fail(self, message: str) -> OpInputError:
        return OpInputError(f"{self.call}: {message}")

    def tensor(self, name: str, t: Any, optional: bool = False) -> None:
        require_tensor(self.call, name, t, optional)

    def shape(self, name: str, t: torch.Tensor, want: tuple, layout: str) -> None:
        if tuple(t.shape) != tuple(want):
            raise self.fail(f"{name} must be {layout} = {list(want)}, got shape {list(t.shape)}")

    def dtype(self, name: str, t: torch.Tensor, allowed: tuple, what: str) -> None:
        if t.dtype not in allowed:
            raise self.fail(f"{name} must be {what}, got {t.dtype}")

    def device(self, name: str, t: torch.Tensor, device: torch.device) -> None:
        if t.device != device:
            raise self.fail(
                f"{name} is on {t.device}, q on {device}: every tensor of one call is on one device"
            )

    def flags(self, flags: dict[str, Any]) -> None:
        for name, value in flags.items():
            require_bool(self.call, name, value)


def check_forward(
    q: Any,
    k: Any,
    v: Any,
    g: Any,
    beta: Any,
    cu_seqlens: Any,
    scale: Any,
    initial_state: Any,
    a_log: Any,
    dt_bias: Any,
    *,
    op: str = "gdn",
    w: Any = None,
    gate_lower_bound: Any = None,
    max_seqlen: Any = None,
    **flags: Any,
) -> GdnProblem:
    """The call's problem, or the `OpInputError` naming the first bad argument.

    ``flags``: output_final_state, use_qk_l2norm_in_kernel, use_beta_sigmoid_in_kernel,
    allow_neg_eigval, safe_gate (each a bool). ``op`` "kda" / "gdn2": g [T, HV, K] (GDN-2's beta
    too), GDN-2's write gate ``w`` [T, HV, V] in the io dtype, ``gate_lower_bound`` (safe gate only).
    """
    rules = _Rules(op)
    _fail, _tensor, _shape, _dtype, _device = rules.fail, rules.tensor, rules.shape, rules.dtype, rules.device
    for name, t in (("q", q), ("k", k), ("v", v), ("g", g), ("beta", beta), ("cu_seqlens", cu_seqlens)):
        _tensor(name, t)
    for name, t in (("initial_state", initial_state), ("a_log", a_log), ("dt_bias", dt_bias)):
        _tensor(name, t, optional=True)
    _tensor("w", w, optional=op != "gdn2")
    if op != "gdn2" and w is not None:
        raise _fail("w (the write gate) is gated_delta_net_v2's")
    rules.flags(flags)
    if scale is not None and not _finite(scale):
        raise _fail(f"scale must be a finite float or None (K ** -0.5), got {scale!r}")

    if q.dim() != 3:
        raise _fail(f"q must be [T, H, K] (rank 3, THD), got shape {list(q.shape)}")
    tokens, heads_qk, key_dim = q.shape
    if key_dim < 1:  # the graph has no zero extent: refused here, naming the op, not by its tensor()
        raise _fail(f"q must be [T, H, K] with a head dim K >= 1, got shape {list(q.shape)}")
    _shape("k", k, q.shape, "[T, H, K] like q")
    if v.dim() != 3 or v.shape[0] != tokens:
        raise _fail(f"v must be [T, HV, V] with q's T = {tokens}, got shape {list(v.shape)}")
    heads_v, value_dim = v.shape[1], v.shape[2]
    if heads_v < 1 or value_dim < 1:
        raise _fail(
            f"v must be [T, HV, V] with HV >= 1 heads and a head dim V >= 1, got shape {list(v.shape)}"
        )
    if heads_qk < 1 or (heads_v % heads_qk and heads_qk % heads_v):
        raise _fail(
            f"q/k heads H = {heads_qk} and v heads HV = {heads_v}: one must divide the other (GVA: H "
            f"divides HV; GQA: HV divides H), got q {list(q.shape)} and v {list(v.shape)}"
        )
    # the output's heads, and the gates', states' and parameters': HV unless GQA (then H)
    heads_out, hl = (heads_v, "HV") if heads_v >= heads_qk else (heads_qk, "HO")
    _dtype("q", q, IO_DTYPES, "torch.bfloat16 or torch.float16")
    for name, t in (("k", k), ("v", v)):
        _dtype(name, t, (q.dtype,), f"q's dtype {q.dtype}")
    per_key = (key_dim,) if op != "gdn" else ()
    _shape("g", g, (tokens, heads_out, *per_key), f"[T, {hl}, K]" if per_key else f"[T, {hl}]")
    _dtype("g", g, (torch.float32,), "torch.float32 (the log decay)")
    beta_dims = per_key if op == "gdn2" else ()
    _shape("beta", beta, (tokens, heads_out, *beta_dims), f"[T, {hl}, K]" if beta_dims else f"[T, {hl}]")
    _dtype("beta", beta, (torch.float32, q.dtype), f"torch.float32 or q's dtype {q.dtype}")
    if w is not None:
        _shape("w", w, (tokens, heads_out, value_dim), f"[T, {hl}, V]")
        _dtype("w", w, (q.dtype,), f"q's dtype {q.dtype} (the write gate, post-activation)")
    if cu_seqlens.dim() != 1 or cu_seqlens.shape[0] < 1:
        raise _fail(f"cu_seqlens must be [N + 1] (rank 1, at least [0]), got shape {list(cu_seqlens.shape)}")
    _dtype("cu_seqlens", cu_seqlens, INDEX_DTYPES, "torch.int32 or torch.int64")
    sequences = cu_seqlens.shape[0] - 1
    if sequences == 0 and tokens != 0:
        raise _fail(f"cu_seqlens {list(cu_seqlens.shape)} holds no sequence for q's T = {tokens} tokens")
    state = (sequences, heads_out, value_dim, key_dim)
    if initial_state is not None:
        _shape("initial_state", initial_state, state, f"[N, {hl}, V, K]")
        _dtype("initial_state", initial_state, (torch.float32,), "torch.float32")
    if gate_lower_bound is not None:
        if op == "gdn":
            raise _fail(f"gate_lower_bound={gate_lower_bound!r}: gated_delta_net's safe gate has no bound")
        if not _finite(gate_lower_bound) or not gate_lower_bound < 0:
            raise _fail(f"gate_lower_bound must be a negative finite float, got {gate_lower_bound!r}")
        if not flags.get("safe_gate"):
            raise _fail(f"gate_lower_bound={gate_lower_bound} bounds the safe gate: set safe_gate=True")
    if max_seqlen is not None and (
        isinstance(max_seqlen, bool) or not isinstance(max_seqlen, int) or max_seqlen < 1
    ):
        raise _fail(
            f"max_seqlen must be an int >= 1 (the longest sequence's tokens) or None, got {max_seqlen!r}"
        )
    if flags.get("safe_gate"):
        if a_log is None and op == "gdn":
            raise _fail("safe_gate=True needs a_log ([HV] fp32, the per-head log decay rate)")
    elif a_log is not None or dt_bias is not None:
        given = [n for n, t in (("a_log", a_log), ("dt_bias", dt_bias)) if t is not None]
        raise _fail(
            f"{' and '.join(given)} given with safe_gate=False: they are read only with safe_gate=True"
        )
    for name, t, dims in (("a_log", a_log, ()), ("dt_bias", dt_bias, per_key)):
        if t is not None:
            _shape(name, t, (heads_out, *dims), f"[{hl}, K]" if dims else f"[{hl}]")
            _dtype(name, t, (torch.float32,), "torch.float32")
    device = q.device
    for name, t in (("k", k), ("v", v), ("g", g), ("beta", beta), ("cu_seqlens", cu_seqlens)):
        _device(name, t, device)
    for name, t in (("initial_state", initial_state), ("a_log", a_log), ("dt_bias", dt_bias), ("w", w)):
        if t is not None:
            _device(name, t, device)
    if device.type not in DEVICE_TYPES:
        raise _fail(f"q is on {device}: the op runs on {' or '.join(DEVICE_TYPES)} devices")
    return GdnProblem(
        tokens=tokens, sequences=sequences, heads_qk=heads_qk, heads_v=heads_v, key_dim=key_dim,
        value_dim=value_dim, io_dtype=q.dtype, beta_dtype=beta.dtype, cu_dtype=cu_seqlens.dtype,
        device=device, has_initial_state=initial_state is not None, has_a_log=a_log is not None,
        has_dt_bias=dt_bias is not None, op=op,
        gate_lower_bound=None if gate_lower_bound is None else float(gate_lower_bound), max_seqlen=max_seqlen,
    )  # fmt: skip


def check_backward(problem: GdnProblem, d_o: Any, d_final_state: Any) -> None:
    """The backward's incoming gradients: dO like O, d_final_state like the final state (or None)."""
    rules = _Rules(problem.op)
    _tensor, _shape, _dtype, _device = rules.tensor, rules.shape, rules.dtype, rules.device
    _tensor("grad of o", d_o)
    _shape("grad of o", d_o, (problem.tokens, problem.heads_out, problem.value_dim), "[T, HO, V]")
    _dtype("grad of o", d_o, (problem.io_dtype,), f"q's dtype {problem.io_dtype}")
    _device("grad of o", d_o, problem.device)
    _tensor("grad of final_state", d_final_state, optional=True)
    if d_final_state is not None:
        _shape("grad of final_state", d_final_state, problem.state_shape, "[N, HO, V, K]")
        _dtype("grad of final_state", d_final_state, (torch.float32,), "torch.float32")
        _device("grad of final_state", d_final_state, problem.device)
