"""sdpa_fwd_sm90 on the device: the CuTe DSL forward against the float64 reference and against the
backend's plan of the same graph, on fresh random inputs with every output poisoned (NaN) first.

The table is the backend path's (`sdpa_cases.CASES`) plus cases that reach what only the kernel's
own loop sees: many key blocks under the causal bound, a window in the bottom-right alignment with
more keys than queries, more queries than keys (rows that see no key: O 0, lse -inf), fp16 at head
dim 128, head dim 256. Relative errors (over the valid rows) at most 1e-2 in bf16 and 5e-3 in fp16, printed per
case. The hook ranks the backend first, so each test selects the engine's plan by name.
"""

from __future__ import annotations

import pytest

import pygraph
from pygraph import data_type as dt

pytestmark = pytest.mark.sm90

torch = pytest.importorskip("torch")

from sdpa_cases import (  # noqa: E402
    CASES,
    KERNEL_CASES,
    TOLERANCE,
    Case,
    _handle,
    _inputs,
    _mask_attrs,
    _padding,
    _rel,
    _valid_rows,
    _where,
)

from pygraph_sdpa.reference import sdpa_reference  # noqa: E402

ENGINE = "sdpa_fwd_sm90"
# head dim 256 (the forward's 64-key blocks; the backward serves up to 128)
D256_CASES = (
    Case("d256", s_q=300, s_kv=450, d=256),
    Case(
        "d256-causal-padding",
        s_q=257,
        s_kv=257,
        d=256,
        causal=True,
        seq_len_q=(257, 70),
        seq_len_kv=(200, 70),
    ),
)
ALL_CASES = CASES + KERNEL_CASES + D256_CASES


def _forward(case: Case, q, k, v, plan_engine: str | None):
    """(O, stats, plan name) of an sdpa graph over q, k, v run on the first plan whose name starts
    with ``plan_engine`` (None: the planner's first)."""
    scale = case.d**-0.5
    o = torch.full_like(q, float("nan"))
    stats = torch.full((case.b, case.hq, case.s_q, 1), float("nan"), device="cuda", dtype=torch.float32)
    g = pygraph.Graph(f"sdpa-{case.name}", q.dtype, dt.FLOAT, dt.FLOAT, handle=_handle())
    tq, tk, tv = g.tensor_like(q), g.tensor_like(k), g.tensor_like(v)
    padding, bound = _padding(g, case)
    to, tstats = g.sdpa(tq, tk, tv, generate_stats=True, attn_scale=scale, **_mask_attrs(case), **padding)
    to.set_output(True).set_dim(list(o.shape)).set_stride(list(o.stride())).set_data_type(q.dtype)
    tstats.set_output(True).set_data_type(dt.FLOAT)
    g.create_execution_plans()
    names = [g.get_plan_name_at_index(i) for i in range(g.get_execution_plan_count())]
    if plan_engine is not None:
        ours = [i for i, n in enumerate(names) if n.startswith(plan_engine)]
        assert ours, f"{plan_engine} offers no plan for {case.name}: {g.decline_reasons()}"
        g.select_plan(ours[0])
    g.build_plans()
    workspace = torch.empty(max(g.get_workspace_size(), 1), device="cuda", dtype=torch.uint8)
    g.execute({tq: q, tk: k, tv: v, to: o, tstats: stats, **bound}, workspace)
    torch.cuda.synchronize()
    return o, stats, g.selected_plan.name


@pytest.mark.parametrize("p_regs", [0, 1], ids=["p-smem", "p-regs"])
@pytest.mark.parametrize("case", ALL_CASES, ids=[c.name for c in ALL_CASES])
def test_the_forward_matches_the_reference_and_the_backend(case: Case, p_regs: int) -> None:
    q, k, v = _inputs(case, seed=11)
    o, stats, plan = _forward(case, q, k, v, f"{ENGINE}[P_REGS={p_regs}")
    want_o, want_lse = sdpa_reference(
        q, k, v, scale=case.d**-0.5, return_lse=True, **case.reference_options()
    )
    errors = {
        "o": _rel(_valid_rows(case, o), _valid_rows(case, want_o)),
        "stats": _rel(_valid_rows(case, stats), _valid_rows(case, want_lse)),
    }
    if case in CASES:  # the backend path serves these (its own test): ours against its plan too
        b_o, b_stats, _ = _forward(case, q, k, v, None)
        errors["o_vs_backend"] = _rel(_valid_rows(case, o), _valid_rows(case, b_o))
        errors["stats_vs_backend"] = _rel(_valid_rows(case, stats), _valid_rows(case, b_stats))
    print(f"{ENGINE}-{case.name}: {{plan: {plan!r}, rel: {errors}}}")
    assert plan.startswith(ENGINE)
    for b, rows in enumerate(case.seq_len_q or ()):  # rows past a sequence: O 0, lse -inf (the reference's)
        assert bool((o[b, :, rows:] == 0).all()) and bool((stats[b, :, rows:] == float("-inf")).all()), b
    assert all(err <= TOLERANCE[case.io] for err in errors.values()), (errors, _where(o, want_o.to(o.dtype)))
