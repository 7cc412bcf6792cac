"""Short names of gemm_sm90 knob sets (``GemmKnobs``), as benchmark tables, device scripts and
docs/gemm.md write them: ``128x256c21z8g2vf`` is a 128x256 tile, a 2x1 cluster, swizzle 8,
warpgroups two k-blocks apart, serpentine bands and every other tile's K flipped. Each knob at its
default leaves no mark, so a label stays short and reads back to the same knobs."""

from __future__ import annotations

import re

from .kernels.config import GemmKnobs

_LABEL = re.compile(
    r"(\d+)x(\d+)(?:x(\d+))?c(\d)(\d)(s?)(n?)(?:z(\d+))?(p?)(?:k(\d+))?(?:t(\d+))?(?:g(\d+))?(?:a(\d+))?"
    r"(?:r(\d+))?(e?)(w?)(l?)(?:h(\d))?(v?)(f?)(d?)(j?)(o?)"
)


def knob_label(kn: GemmKnobs) -> str:
    """Short config name: tile (x K when the k-block is not 64 deep), cluster MxN, s(wap), n (raster),
    z(swizzle), p(ing-pong), k(split), t (split tail, max slices), g (staggered warpgroups, k-blocks
    apart), a (A/B stages, when not the most that fit), r (store-ring slots, when not the default),
    e (64-wide epilogue sub-tiles), w (every k-block's wgmma waited for before the next), l (the bias
    read with global loads in the epilogue instead of staged in shared memory), h (the L2 eviction
    hints of the A/B loads and C's stores), v (serpentine bands), f (every other tile's k-blocks
    last to first), d (tanh-gelu from the whole pre-activation with the bias staged unhalved, instead
    of from half of it), j (the runtime-slot main loop only, instead of whole passes over the A/B
    ring with constant slot indices), o (clusters numbered by SM group)."""
    return (
        f"{kn.tile_m}x{kn.tile_n}"
        + (f"x{kn.tile_k}" if kn.tile_k != 64 else "")
        + f"c{kn.cga_m}{kn.cga_n}"
        + ("s" if kn.swap_ab else "")
        + ("n" if kn.raster == "n" else "")
        + (f"z{kn.swizzle}" if kn.swizzle > 1 else "")
        + ("p" if kn.pingpong else "")
        + (f"k{kn.split_k}" if kn.split_k > 1 else "")
        + (f"t{kn.tail_split}" if kn.tail_split > 1 else "")
        + (f"g{kn.stagger}" if kn.stagger else "")
        + (f"a{kn.stages}" if kn.stages else "")
        + (f"r{kn.epi_slots}" if kn.epi_slots else "")
        + ("e" if kn.epi_n == 64 else "")
        + ("w" if kn.wait_all else "")
        + ("l" if not kn.bias_smem else "")
        + (f"h{kn.l2_hint}" if kn.l2_hint else "")
        + ("v" if kn.serpentine else "")
        + ("f" if kn.k_flip else "")
        + ("d" if not kn.gelu_half else "")
        + ("j" if not kn.static_ring else "")
        + ("o" if kn.place_order else "")
    )


def parse_knob_label(label: str) -> GemmKnobs:
    """The inverse of ``knob_label``: '128x256c21z4e' -> GemmKnobs(128, 256, cga 2x1, swizzle 4, epi_n 64)."""
    m = _LABEL.fullmatch(label)
    if m is None:
        raise ValueError(
            f"knob label {label!r} does not read as tile x tile [x tile_k] c<M><N>[s][n][z#][p][k#][t#][g#][a#][r#][e][w][l][h#][v][f][d][j][o]"
        )
    tm, tn, tk, cm, cn, swap, ras, swz, pp, sk, ts, g, st, r, e, w, gl, h, sv, kf, gh, sr, po = m.groups()
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
        tail_split=int(ts or 1),
        stagger=int(g or 0),
        stages=int(st or 0),
        epi_slots=int(r or 0),
        epi_n=64 if e else 32,
        wait_all=bool(w),
        bias_smem=not gl,
        l2_hint=int(h or 0),
        serpentine=bool(sv),
        k_flip=bool(kf),
        gelu_half=not gh,
        static_ring=not sr,
        place_order=bool(po),
    )
