"""Enums that mirror the backend's names, and conversion from what users pass.

The member names equal nvidia-cudnn-frontend's so classic code reads the same; values are ours.
torch dtypes are recognised by duck typing (module name and ``str``), so nothing here imports torch.
"""

from __future__ import annotations

import enum
from typing import Any

from pygraph.errors import OpInputError

__all__ = [
    "attention_implementation",
    "behavior_note",
    "build_plan_policy",
    "convert_enum",
    "convolution_mode",
    "cuda_graph_retention",
    "data_type",
    "data_type_arg",
    "diagonal_alignment",
    "enum_arg",
    "heur_mode",
    "knob_type",
    "moe_grouped_matmul_mode",
    "norm_forward_phase",
    "numerical_note",
    "reduction_mode",
    "reshape_mode",
    "scalar_type",
    "tensor_reordering",
    "to_data_type",
]


class data_type(enum.Enum):
    FLOAT = "float"
    DOUBLE = "double"
    HALF = "half"
    INT8 = "int8"
    INT32 = "int32"
    INT8x4 = "int8x4"
    UINT8 = "uint8"
    UINT8x4 = "uint8x4"
    INT8x32 = "int8x32"
    BFLOAT16 = "bfloat16"
    INT64 = "int64"
    BOOLEAN = "boolean"
    FP8_E4M3 = "fp8_e4m3"
    FP8_E5M2 = "fp8_e5m2"
    FAST_FLOAT_FOR_FP8 = "fast_float_for_fp8"
    FP8_E8M0 = "fp8_e8m0"
    FP8_E5M3 = "fp8_e5m3"
    FP4_E2M1 = "fp4_e2m1"
    INT4 = "int4"
    NOT_SET = "not_set"

    @property
    def is_set(self) -> bool:
        return self is not data_type.NOT_SET


def _names(*names: str) -> dict[str, str]:
    return {n: n for n in names}


heur_mode = enum.Enum("heur_mode", _names("A", "B", "FALLBACK", "OPENSOURCE"))
build_plan_policy = enum.Enum("build_plan_policy", _names("HEURISTICS_CHOICE", "ALL"))
knob_type = enum.Enum(
    "knob_type",
    _names(
        "NOT_SET", "SWIZZLE", "TILE_SIZE", "EDGE", "MULTIPLY", "SPLIT_K_BUF", "TILEK", "STAGES",
        "REDUCTION_MODE", "SPLIT_K_SLC", "IDX_MODE", "SPECFILT", "KERNEL_CFG", "WORKSPACE",
        "TILE_CGA_M", "TILE_CGA_N", "BLOCK_SIZE", "OCCUPANCY", "ARRAY_SIZE_PER_THREAD", "SPLIT_COLS",
        "TILE_ROWS", "TILE_COLS", "LOAD_SIZE", "CTA_COUNT", "STREAM_K", "SPLIT_P_SLC", "TILE_M",
        "TILE_N", "WARP_SPEC_CFG", "SWAP_AB", "INPUT_TMA_ENABLE", "OUTPUT_TMA_ENABLE", "TILE_CGA",
        "SCHED_POLICY", "PACK_GQA", "SPLIT_KV", "PIPELINE_ARCH", "MMA_TILE_M", "MMA_TILE_N",
        "MMA_TILE_K", "CTA_GROUP", "WARPS_M", "WARPS_N",
    ),
)  # fmt: skip
norm_forward_phase = enum.Enum("norm_forward_phase", _names("INFERENCE", "TRAINING", "NOT_SET"))
reduction_mode = enum.Enum(
    "reduction_mode",
    _names("ADD", "MUL", "MIN", "MAX", "AMAX", "AVG", "NORM1", "NORM2", "MUL_NO_ZEROS", "NOT_SET"),
)
reshape_mode = enum.Enum("reshape_mode", _names("VIEW_ONLY", "LOGICAL"))
convolution_mode = enum.Enum("convolution_mode", _names("CONVOLUTION", "CROSS_CORRELATION"))
diagonal_alignment = enum.Enum("diagonal_alignment", _names("TOP_LEFT", "BOTTOM_RIGHT"))
attention_implementation = enum.Enum("attention_implementation", _names("AUTO", "COMPOSITE", "UNIFIED"))
moe_grouped_matmul_mode = enum.Enum("moe_grouped_matmul_mode", _names("NONE", "GATHER", "SCATTER", "COMBINE"))
tensor_reordering = enum.Enum("tensor_reordering", _names("NONE", "INT8x32", "F16x16", "F8_128x4"))
scalar_type = enum.Enum("scalar_type", _names("RUNTIME_PARAM", "COMPILE_TIME_CONST"))
cuda_graph_retention = enum.Enum("cuda_graph_retention", _names("PER_GRAPH", "NONE"))
behavior_note = enum.Enum(
    "behavior_note",
    _names(
        "RUNTIME_COMPILATION", "REQUIRES_FILTER_INT8x32_REORDER", "REQUIRES_BIAS_INT8x32_REORDER",
        "SUPPORTS_CUDA_GRAPH_NATIVE_API", "CUBLASLT_DEPENDENCY",
    ),
)  # fmt: skip
numerical_note = enum.Enum(
    "numerical_note",
    _names(
        "TENSOR_CORE", "DOWN_CONVERT_INPUTS", "REDUCED_PRECISION_REDUCTION", "FFT", "NONDETERMINISTIC",
        "WINOGRAD", "WINOGRAD_TILE_4x4", "WINOGRAD_TILE_6x6", "WINOGRAD_TILE_13x13", "STRICT_NAN_PROP",
    ),
)  # fmt: skip

