"""Registers, spill frame and shared memory of a compiled kernel, read from its cubin (no GPU).

A cubin from ``cuda.tile.compilation.export_kernel(..., output_format="cubin")`` is an ELF file:
the register count and the per-thread stack frame (the spill) are attributes of its global
``.nv.info`` section, the static shared memory the size of the kernel's ``.nv.shared`` section.
Used by ``scripts/cutile_resources.py`` and by the compile tests that hold the chunk kernels to
no spill (a spill frame made the backward's one-kernel chunk gradient 30x slower on the H200).
"""

from __future__ import annotations

import struct

__all__ = ["resources"]

_REGCOUNT, _FRAME_SIZE = 0x2F, 0x11  # EIATTR codes of the global .nv.info section
_FMT_SVAL = 0x04  # an attribute with a u16 size and a payload


def _sections(blob: bytes) -> list[tuple[str, int, int]]:
    """(name, file offset, size) of every section of an ELF64 little-endian file."""
    shoff = struct.unpack_from("<Q", blob, 0x28)[0]
    entsize, count, names = struct.unpack_from("<HHH", blob, 0x3A)
    rows = [struct.unpack_from("<IIQQQQ", blob, shoff + i * entsize) for i in range(count)]
    base = rows[names][4]

    def name(at: int) -> str:
        return blob[base + at : blob.index(b"\0", base + at)].decode()

    return [(name(r[0]), r[4], r[5]) for r in rows]


def resources(cubin: bytes) -> dict[str, int]:
    """registers, frame (bytes per thread) and shared (bytes) of a one-kernel cubin."""
    out = {"registers": 0, "frame": 0, "shared": 0}
    for name, offset, size in _sections(cubin):
        if name == ".nv.info":
            at = offset
            while at < offset + size:
                fmt, attr, length = cubin[at], cubin[at + 1], struct.unpack_from("<H", cubin, at + 2)[0]
                if fmt != _FMT_SVAL:
                    at += 4
                    continue
                value = struct.unpack_from("<I", cubin, at + 8)[0]
                if attr == _REGCOUNT:
                    out["registers"] = value
                elif attr == _FRAME_SIZE:
                    out["frame"] = max(out["frame"], value)
                at += 4 + length
        elif name.startswith(".nv.shared.") and not name.startswith(".nv.shared.reserved"):
            out["shared"] = max(out["shared"], size)
    return out
