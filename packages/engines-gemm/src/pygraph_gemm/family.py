"""Declaration of the ``gemm`` family (read by the manifest generator at build time)."""

from __future__ import annotations

from pygraph.engines.hookspec import hookimpl
from pygraph.engines.manifest import EngineFamily, EngineSlot


@hookimpl
def pygraph_families() -> list[EngineFamily]:
    return [
        EngineFamily(
            name="gemm",
            engine_id=20400,
            module="pygraph_gemm.engines",
            factory="make_engines",
            slots={
                "gemm_sm90": EngineSlot(0),  # CuTe DSL, TMA + wgmma
                "gemm_sm80": EngineSlot(1, opt_in=True),  # CuTe DSL, portable cp.async + mma.sync
            },
            anchors=("MATMUL",),
            analyzer=("pygraph_gemm.analyzer", "analyze"),
            heuristics=("pygraph_gemm.heuristics", "recommend"),
        )
    ]
