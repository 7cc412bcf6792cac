"""The graph's lifecycle as explicit state, and the one check every public call makes against it.

BUILDING -> VALIDATED -> FROZEN -> PLANNED -> BUILT. A graph's state lives in one `Lifecycle`,
created with the graph and shared by its IR (which guards every mutation with it) and its planner
(which freezes it and moves it to PLANNED and BUILT); each transition is one method of it. Each
public call names the state it needs with `require`, which raises `GraphStateError` naming the
call, the state it needs and the state the graph is in.

- BUILDING: builders and setters allowed.
- VALIDATED: a python-only graph passed validation and is still mutable; any mutation drops it
  back to BUILDING (the validation is invalidated).
- FROZEN: lowered to the backend (or sealed by planning); the whole public surface is read-only.
- PLANNED: the one plan list exists.
- BUILT: at least one plan has been built.

Which plan is selected, and whether the caller pinned it, is selection data of the plan list, not
a state of the graph.
"""

from __future__ import annotations

import enum
from typing import Any, NamedTuple

from pygraph.errors import GraphStateError

__all__ = ["MUTABLE", "NOT_PLANNED", "PLANNED", "VALIDATED", "GraphState", "Lifecycle", "Needs", "require"]


class GraphState(enum.IntEnum):
    BUILDING = 0
    VALIDATED = 1
    FROZEN = 2
    PLANNED = 3
    BUILT = 4

    @property
    def frozen(self) -> bool:
        return self >= GraphState.FROZEN

    @property
    def planned(self) -> bool:
        return self >= GraphState.PLANNED


class Needs(NamedTuple):
    """The states a call accepts (a contiguous range: the states are ordered), and how its error
    says so (``graph 'g' <says>``)."""

    lowest: GraphState
    highest: GraphState
    says: str


MUTABLE = Needs(GraphState.BUILDING, GraphState.VALIDATED, "not yet frozen (BUILDING or VALIDATED)")
VALIDATED = Needs(GraphState.VALIDATED, GraphState.BUILT, "validated (VALIDATED or later)")
NOT_PLANNED = Needs(GraphState.BUILDING, GraphState.FROZEN, "not yet planned (FROZEN or earlier)")
PLANNED = Needs(GraphState.PLANNED, GraphState.BUILT, "planned (PLANNED or BUILT)")


def require(graph: Any, call: str, needs: Needs, hint: str = "") -> None:
    """Raise `GraphStateError` unless ``graph`` (anything with ``name`` and ``state``) is in a state
    ``call`` accepts; ``hint`` says what to do about it."""
    state = graph.state
    if needs.lowest <= state <= needs.highest:
        return
    message = f"{call}: needs graph {graph.name!r} {needs.says}; it is {state.name}"
    raise GraphStateError(f"{message}; {hint}" if hint else message)


class Lifecycle:
    """One graph's state and its transitions; ``name`` is the graph's, for the errors."""

    __slots__ = ("name", "state")

    def __init__(self, name: str) -> None:
        self.name = name
        self.state = GraphState.BUILDING

    def mutating(self, what: str) -> None:
        """Every public mutation calls this first: frozen -> raise; validated -> invalidated."""
        require(self, what, MUTABLE, "it stays readable, but build a new graph to change it")
        if self.state is GraphState.VALIDATED:
            self.state = GraphState.BUILDING

    def validated(self) -> None:
        """A python-only graph passed validation (it stays mutable; a mutation undoes this)."""
        self.state = GraphState.VALIDATED

    def freeze(self) -> None:
        """Seal the whole public surface (idempotent; a later state stays)."""
        if not self.state.frozen:
            self.state = GraphState.FROZEN

    def advance(self, state: GraphState) -> None:
        """Move forward to PLANNED or BUILT (planning's transitions); never backwards."""
        if state < GraphState.FROZEN:
            raise GraphStateError(f"_advance({state.name}): only FROZEN, PLANNED or BUILT can be advanced to")
        if state < self.state:
            raise GraphStateError(
                f"graph {self.name!r} is {self.state.name}; it cannot go back to {state.name}"
            )
        self.state = state
