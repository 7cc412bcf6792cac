"""Shape and dtype inference, user overrides, conditional outputs."""

from __future__ import annotations

import pytest

import pygraph
from pygraph import data_type as dt
from pygraph.ir.shapes import row_major_stride
from pygraph.ir.validate import validate_ir


@pytest.fixture
def g() -> pygraph.Graph:
    return pygraph.Graph(
        "shapes", io_data_type=dt.HALF, intermediate_data_type=dt.FLOAT, compute_data_type=dt.FLOAT
    )


@pytest.mark.parametrize(
    ("a", "b", "out"),
    [([2, 3, 4], [2, 3, 4], [2, 3, 4]), ([2, 1, 4], [1, 3, 1], [2, 3, 4]), ([3, 4], [2, 3, 4], [2, 3, 4])],
    ids=["same", "both-broadcast", "rank-pad"],
)
def test_pointwise_broadcasting(g: pygraph.Graph, a, b, out) -> None:
    assert g.add(g.tensor(a), g.tensor(b)).get_dim() == out


@pytest.mark.parametrize(
    ("a", "b", "out"),
    [([4, 8], [8, 16], [4, 16]), ([2, 4, 8], [1, 8, 16], [2, 4, 16]), ([1, 4, 8], [3, 8, 16], [3, 4, 16])],
    ids=["2d", "batch-b", "batch-a"],
)
def test_matmul_batch_broadcast(g: pygraph.Graph, a, b, out) -> None:
    c = g.matmul(g.tensor(a), g.tensor(b))
    assert c.get_dim() == out and c.get_stride() == list(row_major_stride(out))


def test_dtype_follows_context_then_op(g: pygraph.Graph) -> None:
    c = g.matmul(g.tensor([4, 8]), g.tensor([8, 16]))
    assert c.data_type is dt.FLOAT  # virtual -> intermediate
    c.set_output(True)
    assert c.data_type is dt.HALF  # output -> io
    c.set_data_type(dt.BFLOAT16)
    assert c.data_type is dt.BFLOAT16 and c.data_type_assigned
    bare = pygraph.Graph("bare")
    x = bare.tensor([2, 2], data_type=dt.FLOAT)
    assert bare.cmp_gt(x, x).data_type is dt.BOOLEAN
    assert bare.gen_index(x, axis=0).data_type is dt.INT32
    assert bare.add(x, x).data_type is dt.FLOAT


def test_torch_dtype_and_size_accepted() -> None:
    torch = pytest.importorskip("torch")
    g = pygraph.Graph("t", io_data_type=torch.bfloat16)
    a = g.tensor(torch.Size([2, 3]), data_type=torch.float16)
    assert a.data_type is dt.HALF and a.dim == (2, 3) and g.io_data_type is dt.BFLOAT16
    b = g.tensor_like(torch.zeros(3, 4, dtype=torch.float32))
    assert b.dim == (3, 4) and b.stride == (4, 1) and b.data_type is dt.FLOAT
    assert g.default_bindings[b.uid] is not None
    out = g.matmul(a, b)
    out.set_data_type(torch.float32)
    assert out.data_type is dt.FLOAT


def test_user_dim_overrides_inferred(g: pygraph.Graph) -> None:
    c = g.matmul(g.tensor([4, 8]), g.tensor([8, 16]))
    assert not c.dim_assigned and not c.stride_assigned
    c.set_dim([1, 4, 16]).set_stride([64, 1, 4]).set_output(True)
    assert c.dim == (1, 4, 16) and c.stride == (64, 1, 4) and c.dim_assigned and c.stride_assigned
    validate_ir(g._ir)  # re-inference keeps user values
    assert c.dim == (1, 4, 16) and c.stride == (64, 1, 4)


def test_validate_reinfers_from_late_input_dims(g: pygraph.Graph) -> None:
    a = g.tensor([4, 8])
    c = g.relu(a).set_output(True)
    a.set_dim([5, 8]).set_stride([8, 1])
    validate_ir(g._ir)
    assert c.dim == (5, 8)


def test_norm_conditional_outputs(g: pygraph.Graph) -> None:
    x, s, b = g.tensor([4, 8, 16]), g.tensor([1, 8, 16]), g.tensor([1, 8, 16])
    _y, mean, inv_var = g.layernorm(pygraph.norm_forward_phase.TRAINING, x, s, b, 1e-5)
    assert mean.dim == (4, 1, 1) and inv_var.dim == (4, 1, 1) and mean.data_type is dt.FLOAT
    y2, mean2, inv2 = g.layernorm(
        norm_forward_phase=pygraph.norm_forward_phase.INFERENCE, input=x, scale=s, bias=b, epsilon=1e-5
    )
    assert mean2 is None and inv2 is None and y2.dim == x.dim
    node = g.nodes[-1]
    assert node.outputs["mean"] is None and node.outputs["inv_var"] is None
    dx, dscale, dbias = g.rmsnorm_backward(grad=x, input=x, inv_variance=g.tensor([4, 1, 1]), has_dbias=True)
    assert dx.dim == x.dim and dscale is None and dbias is None
    _, ds, db = g.rmsnorm_backward(
        grad=x, input=x, scale=s, inv_variance=g.tensor([4, 1, 1]), has_dbias=False
    )
    assert ds.dim == s.dim and db is None


