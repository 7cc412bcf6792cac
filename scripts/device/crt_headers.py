"""Give cudnn-frontend's Hopper KDA engine the CUDA headers its NVRTC compile includes.

`KdaHopperCudaEngine` (cudnn-frontend 1.32) compiles CUDA C++ that includes ``<mma.h>`` with NVRTC,
against the first CUDA include tree holding ``cuda_bf16.h`` (`cudnn.linear_attention.cake.compiler.
cuda_include_dirs`: CUDA_HOME, then the pip ``nvidia/cu13`` trees on sys.path, then
/usr/local/cuda). Since CUDA 13 the ``crt/`` headers ``mma.h`` includes ship in their own wheel
(nvidia-cuda-crt), which the device image's pip tree lacks: the anchor failed with "crt/mma.h"
missing. This copies the carried wheel's ``crt/`` into that tree (the wheel of the image's CUDA,
13.0: ``bash scripts/device/bundle_crt.sh`` puts it in ``.dev4/``). Which tree that is depends on the
environment (``.dev3/cutile.sh`` sets CUDA_HOME), so ``env.sh`` runs this in every call, under the
call's own CUDA_HOME and sys.path; a tree that has the headers already is left alone.

    python3 scripts/device/crt_headers.py [.dev4]

Prints what it found and did; exits 0 when cudnn-frontend is absent (nothing to give).
"""

from __future__ import annotations

import sys
import zipfile
from pathlib import Path

PREFIX = "nvidia/cu13/include/crt/"


def main(bundle: Path) -> int:
    try:
        from cudnn.linear_attention.cake import compiler
    except ImportError as exc:
        print(f"crt_headers: cudnn-frontend's KDA compiler is not importable ({exc}); nothing to do")
        return 0
    include = Path(compiler.cuda_include_dirs()[0])
    if (include / "crt" / "mma.h").is_file():
        print(f"crt_headers: {include} already has crt/mma.h")
        return 0
    wheels = sorted(bundle.glob("nvidia_cuda_crt-*.whl"))
    if not wheels:
        print(
            f"crt_headers: {include} lacks crt/mma.h and {bundle} holds no nvidia_cuda_crt wheel",
            file=sys.stderr,
        )
        return 1
    with zipfile.ZipFile(wheels[-1]) as wheel:
        members = [m for m in wheel.namelist() if m.startswith(PREFIX) and not m.endswith("/")]
        for member in members:
            target = include / "crt" / member[len(PREFIX) :]
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(wheel.read(member))
    print(f"crt_headers: {len(members)} crt headers from {wheels[-1].name} into {include}")
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parents[2] / ".dev4"))
