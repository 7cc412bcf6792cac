"""Sessions: tests per GPU arch, lint, build, manifest, packaging.

    nox -s "tests(arch='any')"      CPU suite (what CI runs)
    nox -s "tests(arch='sm90')"     the SM90 suite; skipped (loudly) without an SM90 GPU
    nox -s lint build manifest packaging

PYGRAPH_REQUIRE_ARCH=sm90 (or a comma list) turns a missing-device skip into a failure.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
from pathlib import Path

import nox

ROOT = Path(__file__).parent
PACKAGES = ["manifest", "pygraph-core", "engines-gemm", "engines-sdpa", "engines-linear-attention"]
ARCHES = ["any", "sm90", "sm100", "sm120"]
ARCH_MARKERS = {"sm90": "sm90", "sm100": "sm100", "sm120": "sm120"}

nox.options.sessions = ["lint", "manifest_check", "tests(arch='any')"]
nox.options.reuse_existing_virtualenvs = True


def _device_arch() -> str | None:
    spec = importlib.util.spec_from_file_location("_pygraph_gpu_arch", ROOT / "tools" / "gpu_arch.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.device_arch()


def _install_workspace(session: nox.Session) -> None:
    session.install("-r", "requirements-dev.txt")
    editable = []
    for pkg in PACKAGES:
        editable += ["-e", f"packages/{pkg}"]
    session.install(*editable)


@nox.session
@nox.parametrize("arch", ARCHES)
def tests(session: nox.Session, arch: str) -> None:
    """The test suite for one GPU arch ('any' = the CPU suite)."""
    if arch != "any":
        found = _device_arch()
        if found != arch:
            raw = os.environ.get("PYGRAPH_REQUIRE_ARCH", "")
            required = {a.strip() for a in raw.split(",") if a.strip()}
            if required - set(ARCH_MARKERS):  # nox's interpreter has no pygraph: checked here, alike
                session.warn(
                    f"PYGRAPH_REQUIRE_ARCH={raw!r}: {', '.join(sorted(required - set(ARCH_MARKERS)))} is not "
                    f"one of {', '.join(ARCH_MARKERS)}; the value is a comma-separated list of them; ignored"
                )
            message = f"no {arch} device (found: {found or 'no GPU'})"
            if arch in required:
                session.error(
                    f"{message}, and PYGRAPH_REQUIRE_ARCH={os.environ['PYGRAPH_REQUIRE_ARCH']} requires it"
                )
            session.skip(message)
    _install_workspace(session)
    # The CPU suite keeps the GPU-marked tests in view: each is reported skipped with its reason.
    selection = "not packaging" if arch == "any" else ARCH_MARKERS[arch]
    session.run("python", "-m", "pytest", "-m", selection, *session.posargs)


@nox.session
def lint(session: nox.Session) -> None:
    """ruff check and format check."""
    session.install("ruff==0.16.9")
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")


@nox.session
def build(session: nox.Session) -> None:
    """Build every wheel (and the manifest's sdist) into dist/."""
    session.install("build>=1.2")
    dist = ROOT / "dist"
    shutil.rmtree(dist, ignore_errors=True)
    for pkg in PACKAGES:
        session.run("python", "-m", "build", "--wheel", "--outdir", str(dist), f"packages/{pkg}")
    wheels = sorted(p.name for p in dist.glob("*.whl"))
    session.log(f"{len(wheels)} wheels: {', '.join(wheels)}")
    if len(wheels) != len(PACKAGES):
        session.error(f"expected {len(PACKAGES)} wheels in dist/, found {len(wheels)}")


@nox.session
def manifest(session: nox.Session) -> None:
    """Regenerate the manifest table and record new ids in the lock (`-- --check` only checks)."""
    session.install("pluggy>=1.5", "packaging>=23")
    session.run("python", "packages/manifest/src/pygraph_manifest/generate.py", *session.posargs)


@nox.session
def manifest_check(session: nox.Session) -> None:
    """Fail if the committed table or lock is stale."""
    session.install("pluggy>=1.5", "packaging>=23")
    session.run("python", "packages/manifest/src/pygraph_manifest/generate.py", "--check")


@nox.session
def packaging(session: nox.Session) -> None:
    """Build every wheel, install pygraph-core[sdpa,linear-attention] into a fresh venv, import it."""
    session.install("pytest>=8", "build>=1.2")
    session.run("python", "-m", "pytest", "-m", "packaging", "tests/test_packaging.py", *session.posargs)
