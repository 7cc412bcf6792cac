"""A `gemm_cases.Case`'s operands on a device, and its float64 reference: shared by the SM90 and
SM80 numerics tests.

Inputs are fresh random values in the case's majors and broadcasts (stored as `Case.strides`
says); outputs start as NaN (a tile the kernel never writes shows); padding after a storage row is
NaN too (a read past the row shows in the sum, a store past it in the padding). The reference is
`pygraph_gemm.reference.gemm_reference` in float64.
"""

from __future__ import annotations

import dataclasses

import torch
from gemm_cases import Case

from pygraph_gemm.reference import gemm_reference

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
# relative Frobenius error allowed per output dtype
TOL = {"bf16": 1e-2, "fp16": 5e-3, "fp32": 2e-3}


def random_operand(l, rows, cols, dtype, col_major, bcast, device, pad=0) -> torch.Tensor:
    """An (l, rows, cols) random view: columns stored contiguously when ``col_major``; batch stride
    0 when ``bcast``; ``pad`` NaN elements after each contiguous storage row."""
    lb = 1 if bcast else l
    s_rows, s_cols = (cols, rows) if col_major else (rows, cols)
    t = torch.randn(lb, s_rows, s_cols, device=device).to(dtype)
    if pad:
        store = torch.full((lb, s_rows, s_cols + pad), float("nan"), device=device, dtype=dtype)
        store[:, :, :s_cols] = t
        t = store[:, :, :s_cols]
    if col_major:
        t = t.transpose(1, 2)
    return t.expand(l, rows, cols) if bcast else t


def poisoned_output(
    l, m, n, dtype, col_major=False, pad=0, device="cuda"
) -> tuple[torch.Tensor, torch.Tensor]:
    """(an (l, m, n) output view filled with NaN, its storage): row-major, or column-major (the
    transpose of a row-major (l, n, m)); ``pad`` NaN elements after each contiguous storage row."""
    s_rows, s_cols = (n, m) if col_major else (m, n)
    store = torch.full((l, s_rows, s_cols + pad), float("nan"), device=device, dtype=dtype)
    view = store[:, :, :s_cols]
    return (view.transpose(1, 2) if col_major else view), store


@dataclasses.dataclass
class Operands:
    """A case's tensors, each 3-D (L, rows, cols); ``vectors`` maps "row_scale" / "col_scale" /
    "bias" to the ones the case has; ``ref`` and ``pre`` are the float64 output and pre-activation."""

    a: torch.Tensor
    b: torch.Tensor
    c: torch.Tensor
    c_store: torch.Tensor
    vectors: dict
    residual: torch.Tensor | None
    aux: torch.Tensor | None
    ref: torch.Tensor
    pre: torch.Tensor


def operands(case: Case, device: str = "cuda") -> Operands:
    """Fresh operands for ``case`` (drawn in the order A, B, row scale, col scale, bias, residual)
    and their reference."""
    idt, vdt = DTYPES[case.dt], DTYPES[case.vec]
    pa, pb, pc = case.pads()
    a = random_operand(case.l, case.m, case.k, idt, case.a_col, case.a_bc, device, pa)
    b = random_operand(case.l, case.k, case.n, idt, case.b_col, case.b_bc, device, pb)
    vectors = {}
    if case.row_scale:
        vectors["row_scale"] = (torch.rand(case.m, device=device) + 0.5).to(vdt)
    if case.col_scale:
        vectors["col_scale"] = (torch.rand(case.n, device=device) + 0.5).to(vdt)
    if case.bias:
        vectors["bias"] = torch.randn(case.n, device=device).to(vdt)
    residual = torch.randn(case.l, case.m, case.n, device=device).to(idt) if case.residual else None
    c, c_store = poisoned_output(case.l, case.m, case.n, DTYPES[case.out], case.c_col, pc, device)
    aux = torch.full_like(c, float("nan"), dtype=idt) if case.aux else None
    if device == "meta":  # strides only: nothing to compute
        ref = pre = c
    else:
        ref, pre = gemm_reference(a, b, residual=residual, activation=case.act, **vectors)
    return Operands(a, b, c, c_store, vectors, residual, aux, ref, pre)


def relerr(got: torch.Tensor, ref: torch.Tensor) -> float:
    """Relative Frobenius error of ``got`` against ``ref``; NaN when ``got`` holds any NaN."""
    g = got.double()
    if torch.isnan(g).any():
        return float("nan")
    return (torch.linalg.norm(g - ref) / torch.linalg.norm(ref).clamp_min(1e-30)).item()


def assert_close(case: Case, ops: Operands) -> None:
    """The output (and aux) within the case's output dtype's tolerance of the reference."""
    tol = TOL[case.out]
    err = relerr(ops.c, ops.ref)
    assert err < tol, f"{case.id}: relative error {err:.2e} >= {tol:.0e}"
    if ops.aux is not None:
        aux_err = relerr(ops.aux, ops.pre)
        assert aux_err < tol, f"{case.id}: aux relative error {aux_err:.2e} >= {tol:.0e}"
