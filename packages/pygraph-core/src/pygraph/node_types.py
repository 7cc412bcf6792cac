"""One op-identity namespace: every node of a graph has exactly one `NodeType`."""

from __future__ import annotations

import enum

__all__ = ["NodeType"]


class NodeType(enum.Enum):
    # Explicit and uniform ops.
    MATMUL = "matmul"
    POINTWISE = "pointwise"  # the 54 pointwise builders; params["mode"] names which one
    # Structured, lowerable ops.
    RMSNORM = "rmsnorm"
    RMSNORM_BWD = "rmsnorm_backward"
    LAYERNORM = "layernorm"
    LAYERNORM_BWD = "layernorm_backward"
    ADALAYERNORM = "adalayernorm"
    ADALAYERNORM_BWD = "adalayernorm_backward"
    INSTANCENORM = "instancenorm"
    INSTANCENORM_BWD = "instancenorm_backward"
    BATCHNORM = "batchnorm"
    BATCHNORM_INFERENCE = "batchnorm_inference"
    BATCHNORM_BWD = "batchnorm_backward"
    GENSTATS = "genstats"
    REDUCTION = "reduction"
    BLOCK_SCALE_DEQUANTIZE = "block_scale_dequantize"
    BLOCK_SCALE_QUANTIZE = "block_scale_quantize"
    MOE_GROUPED_MATMUL = "moe_grouped_matmul"
    MOE_GROUPED_MATMUL_BWD = "moe_grouped_matmul_bwd"
    CONV_FPROP = "conv_fprop"
    CONV_DGRAD = "conv_dgrad"
    CONV_WGRAD = "conv_wgrad"
    RESHAPE = "reshape"
    SLICE = "slice"
    TRANSPOSE = "transpose"
    CONCATENATE = "concatenate"
    ROPE = "rope"
    ROPE_BWD = "rope_backward"
    # Captured SDPA variants.
    SDPA = "sdpa"
    SDPA_BWD = "sdpa_backward"
    SDPA_FP8 = "sdpa_fp8"
    SDPA_FP8_BWD = "sdpa_fp8_backward"
    SDPA_MXFP8 = "sdpa_mxfp8"
    SDPA_MXFP8_BWD = "sdpa_mxfp8_backward"
    # Python-only linear attention (no backend lowering).
    GDN = "gdn"
    GDN_BWD = "gdn_bwd"
    KDA = "kda"
    KDA_BWD = "kda_bwd"
    GDN2 = "gdn2"
    GDN2_BWD = "gdn2_bwd"

    @property
    def op_name(self) -> str:
        """The builder method's name (for POINTWISE, the node's params["mode"] instead)."""
        return self.value
