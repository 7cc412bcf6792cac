"""The GEMM kernels' disk cache goes through pygraph.disk_cache: a verified entry is loaded instead of
compiled, a damaged one is recompiled with a notice, 'off' stores nothing. The compile is stood in
for, except in one real round trip (an SM80 kernel compiled, stored, and loaded back on the CPU)."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest

from pygraph import kernel_cache
from pygraph.errors import CacheWarning
from pygraph_gemm.kernels import compile_cache as cc
from pygraph_gemm.kernels.config import GemmKnobs, KernelEpilogue, KernelLayout

KNOBS = GemmKnobs(tile_m=128, tile_n=128, tile_k=32)
LAYOUT = KernelLayout("bf16", "bf16", "k", "k", "n")
EPILOGUE = KernelEpilogue()


class _Compiled:
    def __init__(self, payload: bytes) -> None:
        self.payload = payload

    def export_to_c(self, path: str, function_name: str) -> None:
        Path(path).write_bytes(self.payload)


@pytest.fixture
def stood_in(monkeypatch, tmp_path):
    monkeypatch.setattr(cc.KERNELS, "_memory", {})
    monkeypatch.delenv(cc.CACHE_ENV, raising=False)
    monkeypatch.setenv("PYGRAPH_CACHE_DIR", str(tmp_path / "root"))
    compiled: list[int] = []

    def compile_uncached(*args, **kwargs):
        compiled.append(1)
        return _Compiled(b"object bytes " * 10)

    monkeypatch.setattr(cc, "compile_uncached", compile_uncached)
    monkeypatch.setattr(kernel_cache, "_load", lambda path, name: ("loaded", path.read_bytes()))
    return compiled


def _get():
    cc.KERNELS.clear_memory()  # a fresh process: only the disk remembers
    return cc.get_compiled(KNOBS, EPILOGUE, LAYOUT, "sm_80", kernel="sm80")


def test_an_object_is_compiled_once_then_loaded_from_the_default_place(stood_in, tmp_path):
    first = _get()
    assert isinstance(first, _Compiled) and stood_in == [1]
    (entry,) = (tmp_path / "root" / "gemm").glob("*.o")
    meta = json.loads(entry.with_name(entry.name + ".meta").read_text())
    assert meta["kind"] == "pygraph_gemm kernel object" and meta["size"] == entry.stat().st_size
    assert _get() == ("loaded", b"object bytes " * 10) and stood_in == [1]


def test_a_torn_object_is_recompiled_with_a_notice(stood_in, tmp_path):
    _get()
    (entry,) = (tmp_path / "root" / "gemm").glob("*.o")
    entry.write_bytes(entry.read_bytes()[:7])
    with pytest.warns(CacheWarning, match="is not used: it has 7 bytes"):
        assert isinstance(_get(), _Compiled)
    assert stood_in == [1, 1] and _get()[0] == "loaded"


def test_off_stores_nothing(stood_in, tmp_path, monkeypatch):
    monkeypatch.setenv(cc.CACHE_ENV, "off")
    _get()
    _get()
    assert stood_in == [1, 1] and not (tmp_path / "root").exists()


def test_an_unusable_directory_is_one_notice_and_compiling_goes_on(stood_in, tmp_path, monkeypatch):
    (tmp_path / "blocker").write_text("a file")
    monkeypatch.setenv(cc.CACHE_ENV, str(tmp_path / "blocker"))
    with pytest.warns(CacheWarning, match=r"blocker .*PYGRAPH_GEMM_CACHE_DIR.*a file is in the way"):
        _get()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _get()
    assert stood_in == [1, 1]


def test_a_real_kernel_round_trips_through_the_cache(monkeypatch, tmp_path):
    pytest.importorskip("cutlass.cute")
    monkeypatch.setattr(cc.KERNELS, "_memory", {})
    monkeypatch.setenv(cc.CACHE_ENV, str(tmp_path / "kernels"))
    compiled = []
    real = cc.compile_uncached

    def counting(*args, **kwargs):
        compiled.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(cc, "compile_uncached", counting)
    assert callable(_get()) and compiled == [1]
    assert callable(_get()) and compiled == [1]  # loaded back: no second compile
