"""`GraphIR`: the tensors and nodes of one graph and its uid namespace; its lifecycle state is the
graph's `Lifecycle`, which the IR shares with the graph's planner.

The IR owns every uid: each tensor gets one at creation. A user uid that lands on an auto-assigned
one takes it (the holder is renumbered); two user uids colliding raise ValueError naming both.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pygraph.errors import OpInputError
from pygraph.ir.dtypes import data_type, data_type_arg
from pygraph.ir.shapes import INT64_MAX
from pygraph.ir.tensor import Tensor
from pygraph.lifecycle import GraphState, Lifecycle

if TYPE_CHECKING:
    from pygraph.ir.node import Node

__all__ = ["GraphContext", "GraphIR"]


class GraphContext:
    """The graph-wide dtypes (intermediate and compute default to io). Writes are guarded."""

    __slots__ = ("_compute", "_intermediate", "_io", "_ir")

    def __init__(self, io: data_type, intermediate: data_type, compute: data_type) -> None:
        object.__setattr__(self, "_ir", None)
        object.__setattr__(self, "_io", io)
        object.__setattr__(self, "_intermediate", intermediate if intermediate.is_set else io)
        object.__setattr__(self, "_compute", compute if compute.is_set else io)

    def __setattr__(self, key: str, value: Any) -> None:
        if self._ir is not None:
            self._ir.before_mutation(f"setting GraphContext.{key}")
        if key not in ("io_data_type", "intermediate_data_type", "compute_data_type"):
            raise AttributeError(f"GraphContext has no writable attribute {key!r}")
        dt = data_type_arg(value, f"setting GraphContext.{key}")
        object.__setattr__(self, "_" + key.split("_")[0], dt)

    def _attach(self, ir: GraphIR) -> None:
        """Guard this context's writes with ``ir``'s lifecycle (the IR holding it calls this once)."""
        object.__setattr__(self, "_ir", ir)

    @property
    def io_data_type(self) -> data_type:
        return self._io

    @property
    def intermediate_data_type(self) -> data_type:
        return self._intermediate

    @property
    def compute_data_type(self) -> data_type:
        return self._compute

    def to_dict(self) -> dict[str, str]:
        return {
            "io_data_type": self._io.name,
            "intermediate_data_type": self._intermediate.name,
            "compute_data_type": self._compute.name,
        }


class GraphIR:
    def __init__(
        self, owner: Any, name: str, context: GraphContext, lifecycle: Lifecycle | None = None
    ) -> None:
        self.owner = owner
        self.name = name
        self.context = context
        context._attach(self)
        # shared, not copied: an IR rebuilt by deserialize() keeps the graph's one lifecycle
        self.lifecycle = lifecycle if lifecycle is not None else Lifecycle(name)
        self.tensors: list[Tensor] = []
        self.nodes: list[Node] = []
        self._by_uid: dict[int, Tensor] = {}
        self._next_uid = 1
        self._node_names: set[str] = set()

    # -- lifecycle guard ------------------------------------------------------------------------
    @property
    def state(self) -> GraphState:
        return self.lifecycle.state

    def before_mutation(self, what: str) -> None:
        """Every public mutation calls this first: frozen -> raise; validated -> invalidated."""
        self.lifecycle.mutating(what)

    # -- uids -----------------------------------------------------------------------------------
    def _fresh_uid(self) -> int:
        while self._next_uid in self._by_uid:
            self._next_uid += 1
        uid = self._next_uid
        self._next_uid += 1
        return uid

    def new_tensor(self, name: str | None = None, uid: int | None = None) -> Tensor:
        if uid is not None:  # refuse a colliding user uid before anything is created
            self._check_user_uid(name or "<new tensor>", uid)
        auto = self._fresh_uid()
        t = Tensor(self, name=name or "", uid=auto, user_uid=False)
        self._by_uid[auto] = t
        self.tensors.append(t)
        if uid is not None:
            self.assign_user_uid(t, uid)
        if not name:
            t._raw_set("_name", f"tensor_{t.uid}")
        return t

    def _check_user_uid(self, who: str, uid: Any, tensor: Tensor | None = None) -> None:
        if isinstance(uid, bool) or not isinstance(uid, int) or not 0 < uid <= INT64_MAX:
            raise OpInputError(f"Tensor.uid of {who!r}: expected a positive int64, got {uid!r}")
        holder = self._by_uid.get(uid)
        if holder is not None and holder is not tensor and holder.uid_assigned:
            raise OpInputError(
                f"uid {uid} requested for tensor {who!r} is already the user uid of tensor {holder.name!r}"
            )

    def assign_user_uid(self, tensor: Tensor, uid: Any) -> None:
        self._check_user_uid(tensor.name, uid, tensor)
        holder = self._by_uid.get(uid)
        if holder is not None and holder is not tensor:
            # the auto-assigned holder moves to a fresh uid
            del self._by_uid[uid]
            self._by_uid[uid] = tensor
            del self._by_uid[tensor.uid]
            new = self._fresh_uid()
            holder._raw_set("_uid", new)
            self._by_uid[new] = holder
        else:
            del self._by_uid[tensor.uid]
            self._by_uid[uid] = tensor
        tensor._raw_set("_uid", uid)
        tensor._raw_set("_uid_assigned", True)

    def tensor_by_uid(self, uid: int) -> Tensor | None:
        return self._by_uid.get(uid)

    # -- membership and names -------------------------------------------------------------------
    def check_member(self, tensor: Any, port: str, where: str) -> None:
        if not isinstance(tensor, Tensor):
            raise OpInputError(f"{where}: port {port!r} expects a pygraph.Tensor, got {tensor!r}")
        if self._by_uid.get(tensor.uid) is not tensor:
            raise OpInputError(
                f"{where}: port {port!r} got tensor {tensor.name!r} (uid {tensor.uid}) of another graph "
                f"({tensor.graph.name!r}); tensors cannot cross graphs"
            )

    def node_name(self, op: str, requested: str | None) -> str:
        if requested:
            name = requested
            if name in self._node_names:
                k = 1
                while f"{requested}_{k}" in self._node_names:
                    k += 1
                name = f"{requested}_{k}"
        else:
            k = len(self.nodes)
            name = f"{op}_{k}"
            while name in self._node_names:
                k += 1
                name = f"{op}_{k}"
        self._node_names.add(name)
        return name

    def add_node(self, node: Node) -> None:
        self.nodes.append(node)

    @property
    def is_python_only(self) -> bool:
        return any(not n.spec.is_lowerable for n in self.nodes)
