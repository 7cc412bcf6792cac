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
                # on by default: its sm90 suite passed on the H200; the hook ranks it per cell (docs/sdpa.md)
                "sdpa_fwd_sm90": EngineSlot(0, impl=("pygraph_sdpa.engines.sm90", "SdpaFwdSm90Engine")),
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
                "sdpa_bwd_sm90": EngineSlot(0, impl=("pygraph_sdpa.engines.sm90", "SdpaBwdSm90Engine")),
            },
            anchors=("SDPA_BWD",),
            analyzer=("pygraph_sdpa.analyzer", "analyze"),
            heuristics=("pygraph_sdpa.heuristics", "recommend"),
        ),
    ]
