"""The generated manifest: drift, id stability, structural rules, run-time accessors."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

import pygraph
from pygraph.engines import manifest as mf
from pygraph.engines.manifest import EngineFamily, EngineSlot
from pygraph.engines.manifest_rules import check_against_lock, check_families, lock_entries
from pygraph.errors import ConfigurationWarning, ManifestError
from pygraph.testing import manifest_override

ROOT = Path(__file__).resolve().parents[1]
GENERATE = ROOT / "packages" / "manifest" / "src" / "pygraph_manifest" / "generate.py"
ROADMAP = {"gdn": 20100, "kda": 20200, "gdn2": 20300, "gemm": 20400, "sdpa_fwd": 20500, "sdpa_bwd": 20600}


def _slot(slot: int, **kw) -> EngineSlot:
    return EngineSlot(slot, impl=("absent_family_pkg.engines", "Engine"), **kw)


def _family(name="fam", engine_id=29000, slots=None, anchors=("MATMUL",), **kw) -> EngineFamily:
    return EngineFamily(
        name=name,
        engine_id=engine_id,
        package="absent_family_pkg",
        slots=slots or {"a": _slot(0)},
        anchors=anchors,
        **kw,
    )


def _graph_of(*type_names: str) -> SimpleNamespace:
    return SimpleNamespace(nodes=[SimpleNamespace(type=pygraph.NodeType[n]) for n in type_names])


# --- the generated table ----------------------------------------------------------------------


def test_table_in_use_matches_a_fresh_generation():
    proc = subprocess.run([sys.executable, str(GENERATE), "--check"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_a_stray_with_sources_value_is_said_and_treated_as_unset(monkeypatch, capsys):
    from pygraph_manifest import generate

    monkeypatch.setenv("PYGRAPH_MANIFEST_WITH_SOURCES", "yes")
    assert generate._with_sources() is False  # so the generator re-runs itself with the sources
    err = capsys.readouterr().err
    assert "PYGRAPH_MANIFEST_WITH_SOURCES='yes' is ignored" in err and "set to 1" in err
    monkeypatch.setenv("PYGRAPH_MANIFEST_WITH_SOURCES", "1")
    assert generate._with_sources() is True
    monkeypatch.delenv("PYGRAPH_MANIFEST_WITH_SOURCES")
    assert generate._with_sources() is False
    assert capsys.readouterr().err == ""


def test_generated_file_says_it_is_generated_and_how_to_regenerate():
    import pygraph_manifest._table as table

    text = Path(table.__file__).read_text()
    assert "GENERATED FILE - DO NOT EDIT" in text
    assert "nox -s manifest" in text


def test_roadmap_families_and_blocks():
    assert {f.name: f.engine_id for f in pygraph.engines.families()} == ROADMAP


def test_every_shipped_id_is_locked():
    from pygraph_manifest import generate

    lock = generate.read_lock()
    assert check_against_lock(pygraph.engines.families(), lock) == lock


def _copy_packages(tmp_path: Path) -> Path:
    dst = tmp_path / "packages"
    shutil.copytree(
        ROOT / "packages", dst, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info", "tests")
    )
    return dst


def _run_generator(packages: Path) -> subprocess.CompletedProcess:
    script = packages / "manifest" / "src" / "pygraph_manifest" / "generate.py"
    return subprocess.run([sys.executable, str(script), "--check"], capture_output=True, text=True)


def test_moving_a_shipped_slot_fails_generation_naming_family_and_slot(tmp_path):
    packages = _copy_packages(tmp_path)
    decl = packages / "engines-gemm" / "src" / "pygraph_gemm" / "family.py"
    decl.write_text(decl.read_text().replace('"gemm_sm90": EngineSlot(0', '"gemm_sm90": EngineSlot(7'))
    proc = _run_generator(packages)
    assert proc.returncode == 1
    assert "family 'gemm' slot 'gemm_sm90': id moved from 20400 (shipped) to 20407" in proc.stderr


def test_restored_declaration_passes(tmp_path):
    proc = _run_generator(_copy_packages(tmp_path))
    assert proc.returncode == 0, proc.stdout + proc.stderr


# --- rules ------------------------------------------------------------------------------------------


def test_reusing_a_shipped_id_fails():
    lock = lock_entries([_family(slots={"old": _slot(0)})])
    with pytest.raises(
        ManifestError, match="slot 'new': id 29000 reuses the shipped id of family 'fam' slot 'old'"
    ):
        check_against_lock([_family(slots={"new": _slot(0)})], lock)


def test_removed_engine_keeps_its_id_reserved():
    lock = lock_entries([_family(slots={"old": _slot(0)})])
    merged = check_against_lock([_family(slots={"other": _slot(1)})], lock)
    assert merged["fam"]["engines"] == {"old": 29000, "other": 29001}


def test_moving_a_family_block_fails():
    lock = lock_entries([_family()])
    with pytest.raises(ManifestError, match="family 'fam': block moved from 29000"):
        check_against_lock([_family(engine_id=29100)], lock)


def test_new_family_overlapping_a_shipped_block_fails():
    lock = lock_entries([_family(name="old")])
    with pytest.raises(ManifestError, match="block 29000 overlaps shipped family 'old'"):
        check_against_lock([_family(name="new")], lock)


def test_overlapping_blocks_fail():
    with pytest.raises(ManifestError, match="overlaps family 'a'"):
        check_families([_family(name="a"), _family(name="b", anchors=("SDPA",))])


def test_two_families_claiming_one_anchor_fail():
    with pytest.raises(ManifestError, match="families 'a' and 'b' both claim anchor node type MATMUL"):
        check_families([_family(name="a"), _family(name="b", engine_id=29100)])


def test_slot_outside_block_fails():
    with pytest.raises(ManifestError, match="slot 'a': slot 100 is outside"):
        check_families([_family(slots={"a": _slot(100)})])


def test_unknown_anchor_fails():
    with pytest.raises(ManifestError, match="anchor 'NOT_AN_OP' is not a pygraph.NodeType member"):
        check_families([_family(anchors=("NOT_AN_OP",))])


def test_misaligned_block_fails():
    with pytest.raises(ManifestError, match="engine_id 29001 is not the start of a python block"):
        check_families([_family(engine_id=29001)])


def test_hook_refs_must_be_string_pairs():
    with pytest.raises(TypeError, match="analyzer must be a \\('module', 'callable'\\) pair"):
        _family(analyzer=("only_module",))


# --- accessors ------------------------------------------------------------------------------------


def test_engine_for_id_decodes_from_the_table():
    ref = pygraph.engines.engine_for_id(20401)
    assert (ref.family.name, ref.slot, ref.engine_name) == ("gemm", 1, "gemm_sm80")


@pytest.mark.parametrize("bad", [-1, -2, 5, 19999])
def test_engine_for_id_refuses_backend_ids(bad):
    with pytest.raises(ValueError, match=f"engine id {bad} is a backend id"):
        pygraph.engines.engine_for_id(bad)


def test_engine_for_id_unknown_python_id():
    with pytest.raises(KeyError, match="20499 is in the block of family 'gemm'"):
        pygraph.engines.engine_for_id(20499)
    with pytest.raises(KeyError, match="belongs to no family"):
        pygraph.engines.engine_for_id(29999)


def test_id_helpers():
    from pygraph.engines import engine_ids as ids

    assert ids.is_python_engine(20400) and not ids.is_python_engine(19999)
    assert ids.is_backend_engine(-1) and ids.is_backend_engine(0) and ids.is_backend_engine(15000)
    assert not ids.is_backend_engine(-2) and not ids.is_backend_engine(20400)
    assert ids.block_of(20467) == 20400
    assert (ids.BACKEND_HEURISTIC_ENGINE_ID, ids.BACKEND_PLACEMENT_MARKER) == (-1, -2)


def test_offered_ids_honour_opt_in_and_the_env(monkeypatch):
    fam = _family(slots={"stable": _slot(0), "young": _slot(1, opt_in=True)})
    monkeypatch.delenv(mf.OPT_IN_ENV, raising=False)
    assert pygraph.engines.offered_ids(fam) == {"stable": 29000}
    monkeypatch.setenv(mf.OPT_IN_ENV, "young")
    assert pygraph.engines.offered_ids(fam) == {"stable": 29000, "young": 29001}
    monkeypatch.setenv(mf.OPT_IN_ENV, "1")
    assert pygraph.engines.offered_ids(fam) == {"stable": 29000, "young": 29001}
    monkeypatch.setenv(mf.OPT_IN_ENV, "someone_else")
    with pytest.warns(ConfigurationWarning, match="'someone_else' names no engine or family"):
        assert pygraph.engines.offered_ids(fam) == {"stable": 29000}


def test_family_for_is_a_lookup_on_anchor_node_types():
    gemm = pygraph.engines.family_by_name("gemm")
    assert pygraph.engines.family_for(_graph_of("MATMUL", "POINTWISE", "POINTWISE")) is gemm
    assert pygraph.engines.family_for(_graph_of("GDN_BWD")).name == "gdn"
    assert pygraph.engines.family_for(_graph_of("POINTWISE", "REDUCTION")) is None
    # A graph naming two families belongs to neither.
    assert pygraph.engines.family_for(_graph_of("MATMUL", "SDPA")) is None


def test_manifest_override_swaps_the_table_and_restores_it():
    fam = _family()
    before = pygraph.engines.families()
    with manifest_override([fam]) as table:
        assert pygraph.engines.families() == table == (fam,)
        assert pygraph.engines.family_for(_graph_of("MATMUL")) is fam
        assert pygraph.engines.engine_for_id(29000).engine_name == "a"
    assert pygraph.engines.families() == before


def test_manifest_override_enforces_the_rules():
    with (
        pytest.raises(ManifestError, match="both claim anchor"),
        manifest_override([_family(name="a"), _family(name="b", engine_id=29100)]),
    ):
        pass


def test_instantiate_tolerates_an_absent_package():
    with manifest_override([_family()]):
        result = pygraph.engines.instantiate(pygraph.engines.families()[0])
    assert result.engines == ()
    assert result.unavailable["a"].startswith(
        "package for family 'fam' is not installed (no module 'absent_family_pkg'; pip install 'pygraph-core[fam]')"
    )


_STANDIN_PACKAGE = """
class _Engine:
    def __init__(self, engine_id):
        self.engine_id = engine_id

