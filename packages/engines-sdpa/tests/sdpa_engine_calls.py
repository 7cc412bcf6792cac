"""The python sdpa engines' call paths on the CPU: a recorder standing in for a compiled function,
a variant pack of a graph's declared geometry at made-up addresses (no torch needed), and the spill
frames of compiled kernels."""

from __future__ import annotations


class Recorder:
    """Records each call's arguments instead of launching."""

    def __init__(self):
        self.calls = []

    def __call__(self, *args):
        self.calls.append(args)


def pack_of(graph, base: int = 0x100000, step: int = 0x100000):
    """A variant pack of ``graph``'s declared geometry, operand i at ``base + i * step``."""
    from pygraph.execution.variant_pack import OperandBuffer, VariantPack

    layout = graph.engine_request().layout
    buffers = [
        OperandBuffer(base + i * step, tuple(d.shape), tuple(d.stride), d.dtype)
        for i, d in enumerate(layout.declared)
    ]
    return VariantPack(layout, buffers, device=0)


def spill_frames(cache_dir) -> dict[str, int]:
    """Each kernel's spill frame (bytes a thread) in the compiled objects under ``cache_dir``, read
    from their embedded cubins (`pygraph.cubin_resources`); the kernel names shortened."""
    from pygraph.cubin_resources import embedded_cubins, kernel_resources

    frames = {}
    for obj in sorted(cache_dir.rglob("*.o")):
        for cubin in embedded_cubins(obj.read_bytes()):
            for name, res in kernel_resources(cubin).items():
                frames[name.split("_pygraph")[0]] = res["frame"]
    return frames
