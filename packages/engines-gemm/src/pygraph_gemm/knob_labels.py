"""Short names of gemm_sm90 knob sets (``GemmKnobs``), as benchmark tables, device scripts and
docs/gemm.md write them: ``128x256c21z8g2vf`` is a 128x256 tile, a 2x1 cluster, swizzle 8,
warpgroups two k-blocks apart, serpentine bands and every other tile's K flipped. Each knob at its
default leaves no mark, so a label stays short and reads back to the same knobs."""

from __future__ import annotations

import re

from .kernels.config import GemmKnobs

_LABEL = re.compile(
    r"(\d+)x(\d+)(?:x(\d+))?c(\d)(\d)(s?)(n?)(?:z(\d+))?(p?)(?:k(\d+))?(?:g(\d+))?(?:a(\d+))?(v?)(f?)(o?)"
)
_GRAMMAR = "tile x tile [x tile_k] c<M><N>[s][n][z#][p][k#][g#][a#][v][f][o]"


def knob_label(kn: GemmKnobs) -> str:
    """Short config name: tile (x K when the k-block is not 64 deep), cluster MxN, s(wap), n (raster),
    z(swizzle), p(ing-pong), k(split), g (staggered warpgroups, k-blocks apart), a (A/B stages, when
    not the most that fit), v (serpentine bands), f (every other tile's k-blocks last to first), o
    (clusters numbered GPC by GPC)."""
    return (
        f"{kn.tile_m}x{kn.tile_n}"
        + (f"x{kn.tile_k}" if kn.tile_k != 64 else "")
        + f"c{kn.cga_m}{kn.cga_n}"
        + ("s" if kn.swap_ab else "")
        + ("n" if kn.raster == "n" else "")
        + (f"z{kn.swizzle}" if kn.swizzle > 1 else "")
        + ("p" if kn.pingpong else "")
        + (f"k{kn.split_k}" if kn.split_k > 1 else "")
        + (f"g{kn.stagger}" if kn.stagger else "")
        + (f"a{kn.stages}" if kn.stages else "")
        + ("v" if kn.serpentine else "")
        + ("f" if kn.k_flip else "")
        + ("o" if kn.place_order else "")
    )


def parse_knob_label(label: str) -> GemmKnobs:
    """The inverse of ``knob_label``: '128x256c21z8g2vf' -> GemmKnobs(128, 256, cga 2x1, swizzle 8,
    stagger 2, serpentine, k_flip)."""
    m = _LABEL.fullmatch(label)
    if m is None:
        raise ValueError(f"parse_knob_label: knob label {label!r} does not read as {_GRAMMAR}")
    tm, tn, tk, cm, cn, swap, ras, swz, pp, sk, g, st, sv, kf, po = m.groups()
    return GemmKnobs(
        tile_m=int(tm),
        tile_n=int(tn),
        tile_k=int(tk or 64),
        cga_m=int(cm),
        cga_n=int(cn),
        swap_ab=bool(swap),
        raster="n" if ras else "m",
        swizzle=int(swz or 1),
        pingpong=bool(pp),
        split_k=int(sk or 1),
        stagger=int(g or 0),
        stages=int(st or 0),
        serpentine=bool(sv),
        k_flip=bool(kf),
        place_order=bool(po),
    )
