"""The torch ops' graphs: one ``gdn``, ``kda`` or ``gdn2`` graph (or its ``*_bwd``) per problem,
planned and built once, then executed per call with the call's tensors.

A key is everything a graph declares: the `GdnProblem` (shapes, dtypes, device, which optional
inputs exist), the scale and the flags, and for the backward whether d_final_state is given. The
first call of a key builds the graph (`create_execution_plans`, which consults the plan cache,
then `build_plans`), so it runs whatever plan the planner ranks first; a graph no engine serves
raises the planner's `pygraph.GraphNotSupportedError`, which is not cached (the next call asks
again); a first call while torch's current stream captures a CUDA graph raises
`pygraph.errors.StreamCaptureError` instead of building inside the capture. Graphs are kept in a
bounded LRU (`GraphCache.capacity`): a training run with varying sequence packings builds one
graph per distinct (T, N).

The graph's operands are declared contiguous (the op passes contiguous tensors), outputs in the
dtypes of the op's contract; the cache and `execute` (on torch's current stream) are
`pygraph.op_support`'s.
"""

from __future__ import annotations

from typing import Any

import torch

from pygraph.op_support import BuiltGraph, GraphCache, built, direct, execute, launcher, plan_and_build
from pygraph.op_support import declare as _declare
from pygraph.op_support import device_facts as _device_facts
from pygraph_linear_attention.common import op_arguments
from pygraph_linear_attention.common.op_arguments import CALLS, GdnProblem, check_forward

__all__ = [
    "BACKWARD_INPUTS", "FORWARD_INPUTS", "GRAPHS", "BuiltGraph", "GraphCache", "aligned_contiguous", "backward",
    "backward_graph", "backward_signature", "execute", "forward", "forward_graph", "forward_signature",
    "gradients", "none_state",
]  # fmt: skip

# forward flags, in the op's order; the graph's attribute for each
FLAG_ATTRS = {
    "use_qk_l2norm_in_kernel": "use_qk_l2norm",
    "use_beta_sigmoid_in_kernel": "use_beta_sigmoid",
    "allow_neg_eigval": "allow_neg_eigval",
    "safe_gate": "safe_gate",
}
# gdn_bwd's (and kda_bwd's) outputs in the op's output order, with the input each is the gradient of
GRADIENTS = (
    ("dQ", "q"), ("dK", "k"), ("dV", "v"), ("dG", "g"), ("dBeta", "beta"),
    ("d_initial_state", "initial_state"), ("d_a_log", "a_log"), ("d_dt_bias", "dt_bias"),
)  # fmt: skip
# gdn2_bwd's: dW (the write gate's) after dBeta
GDN2_GRADIENTS = (*GRADIENTS[:5], ("dW", "w"), *GRADIENTS[5:])
GRAPH_NAMES = {"gdn": "gated_delta_net", "kda": "kimi_delta_attention", "gdn2": "gated_delta_net_v2"}


def gradients(op: str) -> tuple[tuple[str, str], ...]:
    """The ``op``'s backward outputs in order, each with the input it is the gradient of."""
    return GDN2_GRADIENTS if op == "gdn2" else GRADIENTS


GRAPHS = GraphCache()


def _inputs(g: Any, problem: GdnProblem) -> dict[str, Any]:
    """The graph's input tensors of the forward's operands, declared contiguous."""
    p = problem
    per_key = (p.key_dim,) if p.channel_gate else ()  # KDA's and GDN-2's gates per key channel
    shapes = {
        "q": ((p.tokens, p.heads_qk, p.key_dim), p.io_dtype),
        "k": ((p.tokens, p.heads_qk, p.key_dim), p.io_dtype),
        "v": ((p.tokens, p.heads_v, p.value_dim), p.io_dtype),
        "g": ((p.tokens, p.heads_out, *per_key), torch.float32),
        "beta": ((p.tokens, p.heads_out, *(per_key if p.op == "gdn2" else ())), p.beta_dtype),
    }
    if p.op == "gdn2":
        shapes["w"] = ((p.tokens, p.heads_out, p.value_dim), p.io_dtype)
    shapes["cu_seqlens"] = ((p.sequences + 1,), p.cu_dtype)
    if p.has_initial_state:
        shapes["initial_state"] = (p.state_shape, torch.float32)
    if p.has_a_log:
        shapes["a_log"] = ((p.heads_out,), torch.float32)
    if p.has_dt_bias:
        shapes["dt_bias"] = ((p.heads_out, *per_key), torch.float32)
    return {name: _declare(g, name, shape, dtype) for name, (shape, dtype) in shapes.items()}


