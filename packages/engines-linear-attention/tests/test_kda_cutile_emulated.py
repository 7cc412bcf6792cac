"""The KDA / GDN-2 cuTile forward (`kda.cutile_fwd`) on the CPU: its source run on the
numpy stand-in of cuTile that `test_gdn_cutile_emulated.py` defines (with the GDN forward's helpers
it imports), launched as the engine will (the chunk table and offsets, prepare over chunk slots x
output heads, the state scan over sequences x heads x value blocks, the output over chunk slots x
heads x value blocks), against `kda.chunked` in float64. The grids and argument order are
`kda.cutile_host`'s. Workspace and outputs are poisoned (NaN), so a read of what no kernel wrote
shows. What this cannot see (bf16 rounding, the compiler) waits for the device.
"""

from __future__ import annotations

import importlib.util
import pathlib
import re
import types

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from pygraph_linear_attention.kda.chunked import (  # noqa: E402
    chunked_gated_delta_net_v2,
    chunked_kimi_delta_attention,
)
from pygraph_linear_attention.kda.cutile_host import (  # noqa: E402
    SUB_CHUNK,
    KdaCutileConfig,
    launch_forward,
)

_HERE = pathlib.Path(__file__)
_spec = importlib.util.spec_from_file_location(
    "gdn_cutile_emulation", _HERE.with_name("test_gdn_cutile_emulated.py")
)
EMULATION = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(EMULATION)
EMU, _Array = EMULATION.EMU, EMULATION._Array
BV = 8
F64 = torch.float64


def _kda_module() -> types.SimpleNamespace:
    namespace = {"ct": EMU, "__name__": "kda_cutile_fwd_emulated"}
    return types.SimpleNamespace(
        **EMULATION.run_sources(namespace, "common/cutile_blocks.py", "kda/cutile_fwd.py")
    )


KDA = _kda_module()


def test_the_kernels_sub_chunk_is_the_hosts():
    assert KDA.SUB == SUB_CHUNK


def _inputs(op, lengths, h, hv, dk, dv, options, seed, gate_scale):
    gen = torch.Generator().manual_seed(seed)
    t, n = sum(lengths), len(lengths)

    def rand(*shape):
        return torch.randn(*shape, dtype=F64, generator=gen)

    q, k, v = rand(t, h, dk), rand(t, h, dk), rand(t, hv, dv)
    if "qk_l2norm" not in options:
        k = torch.nn.functional.normalize(k, dim=-1)
    g = (
        rand(t, hv, dk)
        if "safe_gate" in options
        else -torch.rand(t, hv, dk, dtype=F64, generator=gen) * gate_scale
    )
    beta_shape = (t, hv, dk) if op == "gdn2" else (t, hv)
    beta = (
        rand(*beta_shape) if "beta_sigmoid" in options else torch.rand(*beta_shape, dtype=F64, generator=gen)
    )
    inputs = {"q": q, "k": k, "v": v, "g": g, "beta": beta}
    if op == "gdn2":
        inputs["w"] = torch.rand(t, hv, dv, dtype=F64, generator=gen)
    kwargs = {
        "use_qk_l2norm": "qk_l2norm" in options, "use_beta_sigmoid": "beta_sigmoid" in options,
        "allow_neg_eigval": "neg_eigval" in options, "safe_gate": "safe_gate" in options,
    }  # fmt: skip
    if "safe_gate" in options:
        kwargs |= {"a_log": rand(hv) * 0.5, "dt_bias": rand(hv, dk) * 0.5, "gate_lower_bound": -4.0}
    if "initial_state" in options:
        kwargs["initial_state"] = rand(n, hv, dv, dk) * 0.3
    return inputs, kwargs


