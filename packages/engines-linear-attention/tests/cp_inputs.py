"""Inputs and checks of the context-parallel tests (`context_parallel`): one problem of the group's
tokens, its shards by rank, the single-process op's outputs and gradients to compare with, and
the loss both sides backpropagate (device-agnostic: the CPU tests and the sm90 one share them)."""

from __future__ import annotations

import torch

TOKENS = {"gdn": ("q", "k", "v", "g", "beta"), "kda": ("q", "k", "v", "g", "beta"),
          "gdn2": ("q", "k", "v", "g", "beta", "w")}  # fmt: skip
LEAVES = ("q", "k", "v", "g", "beta", "w", "initial_state")


def make_problem(op, lengths, *, h=1, hv=2, d=64, state=False, seed=0, device="cpu", io=torch.bfloat16):
    """The group's tensors (THD over every rank's tokens) and the loss weights (dO exact in the io
    dtype, the final state's in fp64)."""
    gen = torch.Generator().manual_seed(seed)
    t, n = sum(lengths), len(lengths)

    def normal(*shape):
        return torch.randn(*shape, generator=gen)

    per_key = (d,) if op != "gdn" else ()
    x = {
        "q": normal(t, h, d).to(io),
        "k": torch.nn.functional.normalize(normal(t, h, d), dim=-1).to(io),
        "v": normal(t, hv, d).to(io),
        # slow decay (about exp(-0.005) a token): the state entering a shard still shapes its output
        # and its final state after a hundred tokens, so the exchange is what the comparison checks
        "g": torch.nn.functional.logsigmoid(normal(t, hv, *per_key) + 5.0),
        "beta": torch.rand(t, hv, *((d,) if op == "gdn2" else ()), generator=gen),
    }
    if op == "gdn2":
        x["w"] = torch.rand(t, hv, d, generator=gen).to(io)
    x["cu_seqlens"] = torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int32)
    if state:
        x["initial_state"] = normal(n, hv, d, d) * 0.1
    weights = {"o": normal(t, hv, d).to(io).double(), "final": normal(n, hv, d, d).double() * 0.1}
    x = {name: value.to(device) for name, value in x.items()}
    return x, {name: value.to(device) for name, value in weights.items()}


def loss_of(o, final, weights, rows=slice(None), final_share=1.0):
    """sum(o * dO) (+ sum(final * dS) * final_share), o the rows ``rows`` of the group's."""
    loss = (o.double() * weights["o"][rows]).sum()
    if final is not None:
        loss = loss + (final.double() * weights["final"]).sum() * final_share
    return loss


def single(fn, op, x, weights, flags):
    """The single-process op on the group's tokens: (o, final, gradients by name)."""
    leaves = {n: t.clone().requires_grad_(True) for n, t in x.items() if n in LEAVES}
    o, final = fn(**leaves, cu_seqlens=x["cu_seqlens"], **flags)
    loss_of(o, final, weights).backward()
    return o.detach(), None if final is None else final.detach(), {n: t.grad for n, t in leaves.items()}


def shard_bounds(sizes):
    bounds = [0]
    for s in sizes:
        bounds.append(bounds[-1] + s)
    return bounds


def rel(got, want) -> float:
    got, want = got.detach().double(), want.detach().double()
    return float((got - want).norm() / want.norm().clamp_min(1e-30))


def compare(op, got, want, flags):
    """{name: relative error} of (o, final, grads) against the single process's, and their bounds:
    bf16 outputs and gradients by their rounding (a rank's gradient sums up to three op backwards'
    bf16 results), fp32 ones by the fp32 composition of the entering states."""
    errors, bounds = {}, {}
    o, final, grads = got
    want_o, want_final, want_grads = want
    errors["o"], bounds["o"] = rel(o, want_o), 8e-3
    if flags.get("output_final_state"):
        errors["final"], bounds["final"] = rel(final, want_final), 1e-4
    for name, g in want_grads.items():
        errors[f"d{name}"] = rel(grads[name], g)
        bounds[f"d{name}"] = 1e-2 if g.dtype in (torch.bfloat16, torch.float16) else 1e-4
    return errors, bounds
