"""Generate the manifest table from the families' pluggy declarations.

Discovery reads the sibling packages' ``pyproject.toml`` files for entry points in the group
``pygraph.families`` (installed metadata is not visible under build isolation), registers the named
modules with pluggy and calls the hook. The modules are imported from the monorepo's sources, not
from whatever is installed: `main` runs the generation in a child interpreter whose ``PYTHONPATH``
starts with pygraph-core's, the declaring packages' and this package's ``src`` folders.

    python -m pygraph_manifest.generate            # rewrite _table.py and record new ids in the lock
    python -m pygraph_manifest.generate --check    # exit 1 if _table.py differs from a fresh generation
    python -m pygraph_manifest.generate --print    # write the fresh table's source to stdout

``nox -s manifest`` runs the first; the build hook runs the generation on every build.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import pprint
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

ENTRY_POINT_GROUP = "pygraph.families"
REGENERATE_COMMAND = "nox -s manifest"
MANIFEST_ROOT = Path(__file__).resolve().parents[2]  # packages/manifest
TABLE_PATH = MANIFEST_ROOT / "src" / "pygraph_manifest" / "_table.py"
LOCK_PATH = MANIFEST_ROOT / "ids.lock.json"
_WITH_SOURCES = "PYGRAPH_MANIFEST_WITH_SOURCES"  # set in the child `run_with_sources` starts

_HEADER = f'''"""GENERATED FILE - DO NOT EDIT.

The static table of pygraph engine families, written by the pygraph-manifest build hook from the
families' ``pygraph.families`` entry points. Regenerate with: {REGENERATE_COMMAND}
"""

'''


class GenerationError(RuntimeError):
    """The declarations could not be turned into a table (the message names the family and slot)."""


def repo_packages(manifest_root: Path = MANIFEST_ROOT) -> Path | None:
    """The monorepo's ``packages`` folder, or None when building from an unpacked sdist."""
    packages = manifest_root.parent
    return packages if (packages / "pygraph-core" / "pyproject.toml").is_file() else None


def _declaring_projects(packages: Path) -> list[tuple[str, Path, list[str]]]:
    """(distribution, src dir, [module, ...]) for each package naming family entry points."""
    found = []
    for pyproject in sorted(packages.glob("*/pyproject.toml")):
        project = tomllib.loads(pyproject.read_text())["project"]
        modules = project.get("entry-points", {}).get(ENTRY_POINT_GROUP, {})
        if modules:
            found.append((project["name"], pyproject.parent / "src", sorted(modules.values())))
    return found


def run_with_sources(packages: Path, args: list[str], **run: Any) -> subprocess.CompletedProcess:
    """``python -m pygraph_manifest.generate ARGS`` in a child interpreter whose ``PYTHONPATH`` puts the
    monorepo's sources first (pygraph-core's, the declaring packages', this package's), so the
    declarations under ``packages`` are what it imports; ``run``: `subprocess.run`'s options."""
    sources = [packages / "pygraph-core" / "src", *(src for _, src, _ in _declaring_projects(packages))]
    path = [*map(str, sources), str(MANIFEST_ROOT / "src"), os.environ.get("PYTHONPATH", "")]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in path if p), _WITH_SOURCES: "1"}
    return subprocess.run([sys.executable, "-m", "pygraph_manifest.generate", *args], env=env, **run)


def _with_sources() -> bool:
    """Whether this process is the child `run_with_sources` started (it sets the variable to ``1``).
    Any other value is a leftover or a mistake: said on stderr, naming the variable and the value, and
    treated as unset, so the generator runs itself again with the sources. (The parent need not have
    pygraph importable, so this is not `pygraph.environment`'s ConfigurationWarning.)"""
    raw = os.environ.get(_WITH_SOURCES, "")
    if raw and raw != "1":
        print(
            f"pygraph manifest: {_WITH_SOURCES}={raw!r} is ignored: it is internal, set to 1 in the child "
            "the generator starts with the monorepo's sources; unset it",
            file=sys.stderr,
        )
    return raw == "1"


def discover(packages: Path) -> list[Any]:
    """Every EngineFamily the monorepo declares, with its distribution filled in, sorted by block
    (the declaring modules importable: `run_with_sources`)."""
    import dataclasses

    import pluggy

    from pygraph.engines import hookspec

    families = []
    for distribution, _src, modules in _declaring_projects(packages):
        pm = pluggy.PluginManager(hookspec.PROJECT)
        pm.add_hookspecs(hookspec)
        for module_name in modules:
            pm.register(importlib.import_module(module_name), name=module_name)
        for declared in pm.hook.pygraph_families():
            families.extend(dataclasses.replace(fam, distribution=distribution) for fam in declared)
    return sorted(families, key=lambda fam: fam.engine_id)


def read_lock(path: Path = LOCK_PATH) -> dict[str, Any]:
    if not path.is_file():
        return {}
    return json.loads(path.read_text())["families"]


def write_lock(entries: dict[str, Any], path: Path = LOCK_PATH) -> None:
    body = {
        "comment": "Every engine id ever shipped. Never edit an existing entry: ids are not reused or moved.",
        "families": entries,
    }
    path.write_text(json.dumps(body, indent=2) + "\n")


def render(families: list[Any]) -> str:
    rows = tuple(fam.to_row() for fam in families)
    return _HEADER + "FAMILIES = " + pprint.pformat(rows, width=100, sort_dicts=False) + "\n"


def generate(packages: Path) -> tuple[str, dict[str, Any]]:
    """(table source, merged lock) for the declarations under ``packages``; raises on any conflict."""
    families = discover(packages)
    from pygraph.engines.manifest_rules import check_against_lock, check_families
    from pygraph.errors import ManifestError

    try:
        check_families(families)
        merged = check_against_lock(families, read_lock())
    except ManifestError as exc:
        raise GenerationError(f"pygraph manifest: {exc} (lock: {LOCK_PATH})") from None
    return render(families), merged


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m pygraph_manifest.generate", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--check", action="store_true", help="fail if the table on disk is stale")
    parser.add_argument("--print", action="store_true", help="write the fresh table's source to stdout")
    args = parser.parse_args(argv)
    packages = repo_packages()
    if packages is None:
        print("pygraph manifest: not inside the monorepo; nothing to generate", file=sys.stderr)
        return 2
    if not _with_sources():
        return run_with_sources(packages, sys.argv[1:] if argv is None else argv).returncode
    try:
        source, merged = generate(packages)
    except GenerationError as exc:
        print(exc, file=sys.stderr)
        return 1
    if args.print:
        sys.stdout.write(source)
        return 0
    if args.check:
        stale = not TABLE_PATH.is_file() or TABLE_PATH.read_text() != source
        unlocked = merged != read_lock()
        if stale:
            print(f"pygraph manifest: {TABLE_PATH} differs from a fresh generation; run {REGENERATE_COMMAND}")
        if unlocked:
            print(f"pygraph manifest: {LOCK_PATH} lacks ids the table ships; run {REGENERATE_COMMAND}")
        if stale or unlocked:
            return 1
        print("pygraph manifest: up to date")
        return 0
    TABLE_PATH.write_text(source)
    write_lock(merged)
    print(f"pygraph manifest: wrote {TABLE_PATH} and {LOCK_PATH}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
