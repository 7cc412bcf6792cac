"""Context parallelism (`context_parallel`) on the CPU: the ranks' plans; several ranks' algebra in
one process (`simulate`) and over a gloo process group of 2-4 forked processes, each against the
single-process op on the group's tokens — the outputs, the final states and every gradient (q, k,
v, g, beta, w, initial_state), with shard boundaries off the chunk grid, a one-token shard, a
sequence of one token, an empty rank, with and without initial states; GDN, KDA and GDN-2. The op
runs through the CPU stand-ins (``gdn_stand_in``, ``kda_stand_in``: the chunked specs in float64);
typed errors; FLA's ``cp_context`` through the front door.
"""

from __future__ import annotations

import multiprocessing
import os
import traceback
from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")

from cp_inputs import (  # noqa: E402
    CASES,
    FINAL,
    TOKENS,
    compare,
    loss_of,
    make_problem,
    rel,
    simulated,
    single,
)

from pygraph.errors import OpInputError  # noqa: E402
from pygraph_linear_attention import context_parallel as cp  # noqa: E402
from pygraph_linear_attention import fla as front_door  # noqa: E402
from pygraph_linear_attention.gdn.op import gated_delta_net  # noqa: E402
from pygraph_linear_attention.kda.op import gated_delta_net_v2, kimi_delta_attention  # noqa: E402

OPS = {"gdn": gated_delta_net, "kda": kimi_delta_attention, "gdn2": gated_delta_net_v2}
CP_OPS = {"gdn": cp.gated_delta_net, "kda": cp.kimi_delta_attention, "gdn2": cp.gated_delta_net_v2}
DISTRIBUTED = ("gdn-one-sequence", "gdn-varlen-empty-rank", "kda-all-ranks-final", "gdn2-one-sequence")


@pytest.fixture
def stand_in(request):
    """The CPU stand-in of the case's op (gdn_cutile's for GDN, kda_cutile's for KDA and GDN-2): each
    case's name starts with its op's."""
    op = request.param.split("-")[0]
    return request.getfixturevalue("gdn_stand_in" if op == "gdn" else "kda_stand_in")


def _flags(case):
    op, lengths, sizes, state, flags, final_states, shape = CASES[case]
    return op, lengths, sizes, state, dict(flags), final_states, shape


# --- the plans ---------------------------------------------------------------------------------------


def test_a_plan_names_pieces_chains_and_owners():
    # sequences [0, 37) [37, 38) [38, 128) [128, 141); shards [0, 30) [30, 70) [70, 70) [70, 141)
    bounds, sizes = [0, 37, 38, 128, 141], [30, 40, 0, 71]
    plans = [cp.plan_shards(bounds, sizes, r) for r in range(4)]
    assert plans[0].bounds == (0, 30) and plans[0].outgoing and not plans[0].continued
    assert plans[1].bounds == (0, 7, 8, 40) and plans[1].sequences == (0, 1, 2)
    assert plans[1].continued and plans[1].chain_start == 0 and plans[1].outgoing
    assert plans[1].owned == ((0, 0), (1, 1)) and plans[1].starts == ((1, 1), (2, 2))
    assert plans[2].pieces == 0 and not plans[2].continued
    assert plans[3].continued and plans[3].chain_start == 1 and plans[3].owned == ((0, 2), (1, 3))
    assert not any(p.passes_through for p in plans) and all(p.final_elsewhere for p in plans)
    through = cp.plan_shards([0, 157], [70, 1, 86], 1)
    assert through.passes_through and through.chain_start == 0 and through.owned == ()


def test_an_empty_sequence_is_homed_where_its_position_is():
    plans = [cp.plan_shards([0, 5, 5, 9, 9], [5, 4], r) for r in range(2)]
    assert plans[0].homed == () and plans[1].homed == (1, 3)
    assert plans[1].sequences == (2,) and plans[0].owned == ((0, 0),)


# --- several ranks in one process --------------------------------------------------------------------


@pytest.mark.parametrize("stand_in", list(CASES), indirect=True)
def test_simulated_ranks_equal_the_single_process_op(stand_in, request):
    case = request.node.callspec.params["stand_in"]
    op, lengths, sizes, state, flags, final_states, shape = _flags(case)
    x, weights = make_problem(op, lengths, state=state, **shape)
    want = single(OPS[op], op, x, weights, flags)
    got = simulated(cp, op, x, weights, sizes, flags, final_states)
    errors, bounds = compare(op, got, want, flags)
    print(case, {k: f"{v:.1e}" for k, v in errors.items()})
    assert all(errors[k] <= bounds[k] for k in errors), errors


