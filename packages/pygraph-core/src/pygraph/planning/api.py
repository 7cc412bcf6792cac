"""The Graph's planning and execution methods (mixed into `pygraph.Graph`).

Placeholder: the planning layer fills this in.
"""

from __future__ import annotations

__all__ = ["PlanningMixin"]


class PlanningMixin:
    """Planning/execution methods of `pygraph.Graph`."""
