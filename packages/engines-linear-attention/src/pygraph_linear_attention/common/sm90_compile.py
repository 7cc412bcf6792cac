"""The CuTe DSL kernels' compile and cache, shared by gdn's and kda's hosts (`gdn.sm90_host`,
`kda.sm90_host`): `cute_compile` compiles a kernel for an arch without a GPU, as a TVM-FFI function
of raw device addresses, 32-bit sizes and the stream; `compiled` keeps the result per process and on
disk, so a configuration compiles (seconds) once per machine, not once per process.

The disk key holds the digest of every source a compiled object is built from (`source_files`): an
edited kernel module never loads a stale object.
"""

from __future__ import annotations

import dataclasses
import hashlib
import threading
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = ["ARCH", "CACHE_ENV", "compiled", "cute_compile", "source_files"]

ARCH = "sm_90a"
CACHE_ENV = "PYGRAPH_GDN_SM90_CACHE_DIR"
_CACHE: dict[tuple, Any] = {}
_LOCK = threading.Lock()
_PACKAGE = Path(__file__).resolve().parent.parent  # pygraph_linear_attention/


def compiled(key: Any, arch: str, name: str, build: Callable[[Any, str], Any]) -> Any:
    """The compiled function for ``key`` (a frozen dataclass naming everything the compile is
    specialised for): from the process, the disk (`pygraph.disk_cache`: ``<the user's cache
    directory>/pygraph/gdn_sm90`` unless PYGRAPH_GDN_SM90_CACHE_DIR or PYGRAPH_CACHE_DIR moves it,
    ``off`` disables it) or ``build(key, arch)``; ``name``: the function's symbol in the stored
    object."""
    found = _CACHE.get((key, arch))
    if found is not None:
        return found
    with _LOCK:
        found = _CACHE.get((key, arch))
        if found is None:
            disk = _disk()
            if disk is None:
                found = build(key, arch)
            else:
                found = disk.fetch(
                    _disk_key(key, arch),
                    load=lambda path: _load_object(path, name),
                    build=lambda: build(key, arch),
                    save=lambda fn, path: _save_object(fn, path, name),
                )
            _CACHE[(key, arch)] = found
    return found


def _disk() -> Any:
    from pygraph.disk_cache import DiskCache, cache_dir

    directory = cache_dir("gdn_sm90", CACHE_ENV)
    return None if directory is None else DiskCache(directory, kind="gdn_sm90 kernel object", suffix=".o")


def _disk_key(key: Any, arch: str) -> str:
    import cutlass

    ident = (
        type(key).__name__,
        dataclasses.astuple(key),
        arch,
        getattr(cutlass, "__version__", "?"),
        _source_digest(),
    )
    return hashlib.sha256(repr(ident).encode()).hexdigest()[:24]


def source_files() -> tuple[Path, ...]:
    """What a compiled object is built from: every ``sm90_*.py`` of the ops and of `common` (the
    kernels, their building blocks, the hosts, this compile), `common.host` (the chunk) and the
    shared blocks of `pygraph.engines.cute_tiles`. One list for both ops: kda's kernels extend gdn's."""
    from pygraph.engines.cute_tiles import SOURCE as shared

    kernels = sorted(
        path for folder in ("common", "gdn", "kda") for path in (_PACKAGE / folder).glob("sm90_*.py")
    )
    return (*kernels, _PACKAGE / "common" / "host.py", Path(shared))


def _source_digest() -> str:
    """sha256 of `source_files`, each under its path in the package (gdn's and kda's share names)."""
    digest = hashlib.sha256()
    for path in source_files():
        label = path.relative_to(_PACKAGE) if path.is_relative_to(_PACKAGE) else path.name
        digest.update(str(label).encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


def _load_object(path: Path, name: str) -> Any:
    import cutlass.cute as cute

    return getattr(cute.runtime.load_module(str(path), enable_tvm_ffi=True), name)


def _save_object(fn: Any, path: Path, name: str) -> None:
    fn.export_to_c(str(path), function_name=name)


def cute_compile(kernel: Any, pointers: list[tuple[str, int]], cu_dtype: str, sizes: int, arch: str) -> Any:
    """``cute.compile`` of ``kernel`` (a host-side @cute.jit callable) for ``arch`` as a TVM-FFI
    function of raw addresses: ``pointers`` as (dtype name, or "cu" for cu_seqlens' ``cu_dtype``;
    assumed alignment in bytes), then ``sizes`` 32-bit sizes and the stream."""
    import cutlass
    import cutlass.cute as cute
    from cutlass.cute.runtime import make_fake_stream, make_ptr

    from pygraph_linear_attention.common.sm90_tiles import DTYPES

    types = {**DTYPES, "cu": cutlass.Int64 if cu_dtype == "int64" else cutlass.Int32}
    gmem = cute.AddressSpace.gmem
    args = [make_ptr(types[dtype], 0, gmem, assumed_align=align) for dtype, align in pointers]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # trace-time advisories on the intended fully unrolled loops
        return cute.compile(
            kernel, *args, *[cutlass.Int32(1)] * sizes, make_fake_stream(),
            options=f"--enable-tvm-ffi --gpu-arch {arch}",
        )  # fmt: skip
