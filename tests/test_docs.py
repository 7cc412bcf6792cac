"""The user guide's code blocks run, in order, on a machine without a GPU."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "usage.md"


def test_usage_guide_code_runs():
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.S)
    assert len(blocks) >= 5
    namespace: dict = {}
    for block in blocks:
        exec(compile(block, str(DOC), "exec"), namespace)
    assert namespace["engine_id"] == 20400


def test_getting_started_code_runs():
    page = ROOT / "docs" / "getting-started.md"
    blocks = re.findall(r"```python\n(.*?)```", page.read_text(), flags=re.S)
    assert len(blocks) >= 5
    namespace: dict = {}
    for block in blocks:
        exec(compile(block, str(page), "exec"), namespace)
    assert namespace["g2"].get_execution_plan_count() == namespace["g"].get_execution_plan_count()


_LINK = re.compile(r"\]\(([^)\s]+)\)")


def _links(page: Path) -> list[str]:
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)  # code blocks hold no links
    return [
        target for target in _LINK.findall(text) if "://" not in target and not target.startswith("mailto:")
    ]


def test_docs_link_only_inside_the_repository():
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    broken = []
    for page in pages:
        for target in _links(page):
            path = target.split("#", 1)[0]
            if not path:
                continue
            resolved = (page.parent / path).resolve()
            if not resolved.is_relative_to(ROOT) or not resolved.exists():
                broken.append(f"{page.relative_to(ROOT)}: {target}")
    assert not broken, broken


def test_the_readme_reaches_every_docs_page():
    seen, todo = set(), [ROOT / "README.md"]
    while todo:
        page = todo.pop()
        if page in seen or page.suffix != ".md" or not page.exists():
            continue
        seen.add(page)
        todo += [(page.parent / t.split("#", 1)[0]).resolve() for t in _links(page) if t.split("#", 1)[0]]
    missing = sorted(p.name for p in (ROOT / "docs").glob("*.md") if p.resolve() not in seen)
    assert not missing, f"docs pages no link from README.md leads to: {missing}"


_VARIABLE = re.compile(r"PYGRAPH_[A-Z0-9_]+")


def _environment_table() -> set[str]:
    """The variables docs/cli.md's environment table lists (its first column)."""
    text = (ROOT / "docs" / "cli.md").read_text()
    section = text.split("## Environment", 1)[1].split("\n## ", 1)[0]
    return {m.group(1) for m in re.finditer(r"^\| `([A-Z0-9_]+)` \|", section, flags=re.M)}


def test_every_pygraph_variable_the_code_reads_is_in_the_environment_table():
    sources = [*sorted(ROOT.glob("packages/*/src/**/*.py")), ROOT / "conftest.py", ROOT / "noxfile.py"]
    read: dict[str, Path] = {}  # each variable -> the first source naming it
    for path in sources:
        for name in _VARIABLE.findall(path.read_text()):
            read.setdefault(name, path)
    assert {"PYGRAPH_CUTILE_TMA", "PYGRAPH_SDPA_SM90_CACHE_DIR", "PYGRAPH_REQUIRE_ARCH"} <= read.keys()
    listed = _environment_table()
    missing = sorted(f"{name} ({read[name].relative_to(ROOT)})" for name in read.keys() - listed)
    assert not missing, f"PYGRAPH_* variables docs/cli.md's environment table does not list: {missing}"
    stale = sorted(name for name in listed if name.startswith("PYGRAPH_") and name not in read)
    assert not stale, f"docs/cli.md's environment table lists variables no source reads: {stale}"
