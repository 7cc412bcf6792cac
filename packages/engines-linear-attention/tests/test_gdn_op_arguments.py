"""The torch op's argument checks (one row per bad input: the error's type and the tensor it names)
and its fake kernel's shapes and dtypes. CPU only: nothing here executes a graph."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from pygraph.errors import OpInputError  # noqa: E402
from pygraph_linear_attention.ops import gated_delta_net  # noqa: E402

T, N, H, HV, K, V = 10, 2, 1, 2, 64, 64


def _args(**over):
    bf = torch.bfloat16
    args = {
        "q": torch.zeros(T, H, K, dtype=bf),
        "k": torch.zeros(T, H, K, dtype=bf),
        "v": torch.zeros(T, HV, V, dtype=bf),
        "g": torch.zeros(T, HV),
        "beta": torch.zeros(T, HV),
        "cu_seqlens": torch.tensor([0, 4, T], dtype=torch.int32),
    }
    args.update(over)
    return args


BAD = [
    ("q-rank", {"q": torch.zeros(T, K, dtype=torch.bfloat16)}, "q must be [T, H, K] (THD) or [B, T, H, K], got shape [10, 64]"),
    ("q-dtype", {"q": torch.zeros(T, H, K), "k": torch.zeros(T, H, K), "v": torch.zeros(T, HV, V)},
     "q must be torch.bfloat16 or torch.float16, got torch.float32"),
    ("k-shape", {"k": torch.zeros(T, H, 32, dtype=torch.bfloat16)}, "k must be [T, H, K] like q = [10, 1, 64], got shape [10, 1, 32]"),
    ("k-dtype", {"k": torch.zeros(T, H, K, dtype=torch.float16)}, "k must be q's dtype torch.bfloat16, got torch.float16"),
    ("v-tokens", {"v": torch.zeros(T + 1, HV, V, dtype=torch.bfloat16)}, "v must be [T, HV, V] with q's T = 10, got shape [11, 2, 64]"),
    ("v-dtype", {"v": torch.zeros(T, HV, V, dtype=torch.float16)}, "v must be q's dtype torch.bfloat16, got torch.float16"),
    ("heads", {"q": torch.zeros(T, 3, K, dtype=torch.bfloat16), "k": torch.zeros(T, 3, K, dtype=torch.bfloat16)},
     "q/k heads H = 3 and v heads HV = 2: one must divide the other (GVA: H divides HV; GQA: HV divides H)"),
    ("gqa-g-heads", {"q": torch.zeros(T, 4, K, dtype=torch.bfloat16), "k": torch.zeros(T, 4, K, dtype=torch.bfloat16)},
     "g must be [T, HO] = [10, 4], got shape [10, 2]"),
    ("g-shape", {"g": torch.zeros(T, 1)}, "g must be [T, HV] = [10, 2], got shape [10, 1]"),
    ("g-dtype", {"g": torch.zeros(T, HV, dtype=torch.float64)}, "g must be torch.float32 (the log decay), got torch.float64"),
    ("beta-shape", {"beta": torch.zeros(T)}, "beta must be [T, HV] = [10, 2], got shape [10]"),
    ("beta-dtype", {"beta": torch.zeros(T, HV, dtype=torch.float64)},
     "beta must be torch.float32 or q's dtype torch.bfloat16, got torch.float64"),
    ("cu-rank", {"cu_seqlens": torch.zeros(2, 2, dtype=torch.int32)}, "cu_seqlens must be [N + 1] (rank 1, at least [0]), got shape [2, 2]"),
    ("cu-dtype", {"cu_seqlens": torch.tensor([0.0, 10.0])}, "cu_seqlens must be torch.int32 or torch.int64, got torch.float32"),
    ("cu-empty", {"cu_seqlens": torch.tensor([0], dtype=torch.int32)}, "cu_seqlens [1] holds no sequence for q's T = 10 tokens"),
    ("h0-shape", {"initial_state": torch.zeros(N, HV, K, V + 1)}, "initial_state must be [N, HV, V, K] = [2, 2, 64, 64], got shape [2, 2, 64, 65]"),
    ("h0-dtype", {"initial_state": torch.zeros(N, HV, V, K, dtype=torch.bfloat16)},
     "initial_state must be torch.float32, got torch.bfloat16"),
    ("no-a-log", {"safe_gate": True}, "safe_gate=True needs a_log"),
    ("a-log-no-gate", {"a_log": torch.zeros(HV)}, "a_log given with safe_gate=False"),
    ("a-log-shape", {"safe_gate": True, "a_log": torch.zeros(HV + 1)}, "a_log must be [HV] = [2], got shape [3]"),
    ("dt-bias-dtype", {"safe_gate": True, "a_log": torch.zeros(HV), "dt_bias": torch.zeros(HV, dtype=torch.bfloat16)},
     "dt_bias must be torch.float32, got torch.bfloat16"),
    ("q-type", {"q": [[0.0]]}, "q must be a torch.Tensor, got list"),
    ("h0-type", {"initial_state": 0.0}, "initial_state must be a torch.Tensor or None, got float"),
    ("flag-type", {"output_final_state": 1}, "output_final_state must be a bool, got int 1"),
    ("scale", {"scale": float("nan")}, "scale must be a finite float or None (K ** -0.5), got nan"),
    ("device", {"g": torch.zeros(T, HV, device="meta")}, "g is on meta, q on cpu: every tensor of one call is on one device"),
    ("host", {}, "q is on cpu: the op runs on cuda devices"),
    # a zero head dim or head count names the op (the graph's tensor() would refuse it unnamed)
    ("q-zero-head-dim", {"q": torch.zeros(T, H, 0, dtype=torch.bfloat16), "k": torch.zeros(T, H, 0, dtype=torch.bfloat16)},
     "q must be [T, H, K] with a head dim K >= 1, got shape [10, 1, 0]"),
    ("v-zero-head-dim", {"v": torch.zeros(T, HV, 0, dtype=torch.bfloat16)},
     "v must be [T, HV, V] with HV >= 1 heads and a head dim V >= 1, got shape [10, 2, 0]"),
    ("v-zero-heads", {"v": torch.zeros(T, 0, V, dtype=torch.bfloat16), "g": torch.zeros(T, 0), "beta": torch.zeros(T, 0)},
     "v must be [T, HV, V] with HV >= 1 heads and a head dim V >= 1, got shape [10, 0, 64]"),
    ("scale-overflow", {"scale": 2**1100}, "scale must be a finite float or None (K ** -0.5), got 1"),
    ("max-seqlen", {"max_seqlen": 0}, "max_seqlen must be an int >= 1 (the longest sequence's tokens) or None, got 0"),
    ("max-seqlen-type", {"max_seqlen": 8.0}, "max_seqlen must be an int >= 1 (the longest sequence's tokens) or None, got 8.0"),
]  # fmt: skip


@pytest.mark.parametrize(("over", "says"), [row[1:] for row in BAD], ids=[row[0] for row in BAD])
def test_a_bad_argument_is_an_op_input_error_naming_the_tensor(over, says):
    with pytest.raises(OpInputError) as err:
        gated_delta_net(**_args(**over))
    message = str(err.value)
    assert message.startswith("pygraph_linear_attention.gated_delta_net(): "), message
    assert says in message, message


def test_the_raw_op_checks_the_same_way():
    args = _args(g=torch.zeros(T, HV, dtype=torch.float16))
    with pytest.raises(OpInputError, match=r"g must be torch.float32 \(the log decay\), got torch.float16"):
        torch.ops.pygraph_linear_attention.gated_delta_net(**args)


@pytest.mark.parametrize("final", [False, True], ids=["no-final", "final"])
@pytest.mark.parametrize("io", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
def test_the_fake_kernel_gives_the_outputs_shapes_and_dtypes(io, final):
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():  # fake CUDA tensors: no GPU needed
        args = {name: t.to(io) if t.dtype == torch.bfloat16 else t for name, t in _args().items()}
        args = {name: torch.empty_like(t, device="cuda") for name, t in args.items()}
        o, fs = torch.ops.pygraph_linear_attention.gated_delta_net(**args, output_final_state=final)
        assert (tuple(o.shape), o.dtype) == ((T, HV, V), io)
        assert (tuple(fs.shape), fs.dtype) == (((N, HV, V, K) if final else (0,)), torch.float32)
        grads = torch.ops.pygraph_linear_attention.gated_delta_net_backward(
            args["q"], args["k"], args["v"], args["g"], args["beta"], args["cu_seqlens"], torch.empty_like(o),
            torch.empty(N, HV, V, K, device="cuda") if final else None,
        )  # fmt: skip
        shapes = [(tuple(x.shape), x.dtype) for x in grads]
        assert shapes == [((T, H, K), io), ((T, H, K), io), ((T, HV, V), io), ((T, HV), torch.float32),
                          ((T, HV), torch.float32)] + [((0,), torch.float32)] * 3  # fmt: skip


def test_the_fake_backward_checks_the_incoming_gradient():
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        args = {name: torch.empty_like(t, device="cuda") for name, t in _args().items()}
        with pytest.raises(
            OpInputError, match=r"grad of o must be \[T, HO, V\] = \[10, 2, 64\], got shape \[10, 1, 64\]"
        ):
            torch.ops.pygraph_linear_attention.gated_delta_net_backward(
                *args.values(), torch.empty(T, 1, V, dtype=torch.bfloat16, device="cuda")
            )


def test_under_torch_compile_the_fake_kernel_refuses_while_tracing():
    """Traced, the check runs in the fake kernel; dynamo wraps the error, whose cause chain holds ours."""
    torch._dynamo.reset()

    def f(q, k, v, g, beta, cu_seqlens):
        return gated_delta_net(q, k, v, g, beta, cu_seqlens)[0]

    with pytest.raises(Exception) as err:
        torch.compile(f, fullgraph=True, backend="eager")(**_args(g=torch.zeros(T, HV, dtype=torch.float64)))
    chain, cause = [], err.value
    while cause is not None:
        chain.append(cause)
        cause = cause.__cause__ or cause.__context__
    ours = [c for c in chain if isinstance(c, OpInputError)]
    assert ours and "g must be torch.float32 (the log decay), got torch.float64" in str(ours[0]), chain
    torch._dynamo.reset()
