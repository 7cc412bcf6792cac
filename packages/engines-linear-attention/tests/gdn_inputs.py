"""Random float64 inputs of gated_delta_net for the chunked forward's and backward's tests, fresh per seed."""

from __future__ import annotations

import torch

F64 = torch.float64
OPTIONS = ["initial_state", "final_state", "qk_l2norm", "beta_sigmoid", "neg_eigval", "safe_gate", "scale"]


def cu_seqlens(*lengths):
    return torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int32)


def gdn_inputs(lengths, h=2, hv=2, k=16, v=8, *, options=(), seed=0, gate=0.3):
    """(args, kwargs) of one call: sequences of ``lengths`` in one varlen batch, each named option on;
    the log decay g is uniform in (-gate, 0]."""
    gen = torch.Generator().manual_seed(seed)
    t, ho = sum(lengths), max(h, hv)

    def rand(*shape):
        return torch.randn(*shape, dtype=F64, generator=gen)

    args = {
        "q": rand(t, h, k),
        "k": rand(t, h, k) / k**0.5,  # unit-ish keys keep (I + A) well conditioned, as in real models
        "v": rand(t, hv, v),
        "g": -torch.rand(t, hv, dtype=F64, generator=gen) * gate,
        "beta": torch.rand(t, hv, dtype=F64, generator=gen),
        "cu_seqlens": cu_seqlens(*lengths),
    }
    kwargs = {}
    if "initial_state" in options:
        kwargs["initial_state"] = rand(len(lengths), ho, v, k)
    if "final_state" in options:
        kwargs["output_final_state"] = True
    if "qk_l2norm" in options:
        kwargs["use_qk_l2norm"] = True
    if "beta_sigmoid" in options:
        kwargs["use_beta_sigmoid"] = True
        args["beta"] = rand(t, hv)
    if "neg_eigval" in options:
        kwargs["allow_neg_eigval"] = True
    if "safe_gate" in options:
        kwargs.update(safe_gate=True, a_log=rand(hv) * 0.5 - 1.0, dt_bias=rand(hv))
        args["g"] = rand(t, hv)
    if "scale" in options:
        kwargs["scale"] = 0.37
    return args, kwargs
