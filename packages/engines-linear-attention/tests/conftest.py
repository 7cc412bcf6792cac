"""Fixtures of the family's tests: ``gdn_stand_in``, gdn_cutile built with its launch sequences
replaced by the chunked spec computed on the host (and ``kda_stand_in``, kda_cutile and gdn2_cutile
the same way).

The stand-in: gdn_cutile's kernel modules replaced in ``sys.modules`` by sentinels, cuTile's launch
by a no-op, and the plan's launch sequences (`launch_forward`, `launch_backward`) by functions that
read the plan's device arrays (host addresses: CPU tensors) as torch tensors and compute
the chunked specs (`gdn.chunked`, `gdn.chunked_bwd`, `kda.chunked`, `kda.chunked_bwd`) in float64, so a caller of the torch op, its graph cache, planning,
the variant pack, the plan's operand positions, geometry checks and workspace all run as they do on
the device.
"""

from __future__ import annotations

import ctypes
import sys
import types

import pytest

from pygraph_linear_attention.gdn.cutile_host import HINTED_BWD


def _host(array, dtype=None):
    """A device array at a host address, as a torch tensor over the same memory."""
    import torch

    dtype = dtype or getattr(torch, array.dtype)
    span = 1 + sum((d - 1) * s for d, s in zip(array.shape, array.strides)) if all(array.shape) else 0
    size = torch.empty((), dtype=dtype).element_size()
    memory = (ctypes.c_char * max(span * size, 1)).from_address(array.pointer)
    return torch.frombuffer(memory, dtype=dtype, count=span).as_strided(array.shape, array.strides)


def _options(cfg) -> dict:
    return {
        "scale": cfg.scale, "use_qk_l2norm": cfg.use_qk_l2norm, "use_beta_sigmoid": cfg.use_beta_sigmoid,
        "allow_neg_eigval": cfg.allow_neg_eigval, "safe_gate": cfg.safe_gate,
    }  # fmt: skip


class StandIn:
    """The plan's launch sequences, computing the chunked spec on the host; records each run."""

    def __init__(self):
        self.runs = []

    def forward(self, launch, kernels, cfg, arrays):
        from pygraph_linear_attention.gdn.chunked import chunked_gated_delta_net

        self.runs.append("gdn")
        x = {name: _host(arrays[name]) for name in ("q", "k", "v", "g", "beta", "cu_seqlens", "o")}
        extra = {name: _host(arrays[role]) for name, role in (("initial_state", "h0"), ("a_log", "a_log"),
                 ("dt_bias", "dt_bias")) if role in arrays}  # fmt: skip
        o, final = chunked_gated_delta_net(
            x["q"], x["k"], x["v"], x["g"], x["beta"], x["cu_seqlens"], **extra,
            output_final_state=cfg.output_final_state, **_options(cfg),
        )  # fmt: skip
        x["o"].copy_(o)
        if cfg.output_final_state:
            _host(arrays["ht"]).copy_(final)

    def backward(self, launch, kernels, cfg, arrays):
        from pygraph_linear_attention.gdn.chunked_bwd import chunked_gated_delta_net_backward

        self.runs.append("gdn_bwd")
        x = {name: _host(arrays[name]) for name in ("q", "k", "v", "g", "beta", "cu_seqlens", "dO")}
        extra = {name: _host(arrays[role]) for name, role in (("initial_state", "h0"), ("a_log", "a_log"),
                 ("dt_bias", "dt_bias"), ("grad_final_state", "dht")) if role in arrays}  # fmt: skip
        grads = chunked_gated_delta_net_backward(
            x["q"], x["k"], x["v"], x["g"], x["beta"], x["cu_seqlens"], x["dO"], **extra, **_options(cfg)
        )
        for name, role in (("dQ", "dQ"), ("dK", "dK"), ("dV", "dV"), ("dG", "dG"), ("dBeta", "dBeta"),
                           ("d_initial_state", "dh0"), ("d_a_log", "d_a_log"), ("d_dt_bias", "d_dt_bias")):  # fmt: skip
            if role in arrays:
                _host(arrays[role]).copy_(grads[name])