def _attrs(problem: GdnProblem, flags: dict[str, bool]) -> dict[str, Any]:
    """The graph's attributes of the op's flags (and KDA's / GDN-2's gate bound where given)."""
    attrs = {FLAG_ATTRS[name]: value for name, value in flags.items() if name in FLAG_ATTRS}
    if problem.gate_lower_bound is not None:
        attrs["gate_lower_bound"] = problem.gate_lower_bound
    if problem.max_seqlen is not None:
        attrs["max_seqlen"] = problem.max_seqlen
    return attrs


def forward_graph(problem: GdnProblem, scale: float | None, flags: dict[str, bool]) -> BuiltGraph:
    """The built graph of ``problem`` (its op's: gdn, kda or gdn2; outputs O [T, HO, V] io dtype,
    final_state fp32)."""
    key = (problem.op, problem, scale, tuple(sorted(flags.items())))

    def build() -> BuiltGraph:
        import pygraph

        g = pygraph.Graph(
            name=GRAPH_NAMES[problem.op], io_data_type=problem.io_dtype, **_device_facts(problem.device)
        )
        ports = _inputs(g, problem)
        attrs = _attrs(problem, flags)
        o, final = getattr(g, problem.op)(
            **ports, scale=scale, output_final_state=flags["output_final_state"], **attrs
        )
        o.set_output(True).set_data_type(problem.io_dtype)
        ports["o"] = o
        if final is not None:
            final.set_output(True).set_data_type(torch.float32)
            ports["final_state"] = final
        plan_and_build(g)
        return built(g, ports, problem.device)

    return GRAPHS.get(key, build, call=CALLS[problem.op], device=problem.device)


def backward_graph(
    problem: GdnProblem, scale: float | None, flags: dict[str, bool], has_d_final_state: bool
) -> BuiltGraph:
    """The built backward graph of ``problem`` (gdn_bwd, kda_bwd or gdn2_bwd): inputs plus dO (and
    d_final_state), every gradient in its input's dtype."""
    flags = {name: value for name, value in flags.items() if name != "output_final_state"}
    key = (f"{problem.op}_bwd", problem, scale, tuple(sorted(flags.items())), has_d_final_state)

    def build() -> BuiltGraph:
        import pygraph

        g = pygraph.Graph(
            name=f"{GRAPH_NAMES[problem.op]}_backward",
            io_data_type=problem.io_dtype,
            **_device_facts(problem.device),
        )
        ports = _inputs(g, problem)
        p = problem
        ports["dO"] = _declare(g, "dO", (p.tokens, p.heads_out, p.value_dim), p.io_dtype)
        if has_d_final_state:
            ports["d_final_state"] = _declare(g, "d_final_state", p.state_shape, torch.float32)
        outs = getattr(g, f"{problem.op}_bwd")(**ports, scale=scale, **_attrs(problem, flags))
        for (name, like), out in zip(gradients(problem.op), outs):
            if out is not None:  # unset, a gradient would take the io dtype
                out.set_output(True).set_data_type(ports[like].data_type)
                ports[name] = out
        plan_and_build(g)
        return built(g, ports, problem.device)

    return GRAPHS.get(key, build, call=CALLS[problem.op], device=problem.device)


# --- the tensors the ops pass to a graph


def none_state(like: torch.Tensor) -> torch.Tensor:
    """The stand-in of an absent output (a custom op returns tensors only)."""
    return like.new_empty((0,), dtype=torch.float32)


def aligned_contiguous(tensors: dict[str, Any]) -> dict[str, torch.Tensor]:
    """The operands as the ops' graphs declare them: contiguous, and starting on a 16-byte boundary,
    where the CuTe DSL kernels read their rows 16 bytes at a time; a view that starts inside its
    storage elsewhere (a slice of a flat buffer) is copied rather than refused by the plan."""
    out = {}
    for name, t in tensors.items():
        if t is not None:
            t = t.contiguous()
            out[name] = t.clone() if t.data_ptr() % 16 else t
    return out


