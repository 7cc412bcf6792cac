"""The KDA / GDN-2 cuTile forward (`kernels/kda_cutile_fwd.py`) on the CPU: its source run on the
numpy stand-in of cuTile that `test_gdn_cutile_emulated.py` defines (with the GDN forward's helpers
it imports), launched as the engine will (the chunk table, then prepare over chunk slots x output
heads, then the scan over sequences x heads x value blocks), against `chunked.py` in float64.
Workspace and outputs are poisoned (NaN), so a read of what no kernel wrote shows. What this cannot
see (bf16 rounding, the compiler) waits for the device.
"""

from __future__ import annotations

import importlib.util
import pathlib
import re
import types

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from pygraph_linear_attention.chunked import (  # noqa: E402
    chunked_gated_delta_net_v2,
    chunked_kimi_delta_attention,
)
from pygraph_linear_attention.kernels import gdn_cutile_host  # noqa: E402

_HERE = pathlib.Path(__file__)
_spec = importlib.util.spec_from_file_location(
    "gdn_cutile_emulation", _HERE.with_name("test_gdn_cutile_emulated.py")
)
EMULATION = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(EMULATION)
EMU, _Array = EMULATION.EMU, EMULATION._Array
KERNEL_DIR = pathlib.Path(gdn_cutile_host.__file__).parent
C, BV = 64, 8
F64 = torch.float64


def _kda_module() -> types.SimpleNamespace:
    gdn_ns = {"ct": EMU, "__name__": "gdn_cutile_fwd_emulated"}
    gdn = (KERNEL_DIR / "gdn_cutile_fwd.py").read_text().replace("import cuda.tile as ct\n", "")
    exec(compile(gdn, "gdn_cutile_fwd.py", "exec"), gdn_ns)
    kda_ns = {**gdn_ns, "__name__": "kda_cutile_fwd_emulated"}  # the helpers it imports from GDN's
    kda = (KERNEL_DIR / "kda_cutile_fwd.py").read_text().replace("import cuda.tile as ct\n", "")
    kda = re.sub(
        r"from pygraph_linear_attention\.kernels\.gdn_cutile_fwd import (\([^)]*\)|[^\n]*)\n", "", kda
    )
    exec(compile(kda, "kda_cutile_fwd.py", "exec"), kda_ns)
    return types.SimpleNamespace(**kda_ns)


KDA = _kda_module()


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
    """(the kernels' O and final state, chunked.py's) on the same fresh inputs."""
    t, n, ho = sum(lengths), len(lengths), max(h, hv)
    inputs, kwargs = _inputs(op, lengths, h, hv, dk, dv, options, seed, gate_scale)
    cu = torch.tensor([0, *lengths]).cumsum(0)
    spec = chunked_gated_delta_net_v2 if op == "gdn2" else chunked_kimi_delta_attention
    want = spec(**inputs, cu_seqlens=cu, output_final_state=True, **kwargs)

    f32, i64 = EMU.float32, EMU.int64

    def arr(x):
        return _Array(x.numpy().copy(), f32)

    def poisoned(*shape):
        return _Array(np.full(shape, np.nan), f32)

    slots = -(-t // C) + n
    table = _Array(np.full((slots, 2), -7, dtype=np.int32), EMU.int32)
    cu_arr = _Array(cu.numpy().copy(), i64)
    gamma, w, u = poisoned(t, ho, dk), poisoned(t, ho, dk), poisoned(t, ho, dv)
    o, ht = poisoned(t, ho, dv), poisoned(n, ho, dv, dk)
    spare = _Array(np.zeros((1,)), f32)
    a_log = arr(kwargs["a_log"]) if "a_log" in kwargs else spare
    dt_bias = arr(kwargs["dt_bias"]) if "dt_bias" in kwargs else _Array(np.zeros((1, dk)), f32)
    w_gate = arr(inputs["w"]) if op == "gdn2" else spare
    h0 = arr(kwargs["initial_state"]) if "initial_state" in kwargs else _Array(np.zeros((1, 1, 1, 1)), f32)

    EMU.launch((-(-slots // 128),), KDA.chunk_table_kernel, (cu_arr, table, n, C, 128, 64))
    prepare = (
        arr(inputs["k"]), arr(inputs["v"]), arr(inputs["g"]), arr(inputs["beta"]), w_gate, a_log, dt_bias,
        cu_arr, table, gamma, w, u,
        ho // h, ho // hv, 1, 1, 1, 1, 1,
        int(kwargs["use_qk_l2norm"]), int(kwargs["use_beta_sigmoid"]), int(kwargs["allow_neg_eigval"]),
        int(kwargs["safe_gate"]), int("a_log" in kwargs), int("dt_bias" in kwargs), int(op == "gdn2"),
        kwargs.get("gate_lower_bound", -5.0), int(op == "gdn2"), dk, dv, C,
    )  # fmt: skip
    EMU.launch((slots, ho), KDA.kda_prepare_kernel, prepare)
    scan = (
        arr(inputs["q"]), arr(inputs["k"]), w, u, gamma, cu_arr, h0, o, ht,
        ho // h, int(kwargs["use_qk_l2norm"]), int("initial_state" in kwargs), 1, dk, BV, C, dk**-0.5,
    )  # fmt: skip
    EMU.launch((n, ho, dv // BV), KDA.kda_scan_kernel, scan)
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
