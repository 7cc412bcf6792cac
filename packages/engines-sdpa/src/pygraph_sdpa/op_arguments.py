"""The torch op's argument rules: every shape, dtype, device and mask of an ``sdpa`` call, checked
before anything runs (in eager mode and while ``torch.compile`` traces the fake kernel).

The rules are the op's documented contract (``docs/sdpa.md``, "The torch op"): the dense
[B, H, S, D] layout or the ragged (THD) one, [T, H, D] with ``cu_seqlens_q`` / ``cu_seqlens_kv``
([N + 1] int32 prefix sums) and ``max_seqlen_q`` / ``max_seqlen_kv``; key and value sharing their
heads, which divide the query's (GQA; one head is MQA), one io dtype, and the masks the op maps onto
the graph's ``sdpa`` attributes. Each refusal is an `pygraph.errors.OpInputError` naming the call,
the argument and the value it saw. The values of ``seq_len_*`` and ``cu_seqlens_*`` are not read
(that would wait on the device): a ragged call's maximum lengths are the caller's to give.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import torch

from pygraph.errors import OpInputError
from pygraph.op_support import require_bool, require_tensor

__all__ = [
    "CALL",
    "DEVICE_TYPES",
    "SdpaMasks",
    "SdpaProblem",
    "check_backward",
    "check_call",
    "check_forward",
]

CALL = "pygraph_sdpa.sdpa()"
# where the op's tensors may live: the backend and the engines read device memory (the CPU tests
# widen this for their host stand-in)
DEVICE_TYPES = ("cuda",)
IO_DTYPES = (torch.bfloat16, torch.float16)


@dataclasses.dataclass(frozen=True)
class SdpaMasks:
    """The call's mask arguments, checked: part of its graphs' key."""

    is_causal: bool
    causal_bottom_right: bool
    window_left: int  # keys visible left of the diagonal, the diagonal's included; -1 unbounded

    def graph_attrs(self) -> dict[str, Any]:
        """The graph ``sdpa`` / ``sdpa_backward`` attributes of these masks."""
        attrs: dict[str, Any] = {}
        if self.is_causal:
            attrs["use_causal_mask_bottom_right" if self.causal_bottom_right else "use_causal_mask"] = True
        if self.window_left > 0:
            attrs["sliding_window_length"] = self.window_left
        return attrs

    def reference_options(self) -> dict[str, Any]:
        """The same masks in `pygraph_sdpa.reference.sdpa_reference`'s terms."""
        return {
            "is_causal": self.is_causal,
            "causal_bottom_right": self.causal_bottom_right,
            "window_left": self.window_left,
        }


@dataclasses.dataclass(frozen=True)
class SdpaProblem:
    """What a call's tensors say: the static part of its graphs' key."""

    batch: int
    heads_q: int
    heads_kv: int
    seq_q: int
    seq_kv: int
    head_dim_qk: int
    head_dim_v: int
    io_dtype: torch.dtype
    device: torch.device
    padded: bool  # seq_len_q and seq_len_kv given
    # THD: the tensors are [T, H, D] with cu_seqlens; batch is the sequences' count, seq_q and seq_kv
    # the maximum lengths rounded up to a power of two (`bucket`), so the graphs are few
    ragged: bool = False

    @property
    def out_shape(self) -> tuple[int, int, int, int]:
        """O's shape in the dense layout (a ragged O is query's [T, H, D_v])."""
        return (self.batch, self.heads_q, self.seq_q, self.head_dim_v)

    @property
    def lse_shape(self) -> tuple[int, int, int, int]:
        """The graph's stats: [B, H, S_q, 1] (ragged: per sequence, padded to seq_q)."""
        return (self.batch, self.heads_q, self.seq_q, 1)

    @property
    def empty(self) -> bool:
        """Nothing to attend to or from: no row, or no key (O is 0 and lse -inf)."""
        return 0 in (self.batch, self.heads_q, self.seq_q, self.seq_kv)

    def scale(self, given: float | None) -> float:
        """The attention scale: ``given``, or D ** -0.5."""
        return float(self.head_dim_qk**-0.5 if given is None else given)