def _given_operands(tensors: tuple, given: tuple, copy: tuple) -> list:
    """A prepared call's operands, ``tensors`` at the positions ``given``, as `aligned_contiguous`
    makes them: those at the positions ``copy`` (non-contiguous when the signature was checked)
    made contiguous, any starting off a 16-byte boundary cloned."""
    operands = [tensors[i] for i in given]
    for j, i in enumerate(given):
        t = operands[j]
        if i in copy:
            t = operands[j] = t.contiguous()
        if t.data_ptr() % 16:
            operands[j] = t.clone()
    return operands


# --- the forward's call: checked once per signature, then served prepared

# the forward's operands in the order a call passes them (gdn and kda pass no w)
FORWARD_INPUTS = ("q", "k", "v", "g", "beta", "w", "cu_seqlens", "initial_state", "a_log", "dt_bias")
# the flags in the order a call passes them
FORWARD_FLAGS = (
    "output_final_state", "use_qk_l2norm_in_kernel", "use_beta_sigmoid_in_kernel", "allow_neg_eigval",
    "safe_gate",
)  # fmt: skip


def forward_signature(
    op: str, tensors: tuple, scale: Any, flags: tuple, gate_lower_bound: Any, max_seqlen: Any = None
) -> tuple | None:
    """Everything `check_forward` reads of a forward call, so a call of a remembered signature passed
    the same checks and has the same graph (`GraphCache.call`): each tensor's shape, stride, dtype and
    device (None where absent), each scalar with its type (True equals 1 in a tuple; the checks
    refuse a flag that is not a bool) and the devices the ops serve; None where an operand is no
    tensor (the checks name it)."""
    try:
        return (
            op, op_arguments.DEVICE_TYPES, scale, type(scale), gate_lower_bound, type(gate_lower_bound), flags,
            tuple(map(type, flags)), max_seqlen, type(max_seqlen),
            *[None if t is None else (t.shape, t.stride(), t.dtype, t.device) for t in tensors],
        )  # fmt: skip
    except (AttributeError, RuntimeError):  # RuntimeError: a sparse or nested tensor's strides
        return None


def forward(
    op: str, tensors: tuple, scale: Any, flags: tuple, gate_lower_bound: Any, max_seqlen: Any = None
) -> tuple:
    """The forward custom op's body for every op (gdn, kda, gdn2): ``tensors`` in `FORWARD_INPUTS`'
    order (None where absent), ``flags`` in `FORWARD_FLAGS`'. A remembered signature runs its
    prepared call; another is checked, its graph built (or looked up) and its call prepared and
    remembered. Measured with benchmarks.ops.host_cost_cpu: the checks (with the flags' dict) and the
    graph's key and lookup are most of the body's cost."""
    signature = forward_signature(op, tensors, scale, flags, gate_lower_bound, max_seqlen)
    prepared = None if signature is None else GRAPHS.call(signature)
    if prepared is None:
        return _forward_checked(op, signature, tensors, scale, flags, gate_lower_bound, max_seqlen)
    return prepared(*tensors)


def call_forward(
    op_fn: Any,
    op: str,
    tensors: tuple,
    scale: Any,
    flags: tuple,
    glb: Any,
    args: tuple,
    batch: Any,
    check: Any,
    max_seqlen: Any = None,
) -> tuple:
    """The Python functions' call of every op: ``op_fn(*args)`` (the custom op), or a remembered
    signature's prepared call where torch's dispatcher has nothing to do (`pygraph.op_support.direct`);
    ``tensors`` in `FORWARD_INPUTS`' order, ``flags`` in `FORWARD_FLAGS`'. O comes back viewed as
    ``batch``'s [B, T, ...] where given. Where the dispatcher's own schema check refuses an argument
    before the op's check runs, ``check()`` (the op's check) raises the typed error naming it (under
    torch.compile the fake kernel checks)."""
    prepared = None
    if direct(tensors):
        signature = forward_signature(op, tensors, scale, flags, glb, max_seqlen)
        prepared = None if signature is None else GRAPHS.call(signature)
    try:
        o, final = op_fn(*args) if prepared is None else prepared(*tensors, placeholders=False)
    except (TypeError, RuntimeError):
        if not torch.compiler.is_compiling():
            check()
        raise
    if batch is not None:
        o = o.view(*batch, *o.shape[1:])
    return o, (final if flags[0] else None)


