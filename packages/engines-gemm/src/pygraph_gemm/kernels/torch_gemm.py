"""`gemm()`: the SM90 kernel called directly on torch tensors, without a graph (tests, benchmarks).

out = act(a @ b * scales + bias + residual); plans are cached by the problem's static facts. Users
of the graph API never reach this: the engine builds its own `Plan` from the graph.
"""

from __future__ import annotations

from typing import Any

from pygraph.engines.base import REFERENCE_SM_COUNT

from .config import EpilogueSpec, GemmKnobs, can_implement, dtype_name
from .plan import Plan


def default_knobs(m: int, n: int, k: int, l: int = 1, sm_count: int = REFERENCE_SM_COUNT) -> GemmKnobs:
    """A reasonable configuration without tuning, for a card of ``sm_count`` SMs: 128x128 tiles
    while 128x256 ones fill at most one wave of them (the ranking's small bucket,
    `heuristics.shape_bucket`), 128x256 in a 2x1 cluster past it."""
    if m <= 64 and n >= 256:
        return GemmKnobs(tile_m=128, tile_n=max(16, min(64, 16 * ((m + 15) // 16))), swap_ab=True)
    if m * n * l <= 128 * 256 * sm_count:
        return GemmKnobs(tile_m=128, tile_n=128)
    return GemmKnobs(tile_m=128, tile_n=256, cga_m=2)


def _sm_count(device: Any) -> int:
    """The SM count of the CUDA device ``device`` (a torch.device); the reference card's for any
    other (a meta tensor's: nothing runs)."""
    if device.type != "cuda":
        return REFERENCE_SM_COUNT
    import torch

    return torch.cuda.get_device_properties(device).multi_processor_count


_PLANS: dict[tuple, Plan] = {}


def gemm(
    a,
    b,
    out=None,
    *,
    bias=None,
    row_scale=None,
    col_scale=None,
    residual=None,
    activation: str = "none",
    aux=None,
    knobs: GemmKnobs | None = None,
    out_dtype=None,
) -> Any:
    """Torch convenience wrapper: out = act(a @ b * scales + bias + residual); a (L?,M,K), b (L?,K,N).

    Declines (ValueError with the reason) what can_implement refuses.
    """
    import torch

    a3 = a if a.dim() == 3 else a.unsqueeze(0)
    b3 = b if b.dim() == 3 else b.unsqueeze(0)
    l = max(a3.shape[0], b3.shape[0])
    if a3.shape[0] != l:
        a3 = a3.expand(l, -1, -1)
    if b3.shape[0] != l:
        b3 = b3.expand(l, -1, -1)
    m, k = a3.shape[1:]
    n = b3.shape[2]
    if out is None:
        shape = (l, m, n) if (a.dim() == 3 or b.dim() == 3) else (m, n)
        out = torch.empty(shape, device=a.device, dtype=out_dtype or a.dtype)
    o3 = out if out.dim() == 3 else out.unsqueeze(0)
    r3 = (
        None
        if residual is None
        else (residual if residual.dim() == 3 else residual.unsqueeze(0)).expand(l, m, n)
    )
    x3 = None if aux is None else (aux if aux.dim() == 3 else aux.unsqueeze(0))
    spec = EpilogueSpec(
        bias=bias is not None,
        row_scale=row_scale is not None,
        col_scale=col_scale is not None,
        residual=r3 is not None,
        activation=activation,
        aux_out=x3 is not None,
        vec_dtype=dtype_name(
            next((v.dtype for v in (bias, row_scale, col_scale) if v is not None), torch.float32)
        ),
        residual_dtype=dtype_name(r3.dtype) if r3 is not None else "bf16",
        aux_dtype=dtype_name(x3.dtype) if x3 is not None else "bf16",
    )
    knobs = knobs or default_knobs(m, n, k, l, _sm_count(a.device))
    st = lambda t: tuple(t.stride()) if t is not None else (0, 0, 0)  # noqa: E731
    vecs = tuple(v.data_ptr() for v in (bias, row_scale, col_scale) if v is not None)
    why = can_implement(
        m,
        n,
        k,
        l,
        a.dtype,
        b.dtype,
        out.dtype,
        st(a3),
        st(b3),
        st(o3),
        a3.data_ptr(),
        b3.data_ptr(),
        o3.data_ptr(),
        knobs,
        spec,
        st(r3) if r3 is not None else None,
        st(x3) if x3 is not None else None,
        vecs,
        r3.data_ptr() if r3 is not None else 0,
        x3.data_ptr() if x3 is not None else 0,
    )
    if why:
        raise ValueError(f"sm90 gemm cannot serve this problem: {why}")
    for v, ln, nm in ((bias, n, "bias"), (row_scale, m, "row_scale"), (col_scale, n, "col_scale")):
        if v is not None and (v.numel() != ln or (v.dim() == 1 and v.stride(0) != 1)):
            raise ValueError(f"{nm} must be a contiguous vector of length {ln}, got shape {tuple(v.shape)}")
    key = (knobs, spec, a.dtype, out.dtype, _sig(st(a3), m, k), _sig(st(b3), k, n), _sig(st(o3), m, n), l > 1)
    plan = _PLANS.get(key)
    if plan is None:
        plan = _PLANS[key] = Plan(knobs, spec, a.dtype, out.dtype, st(a3), st(b3), st(o3), m, n, k, l)
    plan(
        a3.data_ptr(),
        b3.data_ptr(),
        o3.data_ptr(),
        m,
        n,
        k,
        l,
        st(a3),
        st(b3),
        st(o3),
        bias.data_ptr() if bias is not None else 0,
        row_scale.data_ptr() if row_scale is not None else 0,
        col_scale.data_ptr() if col_scale is not None else 0,
        r3.data_ptr() if r3 is not None else 0,
        st(r3),
        x3.data_ptr() if x3 is not None else 0,
        st(x3),
        torch.cuda.current_stream(a.device).cuda_stream,
    )
    return out


def _sig(strides: tuple, rows: int, cols: int) -> tuple:
    bs, sr, sc = strides
    return (bs == 0, sc == 1 or cols == 1, sr == 1 or rows == 1)
