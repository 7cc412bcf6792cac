"""Declarations of the ``gdn``, ``kda`` and ``gdn2`` families (read by the manifest generator at build time)."""

from __future__ import annotations

from pygraph.engines.hookspec import hookimpl
from pygraph.engines.manifest import EngineFamily, EngineSlot


def _family(
    name: str,
    engine_id: int,
    anchors: tuple[str, ...],
    cutile: EngineSlot | None = None,
    sm90: EngineSlot | None = None,
    extra: dict[str, EngineSlot] | None = None,
) -> EngineFamily:
    no_backend = f"no backend lowers {name} graphs"
    return EngineFamily(
        name=name,
        engine_id=engine_id,
        package="pygraph_linear_attention",
        slots={
            f"{name}_sm90": sm90
            or EngineSlot(
                0, planned=f"the chunked CuTe DSL kernels for Hopper are not written yet; {no_backend}"
            ),
            f"{name}_cutile": cutile
            or EngineSlot(
                1, planned=f"the portable cuTile kernels (sm80 and up) are not written yet; {no_backend}"
            ),
            **(extra or {}),
        },
        anchors=anchors,
        analyzer=("pygraph_linear_attention.analyzer", "analyze"),
        heuristics=("pygraph_linear_attention.heuristics", "recommend"),
    )


@hookimpl
def pygraph_families() -> list[EngineFamily]:
    return [
        # all default-on: on the H200 the cuTile forward passed its 26 correctness cases (bf16
        # relative error of O 2.4e-3 to 4.2e-3), the cuTile backward its 26 (every gradient 2.5e-3
        # to 4.4e-3 but d_a_log's 8.4e-3), the CuTe DSL forward (gdn_sm90) its 34 and 46 split (the
        # same errors) and the CuTe DSL backward (gdn_sm90_bwd) its 23 (2.2e-3 to 4.8e-3, d_a_log
        # 9.8e-3); no backend serves a gdn or gdn_bwd graph.
        _family(
            "gdn",
            20100,
            ("GDN", "GDN_BWD"),
            cutile=EngineSlot(1, impl=("pygraph_linear_attention.gdn.engine_cutile", "GdnCutileEngine")),
            sm90=EngineSlot(0, impl=("pygraph_linear_attention.gdn.engine_sm90", "GdnSm90Engine")),
            extra={
                "gdn_cutile_bwd": EngineSlot(
                    2, impl=("pygraph_linear_attention.gdn.engine_cutile", "GdnCutileBwdEngine")
                ),
                "gdn_sm90_bwd": EngineSlot(
                    3, impl=("pygraph_linear_attention.gdn.engine_sm90", "GdnSm90BwdEngine")
                ),
            },
        ),
        # kda and gdn2: the CuTe DSL forwards and backwards (kda_sm90, gdn2_sm90, kda_sm90_bwd,
        # gdn2_sm90_bwd) default-on: they passed the 26 device cases each (O <= 5.0e-3, gradients <=
        # 9.1e-3), compute-sanitizer on the varlen-odd forward and backward, and the torch ops'
        # opcheck and compiled training step (benchmarks/RESULTS.md, Linear attention: "kda and
        # gdn2, the CuTe DSL pairs against FLA", its correctness paragraph). Opt-in: the cuTile
        # engines (correct, but 4-7x FLA's time, and compute-sanitizer reported out of bounds in the
        # backward's gradient scan; on other archs compile-checked only)
        _family(
            "kda",
            20200,
            ("KDA", "KDA_BWD"),
            cutile=EngineSlot(
                1, impl=("pygraph_linear_attention.kda.engine_cutile", "KdaCutileEngine"), opt_in=True
            ),
            sm90=EngineSlot(0, impl=("pygraph_linear_attention.kda.engine_sm90", "KdaSm90Engine")),
            extra={
                "kda_cutile_bwd": EngineSlot(
                    2, impl=("pygraph_linear_attention.kda.engine_cutile", "KdaCutileBwdEngine"), opt_in=True
                ),
                "kda_sm90_bwd": EngineSlot(
                    3, impl=("pygraph_linear_attention.kda.engine_sm90", "KdaSm90BwdEngine")
                ),
            },
        ),
        _family(
            "gdn2",
            20300,
            ("GDN2", "GDN2_BWD"),
            cutile=EngineSlot(
                1, impl=("pygraph_linear_attention.kda.engine_cutile", "Gdn2CutileEngine"), opt_in=True
            ),
            sm90=EngineSlot(0, impl=("pygraph_linear_attention.kda.engine_sm90", "Gdn2Sm90Engine")),
            extra={
                "gdn2_cutile_bwd": EngineSlot(
                    2,
                    impl=("pygraph_linear_attention.kda.engine_cutile", "Gdn2CutileBwdEngine"),
                    opt_in=True,
                ),
                "gdn2_sm90_bwd": EngineSlot(
                    3, impl=("pygraph_linear_attention.kda.engine_sm90", "Gdn2Sm90BwdEngine")
                ),
            },
        ),
    ]