class A(_Engine):
    name = "a"

class Misnamed(_Engine):
    name = "not_a"

class Misnumbered(_Engine):
    name = "a"
    def __init__(self, engine_id):
        self.engine_id = 12345
"""


@pytest.fixture
def standin_package(tmp_path, monkeypatch):
    """A family package ``standin_family_pkg`` with engine classes and one module that cannot import."""
    pkg = tmp_path / "standin_family_pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "engines.py").write_text(_STANDIN_PACKAGE)
    (pkg / "needs_dsl.py").write_text("import a_dsl_that_is_not_installed\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    return "standin_family_pkg"


def _standin(**slots: EngineSlot) -> EngineFamily:
    return EngineFamily("fam", 29000, "standin_family_pkg", slots, ("MATMUL",))


def test_core_builds_each_offered_slot_from_its_class_with_the_slot_id(standin_package):
    fam = _standin(
        a=EngineSlot(0, impl=("standin_family_pkg.engines", "A")),
        b=EngineSlot(1, impl=("standin_family_pkg.needs_dsl", "B")),
        c=EngineSlot(2, planned="its kernel is not written yet"),
        d=EngineSlot(3, impl=("standin_family_pkg.engines", "D"), opt_in=True),
    )
    with manifest_override([fam]):
        assert pygraph.engines.offered_ids(fam) == {"a": 29000, "b": 29001}
        result = pygraph.engines.instantiate(fam)
    assert [(e.name, e.engine_id) for e in result.engines] == [("a", 29000)]
    assert result.unavailable == {
        "b": "engine 'b' could not be imported: No module named 'a_dsl_that_is_not_installed'",
        "c": "planned: its kernel is not written yet",
    }


@pytest.mark.parametrize(
    ("cls", "message"),
    [("Misnamed", "with id 29000 and name 'not_a'"), ("Misnumbered", "with id 12345 and name 'a'")],
    ids=["name", "id"],
)
def test_an_engine_that_does_not_carry_its_slots_id_and_name_is_a_bug(standin_package, cls, message):
    fam = _standin(a=EngineSlot(0, impl=("standin_family_pkg.engines", cls)))
    with manifest_override([fam]), pytest.raises(ValueError, match=f"family 'fam' slot 'a': .*{message}"):
        pygraph.engines.instantiate(fam)


def test_a_family_of_planned_slots_imports_nothing_and_says_why(standin_package):
    fam = EngineFamily(
        "fam", 29000, "not_installed_anywhere", {"a": EngineSlot(0, planned="soon")}, ("MATMUL",)
    )
    with manifest_override([fam]):
        result = pygraph.engines.instantiate(fam)
    assert result.engines == () and result.unavailable == {"a": "planned: soon"}
    assert repr(fam) == "EngineFamily(fam: block 29000..29099; a=29000 (planned: soon))"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({}, "give exactly one of impl=\\('module', 'Class'\\) or planned='why not yet'"),
        ({"impl": ("m", "C"), "planned": "why"}, "give exactly one of"),
        ({"impl": ("only_module",)}, "EngineSlot\\(0\\) impl must be a \\('module', 'callable'\\) pair"),
        ({"planned": "  "}, "planned must say why"),
        ({"planned": "why", "opt_in": True}, "a planned slot is never offered"),
    ],
    ids=["neither", "both", "bad-impl", "empty-reason", "planned-opt-in"],
)
def test_a_slot_names_its_class_or_why_it_is_planned(kwargs, message):
    with pytest.raises(TypeError, match=message):
        EngineSlot(0, **kwargs)


def test_every_module_a_family_names_lives_in_its_package():
    stray = _family(slots={"a": EngineSlot(0, impl=("other_pkg.engines", "E"))})
    with pytest.raises(
        ManifestError, match="slot 'a' impl: module 'other_pkg.engines' is outside the family's package"
    ):
        check_families([stray])
    with pytest.raises(
        ManifestError, match="family 'fam' analyzer: module 'absent_family_pkgx.analyzer' is outside"
    ):
        check_families([_family(analyzer=("absent_family_pkgx.analyzer", "analyze"))])
    check_families([_family(analyzer=("absent_family_pkg", "analyze"))])


def test_records_round_trip_through_the_table_rows():
    fam = _family(
        slots={"a": _slot(0), "b": _slot(1, opt_in=True), "c": EngineSlot(2, planned="not yet")},
        analyzer=("absent_family_pkg.analyzer", "analyze"),
        distribution="pygraph-engines-fam",
    )
    assert EngineFamily.from_row(fam.to_row()) == fam
    assert fam.planned == {"c": "not yet"}
    for shipped in pygraph.engines.families():
        assert EngineFamily.from_row(shipped.to_row()) == shipped
