"""benchmarks.gemm.ab_gemm --tree-b: a second copy of the kernels package in the same process, so a
refactor's kernels are timed against the ones they replace in one run (no GPU: loading and the
cache key only)."""

from __future__ import annotations

import pathlib
import shutil
import sys

import pytest

pytest.importorskip("cutlass")
pytest.importorskip("torch")

from pygraph_gemm.kernels import compile_cache, plan


@pytest.fixture
def ab_gemm():
    from benchmarks.gemm import ab_gemm

    yield ab_gemm
    for name in [n for n in sys.modules if n.startswith("pygraph_gemm.kernels_b")]:
        del sys.modules[name]


def _copy_of_kernels(tmp_path) -> pathlib.Path:
    here = pathlib.Path(compile_cache.__file__).parent
    dest = tmp_path / "kernels"
    shutil.copytree(here, dest, ignore=shutil.ignore_patterns("__pycache__"))
    return dest


def test_the_second_tree_loads_beside_the_first_with_its_own_cache_key(ab_gemm, tmp_path):
    copy = _copy_of_kernels(tmp_path)
    (copy / "mainloop.py").write_text((copy / "mainloop.py").read_text() + "# edited\n")
    plan_b = ab_gemm.load_tree_b(str(copy))
    assert plan_b.__module__ == "pygraph_gemm.kernels_b.plan"
    assert plan_b is not plan.Plan
    launch_b = sys.modules["pygraph_gemm.kernels_b.compile_cache"]
    from pygraph.kernel_cache import module_sources

    sources = module_sources(launch_b.KERNELS.roots)
    assert sources["pygraph_gemm.kernels_b.mainloop"].is_relative_to(copy)
    assert launch_b.KERNELS.digest() != compile_cache.KERNELS.digest()


def test_labels_pick_their_tree(ab_gemm):
    assert ab_gemm.plan_for("128x256c21z8g2vf", None) == (plan.Plan, "128x256c21z8g2vf")
    assert ab_gemm.plan_for("64x64c21@b", "PlanB") == ("PlanB", "64x64c21")
    with pytest.raises(ValueError, match="'64x64c21@b' names the second tree: pass --tree-b"):
        ab_gemm.plan_for("64x64c21@b", None)


def test_a_directory_that_is_not_a_kernels_package_is_refused(ab_gemm, tmp_path):
    with pytest.raises(FileNotFoundError, match="no __init__.py"):
        ab_gemm.load_tree_b(str(tmp_path))