def bucket(max_seqlen: int) -> int:
    """A ragged call's maximum length as its graphs declare it: the next power of two (at least 64)."""
    return max(64, 1 << (max_seqlen - 1).bit_length())


def _fail(message: str) -> OpInputError:
    return OpInputError(f"{CALL}: {message}")


def _tensor(name: str, t: Any, optional: bool = False) -> None:
    require_tensor(CALL, name, t, optional)


def _bool(name: str, value: Any) -> None:
    require_bool(CALL, name, value)


def _int(name: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise _fail(f"{name} must be an int, got {type(value).__name__} {value!r}")
    if not -(2**63) <= value < 2**63:  # the custom op's int arguments are int64
        raise _fail(f"{name}={value} is beyond int64")


def check_call(
    scale: Any,
    is_causal: Any,
    causal_bottom_right: Any,
    window_left: Any,
    window_right: Any,
    max_seqlen_q: Any,
    max_seqlen_kv: Any,
    return_lse: Any,
) -> None:
    """The Python function's scalar arguments, cheap enough for every call: those its custom op does
    not take (``window_right``, ``return_lse``) and the types of those it does, before the
    dispatcher could coerce them (an int passed as a bool). The tensors are the op's to check
    (`check_forward`)."""
    _scale(scale)
    _bool("is_causal", is_causal)
    _bool("causal_bottom_right", causal_bottom_right)
    _int("window_left", window_left)
    _int("max_seqlen_q", max_seqlen_q)
    _int("max_seqlen_kv", max_seqlen_kv)
    _int("window_right", window_right)
    if window_right not in (-1, 0):
        raise _fail(
            f"window_right={window_right}: the op serves -1 (unbounded) and 0 (with is_causal); a band "
            "past the diagonal is not served"
        )
    if window_right == 0 and is_causal is not True:
        raise _fail("window_right=0 is the causal mask: pass is_causal=True")
    _bool("return_lse", return_lse)


def _scale(scale: Any) -> None:
    if scale is None:
        return
    finite = not isinstance(scale, bool) and isinstance(scale, (int, float))
    try:
        finite = finite and math.isfinite(scale)
    except OverflowError:  # an int past float's range
        finite = False
    if not finite:
        raise _fail(f"scale must be a finite float or None (D ** -0.5), got {scale!r}")


def _masks(is_causal: Any, causal_bottom_right: Any, window_left: Any) -> SdpaMasks:
    _bool("is_causal", is_causal)
    _bool("causal_bottom_right", causal_bottom_right)
    _int("window_left", window_left)
    if window_left == 0 or window_left < -1:
        raise _fail(
            f"window_left counts the visible keys including the diagonal (>= 1) or is -1, got {window_left}"
        )
    if causal_bottom_right and not is_causal:
        raise _fail("causal_bottom_right aligns the causal diagonal: pass is_causal=True too")
    if window_left > 0 and not is_causal:
        raise _fail(
            f"window_left={window_left} is a sliding window behind the causal diagonal: pass is_causal=True"
        )
    return SdpaMasks(is_causal, causal_bottom_right, window_left)


def _lengths(name: str, t: torch.Tensor, batch: int, device: torch.device) -> None:
    if t.numel() != batch or t.dim() not in (1, 4):
        raise _fail(f"{name} must be [B] or [B, 1, 1, 1] with B = {batch}, got shape {list(t.shape)}")
    if t.dtype != torch.int32:
        raise _fail(f"{name} must be torch.int32, got {t.dtype}")
    if t.device != device:
        raise _fail(f"{name} is on {t.device}, query on {device}: every tensor of one call is on one device")


def _check_ragged(
    query: Any,
    key: Any,
    value: Any,
    cu_seqlens_q: Any,
    cu_seqlens_kv: Any,
    max_seqlen_q: Any,
    max_seqlen_kv: Any,
) -> tuple[int, int, int]:
    """A ragged call's (sequences, max_seqlen_q, max_seqlen_kv) as its graphs declare them."""
    if (cu_seqlens_q is None) != (cu_seqlens_kv is None):
        raise _fail("ragged (THD) inputs take both cu_seqlens_q and cu_seqlens_kv (or neither)")
    for name, t in (("query", query), ("key", key), ("value", value)):
        if t.dim() != 3:
            raise _fail(f"{name} must be [T, H, D] (THD, with cu_seqlens), got shape {list(t.shape)}")
    device = query.device
    for name, t in (("cu_seqlens_q", cu_seqlens_q), ("cu_seqlens_kv", cu_seqlens_kv)):
        if t.dim() != 1 or t.numel() < 1:
            raise _fail(f"{name} must be [N + 1] (prefix sums of the N lengths), got shape {list(t.shape)}")
        if t.dtype != torch.int32:
            raise _fail(f"{name} must be torch.int32, got {t.dtype}")
        if t.device != device:
            raise _fail(
                f"{name} is on {t.device}, query on {device}: every tensor of one call is on one device"
            )
    if cu_seqlens_q.numel() != cu_seqlens_kv.numel():
        raise _fail(
            f"cu_seqlens_q has {cu_seqlens_q.numel()} entries and cu_seqlens_kv {cu_seqlens_kv.numel()}: "
            "one prefix sum per sequence of both"
        )
    for name, t, m in (("query", query, max_seqlen_q), ("key", key, max_seqlen_kv)):
        label = "max_seqlen_q" if t is query else "max_seqlen_kv"
        _int(label, m)
        if m < 1 and t.shape[0] > 0:
            raise _fail(
                f"{label}={m}: a ragged call gives its longest sequence's length (>= 1; reading it from "
                "cu_seqlens would wait on the device)"
            )
        if m > t.shape[0]:
            raise _fail(f"{label}={m} exceeds {name}'s {t.shape[0]} tokens")
    return cu_seqlens_q.numel() - 1, bucket(max(max_seqlen_q, 1)), bucket(max(max_seqlen_kv, 1))


def check_forward(
    query: Any,
    key: Any,
    value: Any,
    scale: Any,
    is_causal: Any,
    causal_bottom_right: Any,
    window_left: Any,
    seq_len_q: Any,
    seq_len_kv: Any,
    cu_seqlens_q: Any = None,
    cu_seqlens_kv: Any = None,
    max_seqlen_q: Any = 0,
    max_seqlen_kv: Any = 0,
) -> tuple[SdpaProblem, SdpaMasks]:
    """The custom op's problem and masks, or the `OpInputError` naming the first bad argument."""
    for name, t in (("query", query), ("key", key), ("value", value)):
        _tensor(name, t)
    for name, t in (
        ("seq_len_q", seq_len_q), ("seq_len_kv", seq_len_kv),
        ("cu_seqlens_q", cu_seqlens_q), ("cu_seqlens_kv", cu_seqlens_kv),
    ):  # fmt: skip
        _tensor(name, t, optional=True)
    _scale(scale)
    masks = _masks(is_causal, causal_bottom_right, window_left)
    if cu_seqlens_q is not None or cu_seqlens_kv is not None:
        if seq_len_q is not None or seq_len_kv is not None:
            raise _fail(
                "ragged (THD) inputs take their lengths from cu_seqlens: pass no seq_len_q / seq_len_kv"
            )
        sequences, s_q, s_kv = _check_ragged(
            query, key, value, cu_seqlens_q, cu_seqlens_kv, max_seqlen_q, max_seqlen_kv
        )
        # the dense rules below, on the [N, H, S, D] shapes the THD tensors' graphs declare
        shapes = [
            (sequences, t.shape[1], s, t.shape[2]) for t, s in ((query, s_q), (key, s_kv), (value, s_kv))
        ]
        problem, masks = _dense(query, key, value, shapes, masks, None, None)
        return dataclasses.replace(problem, ragged=True), masks
    shapes = [tuple(t.shape) for t in (query, key, value)]
    if query.dim() != 4:
        raise _fail(f"query must be [B, H, S, D] (rank 4), got shape {list(query.shape)}")
    return _dense(query, key, value, shapes, masks, seq_len_q, seq_len_kv)


def _dense(
    query: Any, key: Any, value: Any, shapes: list, masks: SdpaMasks, seq_len_q: Any, seq_len_kv: Any
) -> tuple[SdpaProblem, SdpaMasks]:
    """The rules of [B, H, S, D] operands (``shapes``: query's, key's, value's; a ragged call's are
    the ones its graphs declare), their dtypes, devices and padding lengths."""
    q_shape, k_shape, v_shape = shapes
    layout = "[T, H_kv, D]" if len(key.shape) == 3 else "[B, H_kv, S_kv, D]"
    batch, heads_q, seq_q, d_qk = q_shape
    if len(k_shape) != 4 or k_shape[0] != batch or k_shape[3] != d_qk:
        raise _fail(
            f"key must be {layout} with query's D = {d_qk} (and B = {batch}), got shape {list(key.shape)}"
        )
    heads_kv, seq_kv = k_shape[1], k_shape[2]
    if len(v_shape) != 4 or tuple(v_shape[:3]) != (batch, heads_kv, seq_kv) or value.shape[0] != key.shape[0]:
        raise _fail(
            f"value must be key's {list(key.shape[:-1])} with its own head dim, got shape {list(value.shape)}"
        )
    # a zero head dim is no empty problem (a row's scores would all be 0, not -inf): refused
    if d_qk < 1:
        raise _fail(f"query must have a head dim D >= 1, got shape {list(query.shape)}")
    if v_shape[3] < 1:
        raise _fail(f"value must have a head dim D_v >= 1, got shape {list(value.shape)}")
    if heads_kv < 1 or heads_q % heads_kv:
        raise _fail(f"key/value heads H_kv = {heads_kv} must divide query heads H = {heads_q} (GQA, MQA)")
    if query.dtype not in IO_DTYPES:
        raise _fail(f"query must be torch.bfloat16 or torch.float16, got {query.dtype}")
    for name, t in (("key", key), ("value", value)):
        if t.dtype != query.dtype:
            raise _fail(f"{name} must be query's dtype {query.dtype}, got {t.dtype}")
    device = query.device
    for name, t in (("key", key), ("value", value)):
        if t.device != device:
            raise _fail(
                f"{name} is on {t.device}, query on {device}: every tensor of one call is on one device"
            )
    if (seq_len_q is None) != (seq_len_kv is None):
        raise _fail("padding takes both seq_len_q and seq_len_kv (or neither)")
    if seq_len_q is not None:
        _lengths("seq_len_q", seq_len_q, batch, device)
        _lengths("seq_len_kv", seq_len_kv, batch, device)
    if device.type not in DEVICE_TYPES:
        raise _fail(f"query is on {device}: the op runs on {' or '.join(DEVICE_TYPES)} devices")
    problem = SdpaProblem(
        batch=batch, heads_q=heads_q, heads_kv=heads_kv, seq_q=seq_q, seq_kv=seq_kv, head_dim_qk=d_qk,
        head_dim_v=v_shape[3], io_dtype=query.dtype, device=device, padded=seq_len_q is not None,
    )  # fmt: skip
    return problem, masks


def check_backward(problem: SdpaProblem, query: Any, out: Any, grad_out: Any, lse: Any) -> None:
    """The backward's tensors: the forward's O and lse, and dO shaped and typed like O."""
    o_shape = (*query.shape[:-1], problem.head_dim_v) if problem.ragged else problem.out_shape
    for name, t, shape, dtype in (
        ("out", out, o_shape, problem.io_dtype),
        ("grad of out", grad_out, o_shape, problem.io_dtype),
        ("lse", lse, problem.lse_shape, torch.float32),
    ):
        _tensor(name, t)
        if tuple(t.shape) != shape:
            raise _fail(f"{name} must be {list(shape)}, got shape {list(t.shape)}")
        if t.dtype != dtype:
            raise _fail(f"{name} must be {dtype}, got {t.dtype}")
        if t.device != problem.device:
            raise _fail(f"{name} is on {t.device}, query on {problem.device}")