# torch dtype spelling (str(torch.float16) == "torch.float16") -> ours.
_TORCH_NAMES: dict[str, data_type] = {
    "float32": data_type.FLOAT,
    "float": data_type.FLOAT,
    "float64": data_type.DOUBLE,
    "double": data_type.DOUBLE,
    "float16": data_type.HALF,
    "half": data_type.HALF,
    "bfloat16": data_type.BFLOAT16,
    "int8": data_type.INT8,
    "uint8": data_type.UINT8,
    "int32": data_type.INT32,
    "int": data_type.INT32,
    "int64": data_type.INT64,
    "long": data_type.INT64,
    "bool": data_type.BOOLEAN,
    "float8_e4m3fn": data_type.FP8_E4M3,
    "float8_e5m2": data_type.FP8_E5M2,
    "float8_e8m0fnu": data_type.FP8_E8M0,
    "float4_e2m1fn_x2": data_type.FP4_E2M1,
}


def to_data_type(value: Any) -> data_type:
    """Our `data_type` for one of ours, the backend's enum, a torch dtype or a member name.

    Raises TypeError naming the value when it is none of those.
    """
    if isinstance(value, data_type):
        return value
    if value is None:
        return data_type.NOT_SET
    kind = type(value)
    if kind.__module__ == "torch" or (kind.__name__ == "dtype" and str(value).startswith("torch.")):
        found = _TORCH_NAMES.get(str(value).removeprefix("torch."))
        if found is None:
            raise TypeError(f"torch dtype {value} has no pygraph.data_type counterpart")
        return found
    name = getattr(value, "name", None)
    if isinstance(name, str) and name in data_type.__members__:
        return data_type[name]
    if isinstance(value, str) and value in data_type.__members__:
        return data_type[value]
    found = _TORCH_NAMES.get(str(value).removeprefix("torch."))  # numpy dtypes spell the same
    if found is not None:
        return found
    raise TypeError(f"expected a pygraph.data_type, a backend data_type or a torch dtype, got {value!r}")


def convert_enum(value: Any, enum_cls: type[enum.Enum]) -> enum.Enum:
    """``value`` as a member of ``enum_cls``: ours, the backend's same-named member, or the name itself."""
    if isinstance(value, enum_cls):
        return value
    name = value if isinstance(value, str) else getattr(value, "name", None)
    if isinstance(name, str) and name in enum_cls.__members__:
        return enum_cls[name]
    raise TypeError(f"expected a {enum_cls.__name__} member, got {value!r}")


def data_type_arg(value: Any, what: str) -> data_type:
    """`to_data_type` of a public call's argument: `OpInputError` naming ``what`` (the call and the
    argument) when the value is no data type."""
    try:
        return to_data_type(value)
    except TypeError as exc:
        raise OpInputError(f"{what}: {exc}") from None


def enum_arg(value: Any, enum_cls: type[enum.Enum], what: str) -> enum.Enum:
    """`convert_enum` of a public call's argument: `OpInputError` naming ``what`` and the members
    accepted when the value is none of them."""
    try:
        return convert_enum(value, enum_cls)
    except TypeError:
        raise OpInputError(
            f"{what}: {value!r} is not a {enum_cls.__name__} (one of {', '.join(enum_cls.__members__)})"
        ) from None
