"""Shared pieces of the IR tests: one valid call per op, and a recording stand-in for the backend.

The stand-in checks every builder call against the REAL backend's signature (parsed from
nvidia-cudnn-frontend's docstrings when it is importable), so lowering structure is tested on CPU
without a cuDNN runtime.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, ClassVar

import pytest

import pygraph
from pygraph import data_type as dt
from pygraph.ir import dtypes as _dtypes
from pygraph.ops import OPS

# -- one valid call per op ------------------------------------------------------------------------
Recipe = Callable[[pygraph.Graph], tuple[tuple[Any, ...], dict[str, Any]]]


def _t(g: pygraph.Graph, dim, dtype=None, **kw) -> pygraph.Tensor:
    return g.tensor(dim, data_type=dtype, **kw)


def _pointwise(name: str) -> Recipe:
    spec = OPS[name]

    def recipe(g):
        args = tuple(_t(g, [2, 3, 4]) for _ in spec.inputs)
        kwargs: dict[str, Any] = {}
        if name.startswith("leaky_relu"):
            kwargs["negative_slope"] = 0.1
        if name == "gen_index":
            kwargs["axis"] = 1
        return args, kwargs

    return recipe


def _norm_fwd(g):
    x = _t(g, [4, 8, 16])
    return (pygraph.norm_forward_phase.TRAINING, x, _t(g, [1, 8, 16]), _t(g, [1, 8, 16]), 1e-5), {}


def _norm_bwd(g):
    x = _t(g, [4, 8, 16])
    return (), dict(
        grad=_t(g, [4, 8, 16]),
        input=x,
        scale=_t(g, [1, 8, 16]),
        mean=_t(g, [4, 1, 1]),
        inv_variance=_t(g, [4, 1, 1]),
    )


def _la(g, name: str):
    T, H, K, V = 64, 4, 32, 16
    gate = [T, H] if name.startswith("gdn") and not name.startswith("gdn2") else [T, H, K]
    beta = [T, H, K] if name.startswith("gdn2") else [T, H]
    kw = dict(
        q=_t(g, [T, H, K], dt.BFLOAT16), k=_t(g, [T, H, K], dt.BFLOAT16), v=_t(g, [T, H, V], dt.BFLOAT16),
        g=_t(g, gate, dt.FLOAT), beta=_t(g, beta, dt.BFLOAT16), cu_seqlens=_t(g, [3], dt.INT32),
    )  # fmt: skip
    if name.startswith("gdn2"):
        kw["w"] = _t(g, [T, H, V], dt.BFLOAT16)
    if name.endswith("_bwd"):
        kw["dO"] = _t(g, [T, H, V], dt.BFLOAT16)
    return (), kw


def _sdpa_qkv(g, dtype):
    return _t(g, [2, 4, 128, 64], dtype), _t(g, [2, 4, 256, 64], dtype), _t(g, [2, 4, 256, 64], dtype)


def _scalars(g, names: str) -> dict[str, Any]:
    return {n: _t(g, [1, 1, 1, 1], dt.FLOAT) for n in names.split()}


def _sdpa_fp8(g):
    q, k, v = _sdpa_qkv(g, dt.FP8_E4M3)
    return (q, k, v), _scalars(g, "descale_q descale_k descale_v descale_s scale_s scale_o")


def _sdpa_fp8_bwd(g):
    q, k, v = _sdpa_qkv(g, dt.FP8_E4M3)
    o, do = _t(g, [2, 4, 128, 64], dt.FP8_E4M3), _t(g, [2, 4, 128, 64], dt.FP8_E4M3)
    stats = _t(g, [2, 4, 128, 1], dt.FLOAT)
    names = "descale_q descale_k descale_v descale_o descale_dO descale_s descale_dP scale_s scale_dQ scale_dK scale_dV scale_dP"
    return (q, k, v, o, do, stats), _scalars(g, names)


def _sdpa_mxfp8_bwd(g):
    q, k, v = _sdpa_qkv(g, dt.FP8_E4M3)
    kw = dict(
        q=q, q_T=_t(g, [2, 4, 64, 128]), k=k, k_T=_t(g, [2, 4, 64, 256]), v=v, o_f16=_t(g, [2, 4, 128, 64]),
        dO_f16=_t(g, [2, 4, 128, 64]), dO=_t(g, [2, 4, 128, 64]), dO_T=_t(g, [2, 4, 64, 128]),
        stats=_t(g, [2, 4, 128, 1], dt.FLOAT),
    )  # fmt: skip
    kw.update(_scalars(g, "descale_q descale_q_T descale_k descale_k_T descale_v descale_dO descale_dO_T"))
    return (), kw


RECIPES: dict[str, Recipe] = {
    **{name: _pointwise(name) for name, spec in OPS.items() if spec.family == "pointwise"},
    "matmul": lambda g: ((_t(g, [2, 4, 8]), _t(g, [1, 8, 16])), {}),
    "rmsnorm": _norm_fwd,
    "layernorm": _norm_fwd,
    "adalayernorm": _norm_fwd,
    "instancenorm": lambda g: (
        (
            pygraph.norm_forward_phase.TRAINING,
            _t(g, [4, 8, 5, 5]),
            _t(g, [1, 8, 1, 1]),
            _t(g, [1, 8, 1, 1]),
            1e-5,
        ),
        {},
    ),
    "rmsnorm_backward": lambda g: (
        (),
        dict(
            grad=_t(g, [4, 8]),
            input=_t(g, [4, 8]),
            scale=_t(g, [1, 8]),
            inv_variance=_t(g, [4, 1]),
            has_dbias=True,
        ),
    ),
    "layernorm_backward": _norm_bwd,
    "adalayernorm_backward": _norm_bwd,
    "instancenorm_backward": _norm_bwd,
    "batchnorm_backward": _norm_bwd,
    "batchnorm": lambda g: (
        (
            _t(g, [4, 8, 5, 5]),
            _t(g, [1, 8, 1, 1]),
            _t(g, [1, 8, 1, 1]),
            _t(g, [1, 8, 1, 1]),
            _t(g, [1, 8, 1, 1]),
            1e-5,
            0.1,
        ),
        {},
    ),
    "batchnorm_inference": lambda g: ((_t(g, [4, 8, 5, 5]), *(_t(g, [1, 8, 1, 1]) for _ in range(4))), {}),
    "genstats": lambda g: ((_t(g, [4, 8, 5, 5]),), {}),
    "reduction": lambda g: ((_t(g, [4, 8]), pygraph.reduction_mode.ADD), {}),
    "block_scale_dequantize": lambda g: ((_t(g, [32, 64]), _t(g, [32, 2])), dict(block_size=[1, 32])),
    "block_scale_quantize": lambda g: ((_t(g, [32, 64]),), dict(block_size=32)),
    "moe_grouped_matmul": lambda g: ((_t(g, [1, 64, 32]), _t(g, [4, 32, 16]), _t(g, [5], dt.INT32)), {}),
    "moe_grouped_matmul_bwd": lambda g: ((_t(g, [1, 64, 16]), _t(g, [1, 64, 32]), _t(g, [5], dt.INT32)), {}),
    "conv_fprop": lambda g: ((_t(g, [2, 8, 16, 16]), _t(g, [4, 8, 3, 3])), dict(padding=[1, 1])),
    "conv_dgrad": lambda g: ((_t(g, [2, 4, 16, 16]), _t(g, [4, 8, 3, 3])), dict(padding=[1, 1])),
    "conv_wgrad": lambda g: ((_t(g, [2, 8, 16, 16]), _t(g, [2, 4, 16, 16])), dict(padding=[1, 1])),
    "reshape": lambda g: ((_t(g, [2, 3, 4]),), {}),
    "slice": lambda g: ((_t(g, [4, 8]), [slice(0, 2), slice(1, 8, 2)]), {}),
    "transpose": lambda g: ((_t(g, [2, 3, 4]), [2, 0, 1]), {}),
    "concatenate": lambda g: (([_t(g, [2, 3]), _t(g, [2, 5])],), dict(axis=1)),
    "rope": lambda g: ((_t(g, [2, 8, 16]), _t(g, [8, 16])), {}),
    "rope_backward": lambda g: ((_t(g, [2, 8, 16]), _t(g, [8, 16])), {}),
    "sdpa": lambda g: (_sdpa_qkv(g, dt.HALF), dict(attn_scale=0.125, generate_stats=True)),
    "sdpa_backward": lambda g: (
        (
            *_sdpa_qkv(g, dt.HALF),
            _t(g, [2, 4, 128, 64], dt.HALF),
            _t(g, [2, 4, 128, 64], dt.HALF),
            _t(g, [2, 4, 128, 1], dt.FLOAT),
        ),
        dict(attn_scale=0.125),
    ),
    "sdpa_fp8": _sdpa_fp8,
    "sdpa_fp8_backward": _sdpa_fp8_bwd,
    "sdpa_mxfp8": lambda g: (
        _sdpa_qkv(g, dt.FP8_E4M3),
        dict(generate_stats=True, **_scalars(g, "descale_q descale_k descale_v")),
    ),
    "sdpa_mxfp8_backward": _sdpa_mxfp8_bwd,
    **{
        name: (lambda g, _n=name: _la(g, _n))
        for name in ("gdn", "gdn_bwd", "kda", "kda_bwd", "gdn2", "gdn2_bwd")
    },
}


def build_op(name: str, graph: pygraph.Graph | None = None) -> tuple[pygraph.Graph, Any]:
    g = (
        graph
        if graph is not None
        else pygraph.Graph(f"g_{name}", io_data_type=dt.HALF, compute_data_type=dt.FLOAT)
    )
    args, kwargs = RECIPES[name](g)
    result = getattr(g, name)(*args, **kwargs)
    # a graph has at least one output (validate() refuses one whose results are all virtual)
    first = next(t for t in (result if isinstance(result, list) else [result]) if t is not None)
    first.set_output(True)
    return g, result


# -- the recording backend stand-in ---------------------------------------------------------------
_SIG_LINE = re.compile(r"^(\w+)\(self(.*)\) -> (.*)$")


def real_signatures() -> dict[str, list[dict[str, bool]]]:
    """method -> overloads, each {keyword: has_default}, from the installed backend's docstrings."""
    cudnn = pytest.importorskip("cudnn")
    bg = cudnn._pybind_module.backend_graph
    out: dict[str, list[dict[str, bool]]] = {}
    for name in dir(bg):
        doc = getattr(getattr(bg, name), "__doc__", None) or ""
        for line in doc.splitlines():
            m = _SIG_LINE.match(line.strip().strip("`"))
            if not m or m.group(1) != name:
                continue
            params: dict[str, bool] = {}
            depth, cur = 0, ""
            for ch in m.group(2) + ",":
                depth += ch in "[("
                depth -= ch in "])"
                if ch == "," and depth == 0:
                    part = cur.strip()
                    cur = ""
                    if part and ":" in part and not part.startswith("*"):
                        params[part.split(":")[0].strip()] = "=" in part
                    continue
                cur += ch
            overloads = out.setdefault(name, [])
            if params not in overloads:
                overloads.append(params)
    return out


