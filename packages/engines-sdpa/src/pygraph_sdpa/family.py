"""Declarations of the ``sdpa_fwd`` and ``sdpa_bwd`` families (read by the manifest generator at build time)."""

from __future__ import annotations

from pygraph.engines.hookspec import hookimpl
from pygraph.engines.manifest import EngineFamily, EngineSlot


@hookimpl
def pygraph_families() -> list[EngineFamily]:
    return [
        EngineFamily(
            name="sdpa_fwd",
            engine_id=20500,
            package="pygraph_sdpa",
            slots={
                # opt-in until it is proven on the device (PYGRAPH_ENABLE_OPT_IN_ENGINES=sdpa_fwd_sm90)
                "sdpa_fwd_sm90": EngineSlot(
                    0, impl=("pygraph_sdpa.engines.sm90", "SdpaFwdSm90Engine"), opt_in=True
                ),
            },
            anchors=("SDPA",),
            analyzer=("pygraph_sdpa.analyzer", "analyze"),
            heuristics=("pygraph_sdpa.heuristics", "recommend"),
        ),
        EngineFamily(
            name="sdpa_bwd",
            engine_id=20600,
            package="pygraph_sdpa",
            slots={
                # opt-in until it is proven on the device (PYGRAPH_ENABLE_OPT_IN_ENGINES=sdpa_bwd_sm90)
                "sdpa_bwd_sm90": EngineSlot(
                    0, impl=("pygraph_sdpa.engines.sm90", "SdpaBwdSm90Engine"), opt_in=True
                ),
            },
            anchors=("SDPA_BWD",),
            analyzer=("pygraph_sdpa.analyzer", "analyze"),
            heuristics=("pygraph_sdpa.heuristics", "recommend"),
        ),
    ]
