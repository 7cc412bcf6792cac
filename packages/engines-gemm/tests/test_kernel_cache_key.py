"""The compiled-kernel cache key covers the kernel's sources: an edited or added kernel module never
loads an object compiled from the old code."""

from __future__ import annotations

import os

import pytest

pytest.importorskip("cutlass")

from pygraph_gemm.kernels import compile_cache


def test_every_kernel_module_is_hashed():
    names = {os.path.basename(p) for p in compile_cache.kernel_sources()}
    here = os.path.dirname(compile_cache.__file__)
    assert names == {n for n in os.listdir(here) if n.endswith(".py")}
    assert {"gemm_sm90.py", "epilogue.py", "config.py", "tile_schedule.py", "entry.py"} <= names


def _digest_of(paths, monkeypatch) -> str:
    monkeypatch.setattr(compile_cache, "kernel_sources", lambda: sorted(str(p) for p in paths))
    monkeypatch.setattr(compile_cache, "_SOURCE_DIGEST", None)
    return compile_cache._source_digest()


def test_an_edited_or_added_module_changes_the_digest(tmp_path, monkeypatch):
    a = tmp_path / "a.py"
    a.write_text("x = 1\n")
    first = _digest_of([a], monkeypatch)
    assert _digest_of([a], monkeypatch) == first
    a.write_text("x = 2\n")
    edited = _digest_of([a], monkeypatch)
    b = tmp_path / "b.py"
    b.write_text("")
    added = _digest_of([a, b], monkeypatch)
    assert len({first, edited, added}) == 3
