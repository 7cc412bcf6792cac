"""kda_cutile, gdn2_cutile (cuTile) and kda_sm90, gdn2_sm90 (CuTe DSL), forward and backward, on the H200
against the float64 references: the correctness table.

Every case of `kda_cases.CASES` (this folder) for both ops (varlen with odd lengths,
T = 1, an empty sequence, initial and final state, each option, GQA and GVA, a 4097-token sequence,
head dim 64, fp16, BLOCK_V 32): fresh random inputs, outputs poisoned (NaN) first, planned and
executed through the graph API with the engines opted in; the relative error of O and of the final
state must be within the case's tolerance (1e-2 for bf16 and fp16 io). The cuTile engines skip
the BLOCK_V they do not serve (16).
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from kda_cases import CASES, run_bwd_case, run_case  # noqa: E402
from pygraph.environment import OPT_IN_ENV  # noqa: E402

pytestmark = pytest.mark.sm90


def _runs(engine: str, case) -> bool:
    """Whether ``engine`` serves the case's BLOCK_V (the cuTile engines: 32 and 64; the CuTe DSL
    pair 16 too)."""
    from pygraph_linear_attention.kda.cutile_host import BLOCK_V as CUTILE_BLOCK_V

    return engine == "sm90" or case.block_v is None or case.block_v in CUTILE_BLOCK_V


# (case, engine) pairs, the engine's id last so an id ends in it ("-sm90": `run.sh linear-attention kdasm90`)
PAIRS = [
    pytest.param(case, engine, id=f"{case.id}-{engine}")
    for case in CASES
    for engine in ("cutile", "sm90")
    if _runs(engine, case)
]


@pytest.mark.parametrize(("case", "engine"), PAIRS)
def test_the_forward_matches_the_float64_reference(case, engine, monkeypatch):
    monkeypatch.setenv(OPT_IN_ENV, "kda_cutile,gdn2_cutile,kda_sm90,gdn2_sm90")
    result = run_case(case, engine=engine)
    print(f"{case.id} {engine}: {result}")
    assert result["plan"].startswith(f"{case.op}_{engine}[")
    assert result["o_rel"] <= case.tolerance, result
    if "final_state" in case.options:
        assert result["state_rel"] is not None and result["state_rel"] <= case.tolerance, result


@pytest.mark.parametrize(("case", "engine"), PAIRS)
def test_the_backward_matches_autograd_through_the_float64_reference(case, engine, monkeypatch):
    monkeypatch.setenv(OPT_IN_ENV, "kda_cutile_bwd,gdn2_cutile_bwd,kda_sm90_bwd,gdn2_sm90_bwd")
    result = run_bwd_case(case, engine=engine)
    print(f"bwd-{case.id} {engine}: {result}")
    assert result["plan"].startswith(f"{case.op}_{engine}_bwd[")
    # every gradient within the tolerance (a NaN compares False, so it fails here, not in a max)
    assert all(err <= case.tolerance for err in result["rel"].values()), result
