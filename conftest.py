"""Repository-wide pytest setup: GPU-marked tests skip LOUDLY without the matching device.

A test marked ``sm90`` (``sm100``, ``sm120``) runs only where the first visible GPU is that arch.
``PYGRAPH_REQUIRE_ARCH=sm90`` (comma list) turns the skip into a failure.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess

import pytest

_ARCH_MARKERS = ("sm90", "sm100", "sm120")


@functools.cache
def device_arch() -> str | None:
    """``smXY`` of the first visible GPU, or None."""
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


def pytest_runtest_setup(item: pytest.Item) -> None:
    found = device_arch()
    required = {a.strip() for a in os.environ.get("PYGRAPH_REQUIRE_ARCH", "").split(",") if a.strip()}
    for arch in _ARCH_MARKERS:
        if item.get_closest_marker(arch) and found != arch:
            reason = f"no {arch} device (found: {found or 'no GPU'})"
            if arch in required:
                pytest.fail(f"{reason}, and PYGRAPH_REQUIRE_ARCH requires {arch}", pytrace=False)
            pytest.skip(reason)
