"""Op specs: one `OpSpec` per op, written through the pointwise table, the structured table, the
SDPA capture schema, the linear-attention entries, and the explicit matmul."""

from pygraph.ops.registry import OPS, spec_for

__all__ = ["OPS", "spec_for"]