class FakeTensor:
    def __init__(self, graph: FakeBackendGraph, origin: str, **attrs: Any) -> None:
        self.graph = graph
        self.origin = origin
        self.attrs = dict(attrs)
        self.calls: list[tuple[str, Any]] = []
        self.uid: int | None = None

    def __getattr__(self, name: str) -> Any:
        if name.startswith("set_"):

            def setter(value: Any) -> FakeTensor:
                self.calls.append((name, value))
                if name == "set_uid":
                    self.uid = value if self.graph.uid_offset is None else value + self.graph.uid_offset
                self.attrs[name[4:]] = value
                return self

            return setter
        if name.startswith("get_"):
            key = name[4:]
            return lambda: self.uid if key == "uid" else self.attrs.get(key)
        raise AttributeError(name)


class FakeBackendGraph:
    """Records builder calls; validates each against the real signature when it is known."""

    signatures: ClassVar[dict[str, list[dict[str, bool]]]] = {}
    refuse_validate: str | None = None
    uid_offset: int | None = None

    def __init__(self, **kwargs: Any) -> None:
        self.init_kwargs = kwargs
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.validated = False
        self._check("__init__", kwargs)

    def _check(self, method: str, kwargs: dict[str, Any]) -> None:
        overloads = self.signatures.get(method)
        if not overloads:
            return
        for params in overloads:
            unknown = set(kwargs) - set(params)
            missing = {k for k, has_default in params.items() if not has_default} - set(kwargs)
            if not unknown and not missing:
                return
        raise TypeError(f"backend {method}() would reject keywords {sorted(kwargs)}; overloads: {overloads}")

    def tensor(self, **kwargs: Any) -> FakeTensor:
        self._check("tensor", kwargs)
        self.calls.append(("tensor", kwargs))
        return FakeTensor(self, "tensor", **kwargs)

    def tensor_scalar(self, value: Any, scalar_type: Any) -> FakeTensor:
        self.calls.append(("tensor_scalar", {"value": value, "scalar_type": scalar_type}))
        return FakeTensor(self, "tensor_scalar", value=value)

    def validate(self) -> None:
        if self.refuse_validate:
            raise RuntimeError(self.refuse_validate)
        self.validated = True

    def build_operation_graph(self) -> None:
        self.calls.append(("build_operation_graph", {}))

    def serialize(self) -> bytes:
        return b"backend-bytes"

    def __getattr__(self, method: str) -> Any:
        if method.startswith("_"):
            raise AttributeError(method)

        def builder(**kwargs: Any) -> Any:
            self._check(method, kwargs)
            self.calls.append((method, kwargs))
            spec = OPS[method]
            outs = [FakeTensor(self, f"{method}:{o.name}") for o in spec.returned_outputs]
            return outs[0] if spec.returns_single and not spec.family == "sdpa" else outs

        return builder


class FakeBackendModule:
    backend_graph = FakeBackendGraph

    def __getattr__(self, name: str) -> Any:
        return getattr(_dtypes, name)


@pytest.fixture
def fake_backend(monkeypatch: pytest.MonkeyPatch):
    """Route lowering to the recording stand-in; yields its graph class."""
    try:
        sigs = real_signatures()
    except pytest.skip.Exception:
        sigs = {}
    cls = type("FakeBackendGraphT", (FakeBackendGraph,), {"signatures": sigs})
    module = FakeBackendModule()
    module.backend_graph = cls  # type: ignore[misc]
    monkeypatch.setattr("pygraph.lowering.backend.import_backend", lambda: module)
    return cls
