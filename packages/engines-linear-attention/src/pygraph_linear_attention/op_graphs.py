"""The torch op's graphs: one ``gdn`` (or ``gdn_bwd``) graph per problem, planned and built once,
then executed per call with the call's tensors.

A key is everything a graph declares: the `GdnProblem` (shapes, dtypes, device, which optional
inputs exist), the scale and the flags, and for the backward whether d_final_state is given. The
first call of a key builds the graph (`create_execution_plans`, which consults the plan cache,
then `build_plans`), so it runs whatever plan the planner ranks first; a graph no engine serves
raises the planner's `pygraph.GraphNotSupportedError`, which is not cached (the next call asks
again). Graphs are kept in a bounded LRU (`GraphCache.capacity`): a training run with varying
sequence packings builds one graph per distinct (T, N).

The graph's operands are declared contiguous (the op passes contiguous tensors), outputs in the
dtypes of the op's contract. Execution enqueues on the device's default stream, which the
engines' plans run on when no backend handle is given; when torch's current stream is another
one, the default stream first waits for it and it then waits for the default stream, so the
call is ordered as if it ran on the current stream.
"""

from __future__ import annotations

import collections
import dataclasses
import threading
from typing import Any

import torch

from pygraph_linear_attention.op_arguments import GdnProblem

__all__ = ["GRAPHS", "BuiltGraph", "GraphCache", "backward_graph", "execute", "forward_graph"]

# forward flags, in the op's order; the graph's attribute for each
FLAG_ATTRS = {
    "use_qk_l2norm_in_kernel": "use_qk_l2norm",
    "use_beta_sigmoid_in_kernel": "use_beta_sigmoid",
    "allow_neg_eigval": "allow_neg_eigval",
    "safe_gate": "safe_gate",
}
# gdn_bwd's outputs in the op's output order, with the input each is the gradient of
GRADIENTS = (
    ("dQ", "q"), ("dK", "k"), ("dV", "v"), ("dG", "g"), ("dBeta", "beta"),
    ("d_initial_state", "initial_state"), ("d_a_log", "a_log"), ("d_dt_bias", "dt_bias"),
)  # fmt: skip
_WORKSPACE_ALIGN = 256  # the engines' plans refuse a workspace pointer off 256 bytes


@dataclasses.dataclass(frozen=True)
class BuiltGraph:
    """A planned and built graph: its ports by name (inputs and outputs) and its workspace need."""

    graph: Any
    ports: dict[str, Any]
    workspace_bytes: int

    @property
    def plan_name(self) -> str:
        return self.graph.selected_plan.name


class GraphCache:
    """Built graphs by key, least recently used dropped past ``capacity``; one build per key."""

    capacity = 128

    def __init__(self) -> None:
        self._graphs: collections.OrderedDict[tuple, BuiltGraph] = collections.OrderedDict()
        self._lock = threading.Lock()
        self.builds = 0  # graphs built (for tests and for the curious)

    def get(self, key: tuple, build: Any) -> BuiltGraph:
        found = self._graphs.get(key)
        if found is not None:
            try:
                self._graphs.move_to_end(key)
            except KeyError:  # dropped by another thread's build meanwhile: still a built graph
                pass
            return found
        with self._lock:  # two threads' first call of one key build once
            found = self._graphs.get(key)
            if found is None:
                found = build()
                self.builds += 1
                self._graphs[key] = found
                while len(self._graphs) > self.capacity:
                    self._graphs.popitem(last=False)
            return found

    def keys(self) -> list[tuple]:
        return list(self._graphs)

    def clear(self) -> None:
        """Drop every graph (and reset the count of builds)."""
        with self._lock:
            self._graphs.clear()
            self.builds = 0


GRAPHS = GraphCache()


def _device_facts(device: torch.device) -> dict[str, int]:
    """sm_version and sm_count of a CUDA device, for the graph (engines judge their arch range)."""
    if device.type != "cuda":
        return {}
    major, minor = torch.cuda.get_device_capability(device)
    return {
        "sm_version": 10 * major + minor,
        "sm_count": torch.cuda.get_device_properties(device).multi_processor_count,
    }


