"""The KDA / GDN-2 cuTile backward (`kda.cutile_bwd`) on the CPU: its source run on the
numpy stand-in of cuTile that `test_gdn_cutile_emulated.py` defines (with the helpers and kernels it
imports from the GDN modules and the KDA forward), launched through
`kda.cutile_bwd_host.launch_backward`, so the grids, the argument order, the chunk table and the
chunk offsets are the real ones, against `kda.chunked_bwd` in float64. Outputs and the workspace
are poisoned (NaN) first. What this cannot see (bf16 rounding, the compiler) waits for the device.
"""

from __future__ import annotations

import importlib.util
import pathlib
import types

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from pygraph_linear_attention.kda.chunked_bwd import (  # noqa: E402
    chunked_gated_delta_net_v2_backward,
    chunked_kimi_delta_attention_backward,
)
from pygraph_linear_attention.kda.cutile_bwd_host import (  # noqa: E402
    KdaCutileBwdConfig,
    launch_backward,
)

_HERE = pathlib.Path(__file__)


def _load(name: str, file: str):
    spec = importlib.util.spec_from_file_location(name, _HERE.with_name(file))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


FORWARD = _load("kda_cutile_emulation", "test_kda_cutile_emulated.py")  # its emulator and inputs
EMU, _Array = FORWARD.EMU, FORWARD._Array


def emulated_module(emu=EMU):
    """The shared blocks', KDA forward's and KDA backward's source run against the stand-in ``emu``
    in one namespace (each imports its helpers from the ones before). The launcher must be ``emu``'s:
    its programs read their block index from it."""
    namespace = {"ct": emu, "__name__": "kda_cutile_bwd_emulated"}
    FORWARD.EMULATION.run_sources(
        namespace, "common/cutile_blocks.py", "kda/cutile_fwd.py", "kda/cutile_bwd.py"
    )
    return types.SimpleNamespace(**namespace)


KDA_BWD = emulated_module()
F64 = torch.float64
BV = 8


def _run(op, lengths, *, h=2, hv=2, dk=16, dv=16, options=(), seed=0, gate_scale=0.5):
    """(the kernels' gradients, kda.chunked_bwd's) on the same fresh inputs, by the graph's output names."""
    t, n, ho = sum(lengths), len(lengths), max(h, hv)
    inputs, kwargs = FORWARD._inputs(op, lengths, h, hv, dk, dv, options, seed, gate_scale)
    cu = torch.tensor([0, *lengths]).cumsum(0)
    gen = torch.Generator().manual_seed(seed + 1)  # the output gradients (and a state of HO heads)
    if "initial_state" in kwargs:
        kwargs["initial_state"] = torch.randn(n, ho, dv, dk, dtype=F64, generator=gen) * 0.3
    grad_out = torch.randn(t, ho, dv, dtype=F64, generator=gen)
    if "final_state" in options:
        kwargs["grad_final_state"] = torch.randn(n, ho, dv, dk, dtype=F64, generator=gen)
    spec = chunked_gated_delta_net_v2_backward if op == "gdn2" else chunked_kimi_delta_attention_backward
    want = spec(**inputs, cu_seqlens=cu, grad_out=grad_out, **kwargs)

    cfg = KdaCutileBwdConfig(
        op=op, tokens=t, sequences=n, heads_qk=h, heads_v=hv, heads_g=hv, heads_beta=hv, heads_w=hv,
        heads_a_log=hv, heads_dt_bias=hv, key_dim=dk, value_dim=dv, io_dtype="bfloat16",
        scale=dk**-0.5, use_qk_l2norm=kwargs["use_qk_l2norm"], use_beta_sigmoid=kwargs["use_beta_sigmoid"],
        allow_neg_eigval=kwargs["allow_neg_eigval"], safe_gate=kwargs["safe_gate"], has_a_log="a_log" in kwargs,
        has_dt_bias="dt_bias" in kwargs, gate_lower_bound=kwargs.get("gate_lower_bound", -5.0),
        has_initial_state="initial_state" in kwargs, has_d_final_state="grad_final_state" in kwargs, block_v=BV,
    )  # fmt: skip
    f32 = EMU.float32
    arrays = {name: _Array(x.numpy().copy(), f32) for name, x in inputs.items() if name != "w"}
    outputs = {"dQ": "q", "dK": "k", "dV": "v", "dG": "g", "dBeta": "beta"}
    if op == "gdn2":
        arrays["w_gate"] = _Array(inputs["w"].numpy().copy(), f32)
        outputs["dW"] = "w"
    for name, key in (
        ("a_log", "a_log"),
        ("dt_bias", "dt_bias"),
        ("h0", "initial_state"),
        ("dht", "grad_final_state"),
    ):
        if key in kwargs:
            arrays[name] = _Array(kwargs[key].numpy().copy(), f32)
    arrays["cu_seqlens"] = _Array(cu.numpy().copy(), EMU.int64)
    arrays["dO"] = _Array(grad_out.numpy().copy(), f32)
    for name, like in outputs.items():
        arrays[name] = _Array(np.full(inputs[like].shape, np.nan), f32)
    extra = {
        "dh0": ("initial_state", (n, ho, dv, dk)),
        "d_a_log": ("a_log", (hv,)),
        "d_dt_bias": ("dt_bias", (hv, dk)),
    }
    for name, (key, shape) in extra.items():
        if key in kwargs:
            arrays[name] = _Array(np.full(shape, np.nan), f32)
    for region in cfg.workspace_regions():  # poisoned: a read of what no kernel wrote shows as NaN
        dtype = EMU.int32 if region.dtype == "int32" else f32
        fill = -7 if region.dtype == "int32" else np.nan
        arrays[region.name] = _Array(np.full(region.shape, fill, dtype=dtype.storage), dtype)
    arrays["spare2"] = _Array(np.zeros((1, 1)), f32)
    arrays["spare4"] = _Array(np.zeros((1, 1, 1, 1)), f32)
    launch_backward(EMU.launch, KDA_BWD.BWD_KERNELS, cfg, arrays)
    names = {"dh0": "d_initial_state"}
    got = {names.get(k, k): torch.from_numpy(arrays[k].data) for k in (*outputs, *extra) if k in arrays}
    return got, want