def _forward_checked(
    op: str, signature: Any, tensors: tuple, scale: Any, flags: tuple, glb: Any, max_seqlen: Any = None
) -> tuple:
    x = dict(zip(FORWARD_INPUTS, tensors))
    named = dict(zip(FORWARD_FLAGS, flags))
    p = check_forward(
        x["q"], x["k"], x["v"], x["g"], x["beta"], x["cu_seqlens"], scale, x["initial_state"], x["a_log"],
        x["dt_bias"], op=op, w=x["w"], gate_lower_bound=glb, max_seqlen=max_seqlen, **named,
    )  # fmt: skip
    output_final_state = named["output_final_state"]
    if p.tokens == 0:  # nothing to run: every sequence is empty, its final state its initial one
        o, final = _forward_outputs(
            x["q"], (p.tokens, p.heads_out, p.value_dim), p.state_shape, output_final_state
        )
        if output_final_state:
            final.copy_(x["initial_state"]) if x["initial_state"] is not None else final.zero_()
        return o, final
    built = forward_graph(p, scale, named)
    prepared = _prepare_forward(p, built, tensors, output_final_state)
    if signature is not None:
        GRAPHS.remember(signature, built, prepared)
    return prepared(*tensors)


def _forward_outputs(q: torch.Tensor, o_shape: tuple, state_shape: tuple, final: bool) -> tuple:
    o = q.new_empty(o_shape)
    return o, (q.new_empty(state_shape, dtype=torch.float32) if final else none_state(q))


def _prepare_forward(p: GdnProblem, built: BuiltGraph, tensors: tuple, output_final_state: bool) -> Any:
    """The forward's call of ``p``'s graph with what the signature fixes settled: the outputs'
    shapes, which operands are given and need their contiguous copy, the bound launch."""
    given = tuple(i for i, t in enumerate(tensors) if t is not None)
    copy = tuple(i for i in given if not tensors[i].is_contiguous())
    names = (
        tuple(FORWARD_INPUTS[i] for i in given) + ("o",) + (("final_state",) if output_final_state else ())
    )
    launch = launcher(built, names, p.device, execute)
    o_shape, state_shape, f32 = (p.tokens, p.heads_out, p.value_dim), p.state_shape, torch.float32

    def prepared(*tensors: torch.Tensor, placeholders: bool = True) -> tuple:
        operands = _given_operands(tensors, given, copy)
        q = tensors[0]
        o = q.new_empty(o_shape)
        if output_final_state:
            final = q.new_empty(state_shape, dtype=f32)
            launch(*operands, o, final)
            return o, final
        launch(*operands, o)
        # the custom op returns tensors only; the Python functions' direct call returns None for an
        # absent final state anyway, so it skips the empty stand-in (1.4 us, host_cost_cpu)
        return o, (none_state(q) if placeholders else None)

    return prepared


# --- the backward's call: checked once per signature, then served prepared, as the forward's

# the backward's operands in the order a call passes them, by the backward graph's port names (gdn
# and kda pass no w; d_final_state None where the final state had no gradient)
BACKWARD_INPUTS = (
    "q", "k", "v", "g", "beta", "w", "cu_seqlens", "dO", "d_final_state", "initial_state", "a_log", "dt_bias",
)  # fmt: skip


def backward_signature(
    op: str, tensors: tuple, scale: Any, options: tuple, gate_lower_bound: Any, max_seqlen: Any = None
) -> tuple | None:
    """Everything the backward's checks (`check_forward` and `check_backward`) read of a backward
    call, as `forward_signature`: ``tensors`` in `BACKWARD_INPUTS`' order (dO's and d_final_state's
    shape, stride, dtype and device included; d_final_state's presence is the forward's
    output_final_state flag the checks see), ``options`` the four flags after output_final_state."""
    return forward_signature(f"{op}_bwd", tensors, scale, options, gate_lower_bound, max_seqlen)


