"""Inputs and checks of the context-parallel tests (`context_parallel`): one problem of the group's
tokens, its shards by rank, the single-process op's outputs and gradients to compare with, and
the loss both sides backpropagate (device-agnostic: the CPU tests and the sm90 one share them)."""

from __future__ import annotations

from itertools import pairwise

import torch

from gdn_cases import rel_error as rel

TOKENS = {"gdn": ("q", "k", "v", "g", "beta"), "kda": ("q", "k", "v", "g", "beta"),
          "gdn2": ("q", "k", "v", "g", "beta", "w")}  # fmt: skip
LEAVES = ("q", "k", "v", "g", "beta", "w", "initial_state")
STATE = {"initial_state": True}
FINAL = {"output_final_state": True}

# name (its op's first): (op, sequence lengths, shard sizes, with initial states, op flags,
# cp_final_state, make_problem's other arguments)
CASES = {
    # one sequence over three ranks, the middle one a single token passed through
    "gdn-one-sequence": ("gdn", (157,), (70, 1, 86), True, FINAL, "last", {}),
    # varlen: a sequence crossing an empty rank, one of one token, one ending before the last rank
    "gdn-varlen-empty-rank": ("gdn", (37, 1, 90, 13), (30, 40, 0, 71), True, FINAL, "last", {}),
    "gdn-no-state": ("gdn", (100, 29), (51, 78), False, {}, "last", {}),
    # V < K: the transition's M in two calls of V rows
    "gdn-v-under-k": ("gdn", (130,), (40, 50, 40), True, FINAL, "last", {"d": 128, "dv": 64}),
    "kda-all-ranks-final": ("kda", (133,), (45, 88), True, FINAL, "all", {}),
    "kda-varlen-no-state": ("kda", (20, 1, 70), (21, 35, 35), False, FINAL, "last", {}),
    "gdn2-one-sequence": ("gdn2", (97,), (33, 64), True, FINAL, "last", {}),
}  # fmt: skip


def make_problem(
    op, lengths, *, h=1, hv=2, d=64, dv=None, state=False, seed=0, device="cpu", io=torch.bfloat16
):
    """The group's tensors (THD over every rank's tokens) and the loss weights (dO exact in the io
    dtype, the final state's in fp64)."""
    gen = torch.Generator().manual_seed(seed)
    t, n, dv = sum(lengths), len(lengths), dv or d

    def normal(*shape):
        return torch.randn(*shape, generator=gen)

    per_key = (d,) if op != "gdn" else ()
    x = {
        "q": normal(t, h, d).to(io),
        "k": torch.nn.functional.normalize(normal(t, h, d), dim=-1).to(io),
        "v": normal(t, hv, dv).to(io),
        # slow decay (about exp(-0.005) a token): the state entering a shard still shapes its output
        # and its final state after a hundred tokens, so the exchange is what the comparison checks
        "g": torch.nn.functional.logsigmoid(normal(t, hv, *per_key) + 5.0),
        "beta": torch.rand(t, hv, *((d,) if op == "gdn2" else ()), generator=gen),
    }
    if op == "gdn2":
        x["w"] = torch.rand(t, hv, dv, generator=gen).to(io)
    x["cu_seqlens"] = torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int32)
    if state:
        x["initial_state"] = normal(n, hv, dv, d) * 0.1
    weights = {"o": normal(t, hv, dv).to(io).double(), "final": normal(n, hv, dv, d).double() * 0.1}
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


def simulated(cp, op, x, weights, sizes, flags, final_states):
    """`context_parallel.simulate` (``cp``) over shards that are views of shared leaves (their
    gradients add up there); each rank's loss its o's rows, and the final state where it is returned
    (shared out under "all"). Returns (o, final, gradients) as `single` does."""
    leaves = {n: t.clone().requires_grad_(True) for n, t in x.items() if n in LEAVES}
    bounds = shard_bounds(sizes)
    shards = [{n: leaves[n][a:b] for n in TOKENS[op]} for a, b in pairwise(bounds)]
    results = cp.simulate(
        op, shards, x["cu_seqlens"], initial_state=leaves.get("initial_state"), cp_final_state=final_states,
        **flags,
    )  # fmt: skip
    share = 1 / len(sizes) if final_states == "all" else 1.0
    loss = sum(
        loss_of(o, final, weights, slice(a, b), share)
        for (o, final), (a, b) in zip(results, pairwise(bounds))
    )
    loss.backward()
    o = torch.cat([o.detach() for o, _ in results])
    finals = [final for _, final in results]
    if flags.get("output_final_state"):
        holders = [r for r, f in enumerate(finals) if f is not None]
        if holders != (list(range(len(sizes))) if final_states == "all" else [len(sizes) - 1]):
            raise AssertionError(f"final states returned on ranks {holders} under {final_states!r}")
    return o, finals[-1], {n: t.grad for n, t in leaves.items()}
