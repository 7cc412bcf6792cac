"""``MxNxK`` shape arguments of the GEMM benchmark scripts."""

from __future__ import annotations


def parse_shape(text: str) -> tuple[int, int, int]:
    """``"MxNxK"`` as (M, N, K); a ValueError that quotes the text for anything else."""
    try:
        m, n, k = (int(x) for x in text.split("x"))
    except ValueError:
        raise ValueError(f"shape {text!r}: want MxNxK, e.g. 1024x1024x4096") from None
    if min(m, n, k) < 1:
        raise ValueError(f"shape {text!r}: M, N and K must be positive")
    return m, n, k
