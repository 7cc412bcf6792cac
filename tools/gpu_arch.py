"""The first visible GPU's arch as ``smXY`` (stdlib only: nox and pytest both load this file by path)."""

from __future__ import annotations

import shutil
import subprocess


def device_arch() -> str | None:
    """``smXY`` of the first visible GPU, or None when there is none."""
    if shutil.which("nvidia-smi") is None:
        return None
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=compute_cap", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        ).stdout.split()
    except (subprocess.SubprocessError, OSError):
        return None
    return f"sm{out[0].replace('.', '')}" if out else None
