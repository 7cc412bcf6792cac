"""docs/errors.md: every public error type has a section with an example, and every example raises
(or warns) exactly what the page shows after it. ``…`` in a shown message stands for text that
depends on the machine (a path, another library's message)."""

from __future__ import annotations

import inspect
import re
import warnings
from pathlib import Path

import errors_doc_family
import pytest
from dispatch_helpers import matmul_graph

import pygraph
from pygraph import environment
from pygraph import errors as core_errors
from pygraph.execution import errors as execution_errors
from pygraph.testing import manifest_override

DOC = Path(__file__).resolve().parents[4] / "docs" / "errors.md"
_PAIR = re.compile(r"```python\n(.*?)```\n\n```text\n(\w+): (.*?)\n```", flags=re.S)


def examples() -> list[tuple[str, str, str]]:
    return [(code, name, message) for code, name, message in _PAIR.findall(DOC.read_text())]


def public_types() -> set[str]:
    found = set()
    for module in (core_errors, execution_errors):
        for name in module.__all__:
            obj = getattr(module, name)
            if inspect.isclass(obj) and issubclass(obj, (Exception, Warning)):
                found.add(name)
    return found


def run_example(code: str, monkeypatch) -> tuple[str, str]:
    """(the type name, the message) the example's code raised or warned."""
    from pygraph.planning import backend as backend_mod

    monkeypatch.setattr(environment, "_warned", set())
    environment._parse_opt_in.cache_clear()
    for var in ("PYGRAPH_ENABLE_OPT_IN_ENGINES", "PYGRAPH_GEMM_CACHE_DIR", "PYGRAPH_CACHE_DIR"):
        monkeypatch.setenv(var, "")  # recorded, so what an example sets is undone after it
        monkeypatch.delenv(var)
    # no cuDNN backend, the same on every machine
    monkeypatch.setattr(
        backend_mod, "open_backend", lambda graph, refused=None: (None, "no cuDNN backend here")
    )
    with manifest_override([errors_doc_family.FAMILY]):
        g, a, b, c = matmul_graph("mm")
        namespace = {"pygraph": pygraph, "dt": pygraph.data_type, "g": g, "a": a, "b": b, "c": c}
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                exec(compile(code, str(DOC), "exec"), namespace)
            except Exception as exc:
                return type(exc).__name__, str(exc)
    for w in caught:
        if issubclass(w.category, (core_errors.ConfigurationWarning, core_errors.CacheWarning)):
            return w.category.__name__, str(w.message)
    return "nothing", ""


def _matches(shown: str, seen: str) -> bool:
    parts = shown.split("…")
    if len(parts) == 1:
        return shown == seen
    at = 0
    for i, part in enumerate(parts):
        found = seen.find(part, at)
        if found < 0 or (i == 0 and found != 0):
            return False
        at = found + len(part)
    return True


@pytest.mark.parametrize("example", range(len(examples())))
def test_each_example_raises_what_the_page_shows(monkeypatch, example):
    code, name, shown = examples()[example]
    seen_name, seen = run_example(code, monkeypatch)
    assert (seen_name, _matches(shown, seen)) == (name, True), (
        f"the page shows {name}: {shown}\nran: {seen_name}: {seen}"
    )


def test_every_public_error_type_has_a_section_and_an_example():
    text = DOC.read_text()
    for name in sorted(public_types()):
        assert f"### {name}" in text, f"docs/errors.md has no section for {name}"
    shown = {name for _code, name, _message in examples()}
    missing = sorted(public_types() - shown - {"OperandError"})  # the base: its kinds have examples
    assert not missing, f"no example of docs/errors.md raises {missing}"
