"""The built-in example graphs, one or two per family, with shape and dtype overrides.

``pygraph explain|bench|autotune <example>`` and ``pygraph demo`` build their graphs here; a
serialized graph file (the JSON ``repr(graph)`` prints, or ``graph.serialize()`` of a python-only
graph) is read by `load_graph` as well. Building an example imports no framework.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from pygraph.errors import OpInputError
from pygraph.ir.dtypes import data_type

__all__ = ["EXAMPLES", "Example", "UnknownTargetError", "load_graph", "parse_dtype", "parse_shape"]

_DTYPE_ALIASES = {
    "bf16": data_type.BFLOAT16,
    "bfloat16": data_type.BFLOAT16,
    "fp16": data_type.HALF,
    "half": data_type.HALF,
    "float16": data_type.HALF,
    "fp32": data_type.FLOAT,
    "float": data_type.FLOAT,
    "float32": data_type.FLOAT,
}


class UnknownTargetError(LookupError):
    """A target that is neither a built-in example nor a graph file; the message lists the examples."""


@dataclasses.dataclass(frozen=True)
class Example:
    """One example graph. ``axes`` name the sizes ``--shape`` takes, in order, and ``shape`` holds
    their defaults; ``optional`` names the one axis ``--shape`` may leave out (its default holds)."""

    name: str
    family: str
    about: str
    axes: tuple[str, ...]
    shape: tuple[int, ...]
    dtype: data_type
    builder: Callable[[dict[str, int], data_type, str], Any]
    flops: Callable[[dict[str, int]], float] | None = None
    optional: str | None = None

    @property
    def shape_spec(self) -> str:
        """``--shape``'s form: ``[B,]M,N,K``, ``T,H,D[,N]``."""
        return _spec(self.axes, self.optional)

    def dims(self, shape: Sequence[int] | None) -> dict[str, int]:
        """The named sizes for ``shape`` (None: the defaults); OpInputError for a wrong count."""
        dims = dict(zip(self.axes, self.shape))
        if shape is None:
            return dims
        values = tuple(shape)
        names = list(self.axes)
        if self.optional is not None and len(values) == len(names) - 1:
            names.remove(self.optional)
        if len(values) != len(names):
            raise OpInputError(
                f"example {self.name!r}: --shape takes {self.shape_spec}, got {','.join(map(str, values))}"
            )
        if any(v <= 0 for v in values):
            raise OpInputError(f"example {self.name!r}: --shape sizes must be positive, got {list(values)}")
        dims.update(zip(names, values))
        return dims

    def graph(self, shape: Sequence[int] | None = None, dtype: Any = None) -> Any:
        """The example graph at ``shape`` (``axes`` order) in ``dtype`` (a name or a data_type)."""
        dt = self.dtype if dtype is None else parse_dtype(dtype)
        return self.builder(self.dims(shape), dt, self.name)

    def flop_count(self, shape: Sequence[int] | None = None) -> float | None:
        """The example's FLOPs at ``shape`` (None where no count is conventional)."""
        return None if self.flops is None else float(self.flops(self.dims(shape)))


def _spec(axes: Sequence[str], optional: str | None) -> str:
    """``B,M,N,K`` with the optional axis bracketed with its comma: ``[B,]M,N,K``, ``T,H,D[,N]``."""
    text = ",".join(axes)
    if optional is None:
        return text
    return (
        text.replace(f"{optional},", f"[{optional},]", 1)
        if axes[0] == optional
        else text.replace(f",{optional}", f"[,{optional}]", 1)
    )


def parse_dtype(value: Any) -> data_type:
    if isinstance(value, data_type):
        return value
    found = _DTYPE_ALIASES.get(str(value).strip().lower())
    if found is None:
        raise OpInputError(f"--dtype: {value!r} is not one of {', '.join(_DTYPE_ALIASES)}")
    return found


def parse_shape(text: str) -> tuple[int, ...]:
    """``"4096,4096,1024"`` (or ``x`` separated) as a tuple of ints."""
    parts = [p for p in text.replace("x", ",").replace(" ", "").split(",") if p]
    try:
        return tuple(int(p) for p in parts)
    except ValueError:
        raise OpInputError(f"--shape: {text!r} is not a comma-separated list of sizes") from None