class KdaStandIn:
    """kda_cutile's / gdn2_cutile's launch sequences computing `kda.chunked`'s KDA or GDN-2 (and
    `kda.chunked_bwd`'s backward) in float64 on the host; records each run ("kda", "kda_bwd", ...)."""

    def __init__(self):
        self.runs = []

    def forward(self, launch, kernels, cfg, arrays):
        from pygraph_linear_attention.kda.chunked import (
            chunked_gated_delta_net_v2,
            chunked_kimi_delta_attention,
        )

        self.runs.append(cfg.op)
        x = {name: _host(arrays[name]) for name in ("q", "k", "v", "g", "beta", "cu_seqlens", "o")}
        extra = {name: _host(arrays[role]) for name, role in (("initial_state", "h0"), ("a_log", "a_log"),
                 ("dt_bias", "dt_bias")) if arrays.get(role) is not None}  # fmt: skip
        gates = [x["g"], x["beta"]] + ([_host(arrays["w_gate"])] if cfg.op == "gdn2" else [])
        run = chunked_gated_delta_net_v2 if cfg.op == "gdn2" else chunked_kimi_delta_attention
        o, final = run(
            x["q"], x["k"], x["v"], *gates, x["cu_seqlens"], **extra, output_final_state=cfg.output_final_state,
            gate_lower_bound=cfg.gate_lower_bound if cfg.safe_gate else None, **_options(cfg),
        )  # fmt: skip
        x["o"].copy_(o)
        if cfg.output_final_state:
            _host(arrays["ht"]).copy_(final)

    def backward(self, launch, kernels, cfg, arrays):
        from pygraph_linear_attention.kda.chunked_bwd import (
            chunked_gated_delta_net_v2_backward,
            chunked_kimi_delta_attention_backward,
        )

        self.runs.append(f"{cfg.op}_bwd")
        x = {name: _host(arrays[name]) for name in ("q", "k", "v", "g", "beta", "cu_seqlens", "dO")}
        extra = {name: _host(arrays[role]) for name, role in (("initial_state", "h0"), ("a_log", "a_log"),
                 ("dt_bias", "dt_bias"), ("grad_final_state", "dht")) if arrays.get(role) is not None}  # fmt: skip
        gates = [x["g"], x["beta"]] + ([_host(arrays["w_gate"])] if cfg.op == "gdn2" else [])
        run = (
            chunked_gated_delta_net_v2_backward if cfg.op == "gdn2" else chunked_kimi_delta_attention_backward
        )
        grads = run(
            x["q"], x["k"], x["v"], *gates, x["cu_seqlens"], x["dO"], **extra,
            gate_lower_bound=cfg.gate_lower_bound if cfg.safe_gate else None, **_options(cfg),
        )  # fmt: skip
        roles = {"dQ": "dQ", "dK": "dK", "dV": "dV", "dG": "dG", "dBeta": "dBeta", "dW": "dW",
                 "d_initial_state": "dh0", "d_a_log": "d_a_log", "d_dt_bias": "d_dt_bias"}  # fmt: skip
        for name, role in roles.items():
            if arrays.get(role) is not None:
                _host(arrays[role]).copy_(grads[name])


@pytest.fixture
def no_cute_dsl_kda(monkeypatch) -> None:
    """kda_sm90 / gdn2_sm90 (default-on, first on sm90) and their backwards decline, so a CPU stand-in
    of the cuTile engines computes the plans."""
    decline_cute_dsl_kda(monkeypatch)


@pytest.fixture
def no_cute_dsl_kda_bwd(monkeypatch) -> None:
    """kda_sm90_bwd / gdn2_sm90_bwd (default-on, first on sm90) decline, so the cuTile backwards serve
    the CuTe DSL forwards' gradients."""
    decline_cute_dsl_kda(monkeypatch, backward_only=True)


def decline_cute_dsl_kda(monkeypatch, backward_only: bool = False) -> None:
    """The `no_cute_dsl_kda` fixture's work, for fixtures that set up a stand-in; with
    ``backward_only`` only the CuTe DSL backwards decline (the forward stays first)."""
    from pygraph.errors import GraphNotSupportedError
    from pygraph_linear_attention.kda import engine_sm90 as kda_sm90

    def decline(self, request):
        raise GraphNotSupportedError(f"{self.name}: declined here, so the cuTile engine serves")

    engine = kda_sm90.KdaSm90BwdEngine if backward_only else kda_sm90.KdaSm90Engine
    monkeypatch.setattr(engine, "check_support", decline)


