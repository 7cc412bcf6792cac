"""Modules that need an extra: importing one where the extra is absent says which ``pip install``.

A family package's torch ops import torch at their top; without torch that import would fail as a
bare ``ModuleNotFoundError: No module named 'torch'`` from deep inside the package. The package's
``__init__`` names its op modules here once (`require_for_import`), and importing any of them
without torch raises `MissingExtraError` naming the module and the install, before the module runs.
Nothing is imported to decide: the needed module is probed with ``importlib.util.find_spec``, and
where it is installed the import goes on untouched.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import sys
from collections.abc import Iterable
from typing import Any

from pygraph.errors import MissingExtraError

__all__ = ["require_for_import"]


def _installed(module: str) -> bool:
    parts = module.split(".")
    try:
        return all(importlib.util.find_spec(".".join(parts[: i + 1])) is not None for i in range(len(parts)))
    except (ImportError, ValueError):
        return False


class _RequiresFinder(importlib.abc.MetaPathFinder):
    """On ``sys.meta_path``: refuses the named modules while ``needs`` is absent; finds nothing
    itself (the regular finders load every module)."""

    def __init__(self, modules: frozenset[str], needs: str, install: str) -> None:
        self.modules, self.needs, self.install = modules, needs, install

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> None:
        if fullname in self.modules and not _installed(self.needs):
            raise MissingExtraError(
                f"import {fullname}: it needs {self.needs}, which is not installed; {self.install}",
                name=fullname,
            )
        return None

    def __repr__(self) -> str:
        return f"<pygraph.extras finder: {', '.join(sorted(self.modules))} need {self.needs}>"


def require_for_import(modules: Iterable[str], needs: str, install: str) -> None:
    """Importing any of ``modules`` (full dotted names) where ``needs`` cannot be imported raises
    `MissingExtraError` naming the module, ``needs`` and ``install`` (the ``pip install`` command).
    Idempotent per (modules, needs)."""
    wanted = frozenset(modules)
    for finder in sys.meta_path:
        if isinstance(finder, _RequiresFinder) and (finder.modules, finder.needs) == (wanted, needs):
            return
    sys.meta_path.insert(0, _RequiresFinder(wanted, needs, install))
