"""pygraph.kernel_cache: a compiled object's key follows every source its kernel's module graph
reads (found from the imports, not a list), and the cache keeps one object per key in memory."""

from __future__ import annotations

import importlib
import sys
import textwrap

import pytest

from pygraph.kernel_cache import KernelCache, module_sources, source_digest

FILES = {
    "__init__.py": "",
    "kernels/__init__.py": "",
    "kernels/kernel.py": """
        from pygraph_gemm_tmpcopy.kernels import tiles
        from .shared import helper


        def body():
            from pygraph_gemm_tmpcopy.kernels.late import LATE  # imported inside a function
            return tiles.CHUNK, helper(), LATE
    """,
    "kernels/tiles.py": "from .host import CHUNK\n",
    "kernels/host.py": "CHUNK = 64\n",
    "kernels/shared.py": "def helper():\n    return 1\n",
    "kernels/late.py": "LATE = 3\n",
    "kernels/unrelated.py": "X = 1\n",
}


@pytest.fixture
def tree(tmp_path, monkeypatch):
    """A tmp copy of a kernel package (named as one of ours, so its imports are followed)."""
    import pygraph.kernel_cache as kc

    root = tmp_path / "pygraph_gemm_tmpcopy"
    for name, text in FILES.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(kc, "OWN_PACKAGES", (*kc.OWN_PACKAGES, "pygraph_gemm_tmpcopy"))
    importlib.invalidate_caches()
    yield root
    for name in [m for m in sys.modules if m.startswith("pygraph_gemm_tmpcopy")]:
        del sys.modules[name]


def test_the_module_graph_is_found_from_the_imports(tree):
    found = set(module_sources(["pygraph_gemm_tmpcopy.kernels.kernel"]))
    assert found == {
        "pygraph_gemm_tmpcopy.kernels",  # `from pygraph_gemm_tmpcopy.kernels import tiles` reads it
        "pygraph_gemm_tmpcopy.kernels.kernel",
        "pygraph_gemm_tmpcopy.kernels.tiles",
        "pygraph_gemm_tmpcopy.kernels.host",  # through tiles: the stale-kernel hazard a list missed
        "pygraph_gemm_tmpcopy.kernels.shared",  # a relative import
        "pygraph_gemm_tmpcopy.kernels.late",  # an import inside a function
    }


def test_editing_a_constant_in_an_imported_helper_changes_the_key(tree):
    roots = ["pygraph_gemm_tmpcopy.kernels.kernel"]
    before = source_digest(roots)
    (tree / "kernels" / "unrelated.py").write_text("X = 2\n")
    assert source_digest(roots) == before  # a module the kernel never imports does not count
    (tree / "kernels" / "host.py").write_text("CHUNK = 32\n")
    assert source_digest(roots) != before


def test_one_object_per_key_in_memory(monkeypatch, tmp_path):
    monkeypatch.setenv("PYGRAPH_TEST_KERNELS_DIR", "off")
    cache = KernelCache(
        "test", "PYGRAPH_TEST_KERNELS_DIR", roots=["pygraph.kernel_cache"], kind="test object"
    )
    built = []

    def build():
        built.append(1)
        return object()

    first = cache.get(("a", 1), build)
    assert cache.get(("a", 1), build) is first and len(built) == 1
    assert cache.get(("a", 2), build) is not first and len(built) == 2