@pytest.fixture
def kda_stand_in(monkeypatch):
    """kda_cutile, gdn2_cutile and their backwards offered (opted in) and built with the stand-in
    launch sequences; the op's graph cache empty. Yields the `KdaStandIn`."""
    pytest.importorskip("torch")
    from pygraph.environment import OPT_IN_ENV
    from pygraph_linear_attention.common import op_arguments, op_graphs
    from pygraph_linear_attention.kda import engine_cutile as engine_mod

    monkeypatch.setattr(
        op_arguments, "DEVICE_TYPES", ("cuda", "cpu")
    )  # host tensors: the stand-in reads them
    monkeypatch.setenv("PYGRAPH_PLAN_CACHE", "off")
    monkeypatch.setenv(OPT_IN_ENV, "kda_cutile,gdn2_cutile,kda_cutile_bwd,gdn2_cutile_bwd")
    monkeypatch.setattr(engine_mod, "cutile_installed", lambda: True)
    monkeypatch.setattr(engine_mod, "cutile_launch", lambda: lambda *args: None)
    fwd = types.ModuleType("pygraph_linear_attention.kda.cutile_fwd")
    fwd.KERNELS = {name: name for name in ("table", "prepare", "scan")}
    bwd = types.ModuleType("pygraph_linear_attention.kda.cutile_bwd")
    bwd.BWD_KERNELS = {}
    monkeypatch.setitem(sys.modules, fwd.__name__, fwd)
    monkeypatch.setitem(sys.modules, bwd.__name__, bwd)
    recorder = KdaStandIn()
    monkeypatch.setattr(engine_mod, "launch_forward", recorder.forward)
    monkeypatch.setattr(engine_mod, "launch_backward", recorder.backward)
    decline_cute_dsl_kda(monkeypatch)
    op_graphs.GRAPHS.clear()
    yield recorder
    op_graphs.GRAPHS.clear()


@pytest.fixture
def gdn_stand_in(monkeypatch):
    """gdn_cutile offered and built with the stand-in launch sequences (the gdn_sm90 engines
    declining); the op's graph cache empty.
    Yields the `StandIn` (its ``runs`` list the graphs executed, "gdn" or "gdn_bwd")."""
    pytest.importorskip("torch")
    from pygraph_linear_attention.common import op_arguments, op_graphs
    from pygraph_linear_attention.gdn import engine_cutile as engine_mod
    from pygraph_linear_attention.gdn import engine_sm90 as sm90_mod

    monkeypatch.setattr(
        op_arguments, "DEVICE_TYPES", ("cuda", "cpu")
    )  # host tensors: the stand-in reads them
    monkeypatch.setenv("PYGRAPH_PLAN_CACHE", "off")
    monkeypatch.setattr(engine_mod, "cutile_installed", lambda: True)
    monkeypatch.setattr(engine_mod, "cutile_launch", lambda: lambda *args: None)
    fwd = types.ModuleType("pygraph_linear_attention.gdn.cutile_fwd")
    fwd.KERNELS = {name: name for name in ("table", "prepare", "scan")}
    fwd.hinted = lambda kernel, **hints: (kernel, hints)  # a plan's occupancy hint builds
    bwd = types.ModuleType("pygraph_linear_attention.gdn.cutile_bwd")
    bwd.BWD_KERNELS = {name: name for name in HINTED_BWD}
    monkeypatch.setitem(sys.modules, fwd.__name__, fwd)
    monkeypatch.setitem(sys.modules, bwd.__name__, bwd)
    recorder = StandIn()
    monkeypatch.setattr(engine_mod, "launch_forward", recorder.forward)
    monkeypatch.setattr(engine_mod, "launch_backward", recorder.backward)
    # the CuTe DSL engines, ranked first on sm90, decline: the stand-in computes gdn_cutile's plans
    sm90_rule = sm90_mod._sm90_reason
    monkeypatch.setattr(
        sm90_mod,
        "_sm90_reason",
        lambda facts, backward: sm90_rule(facts, backward) or "the CPU stand-in serves gdn_cutile",
    )
    op_graphs.GRAPHS.clear()
    yield recorder
    op_graphs.GRAPHS.clear()


def _cutile_compiler_missing() -> str | None:
    """Why cuTile's compiler (tileiras) cannot be found here, or None where it can."""
    try:
        from cuda.tile._compile import _find_compiler_bin
    except ImportError as exc:
        return f"this cuTile release has no compiler lookup to probe: {exc}"
    try:
        _find_compiler_bin()
    except FileNotFoundError as exc:
        return f"cuTile's compiler is not available: {exc}"
    return None


@pytest.fixture(scope="session")
def cutile_compiler():
    """Skip, saying why, where cuTile's compiler is absent: the compile tests export kernels with it."""
    reason = _cutile_compiler_missing()
    if reason is not None:
        pytest.skip(reason)


@pytest.fixture
def counted_compiles(monkeypatch):
    """``count(host, engine_mod, make)``: the CuTe DSL compiles of ``host`` (gdn's or kda's sm90 host)
    counted instead of run, each returning a new ``make()``, with the process cache emptied, the disk
    cache off and the engine module's CuTe DSL probe passing; returns the list of what was built."""
    from pygraph_linear_attention.common import sm90_compile as cache

    monkeypatch.setattr(cache.KERNELS, "_memory", {})
    monkeypatch.setenv(cache.CACHE_ENV, "off")

    def count(host, engine_mod, make):
        built = []
        monkeypatch.setattr(host, "_compile", lambda key, arch: built.append(make()) or built[-1])
        monkeypatch.setattr(engine_mod.importlib.util, "find_spec", lambda name: object())
        return built

    return count
