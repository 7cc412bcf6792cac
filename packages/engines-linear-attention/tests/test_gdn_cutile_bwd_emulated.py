"""The gdn_cutile backward kernels' logic on the CPU: their source run block by block on the numpy
stand-in of cuTile that `test_gdn_cutile_emulated.py` defines, against `gdn.chunked_bwd` in float64.

The kernel modules' own source is executed with ``ct`` bound to the stand-in (the forward's module
first: the backward reuses its table and prepare kernels and its helpers), and launched through
`gdn.cutile_bwd_host.launch_backward`, so the grids, the argument order, the chunk table and the
chunk offsets are the real ones. Outputs and the workspace are poisoned with NaN first. What this
cannot see (rounding to bf16, the compiler's semantics) the sm90 tests and the compile check cover.
"""

from __future__ import annotations

import importlib.util
import pathlib
import types

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from gdn_inputs import gdn_inputs  # noqa: E402

from pygraph_linear_attention.gdn.chunked_bwd import chunked_gated_delta_net_backward  # noqa: E402
from pygraph_linear_attention.gdn.cutile_bwd_host import (  # noqa: E402
    GdnCutileBwdConfig,
    launch_backward,
)

_HERE = pathlib.Path(__file__)
_spec = importlib.util.spec_from_file_location(
    "gdn_cutile_emulation", _HERE.with_name("test_gdn_cutile_emulated.py")
)
EMULATION = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(EMULATION)  # the forward's emulator (its tests are collected from their own file)
EMU, _Array = EMULATION.EMU, EMULATION._Array


def _emulated_modules():
    """The forward's and the backward's kernel modules, their source run against the stand-in."""
    fwd_ns = EMULATION.run_sources({"ct": EMU, "__name__": "gdn_cutile_fwd_emulated"}, "common/cutile_blocks.py",
                                   "gdn/cutile_fwd.py")  # fmt: skip
    # the backward over a copy: the blocks it imports from the forward's and the shared ones
    bwd_ns = EMULATION.run_sources({**fwd_ns, "__name__": "gdn_cutile_bwd_emulated"}, "gdn/cutile_bwd.py")
    return types.SimpleNamespace(**fwd_ns), types.SimpleNamespace(**bwd_ns)


FWD_MODULE, BWD_MODULE = _emulated_modules()
KERNELS = {**FWD_MODULE.KERNELS, **BWD_MODULE.BWD_KERNELS}
F64 = torch.float64


def _run(lengths, *, h=2, hv=2, dk=16, dv=16, block_v=8, options=(), seed=0, gate=0.3, segment=0):
    """(the kernels' gradients, chunked_bwd's) on the same fresh inputs, by the graph's output names."""
    t, ho, n = sum(lengths), max(h, hv), len(lengths)
    inputs, kwargs = gdn_inputs(lengths, h, hv, dk, dv, options=options, seed=seed, gate=gate)
    cu = inputs.pop("cu_seqlens").to(torch.int64)
    kwargs.pop("output_final_state", None)  # the backward takes the final state's gradient instead
    kwargs.setdefault("scale", None)
    gen = torch.Generator().manual_seed(seed + 1)  # the output gradients

    def rand(*shape):
        return torch.randn(*shape, dtype=F64, generator=gen)

    if "final_state" in options:
        kwargs["grad_final_state"] = rand(n, ho, dv, dk)
    grad_out = rand(t, ho, dv)
    want = chunked_gated_delta_net_backward(**inputs, cu_seqlens=cu, grad_out=grad_out, **kwargs)

    cfg = GdnCutileBwdConfig(
        tokens=t, sequences=n, heads_qk=h, heads_v=hv, heads_g=hv, heads_beta=hv,
        heads_a_log=hv, heads_dt_bias=hv, key_dim=dk, value_dim=dv, io_dtype="bfloat16",
        scale=kwargs["scale"] or dk**-0.5, use_qk_l2norm="qk_l2norm" in options,
        use_beta_sigmoid="beta_sigmoid" in options, allow_neg_eigval="neg_eigval" in options,
        safe_gate="safe_gate" in options, has_dt_bias="safe_gate" in options,
        has_initial_state="initial_state" in options, has_d_final_state="final_state" in options,
        block_v=block_v, segment=segment,
    )  # fmt: skip
    f32 = EMU.float32
    arrays = {name: _Array(x.numpy().copy(), f32) for name, x in inputs.items()}
    arrays["cu_seqlens"] = _Array(cu.numpy().copy(), EMU.int64)
    arrays["dO"] = _Array(grad_out.numpy().copy(), f32)
    for name, x in (
        ("h0", "initial_state"),
        ("dht", "grad_final_state"),
        ("a_log", "a_log"),
        ("dt_bias", "dt_bias"),
    ):
        if kwargs.get(x) is not None:
            arrays[name] = _Array(kwargs[x].numpy().copy(), f32)
    outputs = {"dQ": "q", "dK": "k", "dV": "v", "dG": "g", "dBeta": "beta"}
    for name, like in outputs.items():
        arrays[name] = _Array(np.full(inputs[like].shape, np.nan), f32)
    if "initial_state" in options:
        arrays["dh0"] = _Array(np.full((n, ho, dv, dk), np.nan), f32)
    if "safe_gate" in options:
        arrays["d_a_log"], arrays["d_dt_bias"] = (
            _Array(np.full(hv, np.nan), f32),
            _Array(np.full(hv, np.nan), f32),
        )
    for region in cfg.workspace_regions():  # poisoned: a read of what no kernel wrote shows as NaN
        dtype = EMU.int32 if region.dtype == "int32" else f32
        fill = -7 if region.dtype == "int32" else np.nan
        arrays[region.name] = _Array(np.full(region.shape, fill, dtype=dtype.storage), dtype)
    arrays["spare4"] = _Array(arrays["spare"].data[:1].reshape(1, 1, 1, 1), f32)
    launch_backward(EMU.launch, KERNELS, cfg, arrays)
    names = {"dh0": "d_initial_state"}
    got = {
        names.get(k, k): torch.from_numpy(arrays[k].data)
        for k in (*outputs, "dh0", "d_a_log", "d_dt_bias")
        if k in arrays
    }
    return got, want, arrays