def test_batchnorm_running_stats_conditional(g: pygraph.Graph) -> None:
    x, p = g.tensor([4, 8, 5, 5]), g.tensor([1, 8, 1, 1])
    outs = g.batchnorm(x, p, p, None, None, 1e-5, None)
    assert outs[3] is None and outs[4] is None and outs[1].dim == (1, 8, 1, 1)
    outs = g.batchnorm(x, p, p, p, p, 1e-5, 0.1, peer_stats=[g.tensor([2, 8])])
    assert outs[3].dim == (1, 8, 1, 1) and len(g.nodes[-1].inputs["peer_stats"]) == 1


def test_sdpa_outputs(g: pygraph.Graph) -> None:
    q, k, v = g.tensor([2, 4, 128, 64]), g.tensor([2, 4, 256, 64]), g.tensor([2, 4, 256, 32])
    o, stats = g.sdpa(q, k, v, generate_stats=True)
    assert o.dim == (2, 4, 128, 32) and stats.dim == (2, 4, 128, 1) and stats.data_type is dt.FLOAT
    assert g.sdpa(q, k, v, is_inference=True)[1] is None
    assert g.sdpa(q, k, v, is_inference=False)[1] is not None
    assert g.sdpa(q, k, v)[1] is None
    rng = g.tensor([1, 1, 1, 1])
    g.sdpa(q, k, v, rng_dump=rng, dropout=(0.1, g.tensor([1]), g.tensor([1])))
    node = g.nodes[-1]
    assert node.outputs["rng_dump"] is rng and rng.producer is node
    assert len([t for t in node.input_tensors()]) == 5
    dq, dk, dv = g.sdpa_backward(q, k, v, o, g.tensor(o.dim), stats)
    assert (dq.dim, dk.dim, dv.dim) == (q.dim, k.dim, v.dim)


def test_sdpa_attn_scale_tensor_is_an_input(g: pygraph.Graph) -> None:
    q, k, v = g.tensor([1, 1, 8, 16]), g.tensor([1, 1, 8, 16]), g.tensor([1, 1, 8, 16])
    scale = g.tensor([1, 1, 1, 1], data_type=dt.FLOAT, is_pass_by_value=True)
    g.sdpa(q, k, v, attn_scale=scale)
    assert g.nodes[-1].inputs["attn_scale"] is scale and "attn_scale" not in g.nodes[-1].params


@pytest.mark.parametrize("op", ["gdn", "kda", "gdn2"])
def test_linear_attention_shapes(op: str) -> None:
    g = pygraph.Graph(op)
    T, HQ, HV, K, V, N = 96, 2, 4, 32, 16, 3
    gate = [T, HV] if op == "gdn" else [T, HV, K]
    beta = [T, HV, K] if op == "gdn2" else [T, HV]
    args = dict(
        q=g.tensor([T, HQ, K], data_type=dt.BFLOAT16), k=g.tensor([T, HQ, K], data_type=dt.BFLOAT16),
        v=g.tensor([T, HV, V], data_type=dt.BFLOAT16), g=g.tensor(gate, data_type=dt.FLOAT),
        beta=g.tensor(beta, data_type=dt.FLOAT), cu_seqlens=g.tensor([N + 1], data_type=dt.INT32),
    )  # fmt: skip
    if op == "gdn2":
        args["w"] = g.tensor([T, HV, V], data_type=dt.FLOAT)
    o, final = getattr(g, op)(**args)
    assert o.dim == (T, HV, V) and o.data_type is dt.BFLOAT16 and final is None
    state0 = g.tensor([N, HV, V, K], data_type=dt.BFLOAT16)
    o, final = getattr(g, op)(**args, initial_state=state0, output_final_state=True)
    assert final.dim == (N, HV, V, K) and final.data_type is dt.BFLOAT16
    grads = getattr(g, f"{op}_bwd")(**args, dO=g.tensor([T, HV, V]), initial_state=state0)
    n = 6 if op == "gdn2" else 5
    assert [t.dim for t in grads[:n]] == [args[p].dim for p in ("q", "k", "v", "g", "beta", "w")[:n]]
    assert grads[n].dim == state0.dim and grads[n + 1] is None and grads[n + 2] is None
    a_log = g.tensor([HV], data_type=dt.FLOAT)
    grads = getattr(g, f"{op}_bwd")(**args, dO=g.tensor([T, HV, V]), a_log=a_log, safe_gate=True)
    assert grads[n] is None and grads[n + 1].dim == (HV,) and grads[n + 2] is None
