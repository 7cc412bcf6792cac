"""Fused epilogue math for the SM90 GEMM, applied in registers (fp32) before the store.

``apply_affine`` folds the per-element pieces that need the element's (m, n) coordinate
(scales, bias, residual); ``activate`` is the pointwise activation. Out-of-range coordinates are
clamped into range for the loads (the TMA store clips them), so the hot path has no branches.
"""

from __future__ import annotations

import math

import cutlass
import cutlass.cute as cute
from cutlass import Float32, Int32, const_expr

_LOG2_E = math.log2(math.e)
_INV_SQRT2 = 1.0 / math.sqrt(2.0)
_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)


@cute.jit
def _sigmoid(x: Float32) -> Float32:
    e = cute.math.exp2(x * Float32(-_LOG2_E), fastmath=True)
    return Float32(1.0) / (Float32(1.0) + e)


@cute.jit
def activate(x: Float32, act: cutlass.Constexpr) -> Float32:
    """act(x) for one fp32 value; ``act`` is a compile-time name from config.ACTIVATIONS."""
    y = x
    if const_expr(act == "relu"):
        y = cute.math.max(x, Float32(0.0))
    elif const_expr(act == "gelu"):
        y = Float32(0.5) * x * (Float32(1.0) + cute.math.erf(x * Float32(_INV_SQRT2)))
    elif const_expr(act == "gelu_approx_tanh"):
        # 0.5 x (1 + tanh(u)), u = x (c0 + c1 x^2): 2 FMA + 2 MUL + 1 MUFU
        u = x * (x * x * Float32(_SQRT_2_OVER_PI * 0.044715) + Float32(_SQRT_2_OVER_PI))
        hx = Float32(0.5) * x
        y = hx * cute.math.tanh(u, fastmath=True) + hx
    elif const_expr(act == "gelu_approx_tanh_of_half"):
        # the same gelu of x given h = x / 2 (`config.gelu_from_half`): u = h (2 c0 + 8 c1 h^2), then
        # h tanh(u) + h. Every constant is the one above times a power of two, so each rounding is
        # the same and the result is bit for bit the one above, one multiply fewer.
        u = x * (x * x * Float32(8.0 * _SQRT_2_OVER_PI * 0.044715) + Float32(2.0 * _SQRT_2_OVER_PI))
        y = x * cute.math.tanh(u, fastmath=True) + x
    elif const_expr(act == "silu"):
        y = x * _sigmoid(x)
    elif const_expr(act == "sigmoid"):
        y = _sigmoid(x)
    elif const_expr(act == "tanh"):
        y = cute.math.tanh(x, fastmath=True)
    return y


@cute.jit
def apply_affine(
    acc: cute.Tensor,  # (per-thread accumulator fragment), fp32, modified in place
    coords: cute.Tensor,  # same shape: (m, n) coordinate inside the CTA tile of each element
    m0: Int32,
    n0: Int32,
    batch: Int32,  # origin of the tile in the problem
    m_max: Int32,
    n_max: Int32,  # M - 1, N - 1
    bias_m: cute.Tensor,
    bias_n: cute.Tensor,
    scale_m: cute.Tensor,
    scale_n: cute.Tensor,
    residual: cute.Tensor,
    epi: cutlass.Constexpr,
    bias_n_tile: cute.Tensor | None = None,  # the tile's bias along N in shared memory (fp32, clamped)
    halved: cutlass.Constexpr = False,  # bias_n_tile holds bias / 2: produce the pre-activation / 2
):
    """acc = acc * scale_m[m] * scale_n[n] + bias_m[m] + bias_n[n] + residual[m, n, batch]; given
    ``bias_n_tile``, bias_n comes from it at the element's column in the tile, and with ``halved``
    (the tile holds bias / 2, no bias_m or residual) acc becomes half of that in one FMA."""
    for i in cutlass.range_constexpr(cute.size(acc)):
        crd = coords[i]
        gm = cute.math.min(m0 + crd[0], m_max)
        gn = cute.math.min(n0 + crd[1], n_max)
        v = acc[i]
        if const_expr(epi.scale_m):
            v = v * Float32(scale_m[gm])
        if const_expr(epi.scale_n):
            v = v * Float32(scale_n[gn])
        if const_expr(epi.bias_m):
            v = v + Float32(bias_m[gm])
        if const_expr(epi.bias_n):
            if const_expr(halved):
                v = v * Float32(0.5) + bias_n_tile[crd[1]]
            elif const_expr(bias_n_tile is not None):
                v = v + bias_n_tile[crd[1]]
            else:
                v = v + Float32(bias_n[gn])
        if const_expr(epi.residual):
            v = v + Float32(residual[gm, gn, batch])
        acc[i] = v