def backward(
    op: str,
    tensors: tuple,
    scale: Any,
    options: tuple,
    gate_lower_bound: Any,
    checked: Any,
    max_seqlen: Any = None,
) -> tuple:
    """The backward custom op's body for every op (gdn, kda, gdn2): every gradient of `gradients`
    in order (an absent one an empty fp32 tensor). ``tensors`` in `BACKWARD_INPUTS`' order (None
    where absent), ``options`` the flags after output_final_state, ``checked()`` the family's checks:
    ``(problem, flags, new gradients by port name)``. A remembered signature runs its prepared call
    (no checks, no graph key or lookup: measured with benchmarks.ops.host_cost_cpu, the backward
    rows); another is checked, its graph built or looked up and its call prepared and remembered."""
    signature = backward_signature(op, tensors, scale, options, gate_lower_bound, max_seqlen)
    prepared = None if signature is None else GRAPHS.call(signature)
    if prepared is None:
        return _backward_checked(op, signature, tensors, scale, checked)
    return prepared(*tensors)


def prepared_backward(
    op: str, tensors: tuple, scale: Any, options: tuple, gate_lower_bound: Any, max_seqlen: Any = None
) -> Any:
    """The prepared backward call of these arguments, or None (never remembered, or no signature):
    what an autograd call with nothing for torch's dispatcher to do runs directly (`direct`)."""
    signature = backward_signature(op, tensors, scale, options, gate_lower_bound, max_seqlen)
    return None if signature is None else GRAPHS.call(signature)


def _backward_checked(op: str, signature: Any, tensors: tuple, scale: Any, checked: Any) -> tuple:
    p, flags, grads = checked()
    x = dict(zip(BACKWARD_INPUTS, tensors))
    q, d_final = x["q"], x["d_final_state"]
    if p.tokens == 0:  # no token: the initial state reaches the final one untouched
        for name in ("d_initial_state", "d_a_log", "d_dt_bias"):
            if name in grads:
                grads[name].zero_()
        if d_final is not None and "d_initial_state" in grads:
            grads["d_initial_state"].copy_(d_final)
        return tuple(grads.get(name, none_state(q)) for name, _ in gradients(op))
    built = backward_graph(p, scale, flags, d_final is not None)
    prepared = _prepare_backward(op, p, built, tensors, grads)
    if signature is not None:
        GRAPHS.remember(signature, built, prepared)
    return prepared(*tensors, grads=grads)


def _prepare_backward(op: str, p: GdnProblem, built: BuiltGraph, tensors: tuple, grads: dict) -> Any:
    """The backward's call of ``p``'s graph with what the signature fixes settled: which operands
    are given and need their contiguous copy, each gradient's shape and dtype (as the checked
    call's, ``grads``), the bound launch."""
    given = tuple(i for i, t in enumerate(tensors) if t is not None)
    copy = tuple(i for i in given if not tensors[i].is_contiguous())
    outs = tuple(
        (name, tuple(grads[name].shape), grads[name].dtype) if name in grads else None
        for name, _ in gradients(op)
    )
    names = tuple(BACKWARD_INPUTS[i] for i in given) + tuple(o[0] for o in outs if o is not None)
    launch = launcher(built, names, p.device, execute)

    def prepared(*tensors: torch.Tensor, grads: dict | None = None, placeholders: bool = True) -> tuple:
        operands = _given_operands(tensors, given, copy)
        q = tensors[0]
        if grads is not None:  # the checked call's own gradients (allocated by its checks)
            results = [None if o is None else grads[o[0]] for o in outs]
        else:
            results = [None if o is None else q.new_empty(o[1], dtype=o[2]) for o in outs]
        launch(*operands, *[t for t in results if t is not None])
        if not placeholders:  # autograd's direct call: an absent input's gradient is None anyway
            return tuple(results)  # (no empty stand-ins: 1 us each, host_cost_cpu)
        return tuple(none_state(q) if t is None else t for t in results)

    return prepared
