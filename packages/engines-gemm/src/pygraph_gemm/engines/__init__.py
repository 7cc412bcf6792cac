"""The family's factory: builds the engines for the slots the manifest offers."""

from __future__ import annotations

from typing import Any

from pygraph.engines.factory import engines_from_table

# engine name -> ("module", "class"); a slot absent here ships no engine yet.
IMPLEMENTATIONS: dict[str, tuple[str, str]] = {
    "gemm_sm90": ("pygraph_gemm.engines.sm90", "GemmSm90Engine"),
    "gemm_sm80": ("pygraph_gemm.engines.sm80", "GemmSm80Engine"),
}


def make_engines(ids: dict[str, int]) -> list[Any]:
    return engines_from_table(IMPLEMENTATIONS, ids)