def _check(op, lengths, **kw):
    got, want = _run(op, lengths, **kw)
    assert set(got) == set(want), (sorted(got), sorted(want))
    for name, w in want.items():
        torch.testing.assert_close(got[name], w, rtol=1e-8, atol=1e-9, msg=name)


@pytest.mark.parametrize("op", ["kda", "gdn2"])
@pytest.mark.parametrize("length", [1, 17, 64, 65, 130])
def test_one_sequence_around_the_chunk_length(op, length):
    _check(op, [length], options=("final_state",))


@pytest.mark.parametrize("op", ["kda", "gdn2"])
def test_a_varlen_batch_with_both_states_and_empty_sequences_inside_and_last(op):
    _check(op, [70, 0, 5, 129, 0], options=("initial_state", "final_state"))


@pytest.mark.parametrize("op", ["kda", "gdn2"])
@pytest.mark.parametrize("option", ["qk_l2norm", "beta_sigmoid", "neg_eigval", "safe_gate"])
def test_each_option(op, option):
    options = ("beta_sigmoid", "neg_eigval") if option == "neg_eigval" else (option,)
    _check(op, [37, 90], options=options)


@pytest.mark.parametrize("op", ["kda", "gdn2"])
@pytest.mark.parametrize(("h", "hv"), [(1, 2), (2, 1)], ids=["gva", "gqa"])
def test_every_option_together_with_grouped_heads(op, h, hv):
    options = ("qk_l2norm", "beta_sigmoid", "neg_eigval", "safe_gate", "initial_state", "final_state")
    _check(op, [37, 90], h=h, hv=hv, options=options)


@pytest.mark.parametrize("op", ["kda", "gdn2"])
def test_strong_gates_stay_finite_and_exact(op):
    # gates down to -5 a token (the safe gate's bound): within a chunk the decay spans exp(-320)
    got, want = _run(op, [50, 100], gate_scale=5.0, options=("final_state",))
    for name, w in want.items():
        assert bool(torch.isfinite(got[name]).all()), name
        torch.testing.assert_close(got[name], w, rtol=1e-8, atol=1e-9, msg=name)
