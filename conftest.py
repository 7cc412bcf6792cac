"""Repository-wide pytest setup: GPU-marked tests skip LOUDLY without the matching device.

A test marked ``sm90`` (``sm100``, ``sm120``) runs only where the first visible GPU is that arch.
``PYGRAPH_REQUIRE_ARCH=sm90`` (comma list) turns the skip into a failure.
"""

from __future__ import annotations

import functools
import importlib.util
import os
from pathlib import Path

import pytest

_ARCH_MARKERS = ("sm90", "sm100", "sm120")

# The suite plans thousands of graphs: a plan cache the developer's own `pygraph autotune` filled
# would reorder their plan lists. Tests of the cache point PYGRAPH_PLAN_CACHE at their own file.
os.environ["PYGRAPH_PLAN_CACHE"] = "off"


def _load_gpu_arch():
    spec = importlib.util.spec_from_file_location(
        "_pygraph_gpu_arch", Path(__file__).parent / "tools" / "gpu_arch.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


device_arch = functools.cache(_load_gpu_arch().device_arch)


def pytest_runtest_setup(item: pytest.Item) -> None:
    found = device_arch()
    for arch in _ARCH_MARKERS:
        if item.get_closest_marker(arch) and found != arch:
            reason = f"no {arch} device (found: {found or 'no GPU'})"
            # read only where it decides something: a value naming no arch is a ConfigurationWarning
            # (once), which the suite's filterwarnings=error turns into this test's error
            from pygraph.environment import names

            if arch in names("PYGRAPH_REQUIRE_ARCH", _ARCH_MARKERS):
                pytest.fail(f"{reason}, and PYGRAPH_REQUIRE_ARCH requires {arch}", pytrace=False)
            pytest.skip(reason)