def _new_graph(pg_name: str, dt: data_type) -> Any:
    from pygraph.graph import Graph

    return Graph(name=pg_name.replace("-", "_"), io_data_type=dt, compute_data_type=data_type.FLOAT)


# --- gemm --------------------------------------------------------------------------------------------


def _matmul(d: dict[str, int], dt: data_type, name: str) -> tuple[Any, Any]:
    """A row-major [B, M, K] times a column-major [B, K, N] (the layout of a linear layer's weight)."""
    g = _new_graph(name, dt)
    b, m, n, k = d["B"], d["M"], d["N"], d["K"]
    a = g.tensor(name="A", dim=[b, m, k], data_type=dt)
    w = g.tensor(name="B", dim=[b, k, n], stride=[k * n, 1, k], data_type=dt)
    return g, g.matmul(a, w, compute_data_type=data_type.FLOAT, name="mm")


def _gemm(d: dict[str, int], dt: data_type, name: str) -> Any:
    g, c = _matmul(d, dt, name)
    c.set_output(True).set_data_type(dt)
    return g


def _gemm_bias_gelu(d: dict[str, int], dt: data_type, name: str) -> Any:
    g, c = _matmul(d, dt, name)
    bias = g.tensor(name="bias", dim=[d["B"], 1, d["N"]], data_type=dt)
    y = g.gelu_approx_tanh(input=g.bias(input=c, bias=bias, name="add_bias"), name="act")
    y.set_output(True).set_data_type(dt)
    return g


def _gemm_flops(d: dict[str, int]) -> float:
    return 2.0 * d["B"] * d["M"] * d["N"] * d["K"]


# --- sdpa --------------------------------------------------------------------------------------------


def _sdpa(d: dict[str, int], dt: data_type, name: str) -> Any:
    g = _new_graph(name, dt)
    shape = [d["B"], d["H"], d["S"], d["D"]]
    q, k, v = (g.tensor(name=n, dim=shape, data_type=dt) for n in "qkv")
    o, _stats = g.sdpa(
        q=q, k=k, v=v, attn_scale=d["D"] ** -0.5, generate_stats=False, use_causal_mask=True, name="attn"
    )
    o.set_output(True).set_data_type(dt)
    return g


def _sdpa_bwd(d: dict[str, int], dt: data_type, name: str) -> Any:
    g = _new_graph(name, dt)
    shape = [d["B"], d["H"], d["S"], d["D"]]
    q, k, v, o, d_o = (g.tensor(name=n, dim=shape, data_type=dt) for n in ("q", "k", "v", "o", "dO"))
    stats = g.tensor(name="stats", dim=[d["B"], d["H"], d["S"], 1], data_type=data_type.FLOAT)
    grads = g.sdpa_backward(
        q=q,
        k=k,
        v=v,
        o=o,
        dO=d_o,
        stats=stats,
        attn_scale=d["D"] ** -0.5,
        use_causal_mask=True,
        name="attn_bwd",
    )
    for grad in grads:
        grad.set_output(True).set_data_type(dt)
    return g


def _sdpa_flops(d: dict[str, int]) -> float:
    """Causal forward: QK^T and PV over the lower triangle, 2 * 2 * B*H*S*S*D / 2."""
    return 2.0 * d["B"] * d["H"] * d["S"] * d["S"] * d["D"]


def _sdpa_bwd_flops(d: dict[str, int]) -> float:
    """The backward counted as 2.5 forwards (five matmuls against the forward's two)."""
    return 2.5 * _sdpa_flops(d)


# --- linear attention ------------------------------------------------------------------------------