def _run(op, lengths, *, h=2, hv=2, dk=16, dv=16, options=(), seed=0, gate_scale=0.5):
    """(the kernels' O and final state, kda.chunked's) on the same fresh inputs."""
    t, n, ho = sum(lengths), len(lengths), max(h, hv)
    inputs, kwargs = _inputs(op, lengths, h, hv, dk, dv, options, seed, gate_scale)
    cu = torch.tensor([0, *lengths]).cumsum(0)
    spec = chunked_gated_delta_net_v2 if op == "gdn2" else chunked_kimi_delta_attention
    want = spec(**inputs, cu_seqlens=cu, output_final_state=True, **kwargs)

    cfg = KdaCutileConfig(
        op=op, tokens=t, sequences=n, heads_qk=h, heads_v=hv, key_dim=dk, value_dim=dv, io_dtype="bfloat16",
        scale=dk**-0.5, use_qk_l2norm=kwargs["use_qk_l2norm"], use_beta_sigmoid=kwargs["use_beta_sigmoid"],
        allow_neg_eigval=kwargs["allow_neg_eigval"], safe_gate=kwargs["safe_gate"], has_a_log="a_log" in kwargs,
        has_dt_bias="dt_bias" in kwargs, gate_lower_bound=kwargs.get("gate_lower_bound", -5.0),
        has_initial_state="initial_state" in kwargs, output_final_state=True, block_v=BV,
    )  # fmt: skip
    f32 = EMU.float32
    arrays = {name: _Array(x.numpy().copy(), f32) for name, x in inputs.items() if name != "w"}
    if op == "gdn2":
        arrays["w_gate"] = _Array(inputs["w"].numpy().copy(), f32)
    for name in ("a_log", "dt_bias"):
        if name in kwargs:
            arrays[name] = _Array(kwargs[name].numpy().copy(), f32)
    if "initial_state" in kwargs:
        arrays["h0"] = _Array(kwargs["initial_state"].numpy().copy(), f32)
    arrays["cu_seqlens"] = _Array(cu.numpy().copy(), EMU.int64)
    arrays["o"] = _Array(np.full((t, ho, dv), np.nan), f32)
    arrays["ht"] = _Array(np.full((n, ho, dv, dk), np.nan), f32)
    for region in cfg.workspace_regions():  # poisoned: a read of what no kernel wrote shows as NaN
        dtype = EMU.int32 if region.dtype == "int32" else f32
        fill = -7 if region.dtype == "int32" else np.nan
        arrays[region.name] = _Array(np.full(region.shape, fill, dtype=dtype.storage), dtype)
    arrays["spare2"] = _Array(np.zeros((1, 1)), f32)
    arrays["spare4"] = _Array(np.zeros((1, 1, 1, 1)), f32)
    launch_forward(EMU.launch, KDA.KERNELS, cfg, arrays)
    o, ht = arrays["o"], arrays["ht"]
    return (torch.from_numpy(o.data), torch.from_numpy(ht.data)), want


def _check(op, lengths, **kw):
    (o, s), (want_o, want_s) = _run(op, lengths, **kw)
    torch.testing.assert_close(o, want_o, rtol=1e-9, atol=1e-9)
    torch.testing.assert_close(s, want_s, rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("op", ["kda", "gdn2"])
@pytest.mark.parametrize("length", [1, 17, 63, 64, 65, 130])
def test_one_sequence_around_the_chunk_length(op, length):
    _check(op, [length])


@pytest.mark.parametrize("op", ["kda", "gdn2"])
def test_a_varlen_batch_with_an_initial_state_and_empty_sequences_inside_and_last(op):
    _check(op, [70, 0, 5, 129, 0], options=("initial_state",))


@pytest.mark.parametrize("op", ["kda", "gdn2"])
@pytest.mark.parametrize("option", ["qk_l2norm", "beta_sigmoid", "neg_eigval", "safe_gate"])
def test_each_option(op, option):
    options = ("beta_sigmoid", "neg_eigval") if option == "neg_eigval" else (option,)
    _check(op, [37, 90], options=options)


@pytest.mark.parametrize("op", ["kda", "gdn2"])
def test_every_option_together_with_grouped_values(op):
    _check(op, [37, 90], h=1, hv=2, options=("qk_l2norm", "beta_sigmoid", "safe_gate", "initial_state"))


def test_strong_gates_in_a_partial_chunk_stay_finite():
    # gates down to -5 a token (the safe gate's bound): within a chunk the decay spans exp(-320)
    (o, s), (want_o, want_s) = _run("kda", [50, 100], gate_scale=5.0)
    assert bool(torch.isfinite(o).all()) and bool(torch.isfinite(s).all())
    torch.testing.assert_close(o, want_o, rtol=1e-9, atol=1e-9)
    torch.testing.assert_close(s, want_s, rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"op": "gdn"}, "op must be 'kda' or 'gdn2', got 'gdn'"),
        ({"block_v": 48}, "block_v=48 must divide value_dim=128"),
        ({"gate_lower_bound": 0.0}, "gate_lower_bound must be negative, got 0.0"),
    ],
)
def test_a_config_the_kernels_cannot_take_is_refused(change, message):
    args = {"op": "kda", "tokens": 10, "sequences": 1, "heads_qk": 2, "heads_v": 2, "key_dim": 128,
            "value_dim": 128, "io_dtype": "bfloat16", "scale": 0.1, **change}  # fmt: skip
    with pytest.raises(ValueError, match=re.escape(message)):
        KdaCutileConfig(**args)


def test_the_workspace_holds_the_table_gamma_per_channel_w_u_and_the_chunk_states_aligned():
    cfg = KdaCutileConfig("gdn2", 1000, 3, 2, 4, 128, 64, "bfloat16", 0.1)
    regions = {r.name: r for r in cfg.workspace_regions()}
    slots = -(-1000 // 64) + 3
    assert regions["table"].shape == (slots, 2) and regions["offsets"].shape == (3,)
    assert regions["gamma"].shape == (1000, 4, 128) and regions["gamma"].dtype == "float32"
    assert regions["w"].shape == (1000, 4, 128) and regions["u"].shape == (1000, 4, 64)
    assert regions["h"].shape == (slots, 4, 64, 128) and regions["h"].dtype == "bfloat16"
    assert regions["v_new"].shape == (1000, 4, 64)
    assert all(r.offset % 256 == 0 for r in regions.values())
    assert cfg.workspace_bytes == regions["spare"].offset + regions["spare"].nbytes
