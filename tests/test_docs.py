"""The docs' code blocks run as written, on a machine without a GPU.

Every ```python and ```bash block of README.md and docs/*.md runs here, or is marked in the page
(an HTML comment alone on the line before the block) as one that cannot: `<!-- gpu -->` (it needs
a GPU), `<!-- network -->` (it installs from an index), `<!-- writes -->` (it changes the
repository's files). A page's python blocks run in order in one namespace; a bash block runs each
`pygraph` command (also `.venv/bin/pygraph`) in a fresh process, in a folder holding the `g.json`
the pages name. Pages whose python blocks a test of their own runs are named in `OWN_TESTS`.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

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


# --- every code block -----------------------------------------------------------------------------------

PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
MARKERS = {
    "gpu": "needs a GPU",
    "network": "installs from a package index",
    "writes": "changes the repository's files",
}
_BLOCK = re.compile(
    r"(?:^<!-- (?P<marker>[\w-]+) -->\n)?^```(?P<lang>python|bash)\n(?P<code>.*?)^```", re.M | re.S
)
# pages whose python blocks another test runs (their examples raise on purpose, or need its fixtures)
OWN_TESTS = {
    "usage.md": "tests/test_docs.py::test_usage_guide_code_runs",
    "getting-started.md": "tests/test_docs.py::test_getting_started_code_runs",
    "engines.md": "packages/pygraph-core/tests/test_engine_guide.py",
    "errors.md": "packages/pygraph-core/tests/dispatch/test_errors_doc.py",
}


def _blocks(page: Path, lang: str) -> list[tuple[int, str | None, str]]:
    """(line, marker or None, code) of each block of ``lang`` on ``page``."""
    text = page.read_text()
    found = []
    for m in _BLOCK.finditer(text):
        if m["lang"] == lang:
            marker = m["marker"]
            assert marker is None or marker in MARKERS, f"{page.name}: unknown marker <!-- {marker} -->"
            found.append((text.count("\n", 0, m.start("code")), marker, m["code"]))
    return found


def _commands(code: str) -> list[list[str]]:
    """The block's commands, split as the shell would (continuations joined, comments dropped)."""
    return [
        argv for line in code.replace("\\\n", " ").splitlines() if (argv := shlex.split(line, comments=True))
    ]


@pytest.fixture(scope="module")
def shell_dir(tmp_path_factory) -> Path:
    """Where the bash blocks run: the g.json the pages name (getting-started's graph), a plan cache
    of its own."""
    from pygraph.examples import EXAMPLES

    folder = tmp_path_factory.mktemp("docs-shell")
    (folder / "g.json").write_text(repr(EXAMPLES["gemm-bias-gelu"].graph((512, 2048, 1024))))
    return folder


@pytest.mark.parametrize(
    ("page", "line", "marker", "code"),
    [
        pytest.param(page, line, marker, code, id=f"{page.name}:{line}")
        for page in PAGES
        for line, marker, code in _blocks(page, "bash")
    ],
)
def test_bash_block_runs(page, line, marker, code, shell_dir):
    if marker is not None:
        pytest.skip(f"{page.name}:{line}: marked <!-- {marker} -->: {MARKERS[marker]}")
    env = {**os.environ, "PYGRAPH_PLAN_CACHE": str(shell_dir / "plans.sqlite"), "COLUMNS": "120"}
    for argv in _commands(code):
        assert Path(argv[0]).name == "pygraph", (
            f"{page.name}:{line}: `{shlex.join(argv)}` is no pygraph command this test can run; mark the block "
            f"with one of {', '.join(f'<!-- {m} -->' for m in MARKERS)}"
        )
        proc = subprocess.run(
            [sys.executable, "-m", "pygraph", *argv[1:]], capture_output=True, text=True, cwd=shell_dir, env=env,
            timeout=300,
        )  # fmt: skip
        assert proc.returncode == 0, (
            f"{page.name}:{line}: `{shlex.join(argv)}` exited {proc.returncode}: {proc.stderr}"
        )
        assert "Traceback" not in proc.stderr and "warning" not in proc.stderr.lower(), proc.stderr


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_python_blocks_run(page):
    blocks = _blocks(page, "python")
    if page.name in OWN_TESTS:
        assert (ROOT / OWN_TESTS[page.name].split("::")[0]).is_file(), OWN_TESTS[page.name]
        pytest.skip(f"{page.name}: its python blocks run in {OWN_TESTS[page.name]}")
    namespace: dict = {}
    for line, marker, code in blocks:
        if marker is not None:
            continue  # a block that needs a GPU, the network or writes to the repository
        exec(compile("\n" * line + code, str(page), "exec"), namespace)


def test_every_marker_stands_before_a_code_block():
    for page in PAGES:
        text = page.read_text()
        for m in re.finditer(r"^<!-- ([\w-]+) -->\n(.*)$", text, flags=re.M):
            if m[1] in MARKERS:
                assert m[2].startswith("```"), f"{page.name}: <!-- {m[1]} --> is not followed by a code block"


def test_the_readme_and_getting_started_install_the_same():
    def install_line(page: Path) -> str:
        return next(
            shlex.join(argv)
            for _, marker, code in _blocks(page, "bash")
            if marker == "network"
            for argv in _commands(code)
            if argv[:2] == ["pip", "install"]
        )

    readme, guide = install_line(ROOT / "README.md"), install_line(ROOT / "docs" / "getting-started.md")
    assert readme == guide == "pip install 'pygraph-core[all]'", (readme, guide)
