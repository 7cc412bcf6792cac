"""Declarations of the ``gdn``, ``kda`` and ``gdn2`` families (read at build time)."""

from __future__ import annotations

from pygraph.engines.hookspec import hookimpl
from pygraph.engines.manifest import EngineFamily, EngineSlot

_MODULE = "pygraph_linear_attention.engines"


def _family(name: str, engine_id: int, anchors: tuple[str, ...]) -> EngineFamily:
    return EngineFamily(
        name=name,
        engine_id=engine_id,
        module=_MODULE,
        factory="make_engines",
        slots={
            f"{name}_sm90": EngineSlot(0, opt_in=True),  # CuTe DSL, Hopper (planned)
            f"{name}_cutile": EngineSlot(1, opt_in=True),  # cuTile, portable (planned)
        },
        anchors=anchors,
    )


@hookimpl
def pygraph_families() -> list[EngineFamily]:
    return [
        _family("gdn", 20100, ("GDN", "GDN_BWD")),
        _family("kda", 20200, ("KDA", "KDA_BWD")),
        _family("gdn2", 20300, ("GDN2", "GDN2_BWD")),
    ]