EVERY_OPTION = (
    "initial_state",
    "final_state",
    "qk_l2norm",
    "beta_sigmoid",
    "neg_eigval",
    "safe_gate",
    "scale",
)


def _check(lengths, **kw):
    got, want, _ = _run(lengths, **kw)
    assert set(got) == set(want)
    for name, w in want.items():
        torch.testing.assert_close(
            got[name], w, rtol=1e-9, atol=1e-9, msg=lambda m, name=name: f"{name}: {m}"
        )


def test_the_chunk_offsets_name_each_sequences_first_slot():
    lengths = (65, 0, 1, 128, 63, 64)
    _, _, arrays = _run(lengths)
    counts = [-(-length // 64) for length in lengths]
    assert arrays["offsets"].data.tolist() == [sum(counts[:i]) for i in range(len(lengths))]


@pytest.mark.parametrize("length", [1, 63, 64, 65, 130])
def test_one_sequence_around_the_chunk_length(length):
    _check((length,), options=("final_state",))


def test_a_varlen_batch_with_an_initial_state_and_empty_sequences_inside_and_last():
    _check((65, 0, 1, 130, 63, 0), options=("initial_state", "final_state"))


@pytest.mark.parametrize(
    "option",
    ["initial_state", "final_state", "qk_l2norm", "beta_sigmoid", "neg_eigval", "safe_gate", "scale"],
)
def test_each_option(option):
    _check((70, 9), options=(option,))


def test_every_option_together_with_gva():
    _check((65, 3), h=1, hv=2, options=EVERY_OPTION)


@pytest.mark.parametrize(("h", "hv"), [(1, 4), (4, 2)], ids=["gva", "gqa"])
def test_grouped_heads(h, hv):
    _check((40, 70), h=h, hv=hv, options=("final_state", "safe_gate"))


def test_strong_gates_in_a_partial_chunk_stay_finite():
    """Up to -60 per token over a 33-token partial chunk: the gap of a padded row (gamma read as 0)
    to a real column is a growth past any float's range; the kernels must never form it."""
    _check((97,), gate=60.0, options=("final_state",))


def test_the_value_blocks_tile_the_state():
    _check((130,), dv=32, block_v=8, options=("initial_state", "final_state"))
    _check((130,), dv=32, block_v=32, options=("initial_state", "final_state"))


# --- the split scans: the state scan and the gradient scan over segments ---------------------------


@pytest.mark.parametrize("segment", [1, 2])
def test_the_split_scans_match_the_spec_over_segments(segment):
    """Segments of one or two chunks: several per sequence, partial last ones, empty sequences
    inside and last, an initial state in and d_initial_state out, d_final_state given."""
    _check((130,), segment=segment, options=("final_state",))
    _check((65, 0, 1, 200, 63, 0), segment=segment, options=("initial_state", "final_state"))


def test_the_split_scans_with_every_option_gva_and_value_blocks():
    _check((130, 3), h=1, hv=2, segment=1, options=EVERY_OPTION)
    _check((200,), dv=32, block_v=8, segment=1, options=("initial_state",))
    _check((200,), dk=32, dv=16, block_v=16, segment=2, options=("final_state",))


# --- the engine end to end: a gdn_bwd graph planned, built and executed, the kernels emulated ------------


@pytest.mark.parametrize(
    "name", ["varlen-odd", "all-options-gva", "fp16", "gqa2", "safe-gate", "split-varlen"]
)
def test_the_engine_serves_a_gdn_bwd_graph_end_to_end(name, monkeypatch):
    """gdn_cases' backward runner on the CPU: every gradient against autograd through the float64
    token loop. The stand-in launch rounds each array to its own dtype between kernels (w, u, the
    chunk states, v_new and dv_new in the io dtype, as on the device)."""
    import sys

    import gdn_cases
    from pygraph_linear_attention.gdn import engine_cutile as engine_mod

    monkeypatch.setitem(sys.modules, "pygraph_linear_attention.gdn.cutile_fwd", FWD_MODULE)
    monkeypatch.setitem(sys.modules, "pygraph_linear_attention.gdn.cutile_bwd", BWD_MODULE)
    monkeypatch.setattr(engine_mod, "cutile_launch", EMULATION._EmulatedLaunch)
    monkeypatch.setattr(engine_mod, "cutile_installed", lambda: True)
    case = next(c for c in gdn_cases.BWD_CASES if c.name == name)
    tensors, options = gdn_cases.make_bwd_inputs(case, device="cpu")
    g, out = gdn_cases.execute_bwd(case, tensors, options, device="cpu")
    assert g.selected_plan.name.startswith("gdn_cutile_bwd[")
    want = gdn_cases.bwd_reference(tensors, options)
    assert set(out) == set(want)
    errors = {n: float((out[n].double() - want[n]).norm() / want[n].norm()) for n in want}
    print(name, {n: f"{e:.1e}" for n, e in errors.items()})
    # io-dtype intermediates and outputs: at most 2.8e-3 (bf16) and 3e-4 (fp16) measured here; the device bound is 1e-2
    assert all(e < 1e-2 for e in errors.values()), errors  # all(): max() over a NaN would pass it
