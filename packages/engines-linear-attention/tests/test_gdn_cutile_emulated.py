"""The gdn_cutile kernels' logic on the CPU: their source run block by block on a numpy stand-in of cuTile.

No GPU, no cuTile compiler: the kernel module's own source is executed with ``ct`` bound to
`_Emulated`, which implements the part of the cuda.tile API the kernels use with numpy in float64
(tile-space loads and stores with zero padding and dropped out-of-bounds rows, array slices,
gathers, reductions, scans, mma), and the kernels are launched through the module's own
`gdn.cutile_host.launch_forward`, so the grids, the argument order and the chunk table are the real ones. A load
without ``padding_mode=ZERO`` that reads past an array's end returns NaN, so reliance on
undetermined padding shows. The outputs are checked against `gdn.chunked` in float64; what this
cannot see (rounding to bf16, the compiler's own semantics) the sm90 tests and the compile check
cover.
"""

from __future__ import annotations

import itertools
import pathlib
import re
import types

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from gdn_inputs import gdn_inputs  # noqa: E402

from pygraph_linear_attention.gdn import cutile_host as gdn_cutile_host  # noqa: E402
from pygraph_linear_attention.gdn.chunked import chunked_gated_delta_net  # noqa: E402
from pygraph_linear_attention.gdn.cutile_host import GdnCutileConfig, launch_forward  # noqa: E402

PACKAGE = pathlib.Path(gdn_cutile_host.__file__).parent.parent
# an import of this package's modules, one line or a parenthesized list
_PACKAGE_IMPORTS = r"from pygraph_linear_attention(?:\.\w+)+ import (\([^)]*\)|[^\n]*)\n"


def run_sources(namespace: dict, *files: str) -> dict:
    """Execute the kernel modules ``files`` (paths in the package) in ``namespace``, whose ``ct`` is
    the stand-in: their imports of cuTile and of this package are dropped, so each takes the blocks it
    imports from the files run before it (`common/cutile_blocks.py` first)."""
    for file in files:
        path = PACKAGE / file
        source = re.sub(_PACKAGE_IMPORTS, "", path.read_text().replace("import cuda.tile as ct\n", ""))
        exec(compile(source, str(path), "exec"), namespace)
    return namespace


class _DType:
    def __init__(self, name: str, storage) -> None:
        self.name, self.storage = name, np.dtype(storage)


class _Array:
    """A global array: a numpy view with the cuTile dtype it stands for."""

    def __init__(self, data: np.ndarray, dtype: _DType) -> None:
        self.data, self.ct_dtype = data, dtype

    @property
    def dtype(self):
        return self.data.dtype

    @property
    def shape(self):
        return self.data.shape

    def slice(self, axis, start, stop):
        index = [slice(None)] * self.data.ndim
        index[axis] = slice(int(start), int(stop))
        return _Array(self.data[tuple(index)], self.ct_dtype)


class _Constant:
    def __class_getitem__(cls, item):
        return item


