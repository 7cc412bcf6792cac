"""Test what users install: build every wheel, install them into a fresh venv, import everything.

Slow (builds five wheels, creates a venv, downloads the DSL): marked `packaging`, run by
`nox -s packaging` and by the README's test command.
"""

from __future__ import annotations

import json
import subprocess
import sys
import venv
from pathlib import Path

import pytest

pytestmark = pytest.mark.packaging

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ["manifest", "pygraph-core", "engines-gemm", "engines-sdpa", "engines-linear-attention"]
DISTRIBUTIONS = {
    "manifest": "pygraph_manifest",
    "pygraph-core": "pygraph_core",
    "engines-gemm": "pygraph_engines_gemm",
    "engines-sdpa": "pygraph_engines_sdpa",
    "engines-linear-attention": "pygraph_engines_linear_attention",
}


def _run(*cmd: str, cwd: Path | None = None) -> str:
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=cwd)
    if proc.returncode:
        raise AssertionError(
            f"{' '.join(cmd)} exited {proc.returncode}\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
        )
    return proc.stdout


@pytest.fixture(scope="module")
def wheelhouse(tmp_path_factory) -> Path:
    dist = tmp_path_factory.mktemp("dist")
    for pkg in PACKAGES:
        _run(sys.executable, "-m", "build", "--wheel", "--outdir", str(dist), str(ROOT / "packages" / pkg))
    return dist


def test_every_package_builds_a_wheel(wheelhouse):
    names = sorted(p.name for p in wheelhouse.glob("*.whl"))
    assert len(names) == len(PACKAGES), names
    for pkg, dist_name in DISTRIBUTIONS.items():
        assert any(n.startswith(dist_name + "-") for n in names), (pkg, names)
    import zipfile

    for wheel in wheelhouse.glob("*.whl"):  # the license file and the typing marker travel in each wheel
        files = zipfile.ZipFile(wheel).namelist()
        assert any(f.endswith(".dist-info/licenses/LICENSE") for f in files), (wheel.name, files)
        assert any(f.endswith("/py.typed") for f in files), (wheel.name, files)


def test_manifest_builds_from_its_own_sdist(tmp_path):
    # `python -m build` with no target builds the sdist, then the wheel from the unpacked sdist,
    # where no sibling packages exist: the wheel must carry the table the sdist shipped.
    _run(sys.executable, "-m", "build", "--outdir", str(tmp_path), str(ROOT / "packages" / "manifest"))
    wheel = next(tmp_path.glob("pygraph_manifest-*.whl"))
    import zipfile

    with zipfile.ZipFile(wheel) as zf:
        table = zf.read("pygraph_manifest/_table.py").decode()
    assert table == (ROOT / "packages/manifest/src/pygraph_manifest/_table.py").read_text()


def test_users_install_from_the_wheels_in_a_fresh_venv(wheelhouse, tmp_path):
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True, upgrade_deps=True)
    python = str(env_dir / "bin" / "python")
    # Our own names resolve ONLY to the wheels just built (no index lookup for them); third-party
    # dependencies come from the index.
    constraints = tmp_path / "constraints.txt"
    constraints.write_text(
        "".join(
            f"{d.replace('_', '-')} @ {next(wheelhouse.glob(d + '-*.whl')).as_uri()}\n"
            for d in DISTRIBUTIONS.values()
        )
    )
    _run(
        python, "-m", "pip", "install", "-q", "--find-links", str(wheelhouse), "-c", str(constraints),
        "pygraph-core[sdpa,linear-attention]",
    )  # fmt: skip
    out = _run(
        python,
        "-c",
        "import pygraph, pygraph_manifest, pygraph_sdpa, pygraph_linear_attention; "
        "print(pygraph.engines.families())",
    )
    print(out)
    for name, block in {
        "gemm": 20400,
        "sdpa_fwd": 20500,
        "sdpa_bwd": 20600,
        "gdn": 20100,
        "kda": 20200,
        "gdn2": 20300,
    }.items():
        assert f"EngineFamily({name}: block {block}..{block + 99}" in out, out
    # Families declare only the dependencies they use: sdpa ships no kernel yet and brings no DSL;
    # linear attention brings CuTe DSL (its gdn_sm90 forward), not cuTile (its own [cutile] extra).
    # The shipped gdn engines are offered (gdn_cutile declines naming the missing cuTile).
    out = _run(
        python,
        "-c",
        "import importlib.util as u, pygraph; "
        "print([m for m in ('cutlass', 'cuda.tile', 'torch') if u.find_spec(m.split('.')[0]) and u.find_spec(m)]); "
        "print(pygraph.engines.instantiate(pygraph.engines.family_by_name('gdn')).unavailable)",
    )
    assert out.splitlines()[0] == "['cutlass']", out
    assert "gdn_sm90" not in out.splitlines()[1] and "gdn_cutile" not in out.splitlines()[1], out
    # The gemm family's package was not asked for: it offers nothing and says why.
    out = _run(
        python,
        "-c",
        "import os; os.environ['PYGRAPH_ENABLE_OPT_IN_ENGINES'] = '1'; import pygraph; "
        "r = pygraph.engines.instantiate(pygraph.engines.family_by_name('gemm')); print(r.unavailable)",
    )
    assert "package for family 'gemm' is not installed" in out, out
    # The `pygraph` command runs from the installed wheels (its CLI libraries are core's dependencies),
    # and `info` says, without a GPU and without the gemm package, what is missing and how to add it.
    pygraph_cli = str(env_dir / "bin" / "pygraph")
    assert _run(pygraph_cli, "--version").strip().startswith("pygraph ")
    info = json.loads(_run(pygraph_cli, "info", "--json"))
    gemm = next(f for f in info["families"] if f["name"] == "gemm")
    assert not gemm["installed"] and gemm["install"] == "pip install 'pygraph-core[gemm]'", gemm
