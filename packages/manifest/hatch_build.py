"""Hatch build hook: generate the manifest table before building any target.

Inside the monorepo (wheel, sdist, editable, nox, with or without build isolation) the table is
generated from the sibling packages' declarations and checked against ``ids.lock.json``; a moved,
reused or overlapping id fails the build. Building from an unpacked sdist, where no siblings exist,
reuses the table the sdist shipped.
"""

from __future__ import annotations

import sys
from pathlib import Path

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

TABLE_REL = "src/pygraph_manifest/_table.py"


class ManifestBuildHook(BuildHookInterface):
    PLUGIN_NAME = "custom"

    def initialize(self, version: str, build_data: dict) -> None:
        root = Path(self.root)
        sys.path.insert(0, str(root / "src"))
        try:
            from pygraph_manifest import generate as gen
        finally:
            sys.path.pop(0)
        packages = gen.repo_packages(root)
        table = root / TABLE_REL
        if packages is None:
            if not table.is_file():
                raise RuntimeError(f"pygraph manifest: no sibling packages and no shipped table at {table}")
        else:
            try:
                source, _merged = gen.generate(packages)
            except gen.GenerationError as exc:
                raise SystemExit(str(exc)) from None
            if not table.is_file() or table.read_text() != source:
                table.write_text(source)
        build_data.setdefault("artifacts", []).append(TABLE_REL)