class _Emulated(types.SimpleNamespace):
    """numpy stand-ins for the cuda.tile calls the kernels make."""

    def __init__(self) -> None:
        f = _DType
        super().__init__(
            int32=f("int32", np.int32), int64=f("int64", np.int64), float32=f("float32", np.float64),
            float16=f("float16", np.float64), bfloat16=f("bfloat16", np.float64), bool_=f("bool", np.bool_),
            Constant=_Constant, PaddingMode=types.SimpleNamespace(ZERO="zero", UNDETERMINED="undetermined"),
            block=(0, 0, 0),
        )  # fmt: skip

    # -- kernels and launch ---------------------------------------------------------------------
    @staticmethod
    def kernel(fn=None, **_):
        def wrap(f):  # a cuTile kernel keeps its Python function (gdn.cutile_fwd.hinted reads it)
            f._pyfunc = f
            return f

        return wrap(fn) if fn is not None else wrap

    def launch(self, grid, kernel, args):
        grid = tuple(grid) + (1,) * (3 - len(grid))
        for block in itertools.product(*(range(g) for g in grid)):
            self.block = block
            kernel(*args)

    def bid(self, axis):
        return np.int32(self.block[axis])

    # -- creation and casts ----------------------------------------------------------------------
    @staticmethod
    def _np(dtype):
        return dtype.storage if isinstance(dtype, _DType) else np.dtype(dtype)

    def arange(self, n, dtype):
        return np.arange(n, dtype=self._np(dtype))

    def zeros(self, shape, dtype):
        return np.zeros(shape, dtype=self._np(dtype))

    def astype(self, x, dtype):
        return np.asarray(x).astype(self._np(dtype))

    # -- memory ----------------------------------------------------------------------------------
    def load(self, array, index, shape, padding_mode="undetermined", allow_tma=None):
        data = array.data
        if shape == ():
            return data[tuple(int(i) for i in index)]
        start = [int(i) * s for i, s in zip(index, shape)]
        fill = 0 if padding_mode == "zero" else np.nan
        out = np.full(shape, fill, dtype=np.float64 if data.dtype.kind == "f" else data.dtype)
        src = tuple(slice(b, min(b + s, d)) for b, s, d in zip(start, shape, data.shape))
        dst = tuple(slice(0, x.stop - x.start) for x in src)
        if all(x.stop > x.start for x in src):
            out[dst] = data[src]
        return out

    def store(self, array, index, tile, allow_tma=None):
        data, tile = array.data, np.asarray(tile)
        start = [int(i) * s for i, s in zip(index, tile.shape)]
        dst = tuple(slice(b, min(b + s, d)) for b, s, d in zip(start, tile.shape, data.shape))
        src = tuple(slice(0, max(x.stop - x.start, 0)) for x in dst)
        data[dst] = tile[src]

    def gather(self, array, indices, mask=None, padding_value=0):
        data = array.data
        inside = (indices >= 0) & (indices < data.shape[0])
        if mask is not None:
            inside &= mask
        out = np.full(indices.shape, padding_value, dtype=data.dtype)
        out[inside] = data[indices[inside]]
        return out

    # -- tile math -------------------------------------------------------------------------------
    @staticmethod
    def cdiv(a, b):
        return -(-np.asarray(a) // b)

    @staticmethod
    def sum(x, axis=None, keepdims=False):
        return np.sum(x, axis=axis, keepdims=keepdims)

    @staticmethod
    def cumsum(x, axis=0):
        return np.cumsum(x, axis=axis)

    @staticmethod
    def mma(x, y, acc):
        return np.matmul(np.asarray(x, np.float64), np.asarray(y, np.float64)) + acc

    @staticmethod
    def transpose(x, axis0=None, axis1=None):
        return np.swapaxes(x, -1, -2) if axis0 is None else np.swapaxes(x, axis0, axis1)

    @staticmethod
    def extract(x, index, shape):
        return x[tuple(slice(i * s, (i + 1) * s) for i, s in zip(index, shape))]

    @staticmethod
    def cat(tiles, axis):
        return np.concatenate(tiles, axis=axis)

    where = staticmethod(np.where)
    reshape = staticmethod(np.reshape)
    permute = staticmethod(np.transpose)
    expand_dims = staticmethod(np.expand_dims)
    broadcast_to = staticmethod(np.broadcast_to)
    exp, log, sqrt, abs = (staticmethod(f) for f in (np.exp, np.log, np.sqrt, np.abs))
    maximum, minimum = staticmethod(np.maximum), staticmethod(np.minimum)


def _emulated_module():
    emu = _Emulated()
    namespace = {"ct": emu, "__name__": "gdn_cutile_fwd_emulated"}
    run_sources(namespace, "common/cutile_blocks.py", "gdn/cutile_fwd.py")
    return emu, types.SimpleNamespace(**namespace)


EMU, KERNELS = _emulated_module()
F64 = torch.float64


def _run(lengths, *, h=2, hv=2, dk=16, dv=16, block_v=8, options=(), seed=0, gate=0.3, segment=0):
    """(kernels' O, final state), (gdn.chunked's O, final state) on the same fresh inputs."""
    t, ho, n = sum(lengths), max(h, hv), len(lengths)
    inputs, kwargs = gdn_inputs(lengths, h, hv, dk, dv, options=options, seed=seed, gate=gate)
    cu = inputs.pop("cu_seqlens").to(torch.int64)
    kwargs = {"output_final_state": False, "scale": None, **kwargs}
    want = chunked_gated_delta_net(**inputs, cu_seqlens=cu, **kwargs)

    cfg = GdnCutileConfig(
        tokens=t, sequences=n, heads_qk=h, heads_v=hv, heads_g=hv, heads_beta=hv,
        heads_a_log=hv, heads_dt_bias=hv, key_dim=dk, value_dim=dv, io_dtype="bfloat16",
        scale=kwargs["scale"] or dk**-0.5, use_qk_l2norm="qk_l2norm" in options,
        use_beta_sigmoid="beta_sigmoid" in options, allow_neg_eigval="neg_eigval" in options,
        safe_gate="safe_gate" in options, has_dt_bias="safe_gate" in options,
        has_initial_state="initial_state" in options, output_final_state="final_state" in options,
        block_v=block_v, segment=segment,
    )  # fmt: skip
    f32, i64 = EMU.float32, EMU.int64
    arrays = {name: _Array(x.numpy().copy(), f32) for name, x in inputs.items()}
    arrays["cu_seqlens"] = _Array(cu.numpy().copy(), i64)
    arrays["o"] = _Array(np.full((t, ho, dv), np.nan), f32)
    if "initial_state" in options:
        arrays["h0"] = _Array(kwargs["initial_state"].numpy().copy(), f32)
    if "final_state" in options:
        arrays["ht"] = _Array(np.full((n, ho, dv, dk), np.nan), f32)
    if "safe_gate" in options:
        arrays["a_log"] = _Array(kwargs["a_log"].numpy().copy(), f32)
        arrays["dt_bias"] = _Array(kwargs["dt_bias"].numpy().copy(), f32)
    for region in cfg.workspace_regions():  # poisoned: a read of what no kernel wrote shows as NaN
        dtype = EMU.int32 if region.dtype == "int32" else f32
        fill = -7 if region.dtype == "int32" else np.nan
        arrays[region.name] = _Array(np.full(region.shape, fill, dtype=dtype.storage), dtype)
    arrays["spare4"] = _Array(arrays["spare"].data[:1].reshape(1, 1, 1, 1), f32)
    launch_forward(EMU.launch, KERNELS.KERNELS, cfg, arrays)
    got_final = torch.from_numpy(arrays["ht"].data) if "final_state" in options else None
    return (torch.from_numpy(arrays["o"].data), got_final), want, arrays


def _check(lengths, **kw):
    (o, s), (want_o, want_s), _ = _run(lengths, **kw)
    torch.testing.assert_close(o, want_o, rtol=1e-9, atol=1e-9)
    if want_s is not None:
        torch.testing.assert_close(s, want_s, rtol=1e-9, atol=1e-9)


def test_the_chunk_table_names_every_chunk_once_and_marks_the_rest():
    lengths = (65, 0, 1, 128, 63, 64)
    _, _, arrays = _run(lengths, options=("final_state",))
    table = arrays["table"].data
    want = [(n, c) for n, length in enumerate(lengths) for c in range(-(-length // 64))]
    assert [tuple(r) for r in table[: len(want)]] == want
    assert (table[len(want) :] == -1).all()


@pytest.mark.parametrize("length", [1, 63, 64, 65, 130])
def test_one_sequence_around_the_chunk_length(length):
    _check((length,), options=("final_state",))


def test_a_varlen_batch_with_an_initial_state_and_empty_sequences_inside_and_last():
    _check((65, 0, 1, 130, 63, 0), options=("initial_state", "final_state"))


@pytest.mark.parametrize(
    "option", ["initial_state", "qk_l2norm", "beta_sigmoid", "neg_eigval", "safe_gate", "scale"]
)
def test_each_option(option):
    _check((70, 9), options=(option, "final_state"))


def test_every_option_together_with_gva():
    options = ("initial_state", "final_state", "qk_l2norm", "beta_sigmoid", "neg_eigval", "safe_gate")
    _check((65, 3), h=1, hv=2, options=options)


@pytest.mark.parametrize(("h", "hv"), [(1, 4), (4, 2)], ids=["gva", "gqa"])
def test_grouped_heads(h, hv):
    _check((40, 70), h=h, hv=hv, options=("final_state",))


def test_strong_gates_in_a_partial_chunk_stay_finite():
    """Up to -60 per token over a 33-token partial chunk (see the backward's test of the same name)."""
    _check((97,), gate=60.0, options=("final_state",))


def test_the_value_blocks_tile_the_state():
    _check((130,), dv=32, block_v=8, options=("initial_state", "final_state"))
    _check((130,), dv=32, block_v=32, options=("initial_state", "final_state"))


# --- the split scan: segments of chunks scanned at once, then combined ------------------------------


@pytest.mark.parametrize("segment", [1, 2])
def test_the_split_scan_matches_the_spec_over_segments(segment):
    """Segments of one or two chunks: several per sequence, partial last ones, empty sequences
    (no segment) inside and last, an initial state passed through them."""
    _check((130,), segment=segment, options=("final_state",))
    _check((65, 0, 1, 200, 63, 0), segment=segment, options=("initial_state", "final_state"))


def test_the_split_scan_with_every_option_gva_and_value_blocks():
    options = ("initial_state", "final_state", "qk_l2norm", "beta_sigmoid", "neg_eigval", "safe_gate")
    _check((130, 3), h=1, hv=2, segment=1, options=options)
    _check((200,), dv=32, block_v=8, segment=1, options=("initial_state", "final_state"))
    _check((200,), dk=32, dv=16, block_v=16, segment=2, options=("final_state",))


def test_the_segment_bounds_cover_the_tokens_in_order():
    lengths = (65, 0, 1, 200, 63, 0)
    _, _, arrays = _run(lengths, segment=1, options=("final_state",))
    cu = arrays["seg_cu"].data
    starts = [sum(lengths[:n]) + 64 * p for n, length in enumerate(lengths) for p in range(-(-length // 64))]
    assert list(cu[: len(starts)]) == starts
    assert (cu[len(starts) :] == sum(lengths)).all()  # unused slots and the end: empty segments
    offsets = [sum(-(-length // 64) for length in lengths[:n]) for n in range(len(lengths))]
    assert list(arrays["seg_offsets"].data) == offsets


def test_a_segment_needs_the_key_dim_to_tile_by_block_v():
    with pytest.raises(ValueError, match="segment=1 needs key_dim \\(16\\)"):
        _run((10,), dk=16, dv=32, block_v=32, segment=1)


# --- the engine end to end: the graph API, the plan's device arrays and workspace, emulated kernels ----

_TORCH_DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}


class _EmulatedLaunch:
    """Stands in for ``cuda.tile.launch``: each DeviceArray argument read from host memory into the
    emulator (float64 copies), the kernel run block by block, the arrays written back in their own
    dtype (so w, u and O are rounded to bf16 between kernels, as on the device)."""

    def __init__(self) -> None:
        self.keep = []  # a DLPack consumer holds the producer's struct until its tensor dies

    def __call__(self, stream, grid, kernel, args):
        from pygraph_linear_attention.common.device_arrays import DeviceArray

        views, emulated = [], []
        for a in args:
            if not isinstance(a, DeviceArray):
                emulated.append(a)
                continue
            host = DeviceArray(a.pointer, a.shape, a.strides, a.dtype, device=-1)
            self.keep.append(host)
            t = torch.from_dlpack(host)
            if t.is_floating_point():
                arr = _Array(t.double().numpy().copy(), EMU.float32)
            else:
                arr = _Array(t.numpy().copy(), EMU.int64 if t.dtype == torch.int64 else EMU.int32)
            views.append((t, arr))
            emulated.append(arr)
        EMU.launch(grid, kernel, tuple(emulated))
        for t, arr in views:
            t.copy_(torch.from_numpy(arr.data).to(t.dtype))


@pytest.mark.parametrize("name", ["varlen-odd", "all-options-gva", "fp16", "split-all-options-gva"])
def test_the_engine_end_to_end_through_the_graph_api(name, monkeypatch):
    """gdn_cases' runner on the CPU: plan, build and execute() a gdn graph, the kernels emulated."""
    import sys

    import gdn_cases
    from pygraph_linear_attention.gdn import engine_cutile as engine_mod
    from pygraph_linear_attention.reference import gated_delta_net_reference

    monkeypatch.setitem(sys.modules, "pygraph_linear_attention.gdn.cutile_fwd", KERNELS)
    monkeypatch.setattr(engine_mod, "cutile_launch", _EmulatedLaunch)
    monkeypatch.setattr(engine_mod, "cutile_installed", lambda: True)
    case = next(c for c in gdn_cases.CASES if c.name == name)
    tensors, options = gdn_cases.make_inputs(case, device="cpu")
    g, ports = gdn_cases.build_graph(case, tensors, options)
    t, ho, n = sum(case.lengths), case.heads_out, len(case.lengths)
    out = {"O": torch.full((t, ho, case.value_dim), float("nan"), dtype=_TORCH_DTYPES[case.io])}
    if "final_state" in ports:
        out["final_state"] = torch.full((n, ho, case.value_dim, case.key_dim), float("nan"))
    raw = torch.empty(g.get_workspace_size() + 256, dtype=torch.uint8)
    workspace = raw[(-raw.data_ptr()) % 256 :]
    g.execute({ports[k]: x for k, x in {**tensors, **out}.items()}, workspace=workspace)

    extra = {k: x for k, x in tensors.items() if k not in ("q", "k", "v", "g", "beta", "cu_seqlens")}
    want_o, want_s = gated_delta_net_reference(
        *(tensors[k] for k in ("q", "k", "v", "g", "beta", "cu_seqlens")), **extra, **options
    )
    assert g.selected_plan.name.startswith("gdn_cutile[")

    def rel(got, want):
        return float((got.double() - want).norm() / want.norm())

    assert rel(out["O"], want_o) < 5e-3  # bf16 storage of O, w and u: about 2.4e-3 in bf16, 3e-4 in fp16
    if want_s is not None:
        assert rel(out["final_state"], want_s) < 5e-3
