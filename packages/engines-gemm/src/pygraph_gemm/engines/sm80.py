"""``gemm_sm80``: the gemm family's portable slot (CuTe DSL, cp.async + mma.sync, fused epilogue).

The kernel (`kernels/gemm_sm80.py`) has no TMA, clusters or warp specialization, so it builds for
any GPU from SM80 on; it is compiled for the device's own arch (a cubin loads only on its own major
architecture). It takes exactly gemm_sm90's arguments in the same kernel frame, so the graph facts,
the plan and its per-call path are gemm_sm90's; only the compiled function and the knob domain
differ. Opt-in (PYGRAPH_ENABLE_OPT_IN_ENGINES): on the H200 it runs at 0.3-0.55x cuBLAS
(benchmarks/RESULTS.md), so where gemm_sm90 or the backend serve a graph they lead.
"""

from __future__ import annotations

from typing import Any

from pygraph.engines.base import Capabilities
from pygraph.ir.dtypes import data_type
from pygraph_gemm.engines.sm90 import _FEATURES, GemmSm90Engine, device_sm

__all__ = ["KNOB_DOMAINS", "GemmSm80Engine"]

# The kernel's tiles (kernels/gemm_sm80.SM80_TILES_MN: every TILE_M x TILE_N pair here is one of
# them); the first point of each axis is the default. No clusters, split-K, ping-pong or swizzle.
KNOB_DOMAINS: dict[str, tuple[Any, ...]] = {
    "TILE_M": (128, 64),
    "TILE_N": (128, 64),
    "TILEK": (32, 64),
    "STAGES": (0,),  # 0: as many as fit 96 KiB (2..4), so sm_86 / sm_89 parts hold them too
    "SWAP_AB": (False, True),
}


class GemmSm80Engine(GemmSm90Engine):
    name = "gemm_sm80"
    capabilities = Capabilities(
        sm_lo=80,
        sm_hi=121,
        dtypes={data_type.BFLOAT16, data_type.HALF, data_type.FLOAT},
        features=_FEATURES,
        knob_domains=KNOB_DOMAINS,
    )

    def _arch_reason(self) -> str | None:
        found = device_sm()
        if found is None or isinstance(found, str):
            return found
        dev, sm = found
        return None if sm >= 80 else f"requires SM80 or newer, device {dev} is SM{sm}"

    def _kernel_args(self) -> dict[str, Any]:
        found = device_sm()
        sm = found[1] if isinstance(found, tuple) else 80
        return {"kernel": "sm80", "arch": f"sm_{sm}"}
