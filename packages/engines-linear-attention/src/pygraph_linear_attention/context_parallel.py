"""Context parallelism: one long sequence (or a packed batch) sharded over the ranks of a
``torch.distributed`` process group, each rank running the torch op on its contiguous shard of
the tokens from its true entering state. Exact: every rank's output, the final states and every
gradient are the single-process op's, up to the order of floating-point sums.

The algebra (`common.transitions`): a span of tokens maps the state S [V, K] entering it to
``S M + B``. Each rank gets, for the sequence that leaves its shard to the right (if any), that
piece's transition with the torch op itself, so the transition's gradient is the op's backward:

- B: the op's final state from the piece's own start (the caller's initial state where the
  sequence starts on this rank, zero where it continues from an earlier rank);
- M: only where the sequence passes through the whole shard (it continues from an earlier rank
  and on to a later one), the op's final state with v = 0 from the identity's rows as initial
  state (K rows, in ceil(K / V) calls of V rows; one call where V = K).

One exchange: an all-gather of the (M, B) pairs over the group (torch's functional collectives,
``torch.distributed._functional_collectives``, which ``torch.distributed.nn.functional`` now
defers to: differentiable and traceable; its backward is the mirror, one reduce-scatter carrying
the gradients of the pairs back to the ranks that made them). A rank whose
first token continues a sequence composes the pairs of the ranks from the sequence's start to its
own, ``S = B_start; S = S M_j + B_j``, and runs the op on its shard from that state. Where the
caller asks for final states that end off the last rank (varlen) or on every rank
(``cp_final_state="all"``), each rank's final states are summed over the group with one
differentiable all-reduce.

The API: `gated_delta_net`, `kimi_delta_attention` and `gated_delta_net_v2` here take the torch
ops' arguments plus ``cp_group`` (and ``cp_final_state``, ``cp_shard_sizes``); the torch ops take
``cp_group=`` and route here. `simulate` runs the same algebra for several ranks' shards in one
process (no process group), the check of the algebra on one device. The reference text, with the
cost, is ``docs/linear-attention.md`` ("Context parallelism").
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from itertools import pairwise
from typing import Any

import torch

from pygraph.errors import OpInputError
from pygraph_linear_attention.common.transitions import apply

__all__ = [
    "FINAL_STATES",
    "RankPlan",
    "fla_context_call",
    "gated_delta_net",
    "gated_delta_net_v2",
    "kimi_delta_attention",
    "plan_from_fla_context",
    "plan_shards",
    "simulate",
]

Tensor = torch.Tensor
CALLS = {
    "gdn": "pygraph_linear_attention.context_parallel.gated_delta_net()",
    "kda": "pygraph_linear_attention.context_parallel.kimi_delta_attention()",
    "gdn2": "pygraph_linear_attention.context_parallel.gated_delta_net_v2()",
}
FINAL_STATES = ("last", "all")
# the per-token tensors of each op, in the op's order
_TOKENS = {"gdn": ("q", "k", "v", "g", "beta"), "kda": ("q", "k", "v", "g", "beta"),
           "gdn2": ("q", "k", "v", "g", "beta", "w")}  # fmt: skip


def _fail(call: str, message: str) -> OpInputError:
    return OpInputError(f"{call}: {message}")


# --- the plan: which pieces of which sequences a rank holds, and what it exchanges ---------------------


@dataclasses.dataclass(frozen=True)
class RankPlan:
    """What one rank computes, from the shard boundaries and the sequences (host integers only).

    ``bounds``: the rank-local cu_seqlens of its pieces (the nonempty parts of the sequences its
    shard holds; empty for a rank of no token). ``sequences``: each piece's global sequence index
    (None where the caller has no global numbering: FLA's context, which has no states).
    ``continued``: the first piece continues a sequence that starts on ``chain_start`` < rank.
    ``outgoing``: the last piece's sequence goes on past the shard. ``owned``: (piece, sequence)
    of the sequences whose last token is on this rank; ``homed``: the empty sequences whose final
    state (the initial one) this rank gives. ``final_elsewhere``: some sequence's final state is
    on a rank other than the last (so ``cp_final_state="last"`` needs the all-reduce too)."""

    rank: int
    world: int
    bounds: tuple[int, ...]
    sequences: tuple[int, ...] | None
    continued: bool
    chain_start: int
    outgoing: bool
    owned: tuple[tuple[int, int], ...] = ()
    homed: tuple[int, ...] = ()
    starts: tuple[tuple[int, int], ...] = ()  # (piece, sequence) of the sequences starting here
    num_sequences: int = 0
    final_elsewhere: bool = False

    @property
    def tokens(self) -> int:
        return self.bounds[-1] if self.bounds else 0

    @property
    def pieces(self) -> int:
        return max(len(self.bounds) - 1, 0)

    @property
    def passes_through(self) -> bool:
        """One sequence covers the whole shard and goes on both sides: this rank's M is read."""
        return self.continued and self.outgoing and self.pieces == 1


def plan_shards(cu_seqlens: Sequence[int], shard_sizes: Sequence[int], rank: int) -> RankPlan:
    """The plan of ``rank`` whose shard is tokens [sum(shard_sizes[:rank]), + shard_sizes[rank]) of
    the sequences ``cu_seqlens`` (global boundaries, host ints, checked by the caller). A
    sequence's first token's rank is its start rank, its last token's rank its final state's owner;
    an empty sequence is homed on the rank holding the token at its position (the last rank at the
    end)."""
    offsets = [0]
    for size in shard_sizes:
        offsets.append(offsets[-1] + size)
    world, total = len(shard_sizes), offsets[-1]
    a, b = offsets[rank], offsets[rank + 1]

    def holder(position: int) -> int:  # the rank holding token ``position`` (the last past the end)
        for r in range(world):
            if offsets[r] <= position < offsets[r + 1]:
                return r
        return world - 1

    bounds, sequences, owned, homed, starts = [0], [], [], [], []
    continued, chain_start, outgoing, elsewhere = False, rank, False, False
    for n in range(len(cu_seqlens) - 1):
        s, e = cu_seqlens[n], cu_seqlens[n + 1]
        if s == e:
            home = holder(s) if s < total else world - 1
            elsewhere |= home != world - 1
            if home == rank:
                homed.append(n)
            continue
        elsewhere |= holder(e - 1) != world - 1
        if e <= a or s >= b or a == b:  # a rank of no token holds no piece
            continue
        piece = len(sequences)
        sequences.append(n)
        bounds.append(min(e, b) - a)
        if s < a:
            continued, chain_start = True, holder(s)
        else:
            starts.append((piece, n))
        if e > b:
            outgoing = True
        else:
            owned.append((piece, n))
    return RankPlan(
        rank=rank, world=world, bounds=tuple(bounds) if sequences else (), sequences=tuple(sequences),
        continued=continued, chain_start=chain_start, outgoing=outgoing, owned=tuple(owned),
        homed=tuple(homed), starts=tuple(starts), num_sequences=len(cu_seqlens) - 1,
        final_elsewhere=elsewhere,
    )  # fmt: skip


def plan_from_fla_context(call: str, context: Any, tokens: int) -> tuple[Any, RankPlan]:
    """(group, plan) of flash-linear-attention's ``FLACPContext``: its rank-local ``cu_seqlens``,
    ``is_first_rank`` (the first local sequence starts here), ``pre_num_ranks`` (how many earlier
    ranks hold that sequence) and ``is_last_rank`` (the last local sequence ends here). FLA's
    context carries no global sequence numbering: no states (FLA's CP takes none either)."""
    import torch.distributed as dist

    group = getattr(context, "group", None)
    local = getattr(context, "cu_seqlens", None)
    if group is None or not isinstance(local, Tensor):
        raise _fail(call, f"cp_context={context!r}: it needs a group and its rank-local cu_seqlens")
    values = [int(x) for x in local.tolist()]
    if not values or values[0] != 0 or values[-1] != tokens or any(x > y for x, y in pairwise(values)):
        raise _fail(call, f"cp_context.cu_seqlens {values}: must rise from 0 to this rank's {tokens} tokens")
    bounds = [values[0]] + [y for x, y in pairwise(values) if y > x]  # empty pieces hold no state
    first, last = bool(context.is_first_rank), bool(context.is_last_rank)
    before = int(context.pre_num_ranks or 0)
    rank, world = dist.get_rank(group), dist.get_world_size(group)
    if before < 0 or before > rank or (first and before):
        raise _fail(
            call, f"cp_context.pre_num_ranks={before} with is_first_rank={first} on rank {rank} of {world}"
        )
    pieces = len(bounds) - 1
    plan = RankPlan(
        rank=rank, world=world, bounds=tuple(bounds) if pieces else (), sequences=None,
        continued=pieces > 0 and not first, chain_start=rank - before, outgoing=pieces > 0 and not last,
    )  # fmt: skip
    return group, plan


# --- one rank's work --------------------------------------------------------------------------------


class _Tie(torch.autograd.Function):
    """``x`` unchanged, with ``others`` as inputs of zero gradient: a collective whose output this
    rank does not otherwise use stays in its autograd graph, so its backward (a collective every rank
    must join) runs on every rank, after those the others depend on."""

    @staticmethod
    def forward(ctx: Any, x: Tensor, *others: Tensor) -> Tensor:
        ctx.others = [(t.shape, t.dtype, t.device) for t in others]
        return x.view_as(x)

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple:
        return (grad, *(torch.zeros(s, dtype=d, device=dev) for s, d, dev in ctx.others))


def _tie(x: Tensor, *others: Tensor | None) -> Tensor:
    others = tuple(t for t in others if t is not None and t.requires_grad)
    if not others or not torch.is_grad_enabled():
        return x
    return _Tie.apply(x, *others)


@dataclasses.dataclass
class _Rank:
    """One rank's call: its plan, its shard's tensors, the op and its options."""

    op: str
    call: str
    plan: RankPlan
    tokens: dict[str, Tensor]  # the per-token tensors of the shard, THD
    options: dict[str, Any]  # the op's other arguments (scale, flags, a_log, ...)
    initial_state: Tensor | None  # [N, HO, V, K], the group's sequences
    output_final_state: bool
    final_states: str

    @property
    def q(self) -> Tensor:
        return self.tokens["q"]

    def shape(self) -> tuple[int, int, int]:
        """(HO, V, K)."""
        heads = max(self.tokens["q"].shape[1], self.tokens["v"].shape[1])
        return heads, self.tokens["v"].shape[2], self.tokens["q"].shape[2]

    def _run(self, start: int, bounds: Sequence[int], h0: Tensor | None, zero_v: bool = False,
             final: bool = True) -> tuple[Tensor, Tensor | None]:  # fmt: skip
        """The op on tokens [start, start + bounds[-1]) of the shard as sequences ``bounds``."""
        from pygraph_linear_attention.gdn.op import gated_delta_net
        from pygraph_linear_attention.kda.op import gated_delta_net_v2, kimi_delta_attention

        fn = {"gdn": gated_delta_net, "kda": kimi_delta_attention, "gdn2": gated_delta_net_v2}[self.op]
        end = start + bounds[-1]
        x = {name: t[start:end] for name, t in self.tokens.items()}
        if zero_v:
            x["v"] = torch.zeros_like(x["v"])
        cu = torch.tensor(bounds, dtype=torch.int32, device=self.q.device)
        return fn(**x, cu_seqlens=cu, initial_state=h0, output_final_state=final, **self.options)

    def _h0(self, sequences: Sequence[int]) -> Tensor | None:
        """The caller's initial states of ``sequences`` (None where the caller gave none)."""
        if self.initial_state is None:
            return None
        index = torch.tensor(list(sequences), dtype=torch.long, device=self.initial_state.device)
        return self.initial_state.index_select(0, index)

    def payload(self) -> Tensor:
        """This rank's (M, B) flattened into one fp32 vector: the outgoing piece's transition (B the
        state it leaves with where the sequence starts here; M read only where it passes through),
        the identity (I, 0) on a rank of no token, zeros where nothing leaves the shard."""
        p, (heads, dv, dk) = self.plan, self.shape()
        device = self.q.device
        m = torch.zeros((heads, dk, dk), dtype=torch.float32, device=device)
        b = torch.zeros((heads, dv, dk), dtype=torch.float32, device=device)
        if p.pieces == 0:
            m = m + torch.eye(dk, dtype=torch.float32, device=device)  # an empty span changes nothing
        elif p.outgoing:
            start = p.bounds[-2]
            piece = (0, p.bounds[-1] - start)
            starts_here = not (p.continued and p.pieces == 1)
            h0 = self._h0(p.sequences[-1:]) if starts_here and p.sequences is not None else None
            b = self._run(start, piece, h0)[1][0]
            if p.passes_through:
                m = self._transition_matrix(start, piece)
        payload = torch.cat([m.reshape(-1), b.reshape(-1)])
        # tied to the inputs that need a gradient: a payload of constants (nothing leaves the
        # shard) still joins the all-gather's backward, a collective every rank must join, and the
        # inputs this rank does not read (the initial states of sequences starting elsewhere, a
        # rank of no token's empty shard and gate parameters) get a zero gradient rather than none
        inputs = (self.initial_state, self.options.get("a_log"), self.options.get("dt_bias"))
        tied = [t for t in inputs if isinstance(t, Tensor)]
        if p.pieces == 0 or not payload.requires_grad:
            tied += [t for t in self.tokens.values() if t.requires_grad][: None if p.pieces == 0 else 1]
        return _tie(payload, *tied)

    def _transition_matrix(self, start: int, piece: Sequence[int]) -> Tensor:
        """M [HO, K, K]: the op's final state with v = 0 from the identity's rows, V rows a call."""
        heads, dv, dk = self.shape()
        eye = torch.eye(dk, dtype=torch.float32, device=self.q.device)
        rows = []
        for first in range(0, dk, dv):
            block = torch.zeros((dv, dk), dtype=torch.float32, device=self.q.device)
            count = min(dv, dk - first)
            block[:count] = eye[first : first + count]
            h0 = block.expand(1, heads, dv, dk).contiguous()
            rows.append(self._run(start, piece, h0, zero_v=True)[1][0, :, :count])
        return torch.cat(rows, dim=1)

    def main(self, gathered: Sequence[Tensor]) -> tuple[Tensor, Tensor | None]:
        """(o, owner): the shard's output from its entering state, composed from every rank's
        payload (``gathered``, in rank order), and its `_owner` final states (None without
        output_final_state)."""
        p, (heads, dv, dk) = self.plan, self.shape()
        split = heads * dk * dk
        entering = None
        if p.continued:
            entering = gathered[p.chain_start][split:].view(heads, dv, dk)  # B of the start: its state
            for j in range(p.chain_start + 1, p.rank):
                pair = gathered[j]
                entering = apply(
                    (pair[:split].view(heads, dk, dk), pair[split:].view(heads, dv, dk)), entering
                )
        want_final = self.output_final_state and bool(p.owned)
        final = None
        if p.pieces:
            o, final = self._run(0, p.bounds, self._initial(entering, heads, dv, dk), final=want_final)
        else:
            o = self.q.new_zeros((0, heads, dv))
        owner = self._owner(final, heads, dv, dk) if self.output_final_state else None
        return o, owner

    def outputs(
        self, o: Tensor, owner: Tensor | None, summed: Tensor | None, gathered: Sequence[Tensor]
    ) -> tuple:
        """What the call returns: o, and the final states (``summed``: the owners' sum over the
        group, where it was taken) on the ranks ``final_states`` names. Each output is tied to
        the collectives, so either one's backward reaches them on every rank."""
        p, tie_to = self.plan, gathered
        last = p.rank == p.world - 1
        if not self.output_final_state:
            return _tie(o, tie_to), None
        if summed is not None:
            return _tie(o, tie_to, summed), (summed if last or self.final_states == "all" else None)
        return _tie(o, tie_to), (_tie(owner, tie_to) if last else None)

    def _initial(self, entering: Tensor | None, heads: int, dv: int, dk: int) -> Tensor | None:
        """The main run's initial states [pieces, HO, V, K]: the entering state for a continued first
        piece, the caller's for the sequences that start here (None where both are absent)."""
        p = self.plan
        if entering is None and self.initial_state is None:
            return None
        states = []
        zero = torch.zeros((heads, dv, dk), dtype=torch.float32, device=self.q.device)
        own = self._h0([n for _, n in p.starts]) if p.starts and p.sequences is not None else None
        starts = {piece: i for i, (piece, _) in enumerate(p.starts)}
        for piece in range(p.pieces):
            if piece == 0 and p.continued:
                states.append(entering)
            elif own is not None and piece in starts:
                states.append(own[starts[piece]])
            else:
                states.append(zero)
        return torch.stack(states)

    def _owner(self, final: Tensor | None, heads: int, dv: int, dk: int) -> Tensor:
        """[N, HO, V, K]: the final states of the sequences ending on this rank (an empty sequence's:
        its initial state), zeros for the others."""
        p = self.plan
        device = self.q.device
        out = torch.zeros((p.num_sequences, heads, dv, dk), dtype=torch.float32, device=device)
        if p.owned and final is not None:
            pieces = torch.tensor([piece for piece, _ in p.owned], dtype=torch.long, device=device)
            rows = torch.tensor([n for _, n in p.owned], dtype=torch.long, device=device)
            out = out.index_copy(0, rows, final.index_select(0, pieces))
        if p.homed and self.initial_state is not None:
            rows = torch.tensor(list(p.homed), dtype=torch.long, device=device)
            out = out.index_copy(0, rows, self.initial_state.index_select(0, rows))
        return out


# --- the calls --------------------------------------------------------------------------------------


def _global_bounds(call: str, cu_seqlens: Any, total: int) -> list[int]:
    """The group's sequence boundaries as host ints (None: one sequence of every token), checked."""
    if cu_seqlens is None:
        return [0, total]
    if (
        not isinstance(cu_seqlens, Tensor)
        or cu_seqlens.dim() != 1
        or cu_seqlens.dtype
        not in (
            torch.int32,
            torch.int64,
        )
    ):
        what = list(cu_seqlens.shape) if isinstance(cu_seqlens, Tensor) else type(cu_seqlens).__name__
        raise _fail(call, f"cu_seqlens must be a rank-1 int32 or int64 tensor (the group's), got {what}")
    values = [int(x) for x in cu_seqlens.tolist()]  # read on the host: the plan splits by them
    if len(values) < 2 or values[0] != 0 or any(x > y for x, y in pairwise(values)):
        raise _fail(call, f"cu_seqlens {values}: must rise from 0 (at least one sequence)")
    if values[-1] != total:
        raise _fail(
            call,
            f"cu_seqlens {values} ends at {values[-1]}, the group's shards hold {total} tokens: cu_seqlens "
            "is the whole group's (every rank passes the same), over the shards in rank order",
        )
    return values


def _shard_sizes(call: str, group: Any, tokens: int, given: Any, device: torch.device) -> list[int]:
    """Every rank's token count: ``given`` (checked against this rank's) or gathered (one small
    all-gather of an int per rank, before the state exchange)."""
    import torch.distributed as dist

    rank, world = dist.get_rank(group), dist.get_world_size(group)
    if given is None:
        mine = torch.tensor([tokens], dtype=torch.int64, device=device)
        sizes = [torch.zeros_like(mine) for _ in range(world)]
        dist.all_gather(sizes, mine, group=group)
        return [int(s.item()) for s in sizes]
    sizes = list(given) if isinstance(given, (list, tuple)) else None
    if sizes is None or len(sizes) != world or any(isinstance(s, bool) or not isinstance(s, int) or s < 0
                                                    for s in sizes):  # fmt: skip
        raise _fail(call, f"cp_shard_sizes={given!r}: must be {world} non-negative ints, one a rank")
    if sizes[rank] != tokens:
        raise _fail(call, f"cp_shard_sizes[{rank}]={sizes[rank]}, but this rank's q holds {tokens} tokens")
    return sizes


def _tokens_thd(call: str, op: str, tensors: dict[str, Any]) -> tuple[dict[str, Tensor], bool]:
    """The per-token tensors as THD: [T, ...] as given, or [1, T, ...] (FLA's layout) viewed so."""
    q = tensors["q"]
    if not isinstance(q, Tensor):
        raise _fail(call, f"q must be a torch.Tensor, got {type(q).__name__}")
    if q.dim() == 3:
        return tensors, False
    if q.dim() == 4 and q.shape[0] == 1:
        out = {}
        for name, t in tensors.items():
            if not isinstance(t, Tensor) or t.dim() < 1 or t.shape[0] != 1:
                raise _fail(call, f"{name} must be [1, T, ...] like q {list(q.shape)}")
            out[name] = t[0]
        return out, True
    raise _fail(
        call,
        f"q must be [T, H, K] (the rank's shard of the group's tokens) or [1, T, H, K], got shape {list(q.shape)}",
    )


def _prepare(op: str, tensors: dict[str, Any], output_final_state: Any, cp_final_state: Any) -> tuple:
    """(call, the per-token tensors THD, whether they came as [1, T, ...]), the options checked."""
    call = CALLS[op]
    if cp_final_state not in FINAL_STATES:
        raise _fail(call, f"cp_final_state={cp_final_state!r}: must be 'last' or 'all'")
    if not isinstance(output_final_state, bool):
        raise _fail(call, f"output_final_state must be a bool, got {output_final_state!r}")
    tokens, batched = _tokens_thd(call, op, tensors)
    return call, tokens, batched


def _check_states(call: str, initial_state: Any, n: int) -> None:
    if initial_state is not None and (not isinstance(initial_state, Tensor) or initial_state.dim() != 4
                                      or initial_state.shape[0] != n):  # fmt: skip
        what = (
            list(initial_state.shape) if isinstance(initial_state, Tensor) else type(initial_state).__name__
        )
        raise _fail(
            call, f"initial_state must be [N, HO, V, K] with the group's N = {n} sequences, got {what}"
        )


def _distributed(op: str, tensors: dict[str, Any], options: dict[str, Any], cu_seqlens: Any,
                 initial_state: Any, output_final_state: Any, cp_group: Any, cp_final_state: Any,
                 cp_shard_sizes: Any, plan: RankPlan | None = None) -> tuple:  # fmt: skip
    """One rank's call over ``cp_group`` (``plan`` given: FLA's context's)."""
    import torch.distributed as dist

    # torch's functional collectives: differentiable (the all-gather's backward a reduce-scatter,
    # the all-reduce's an all-reduce) and traceable by torch.compile
    import torch.distributed._functional_collectives as collectives

    call, tokens, batched = _prepare(op, tensors, output_final_state, cp_final_state)
    if not isinstance(cp_group, dist.ProcessGroup):
        raise _fail(call, f"cp_group must be a torch.distributed ProcessGroup, got {type(cp_group).__name__}")
    q = tokens["q"]
    if plan is None:
        sizes = _shard_sizes(call, cp_group, q.shape[0], cp_shard_sizes, q.device)
        bounds = _global_bounds(call, cu_seqlens, sum(sizes))
        _check_states(call, initial_state, len(bounds) - 1)
        plan = plan_shards(bounds, sizes, dist.get_rank(cp_group))
    rank = _Rank(op, call, plan, tokens, options, initial_state, output_final_state, cp_final_state)
    payload = rank.payload()
    gathered = collectives.all_gather_single(payload, 0, cp_group).view(plan.world, payload.shape[0])
    o, owner = rank.main(gathered)
    summed = None
    if owner is not None and (cp_final_state == "all" or plan.final_elsewhere):
        # tied to the exchange, so on every rank the reduce's backward runs before the gather's
        summed = collectives.all_reduce(_tie(owner, gathered), "sum", cp_group)
    o, final = rank.outputs(o, owner, summed, gathered)
    return (o.unsqueeze(0) if batched else o), final


def fla_context_call(op: str, context: Any, tensors: dict[str, Any], options: dict[str, Any]) -> tuple:
    """The front door's (`fla`) call under flash-linear-attention's ``cp_context``: this rank's
    per-token tensors [1, T_rank, ...], the op's other arguments ``options``; no states (FLA's
    context numbers no sequence across ranks). Returns ``(o, None)``."""
    call = CALLS[op]
    q = tensors["q"]
    tokens = q.shape[-3] if isinstance(q, Tensor) and q.dim() >= 3 else 0
    group, plan = plan_from_fla_context(call, context, tokens)
    return _distributed(op, tensors, options, None, None, False, group, "last", None, plan=plan)


def simulate(op: str, shards: Sequence[dict[str, Tensor]], cu_seqlens: Tensor | None = None, *,
             initial_state: Tensor | None = None, output_final_state: bool = False,
             cp_final_state: str = "last", **options: Any) -> list[tuple[Tensor, Tensor | None]]:  # fmt: skip
    """The context-parallel algebra of ``len(shards)`` ranks in one process, no process group: each
    shard a dict of the op's per-token tensors (q, k, v, g, beta, and w for "gdn2"), THD, in rank
    order; ``cu_seqlens`` the group's; the exchange the list of payloads, the final states' sum a
    sum. Returns every rank's ``(o, final_state)`` as the distributed call returns them. ``op``:
    "gdn", "kda" or "gdn2"; ``options`` the op's other arguments. Differentiable like the call."""
    if op not in CALLS:
        raise OpInputError(
            f"pygraph_linear_attention.context_parallel.simulate(): op={op!r}: gdn, kda or gdn2"
        )
    call = CALLS[op]
    prepared = [_prepare(op, dict(shard), output_final_state, cp_final_state)[1] for shard in shards]
    sizes = [int(t["q"].shape[0]) for t in prepared]
    bounds = _global_bounds(call, cu_seqlens, sum(sizes))
    _check_states(call, initial_state, len(bounds) - 1)
    ranks = [
        _Rank(op, call, plan_shards(bounds, sizes, r), t, options, initial_state, output_final_state, cp_final_state)
        for r, t in enumerate(prepared)
    ]  # fmt: skip
    gathered = torch.stack([rank.payload() for rank in ranks])  # what the all-gather returns
    mains = [rank.main(gathered) for rank in ranks]
    summed = None
    if output_final_state and (cp_final_state == "all" or ranks[-1].plan.final_elsewhere):
        summed = sum(_tie(owner, gathered) for _, owner in mains)  # the all-reduce, in rank order
    return [rank.outputs(o, owner, summed, gathered) for rank, (o, owner) in zip(ranks, mains)]


def gated_delta_net(q: Tensor, k: Tensor, v: Tensor, g: Tensor, beta: Tensor, cu_seqlens: Tensor | None = None,
                    scale: float | None = None, initial_state: Tensor | None = None,
                    output_final_state: bool = False, use_qk_l2norm_in_kernel: bool = False,
                    use_beta_sigmoid_in_kernel: bool = False, allow_neg_eigval: bool = False,
                    safe_gate: bool = False, a_log: Tensor | None = None, dt_bias: Tensor | None = None, *,
                    cp_group: Any, cp_final_state: str = "last",
                    cp_shard_sizes: Sequence[int] | None = None) -> tuple[Tensor, Tensor | None]:  # fmt: skip
    """`gdn.op.gated_delta_net` on this rank's shard of the group's tokens: q, k, v, g, beta
    [T_rank, ...] (or [1, T_rank, ...]), the rank's contiguous run of the group's tokens in rank
    order; ``cu_seqlens`` the group's sequences (every rank passes the same; None: one sequence);
    ``initial_state`` [N, HO, V, K] the group's (each rank reads the rows of the sequences starting
    on it: their gradient arrives there, zero on the other ranks). Returns ``(o [T_rank, HO, V],
    final_state)``: the final states [N, HO, V, K] on the last rank (``cp_final_state="last"``,
    None elsewhere) or on every rank ("all"); None without output_final_state.
    ``cp_shard_sizes``: every rank's token count where known (else gathered). Every rank must call
    with the same arguments but its shard, the same requires_grad, and backpropagate through its
    outputs (the exchange's backward is a collective)."""
    tensors = {"q": q, "k": k, "v": v, "g": g, "beta": beta}
    options = {"scale": scale, "use_qk_l2norm_in_kernel": use_qk_l2norm_in_kernel,
               "use_beta_sigmoid_in_kernel": use_beta_sigmoid_in_kernel, "allow_neg_eigval": allow_neg_eigval,
               "safe_gate": safe_gate, "a_log": a_log, "dt_bias": dt_bias}  # fmt: skip
    return _distributed("gdn", tensors, options, cu_seqlens, initial_state, output_final_state, cp_group,
                        cp_final_state, cp_shard_sizes)  # fmt: skip


def kimi_delta_attention(q: Tensor, k: Tensor, v: Tensor, g: Tensor, beta: Tensor,
                         cu_seqlens: Tensor | None = None, scale: float | None = None,
                         initial_state: Tensor | None = None, output_final_state: bool = False,
                         use_qk_l2norm_in_kernel: bool = False, use_beta_sigmoid_in_kernel: bool = False,
                         allow_neg_eigval: bool = False, safe_gate: bool = False, a_log: Tensor | None = None,
                         dt_bias: Tensor | None = None, gate_lower_bound: float | None = None, *,
                         cp_group: Any, cp_final_state: str = "last",
                         cp_shard_sizes: Sequence[int] | None = None) -> tuple[Tensor, Tensor | None]:  # fmt: skip
    """`kda.op.kimi_delta_attention` on this rank's shard: the arguments and results as
    `gated_delta_net`'s here."""
    tensors = {"q": q, "k": k, "v": v, "g": g, "beta": beta}
    options = {"scale": scale, "use_qk_l2norm_in_kernel": use_qk_l2norm_in_kernel,
               "use_beta_sigmoid_in_kernel": use_beta_sigmoid_in_kernel, "allow_neg_eigval": allow_neg_eigval,
               "safe_gate": safe_gate, "a_log": a_log, "dt_bias": dt_bias,
               "gate_lower_bound": gate_lower_bound}  # fmt: skip
    return _distributed("kda", tensors, options, cu_seqlens, initial_state, output_final_state, cp_group,
                        cp_final_state, cp_shard_sizes)  # fmt: skip


def gated_delta_net_v2(q: Tensor, k: Tensor, v: Tensor, g: Tensor, beta: Tensor, w: Tensor,
                       cu_seqlens: Tensor | None = None, scale: float | None = None,
                       initial_state: Tensor | None = None, output_final_state: bool = False,
                       use_qk_l2norm_in_kernel: bool = False, use_beta_sigmoid_in_kernel: bool = False,
                       allow_neg_eigval: bool = False, safe_gate: bool = False, a_log: Tensor | None = None,
                       dt_bias: Tensor | None = None, gate_lower_bound: float | None = None, *,
                       cp_group: Any, cp_final_state: str = "last",
                       cp_shard_sizes: Sequence[int] | None = None) -> tuple[Tensor, Tensor | None]:  # fmt: skip
    """`kda.op.gated_delta_net_v2` on this rank's shard: the arguments and results as
    `gated_delta_net`'s here (w [T_rank, HO, V] per token like v)."""
    tensors = {"q": q, "k": k, "v": v, "g": g, "beta": beta, "w": w}
    options = {"scale": scale, "use_qk_l2norm_in_kernel": use_qk_l2norm_in_kernel,
               "use_beta_sigmoid_in_kernel": use_beta_sigmoid_in_kernel, "allow_neg_eigval": allow_neg_eigval,
               "safe_gate": safe_gate, "a_log": a_log, "dt_bias": dt_bias,
               "gate_lower_bound": gate_lower_bound}  # fmt: skip
    return _distributed("gdn2", tensors, options, cu_seqlens, initial_state, output_final_state, cp_group,
                        cp_final_state, cp_shard_sizes)  # fmt: skip
