"""A helper for family factories: build engines from an implementation table."""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any

__all__ = ["engines_from_table"]


def engines_from_table(implementations: Mapping[str, tuple[str, str]], ids: Mapping[str, int]) -> list[Any]:
    """One engine per offered slot that has an implementation, each carrying the id it was handed.

    ``implementations`` maps engine name -> ("module", "class"); the module is imported only when
    its slot is offered. A slot with no implementation builds nothing (the manifest reports it).
    """
    engines = []
    for name, engine_id in ids.items():
        impl = implementations.get(name)
        if impl is not None:
            cls = getattr(importlib.import_module(impl[0]), impl[1])
            engines.append(cls(engine_id=engine_id))
    return engines