def _linear(op: str) -> Callable[[dict[str, int], data_type, str], Any]:
    """gdn, kda or gdn2 over THD operands: q/k/v [T, H, D], N sequences of T/N tokens."""

    def build(d: dict[str, int], dt: data_type, name: str) -> Any:
        g = _new_graph(name, dt)
        t, h, dk = d["T"], d["H"], d["D"]
        q, k, v = (g.tensor(name=n, dim=[t, h, dk], data_type=dt) for n in "qkv")
        per_key = op in ("kda", "gdn2")  # KDA's and GDN2's gates run per key channel
        gate = g.tensor(name="g", dim=[t, h, dk] if per_key else [t, h], data_type=data_type.FLOAT)
        beta = g.tensor(name="beta", dim=[t, h, dk] if op == "gdn2" else [t, h], data_type=dt)
        cu = g.tensor(name="cu_seqlens", dim=[d["N"] + 1], data_type=data_type.INT32)
        ports = {"q": q, "k": k, "v": v, "g": gate, "beta": beta, "cu_seqlens": cu}
        if op == "gdn2":
            ports["w"] = g.tensor(name="w", dim=[t, h, dk], data_type=dt)
        o, _final = getattr(g, op)(**ports, name=op)
        o.set_output(True)
        return g

    return build


_GEMM = (("B", "M", "N", "K"), (1, 4096, 4096, 4096))
_SDPA = (("B", "H", "S", "D"), (2, 8, 1024, 128))
_LINEAR = (("T", "H", "D", "N"), (2048, 8, 128, 2))
_BF16 = data_type.BFLOAT16

EXAMPLES: dict[str, Example] = {
    e.name: e
    for e in (
        Example("gemm", "gemm", "C = A @ B (A row-major, B column-major)", *_GEMM, _BF16, _gemm, _gemm_flops, "B"),
        Example("gemm-bias-gelu", "gemm", "gelu_tanh(A @ B + bias): the fused epilogue", *_GEMM, _BF16,
                _gemm_bias_gelu, _gemm_flops, "B"),
        Example("sdpa", "sdpa_fwd", "causal attention forward, BHSD", *_SDPA, _BF16, _sdpa, _sdpa_flops),
        Example("sdpa-bwd", "sdpa_bwd", "causal attention backward, BHSD", *_SDPA, _BF16, _sdpa_bwd,
                _sdpa_bwd_flops),
        Example("gdn", "gdn", "gated delta net forward, THD, N sequences", *_LINEAR, _BF16, _linear("gdn"), None,
                "N"),
        Example("kda", "kda", "Kimi delta attention forward (per-channel gate), THD", *_LINEAR, _BF16,
                _linear("kda"), None, "N"),
        Example("gdn2", "gdn2", "gated delta net 2 forward (per-channel gates, a write gate), THD", *_LINEAR,
                _BF16, _linear("gdn2"), None, "N"),
    )
}  # fmt: skip


def load_graph(
    target: str, shape: Sequence[int] | None = None, dtype: Any = None
) -> tuple[Any, Example | None]:
    """(the graph, its example or None) for an example name or a serialized graph file.

    ``shape`` and ``dtype`` apply to examples only. A file holds the JSON ``repr(graph)`` prints
    or the bytes ``graph.serialize()`` returns; it is read through ``Graph.deserialize``, whose
    refusal (a `DeserializationError`) is raised again naming the file.
    """
    example = EXAMPLES.get(target)
    if example is not None:
        return example.graph(shape, dtype), example
    path = Path(target)
    if not path.is_file():
        raise UnknownTargetError(
            f"{target!r} is neither a built-in example ({', '.join(EXAMPLES)}) nor a graph file"
        )
    if shape is not None or dtype is not None:
        raise OpInputError(f"--shape and --dtype apply to the built-in examples, not to the file {target!r}")
    from pygraph.errors import DeserializationError
    from pygraph.graph import Graph
    from pygraph.ir.serialize import parse_ir

    try:
        payload = path.read_bytes()
    except OSError as exc:
        raise UnknownTargetError(f"graph file {target!r} cannot be read: {exc.strerror or exc}") from None
    try:
        # named as the file's graph was (deserialize() keeps the receiving graph's name); a payload
        # that is not pygraph IR (the backend's) carries no name: the file's stem
        data = parse_ir(payload)
        name = data.get("name") if isinstance(data, dict) else None
        graph = Graph(name=name if isinstance(name, str) and name else path.stem)
        graph.deserialize(payload)  # the indented JSON repr(graph) prints is read as well
    except DeserializationError as exc:
        # the same type (BackendPayloadError stays one), prefixed with the file, on one line (the
        # backend's refusal may span several)
        message = " ".join(str(exc).split())
        raise type(exc)(f"graph file {target!r}: {message}", path=exc.path) from exc
    return graph, None
