"""The compiled-kernel cache: where every family keeps its compiled CuTe DSL objects.

A compiled object is native code built from Python sources, so its key must change whenever any
source the compile reads changes. Each entry is keyed by

- the engine's own key (its configuration: dtypes, tiles, flags, the target arch),
- the DSL's name and version, and
- a digest of every source file of the kernel's module graph: the modules its root modules import
  (``import`` and ``from ... import`` statements anywhere in them, relative ones resolved), followed
  through pygraph's own packages. No hand-kept list: a helper a kernel starts importing is hashed
  from then on. A package's ``__init__`` counts only where a module imports the package itself
  (``from pygraph_x.kernels import helper`` reads ``helper``; the packages' ``__init__`` re-export
  and hold no kernel code).

Objects live in memory (per process, per key) and on disk through `pygraph.disk_cache` (its
directory rules, sidecars and locks: docs/usage.md, "Caches on disk"). A disk cache that is off or
cannot be used costs the reuse across processes, never the compile.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import importlib.util
import threading
from collections.abc import Callable, Hashable, Iterable
from pathlib import Path
from typing import Any

from pygraph.disk_cache import DiskCache, cache_dir

__all__ = ["KernelCache", "module_sources", "source_digest"]

# the top-level packages whose modules a kernel's compile may read (third-party ones, the DSL
# included, are named by their version instead)
OWN_PACKAGES = ("pygraph", "pygraph_gemm", "pygraph_sdpa", "pygraph_linear_attention")


def _origin(name: str) -> Path | None:
    """The source file of module ``name``, or None when it is not one of ours or has none."""
    if name.split(".")[0] not in OWN_PACKAGES:
        return None
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.origin or not spec.origin.endswith(".py"):
        return None
    return Path(spec.origin)


def _imported(name: str, path: Path) -> Iterable[str]:
    """The module names ``path`` (module ``name``) imports: each ``import a.b`` and ``from a import
    b`` (``a.b`` too, in case ``b`` is a submodule), relative ones resolved against its package."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    tree = ast.parse(path.read_bytes(), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1])
                module = f"{base}.{node.module}" if node.module else base
            else:
                module = node.module or ""
            if module:
                yield module
                for alias in node.names:
                    yield f"{module}.{alias.name}"


def module_sources(roots: Iterable[str]) -> dict[str, Path]:
    """Module name -> source file of every module of ours the ``roots`` import, transitively (the
    roots included)."""
    found: dict[str, Path] = {}
    pending = list(roots)
    while pending:
        name = pending.pop()
        if name in found:
            continue
        path = _origin(name)
        if path is None:
            continue
        found[name] = path
        for imported in _imported(name, path):
            if imported not in found:
                pending.append(imported)
    return found


def source_digest(roots: Iterable[str]) -> str:
    """sha256 over (module name, source bytes) of `module_sources` of ``roots``, in name order."""
    digest = hashlib.sha256()
    for name, path in sorted(module_sources(roots).items()):
        digest.update(name.encode() + b"\0")
        digest.update(path.read_bytes())
        digest.update(b"\0")
    return digest.hexdigest()


@functools.cache
def _cached_digest(roots: tuple[str, ...]) -> str:
    # sources do not change under a running process; the digest is read once per set of roots
    return source_digest(roots)


def _dsl_version() -> str:
    import cutlass

    return f"nvidia-cutlass-dsl {getattr(cutlass, '__version__', '?')}"


def _load(path: Path, function_name: str) -> Any:
    import cutlass.cute as cute

    return getattr(cute.runtime.load_module(str(path), enable_tvm_ffi=True), function_name)


def _save(fn: Any, path: Path, function_name: str) -> None:
    fn.export_to_c(str(path), function_name=function_name)


class KernelCache:
    """One family's compiled CuTe DSL objects: in memory, then on disk, then compiled.

    ``name`` names the disk cache's folder under ``PYGRAPH_CACHE_DIR`` and ``env`` the variable that
    moves or disables it for this family alone; ``roots`` are the modules whose module graph a
    compile reads (`source_digest`); ``kind`` is recorded in each entry's sidecar."""

    def __init__(self, name: str, env: str, *, roots: Iterable[str], kind: str) -> None:
        self.name, self.env, self.kind = name, env, kind
        self.roots = tuple(sorted(roots))
        self._memory: dict[Hashable, Any] = {}
        self._lock = threading.RLock()

    def digest(self) -> str:
        """The sources' digest of this cache's module graph."""
        return _cached_digest(self.roots)

    def disk_key(self, key: Hashable) -> str:
        """The file name of ``key``'s entry: the engine's key, the DSL's version and the sources."""
        ident = (repr(key), _dsl_version(), self.digest())
        return hashlib.sha256(repr(ident).encode()).hexdigest()[:24]

    def disk(self) -> DiskCache | None:
        """The disk cache, or None when it is off or its directory cannot be used."""
        directory = cache_dir(self.name, self.env)
        return None if directory is None else DiskCache(directory, kind=self.kind, suffix=".o")

    def get(self, key: Hashable, build: Callable[[], Any], *, function_name: str = "fn") -> Any:
        """The compiled object of ``key``: from memory, else loaded from disk, else ``build()``
        (and stored in both). ``function_name`` names the exported function in the object file."""
        found = self._memory.get(key)
        if found is not None:
            return found
        with self._lock:
            found = self._memory.get(key)
            if found is None:
                disk = self.disk()
                if disk is None:
                    found = build()
                else:
                    found = disk.fetch(
                        self.disk_key(key),
                        load=lambda path: _load(path, function_name),
                        build=build,
                        save=lambda fn, path: _save(fn, path, function_name),
                    )
                self._memory[key] = found
        return found

    def clear_memory(self) -> None:
        """Forget the in-process objects (the disk keeps them)."""
        with self._lock:
            self._memory.clear()
