"""Launch signatures of the cuTile kernels for ``cuda.tile.compilation.export_kernel``: compiling a
kernel for a named target without a GPU, with the arrays, runtime scalars and constants a launch
passes, so the compiled code is the code a launch runs. Each op's ``export_signatures`` (in its
``cutile_fwd`` and ``cutile_bwd``) describes its launches with `Param` and `signature`.
"""

from __future__ import annotations

from typing import Any

import cuda.tile as ct

__all__ = ["Param", "signature"]


class Param:
    """An array parameter of a kernel, for `export_signatures`: its dtype name and rank."""

    def __init__(self, dtype: str, ndim: int) -> None:
        self.dtype, self.ndim = dtype, ndim


def _constraint(x: Any, constant: bool) -> Any:
    """A launch argument as `export_kernel` takes it: a constant as itself, a runtime scalar int32, an
    array as the engine passes it (last dim contiguous, int32 indexing, no aliasing)."""
    from cuda.tile.compilation import ArrayConstraint, ScalarConstraint

    if constant:
        return x
    if not isinstance(x, Param):
        return ScalarConstraint(ct.int32)
    return ArrayConstraint(
        getattr(ct, x.dtype), x.ndim, index_dtype=ct.int32, stride_lower_bound_incl=0, alias_groups=(),
        may_alias_internally=False, stride_constant=(None,) * (x.ndim - 1) + (1,),
    )  # fmt: skip


def _constants(kernel: Any) -> list[bool]:
    """Which parameters of the kernel are compile-time constants (annotated ``ct.Constant``)."""
    import inspect

    return [
        str(p.annotation).startswith("Const") for p in inspect.signature(kernel._pyfunc).parameters.values()
    ]


def signature(kernel: Any, args: tuple) -> Any:
    """The `KernelSignature` of launching ``kernel`` with ``args`` (`Param` arrays, runtime scalars,
    constants), for ``cuda.tile.compilation.export_kernel``."""
    from cuda.tile.compilation import CallingConvention, KernelSignature

    constraints = [_constraint(x, c) for x, c in zip(args, _constants(kernel))]
    return KernelSignature(constraints, CallingConvention.cutile_python_v1())
