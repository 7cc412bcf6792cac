"""Registers, spill frame and shared memory of compiled kernels, read from their cubins (no GPU).

A cubin (cuTile's ``export_kernel(..., output_format="cubin")``, or one embedded in a CuTe DSL
kernel cache's object file) is an ELF file: each kernel's register count and per-thread stack frame
(the spill) are attributes of the global ``.nv.info`` section, naming the kernel's symbol; its
static shared memory is the size of its ``.nv.shared`` section. Used by ``scripts/cutile_resources.py``
and by the compile tests that hold kernels to no spill (a spill frame made linear attention's
one-kernel chunk gradient 30x slower on the H200; ptxas spills silently where it drops a kernel's
``setmaxnreg``).
"""

from __future__ import annotations

import re
import struct

__all__ = ["embedded_cubins", "kernel_resources", "resources"]

_REGCOUNT, _FRAME_SIZE = 0x2F, 0x11  # EIATTR codes of the global .nv.info section
_FMT_SVAL = 0x04  # an attribute with a u16 size and a payload


def _headers(blob: bytes) -> list[tuple[int, ...]]:
    """The section headers of an ELF64 little-endian file: (name offset, type, flags, address, file
    offset, size) each."""
    shoff = struct.unpack_from("<Q", blob, 0x28)[0]
    entsize, count = struct.unpack_from("<HH", blob, 0x3A)
    return [struct.unpack_from("<IIQQQQ", blob, shoff + i * entsize) for i in range(count)]


def _sections(blob: bytes) -> list[tuple[str, int, int]]:
    """(name, file offset, size) of every section of an ELF64 little-endian file."""
    rows = _headers(blob)
    base = rows[struct.unpack_from("<H", blob, 0x3E)[0]][4]

    def name(at: int) -> str:
        return blob[base + at : blob.index(b"\0", base + at)].decode()

    return [(name(r[0]), r[4], r[5]) for r in rows]


def _attributes(cubin: bytes, offset: int, size: int):
    """(attribute, symbol index, value) of each sized attribute of the ``.nv.info`` section at
    ``offset``."""
    at = offset
    while at < offset + size:
        fmt, attr, length = cubin[at], cubin[at + 1], struct.unpack_from("<H", cubin, at + 2)[0]
        if fmt != _FMT_SVAL:
            at += 4
            continue
        yield (attr, *struct.unpack_from("<II", cubin, at + 4))
        at += 4 + length


def resources(cubin: bytes) -> dict[str, int]:
    """registers, frame (bytes per thread) and shared (bytes) of a one-kernel cubin."""
    out = {"registers": 0, "frame": 0, "shared": 0}
    for name, offset, size in _sections(cubin):
        if name == ".nv.info":
            for attr, _, value in _attributes(cubin, offset, size):
                if attr == _REGCOUNT:
                    out["registers"] = value
                elif attr == _FRAME_SIZE:
                    out["frame"] = max(out["frame"], value)
        elif name.startswith(".nv.shared.") and not name.startswith(".nv.shared.reserved"):
            out["shared"] = max(out["shared"], size)
    return out


_EM_CUDA = 190  # e_machine of a CUDA ELF


def embedded_cubins(blob: bytes) -> list[bytes]:
    """The CUDA ELF files inside ``blob`` (a host object that embeds them, or a cubin itself), each
    cut at the end of its last section or header table."""
    out = []
    for m in re.finditer(rb"\x7fELF\x02\x01\x01", blob):
        elf = blob[m.start() :]
        if struct.unpack_from("<H", elf, 0x12)[0] != _EM_CUDA:
            continue
        phoff, shoff = struct.unpack_from("<QQ", elf, 0x20)
        phentsize, phnum, shentsize, shnum = struct.unpack_from("<HHHH", elf, 0x36)
        # SHT_NOBITS (8) sections take no room in the file
        ends = [row[4] + row[5] for row in _headers(elf) if row[1] != 8]
        out.append(elf[: max(shoff + shentsize * shnum, phoff + phentsize * phnum, *ends)])
    return out


def kernel_resources(cubin: bytes) -> dict[str, dict[str, int]]:
    """registers and frame (bytes per thread) of each kernel of a cubin, by symbol name."""
    sections = _sections(cubin)
    symbols: list[str] = []
    tables = {name: (offset, size) for name, offset, size in sections if name in (".symtab", ".strtab")}
    if len(tables) == 2:
        (sym_at, sym_size), (str_at, _) = tables[".symtab"], tables[".strtab"]
        for i in range(sym_size // 24):
            at = str_at + struct.unpack_from("<I", cubin, sym_at + i * 24)[0]
            symbols.append(cubin[at : cubin.index(b"\0", at)].decode())
    out: dict[str, dict[str, int]] = {}
    for name, offset, size in sections:
        if name != ".nv.info":
            continue
        for attr, sym, value in _attributes(cubin, offset, size):
            if attr in (_REGCOUNT, _FRAME_SIZE) and sym < len(symbols):
                entry = out.setdefault(symbols[sym], {"registers": 0, "frame": 0})
                entry["registers" if attr == _REGCOUNT else "frame"] = value
    return out
