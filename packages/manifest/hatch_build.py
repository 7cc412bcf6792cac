"""Hatch build hook: generate the manifest table before building any target.

Inside the monorepo (wheel, sdist, editable, nox, with or without build isolation) the table is
generated from the sibling packages' declarations and checked against ``ids.lock.json``; a moved,
reused or overlapping id fails the build. Building from an unpacked sdist, where no siblings exist,
reuses the table the sdist shipped.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

TABLE_REL = "src/pygraph_manifest/_table.py"
GENERATOR_REL = "src/pygraph_manifest/generate.py"


class ManifestBuildHook(BuildHookInterface):
    PLUGIN_NAME = "custom"

    def initialize(self, version: str, build_data: dict) -> None:
        root = Path(self.root)
        # the generator by its path: it imports only the standard library at module level
        spec = importlib.util.spec_from_file_location("_pygraph_manifest_generate", root / GENERATOR_REL)
        gen = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(gen)
        packages = gen.repo_packages(root)
        table = root / TABLE_REL
        if packages is None:
            if not table.is_file():
                raise RuntimeError(f"pygraph manifest: no sibling packages and no shipped table at {table}")
        else:
            proc = gen.run_with_sources(packages, ["--print"], capture_output=True, text=True)
            if proc.returncode != 0:
                raise SystemExit(
                    proc.stderr.strip() or f"pygraph manifest: generation exited {proc.returncode}"
                )
            source = proc.stdout
            if not table.is_file() or table.read_text() != source:
                table.write_text(source)
        build_data.setdefault("artifacts", []).append(TABLE_REL)