@pytest.mark.parametrize("stand_in", ["gdn"], indirect=True)
def test_the_shards_alone_are_far_from_the_whole(stand_in):
    # what the comparisons above check is the exchange: without the entering states, the shards'
    # outputs are not the sequence's
    x, weights = make_problem("gdn", (157,), state=True)
    want_o = single(OPS["gdn"], "gdn", x, weights, {})[0]
    alone = [
        gated_delta_net(*(x[n][a:b] for n in TOKENS["gdn"]))[0] for a, b in ((0, 70), (70, 71), (71, 157))
    ]
    assert rel(torch.cat(alone)[70:], want_o[70:]) > 0.1


@pytest.mark.parametrize("stand_in", ["gdn"], indirect=True)
def test_a_passed_through_rank_runs_the_op_three_times_and_the_others_fewer(stand_in):
    x, weights = make_problem("gdn", (157,), state=True)
    simulated(cp, "gdn", x, weights, (60, 40, 57), FINAL, "last")
    # rank 0: B and the main run; rank 1: B, M (V = K: one call) and the main run; rank 2: the main run
    assert stand_in.runs.count("gdn") == 2 + 3 + 1


# --- typed errors -----------------------------------------------------------------------------------


@pytest.mark.parametrize("stand_in", ["gdn"], indirect=True)
def test_the_calls_refuse_what_does_not_fit_the_shards(stand_in):
    x, _ = make_problem("gdn", (40, 30), state=True)
    shards = [{n: x[n][a:b] for n in TOKENS["gdn"]} for a, b in ((0, 35), (35, 70))]
    with pytest.raises(
        OpInputError, match=r"simulate|gated_delta_net\(\): cu_seqlens \[0, 40, 60\] ends at 60"
    ):
        cp.simulate("gdn", shards, torch.tensor([0, 40, 60], dtype=torch.int32))
    with pytest.raises(OpInputError, match=r"initial_state must be \[N, HO, V, K\] with the group's N = 2"):
        cp.simulate("gdn", shards, x["cu_seqlens"], initial_state=x["initial_state"][:1])
    with pytest.raises(OpInputError, match=r"cp_final_state='first'"):
        cp.simulate("gdn", shards, x["cu_seqlens"], output_final_state=True, cp_final_state="first")
    with pytest.raises(OpInputError, match=r"cu_seqlens \[0, 50, 40, 70\]: must rise from 0"):
        cp.simulate("gdn", shards, torch.tensor([0, 50, 40, 70]))
    with pytest.raises(OpInputError, match=r"cp_group must be a torch.distributed ProcessGroup, got str"):
        cp.gated_delta_net(*(x[n][:35] for n in TOKENS["gdn"]), cp_group="world")


# --- a gloo group of forked processes ----------------------------------------------------------------


def _worker(rank, world, store, out, op, x, weights, sizes, flags, final_states, fla):
    """One rank: its shard as leaves, the call over the gloo group, its loss backpropagated; what
    it got saved to ``out`` (a traceback to ``out.err`` where it failed)."""
    try:
        torch.set_num_threads(1)
        dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world)
        a = sum(sizes[:rank])
        b = a + sizes[rank]
        shard = {n: x[n][a:b].clone().requires_grad_(True) for n in TOKENS[op]}
        h0 = x.get("initial_state")
        h0 = None if h0 is None else h0.clone().requires_grad_(True)
        if fla is not None:  # FLA's front door with a context as FLA's build_cp_context makes it
            cu, first, before, last = fla[rank]
            context = SimpleNamespace(
                group=dist.group.WORLD, cu_seqlens=torch.tensor(cu, dtype=torch.int64), is_first_rank=first,
                pre_num_ranks=before, is_last_rank=last, post_num_ranks=None,
            )  # fmt: skip
            door = front_door.chunk_gated_delta_rule if op == "gdn" else front_door.chunk_kda
            o, final = door(*(shard[n].unsqueeze(0) for n in TOKENS[op]), cp_context=context)
            o = o.squeeze(0)
        elif final_states == "last":  # the torch op's cp_group route (its final states: "last")
            o, final = OPS[op](
                **shard, cu_seqlens=x["cu_seqlens"], initial_state=h0, **flags, cp_group=dist.group.WORLD
            )
        else:
            o, final = CP_OPS[op](
                **shard, cu_seqlens=x["cu_seqlens"], initial_state=h0, **flags, cp_group=dist.group.WORLD,
                cp_final_state=final_states,
            )  # fmt: skip
        share = 1 / world if final_states == "all" else 1.0
        loss_of(o, final, weights, slice(a, b), share).backward()
        grads = {n: t.grad for n, t in shard.items()}
        if h0 is not None:
            grads["initial_state"] = h0.grad
        torch.save({"o": o.detach(), "final": None if final is None else final.detach(), "grads": grads}, out)
        dist.destroy_process_group()
        os._exit(0)
    except BaseException:
        with open(f"{out}.err", "w") as f:
            f.write(traceback.format_exc())
        os._exit(1)


