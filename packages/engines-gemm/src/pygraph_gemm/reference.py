"""Plain-torch references of the GEMM family: matmul and every fused epilogue piece.

    out = act((a @ b) * row_scale[:, None] * col_scale[None, :] + bias + residual)

computed in ``dtype`` (float64 by default), in the order the kernels apply the pieces; the
pre-activation value is what the kernels write to their aux output. The family's correctness
suites (SM90 and SM80) check against these, and a user can check a graph's GEMM the same way::

    from pygraph_gemm.reference import gemm_reference
    out, pre = gemm_reference(a, b, bias=bias, activation="gelu_approx_tanh")
    err = (y.double() - out).norm() / out.norm()
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

# the activations the kernels fuse (pygraph_gemm.kernels.config.ACTIVATIONS) with their aliases
_ACTIVATIONS = {
    "none": lambda x: x,
    "identity": lambda x: x,
    "relu": torch.relu,
    "gelu": F.gelu,
    "gelu_erf": F.gelu,
    "gelu_approx_tanh": lambda x: F.gelu(x, approximate="tanh"),
    "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),
    "silu": F.silu,
    "swish": F.silu,
    "sigmoid": torch.sigmoid,
    "tanh": torch.tanh,
}


def activation(x: torch.Tensor, name: str) -> torch.Tensor:
    """``name`` applied to ``x``: one of the kernels' activations (or an alias such as "swish")."""
    fn = _ACTIVATIONS.get(name)
    if fn is None:
        raise ValueError(
            f"pygraph_gemm.reference.activation: activation {name!r} is not one of {sorted(_ACTIVATIONS)}"
        )
    return fn(x)


def gemm_reference(
    a: torch.Tensor,
    b: torch.Tensor,
    *,
    row_scale: torch.Tensor | None = None,
    col_scale: torch.Tensor | None = None,
    bias: torch.Tensor | None = None,
    residual: torch.Tensor | None = None,
    activation: str = "none",
    dtype: torch.dtype = torch.float64,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(output, pre-activation) of ``a (L?, M, K) @ b (L?, K, N)`` with the fused epilogue, in ``dtype``.

    ``row_scale`` has M values, ``col_scale`` and ``bias`` N (one vector for every batch);
    ``residual`` broadcasts to the output. Every operand is converted to ``dtype`` before it is
    used, so the result carries no rounding of the inputs' own precision.
    """
    acc = torch.matmul(a.to(dtype), b.to(dtype))
    if row_scale is not None:
        acc = acc * row_scale.to(dtype).reshape(-1, 1)
    if col_scale is not None:
        acc = acc * col_scale.to(dtype).reshape(-1)
    if bias is not None:
        acc = acc + bias.to(dtype).reshape(-1)
    if residual is not None:
        acc = acc + residual.to(dtype)
    return _activation(acc, activation), acc


_activation = activation  # the keyword argument of gemm_reference shadows the function's name
