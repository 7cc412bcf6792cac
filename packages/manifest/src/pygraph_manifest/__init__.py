"""pygraph's engine manifest: the GENERATED static table of engine families.

``FAMILIES`` is plain data (one dict per family). Read it through ``pygraph.engines``
(``families()``, ``family_for()``, ``offered_ids()``, ``engine_for_id()``), not directly.
"""

from __future__ import annotations

from typing import Any

from pygraph_manifest._version import __version__

__all__ = ["FAMILIES", "__version__"]


def __getattr__(name: str) -> Any:
    # Lazy so the build hook can import the generator before the table exists.
    if name == "FAMILIES":
        from pygraph_manifest._table import FAMILIES

        return FAMILIES
    raise AttributeError(f"module 'pygraph_manifest' has no attribute {name!r}")
