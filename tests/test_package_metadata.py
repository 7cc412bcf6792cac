"""What each package's wheel says about itself, read from its sources (fast; the wheels themselves
are built and read by tests/test_packaging.py): the license file, py.typed, classifiers, the torch
extras bringing numpy, and a README that stands alone on a package index."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = {
    "manifest": "pygraph_manifest",
    "pygraph-core": "pygraph",
    "engines-gemm": "pygraph_gemm",
    "engines-sdpa": "pygraph_sdpa",
    "engines-linear-attention": "pygraph_linear_attention",
}


def _project(folder: str) -> dict:
    return tomllib.loads((ROOT / "packages" / folder / "pyproject.toml").read_text())["project"]


@pytest.mark.parametrize("folder", PACKAGES)
def test_the_wheel_carries_the_license_and_py_typed(folder):
    package = ROOT / "packages" / folder
    assert (package / "LICENSE").read_text() == (ROOT / "LICENSE").read_text(), f"{folder}/LICENSE is stale"
    assert _project(folder)["license-files"] == ["LICENSE"]
    assert (package / "src" / PACKAGES[folder] / "py.typed").is_file()


@pytest.mark.parametrize("folder", PACKAGES)
def test_classifiers(folder):
    classifiers = _project(folder)["classifiers"]
    assert "Typing :: Typed" in classifiers and "Programming Language :: Python :: 3 :: Only" in classifiers
    assert not any(c.startswith("License ::") for c in classifiers)  # the SPDX `license` says it


@pytest.mark.parametrize(
    "folder", [f for f in PACKAGES if "torch" in _project(f).get("optional-dependencies", {})]
)
def test_the_torch_extra_brings_numpy(folder):
    # torch's wheels do not require numpy, and `import torch` warns "Failed to initialize NumPy" without it
    assert any(r.startswith("numpy") for r in _project(folder)["optional-dependencies"]["torch"])


@pytest.mark.parametrize("folder", PACKAGES)
def test_the_readme_stands_alone(folder):
    text = (ROOT / "packages" / folder / "README.md").read_text()
    assert not re.search(r"^(<<<<<<<|=======|>>>>>>>)", text, flags=re.M), f"{folder}: merge conflict markers"
    # a package index shows the README alone: no link into the repository, no "see the repository README"
    assert not re.search(r"\]\((?!https?://)[^)]+\)", text), f"{folder}: a relative link"
    assert "see the repository readme" not in text.lower() and "readme covers the rest" not in text.lower()
    assert "pip install" in text or folder == "manifest", (
        f"{folder}: the README does not say how to install it"
    )
