"""Bad input gets a typed error naming the op, the port and the value."""

from __future__ import annotations

import pytest

import pygraph
from pygraph import data_type as dt
from pygraph.errors import OpInputError


@pytest.fixture
def g() -> pygraph.Graph:
    return pygraph.Graph("errors", io_data_type=dt.HALF)


CASES = {
    "wrong-rank": (lambda g: g.matmul(g.tensor([8]), g.tensor([8, 4])), ["matmul", "'A'", "[8]"]),
    "inner-dims": (
        lambda g: g.matmul(g.tensor([4, 8]), g.tensor([7, 4])),
        ["matmul", "'A'", "'B'", "[4, 8]", "[7, 4]"],
    ),
    "broadcast": (lambda g: g.mul(g.tensor([2, 3]), g.tensor([4, 3])), ["mul", "a=[2, 3]", "b=[4, 3]"]),
    "unknown-kwarg": (lambda g: g.relu(g.tensor([2]), slope=1.0), ["relu", "'slope'", "1.0"]),
    "not-a-tensor": (lambda g: g.exp("x"), ["exp", "'input'", "'x'"]),
    "missing-port": (lambda g: g.add(g.tensor([2])), ["add", "'b'"]),
    "missing-attr": (lambda g: g.leaky_relu(g.tensor([2])), ["leaky_relu", "'negative_slope'"]),
    "bad-attr": (
        lambda g: g.transpose(g.tensor([2, 3]), permutation=[0, 0]),
        ["transpose", "'permutation'", "[0, 0]"],
    ),
    "bad-enum": (lambda g: g.reduction(g.tensor([2, 3]), mode="SUMM"), ["reduction", "'mode'", "'SUMM'"]),
    "dtype": (
        lambda g: g.gdn(
            *(
                g.tensor(d, data_type=t)
                for d, t in (
                    ([8, 2, 4], None),
                    ([8, 2, 4], None),
                    ([8, 2, 4], None),
                    ([8, 2], dt.HALF),
                    ([8, 2], None),
                    ([3], dt.INT32),
                )
            )
        ),
        ["gdn", "'g'", "HALF"],
    ),
    "token-mismatch": (
        lambda g: g.gdn(
            g.tensor([8, 2, 4]),
            g.tensor([8, 2, 4]),
            g.tensor([9, 2, 4]),
            g.tensor([8, 2], data_type=dt.FLOAT),
            g.tensor([8, 2]),
            g.tensor([3], data_type=dt.INT32),
        ),
        ["gdn", "v: T=9"],
    ),
    "too-many-positional": (lambda g: g.abs(g.tensor([2]), g.tensor([2])), ["abs", "positional"]),
    "sdpa-head-dim": (
        lambda g: g.sdpa(g.tensor([1, 1, 8, 16]), g.tensor([1, 1, 8, 32]), g.tensor([1, 1, 8, 16])),
        ["sdpa", "'q'", "'k'"],
    ),
    "concat": (
        lambda g: g.concatenate([g.tensor([2, 3]), g.tensor([4, 5])], axis=1),
        ["concatenate", "inputs", "[4, 5]"],
    ),
    "conv-padding": (
        lambda g: g.conv_fprop(g.tensor([1, 2, 8, 8]), g.tensor([4, 2, 3, 3]), padding=[1]),
        ["conv_fprop", "'padding'", "[1]"],
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_bad_input(g: pygraph.Graph, case: str) -> None:
    make, fragments = CASES[case]
    with pytest.raises(OpInputError) as info:
        make(g)
    assert isinstance(info.value, (TypeError, ValueError))
    for fragment in fragments:
        assert fragment in str(info.value), (fragment, str(info.value))
    assert not g.nodes  # a refused call adds no node


def test_tensor_from_another_graph(g: pygraph.Graph) -> None:
    other = pygraph.Graph("other")
    t = other.tensor([2, 2], name="foreign")
    with pytest.raises(OpInputError, match=r"add\(\).*'a'.*'foreign'.*another graph"):
        g.add(t, g.tensor([2, 2]))