def _run_group(tmp_path, op, x, weights, sizes, flags, final_states, fla=None):
    """Every rank's saved results, in rank order, from ``len(sizes)`` forked processes (fork: the
    children inherit the stand-in the fixture installed)."""
    world = len(sizes)
    context = multiprocessing.get_context("fork")
    store = tmp_path / "store"
    outs = [tmp_path / f"rank{r}.pt" for r in range(world)]
    procs = [
        context.Process(
            target=_worker, args=(r, world, store, outs[r], op, x, weights, sizes, flags, final_states, fla)
        )
        for r in range(world)
    ]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=60)
    hung = [r for r, p in enumerate(procs) if p.is_alive()]
    for r in hung:
        procs[r].kill()
        procs[r].join()
    errors = [outs[r].with_suffix(".pt.err") for r in range(world)]
    failed = {r: e.read_text() for r, e in enumerate(errors) if e.exists()}
    assert not hung and not failed, (hung, failed)
    return [torch.load(o, weights_only=False) for o in outs]


def _gathered(results, final_states, world):
    o = torch.cat([r["o"] for r in results])
    holders = [i for i, r in enumerate(results) if r["final"] is not None]
    grads = {}
    for name in results[0]["grads"]:
        parts = [r["grads"][name] for r in results]
        # the per-token gradients by shard; the initial state's summed over the ranks
        grads[name] = sum(parts) if name == "initial_state" else torch.cat(parts)
    return o, (results[-1]["final"] if holders else None), grads, holders


@pytest.mark.parametrize("stand_in", DISTRIBUTED, indirect=True)
def test_a_gloo_group_equals_the_single_process_op(stand_in, request, tmp_path):
    case = request.node.callspec.params["stand_in"]
    op, lengths, sizes, state, flags, final_states, shape = _flags(case)
    x, weights = make_problem(op, lengths, state=state, **shape)
    want = single(OPS[op], op, x, weights, flags)
    results = _run_group(tmp_path, op, x, weights, sizes, flags, final_states)
    o, final, grads, holders = _gathered(results, final_states, len(sizes))
    if flags.get("output_final_state"):
        assert holders == (list(range(len(sizes))) if final_states == "all" else [len(sizes) - 1])
        for r in holders:
            assert torch.equal(results[r]["final"], final)
    errors, bounds = compare(op, (o, final, grads), want, flags)
    print(case, {k: f"{v:.1e}" for k, v in errors.items()})
    assert all(errors[k] <= bounds[k] for k in errors), errors


# FLA's contexts (rank-local cu_seqlens, is_first_rank, pre_num_ranks, is_last_rank) of even shards:
# name: (op, sequence lengths, shard sizes, every rank's context)
FLA_CASES = {
    "gdn-varlen": ("gdn", (50, 70, 40), (80, 80), [([0, 50, 80], True, 0, False), ([0, 40, 80], False, 1, True)]),
    "kda-one-sequence": ("kda", (150,), (50, 50, 50),
                         [([0, 50], True, 0, False), ([0, 50], False, 1, False), ([0, 50], False, 2, True)]),
}  # fmt: skip


@pytest.mark.parametrize("stand_in", list(FLA_CASES), indirect=True)
def test_fla_cp_context_through_the_front_door_equals_the_single_process_op(stand_in, request, tmp_path):
    case = request.node.callspec.params["stand_in"]
    op, lengths, sizes, contexts = FLA_CASES[case]
    x, weights = make_problem(op, lengths)
    want = single(OPS[op], op, x, weights, {})
    results = _run_group(tmp_path, op, x, weights, sizes, {}, "last", fla=contexts)
    o, _, grads, _ = _gathered(results, "last", len(sizes))
    errors, bounds = compare(op, (o, None, grads), want, {})
    print(case, {k: f"{v:.1e}" for k, v in errors.items()})
    assert all(errors[k] <= bounds[k] for k in errors), errors


@pytest.mark.parametrize("stand_in", ["gdn"], indirect=True)
def test_fla_cp_context_refuses_states(stand_in):
    x, _ = make_problem("gdn", (40,), state=True)
    args = [x[n].unsqueeze(0) for n in TOKENS["gdn"]]
    context = SimpleNamespace(group=None, cu_seqlens=torch.tensor([0, 40]), is_first_rank=True, pre_num_ranks=0,
                              is_last_rank=True)  # fmt: skip
    with pytest.raises(
        OpInputError, match="cp_context with initial_state: FLA's context parallelism takes no"
    ):
        front_door.chunk_gated_delta_rule(
            *args, initial_state=x["initial_state"].transpose(-1, -2), cp_context=context
        )
    with pytest.raises(OpInputError, match="cp_context with output_final_state=True"):
        front_door.chunk_gated_delta_rule(*args, output_final_state=True, cp_context=context)
    with pytest.raises(OpInputError, match="it needs a group and its rank-local cu_seqlens"):
        front_door.chunk_gated_delta_rule(*args, cp_context=context)
