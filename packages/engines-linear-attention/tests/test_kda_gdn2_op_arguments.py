"""The argument rules of the KDA and GDN-2 ops (`op_arguments.check_forward` with ``op`` "kda" and
"gdn2"): one row per bad input, the error naming the op's call, the tensor and the value; a good
call's problem. CPU only."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from pygraph.errors import OpInputError  # noqa: E402
from pygraph_linear_attention.common import op_arguments  # noqa: E402

T, H, HV, K, V = 10, 1, 2, 64, 32
BF = torch.bfloat16


@pytest.fixture(autouse=True)
def host_tensors(monkeypatch):
    monkeypatch.setattr(op_arguments, "DEVICE_TYPES", ("cpu",))


def _args(op: str, **over):
    args = {
        "q": torch.zeros(T, H, K, dtype=BF), "k": torch.zeros(T, H, K, dtype=BF), "v": torch.zeros(T, HV, V, dtype=BF),
        "g": torch.zeros(T, HV, K), "beta": torch.zeros(T, HV, K) if op == "gdn2" else torch.zeros(T, HV),
        "cu_seqlens": torch.tensor([0, 4, T], dtype=torch.int32), "scale": None, "initial_state": None,
        "a_log": None, "dt_bias": None, "op": op,
    }  # fmt: skip
    if op == "gdn2":
        args["w"] = torch.zeros(T, HV, V, dtype=BF)
    args.update(over)
    return args


def _check(**args):
    return op_arguments.check_forward(**args)


BAD = [
    ("kda", "g-per-head", {"g": torch.zeros(T, HV)}, "g must be [T, HV, K] = [10, 2, 64], got shape [10, 2]"),
    ("kda", "beta-per-channel", {"beta": torch.zeros(T, HV, K)}, "beta must be [T, HV] = [10, 2], got shape [10, 2, 64]"),
    ("kda", "w-given", {"w": torch.zeros(T, HV, V, dtype=BF)}, "w (the write gate) is gated_delta_net_v2's"),
    ("kda", "bound-without-gate", {"gate_lower_bound": -3.0}, "gate_lower_bound=-3.0 bounds the safe gate: set safe_gate=True"),
    ("kda", "bound-positive", {"gate_lower_bound": 1.0, "safe_gate": True}, "gate_lower_bound must be a negative finite float, got 1.0"),
    ("kda", "dt-bias-per-head", {"safe_gate": True, "dt_bias": torch.zeros(HV)}, "dt_bias must be [HV, K] = [2, 64], got shape [2]"),
    ("gdn2", "beta-per-head", {"beta": torch.zeros(T, HV)}, "beta must be [T, HV, K] = [10, 2, 64], got shape [10, 2]"),
    ("gdn2", "no-w", {"w": None}, "w must be a torch.Tensor, got NoneType"),
    ("gdn2", "w-shape", {"w": torch.zeros(T, HV, K, dtype=BF)}, "w must be [T, HV, V] = [10, 2, 32], got shape [10, 2, 64]"),
    ("gdn2", "w-dtype", {"w": torch.zeros(T, HV, V)}, "w must be q's dtype torch.bfloat16 (the write gate, post-activation), got torch.float32"),
    ("gdn2", "w-device", {"w": torch.zeros(T, HV, V, dtype=BF, device="meta")}, "w is on meta, q on cpu"),
    ("kda", "k-zero-head-dim", {"q": torch.zeros(T, H, 0, dtype=BF), "k": torch.zeros(T, H, 0, dtype=BF)},
     "q must be [T, H, K] with a head dim K >= 1, got shape [10, 1, 0]"),
    ("gdn2", "v-zero-head-dim", {"v": torch.zeros(T, HV, 0, dtype=BF), "w": torch.zeros(T, HV, 0, dtype=BF)},
     "v must be [T, HV, V] with HV >= 1 heads and a head dim V >= 1, got shape [10, 2, 0]"),
    ("kda", "bound-overflow", {"gate_lower_bound": -(2**1100), "safe_gate": True},
     "gate_lower_bound must be a negative finite float, got -1"),
]  # fmt: skip


@pytest.mark.parametrize(("op", "name", "over", "message"), BAD, ids=[f"{r[0]}-{r[1]}" for r in BAD])
def test_a_bad_argument_is_refused_naming_the_call_and_the_tensor(op, name, over, message):
    with pytest.raises(OpInputError) as err:
        _check(**_args(op, **over))
    call = op_arguments.CALLS[op]
    assert str(err.value).startswith(f"{call}: ") and message in str(err.value), str(err.value)


def test_gated_delta_net_keeps_its_unbounded_gate():
    with pytest.raises(OpInputError, match="gated_delta_net's safe gate has no bound"):
        _check(
            **_args(
                "gdn", g=torch.zeros(T, HV), beta=torch.zeros(T, HV), safe_gate=True, gate_lower_bound=-5.0
            )
        )


@pytest.mark.parametrize("op", ["kda", "gdn2"])
def test_a_good_call_gives_its_problem(op):
    over = {"safe_gate": True, "gate_lower_bound": -4.0, "dt_bias": torch.zeros(HV, K)}  # a_log optional
    p = _check(**_args(op, **over))
    assert (p.op, p.channel_gate, p.gate_lower_bound, p.has_a_log, p.has_dt_bias) == (
        op,
        True,
        -4.0,
        False,
        True,
    )
    assert p.state_shape == (2, HV, V, K)