def _inputs(g: Any, problem: GdnProblem) -> dict[str, Any]:
    """The graph's input tensors of the forward's operands, declared contiguous."""
    p = problem
    shapes = {
        "q": ((p.tokens, p.heads_qk, p.key_dim), p.io_dtype),
        "k": ((p.tokens, p.heads_qk, p.key_dim), p.io_dtype),
        "v": ((p.tokens, p.heads_v, p.value_dim), p.io_dtype),
        "g": ((p.tokens, p.heads_v), torch.float32),
        "beta": ((p.tokens, p.heads_v), p.beta_dtype),
        "cu_seqlens": ((p.sequences + 1,), p.cu_dtype),
    }
    if p.has_initial_state:
        shapes["initial_state"] = (p.state_shape, torch.float32)
    if p.has_a_log:
        shapes["a_log"] = ((p.heads_v,), torch.float32)
    if p.has_dt_bias:
        shapes["dt_bias"] = ((p.heads_v,), torch.float32)
    return {name: _declare(g, name, shape, dtype) for name, (shape, dtype) in shapes.items()}


def _declare(g: Any, name: str, shape: tuple, dtype: torch.dtype) -> Any:
    stride, acc = [], 1
    for d in reversed(shape):
        stride.append(acc)
        acc *= max(int(d), 1)
    return g.tensor(name=name, dim=list(shape), stride=list(reversed(stride)), data_type=dtype)


def _plan(g: Any) -> None:
    g.create_execution_plans()  # raises GraphNotSupportedError naming every engine's reason
    g.build_plans()


def forward_graph(problem: GdnProblem, scale: float | None, flags: dict[str, bool]) -> BuiltGraph:
    """The built gdn graph of ``problem`` (outputs O [T, HV, V] io dtype, final_state fp32)."""
    key = ("gdn", problem, scale, tuple(sorted(flags.items())))

    def build() -> BuiltGraph:
        import pygraph

        g = pygraph.Graph(
            name="gated_delta_net", io_data_type=problem.io_dtype, **_device_facts(problem.device)
        )
        ports = _inputs(g, problem)
        attrs = {FLAG_ATTRS[name]: value for name, value in flags.items() if name in FLAG_ATTRS}
        o, final = g.gdn(**ports, scale=scale, output_final_state=flags["output_final_state"], **attrs)
        o.set_output(True).set_data_type(problem.io_dtype)
        ports["o"] = o
        if final is not None:
            final.set_output(True).set_data_type(torch.float32)
            ports["final_state"] = final
        _plan(g)
        return BuiltGraph(g, ports, g.get_workspace_size())

    return GRAPHS.get(key, build)


def backward_graph(
    problem: GdnProblem, scale: float | None, flags: dict[str, bool], has_d_final_state: bool
) -> BuiltGraph:
    """The built gdn_bwd graph of ``problem``: inputs plus dO (and d_final_state), every gradient
    in its input's dtype."""
    flags = {name: value for name, value in flags.items() if name != "output_final_state"}
    key = ("gdn_bwd", problem, scale, tuple(sorted(flags.items())), has_d_final_state)

    def build() -> BuiltGraph:
        import pygraph

        g = pygraph.Graph(
            name="gated_delta_net_backward", io_data_type=problem.io_dtype, **_device_facts(problem.device)
        )
        ports = _inputs(g, problem)
        p = problem
        ports["dO"] = _declare(g, "dO", (p.tokens, p.heads_v, p.value_dim), p.io_dtype)
        if has_d_final_state:
            ports["d_final_state"] = _declare(g, "d_final_state", p.state_shape, torch.float32)
        attrs = {FLAG_ATTRS[name]: value for name, value in flags.items()}
        outs = g.gdn_bwd(**ports, scale=scale, **attrs)
        for (name, like), out in zip(GRADIENTS, outs):
            if out is not None:  # unset, a gradient would take the io dtype
                out.set_output(True).set_data_type(ports[like].data_type)
                ports[name] = out
        _plan(g)
        return BuiltGraph(g, ports, g.get_workspace_size())

    return GRAPHS.get(key, build)


def execute(built: BuiltGraph, tensors: dict[str, torch.Tensor], device: torch.device) -> None:
    """Run ``built`` on ``tensors`` (by port name, every port given): a 256-byte aligned workspace
    from torch's allocator, ordered on torch's current stream (module docstring)."""
    ports = built.ports
    pack = {ports[name]: t for name, t in tensors.items()}
    workspace = None
    if built.workspace_bytes:
        raw = torch.empty(built.workspace_bytes + _WORKSPACE_ALIGN, dtype=torch.uint8, device=device)
        workspace = raw[(-raw.data_ptr()) % _WORKSPACE_ALIGN :][: built.workspace_bytes]
    if device.type != "cuda":
        built.graph.execute(pack, workspace=workspace)
        return
    current, default = torch.cuda.current_stream(device), torch.cuda.default_stream(device)
    with torch.cuda.device(device):
        if current.cuda_stream == default.cuda_stream:
            built.graph.execute(pack, workspace=workspace)
            return
        default.wait_stream(current)
        built.graph.execute(pack, workspace=workspace)
        current.wait_stream(default)
