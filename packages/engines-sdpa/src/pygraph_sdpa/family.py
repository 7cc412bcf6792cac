"""Declarations of the ``sdpa_fwd`` and ``sdpa_bwd`` families (read at build time)."""

from __future__ import annotations

from pygraph.engines.hookspec import hookimpl
from pygraph.engines.manifest import EngineFamily, EngineSlot


@hookimpl
def pygraph_families() -> list[EngineFamily]:
    return [
        EngineFamily(
            name="sdpa_fwd",
            engine_id=20500,
            module="pygraph_sdpa.engines",
            factory="make_engines",
            slots={"sdpa_fwd_sm90": EngineSlot(0, opt_in=True)},  # planned
            anchors=("SDPA",),
        ),
        EngineFamily(
            name="sdpa_bwd",
            engine_id=20600,
            module="pygraph_sdpa.engines",
            factory="make_engines",
            slots={"sdpa_bwd_sm90": EngineSlot(0, opt_in=True)},  # planned
            anchors=("SDPA_BWD",),
        ),
    ]
