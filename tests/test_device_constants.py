"""No module assumes the card: an SM count is read from the request's device (`DeviceInfo.sms`),
and the one count the families fall back to is `pygraph.engines.base.REFERENCE_SM_COUNT`.

The scan reads every module under packages/*/src as Python tokens, so comments and docstrings
(which name the H200's 132 SMs where a measurement was taken) are not code; a number literal 132,
or 66 (half of it), in code is an SM count someone wrote down."""

from __future__ import annotations

import io
import pathlib
import tokenize

PACKAGES = pathlib.Path(__file__).resolve().parents[1] / "packages"

# (module, the line's code) -> why that literal is not the card's SM count assumed
ALLOWED = {
    ("pygraph-core/src/pygraph/engines/base.py", "REFERENCE_SM_COUNT = 132"): (
        "the one documented default: the SM count of the card the thresholds were measured on"
    ),
    ("engines-gemm/src/pygraph_gemm/kernels/tile_schedule.py", "_PLACED_FULL = 66"): (
        "the H200's TPC map the GPC order was read from (a hardware placement, applied only to the "
        "grids of that card: identity on any other resident count)"
    ),
}
CARD_NUMBERS = {"132", "66"}


def _card_literals(path: pathlib.Path, root: pathlib.Path = PACKAGES) -> list[tuple[str, str]]:
    """(module relative to ``root``, the line's code) of each number literal in ``CARD_NUMBERS`` in
    ``path``."""
    found = []
    source = path.read_text()
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.NUMBER and tok.string in CARD_NUMBERS:
            code = tok.line.split("#", 1)[0].strip()
            found.append((str(path.relative_to(root)), code))
    return found


def test_no_module_writes_down_an_sm_count():
    modules = sorted(PACKAGES.glob("*/src/**/*.py"))
    assert any(p.name == "heuristics.py" for p in modules), "the families' modules were not found"
    found = [hit for path in modules for hit in _card_literals(path)]
    assert sorted(set(found)) == sorted(ALLOWED), [hit for hit in found if hit not in ALLOWED]


def test_the_scan_sees_a_literal_in_code_and_not_in_comments(tmp_path):
    module = tmp_path / "rule.py"
    module.write_text('"""One wave of the H200\'s 132 SMs."""\n# 66 pairs\nSMS = 132\nhalf = ctas < 66\n')
    assert _card_literals(module, tmp_path) == [("rule.py", "SMS = 132"), ("rule.py", "half = ctas < 66")]
