"""The graph's lifecycle as explicit state.

BUILDING -> VALIDATED -> FROZEN -> PLANNED -> BUILT. Each transition is one method of the graph;
each public call checks the state it needs with one clear error.

- BUILDING: builders and setters allowed.
- VALIDATED: a python-only graph passed validation and is still mutable; any mutation drops it
  back to BUILDING (the validation is invalidated).
- FROZEN: lowered to the backend (or sealed by planning); the whole public surface is read-only.
- PLANNED: the one plan list exists.
- BUILT: at least one plan has been built.
"""

from __future__ import annotations

import enum

__all__ = ["GraphState"]


class GraphState(enum.IntEnum):
    BUILDING = 0
    VALIDATED = 1
    FROZEN = 2
    PLANNED = 3
    BUILT = 4

    @property
    def frozen(self) -> bool:
        return self >= GraphState.FROZEN
