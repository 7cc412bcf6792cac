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
from pygraph.errors import ManifestError
from pygraph.testing import manifest_override

ROOT = Path(__file__).resolve().parents[1]
GENERATE = ROOT / "packages" / "manifest" / "src" / "pygraph_manifest" / "generate.py"
ROADMAP = {"gdn": 20100, "kda": 20200, "gdn2": 20300, "gemm": 20400, "sdpa_fwd": 20500, "sdpa_bwd": 20600}


def _family(name="fam", engine_id=29000, slots=None, anchors=("MATMUL",), **kw) -> EngineFamily:
    return EngineFamily(
        name=name,
        engine_id=engine_id,
        module="absent_family_pkg.engines",
        factory="make_engines",
        slots=slots or {"a": EngineSlot(0)},
        anchors=anchors,
        **kw,
    )


def _graph_of(*type_names: str) -> SimpleNamespace:
    return SimpleNamespace(nodes=[SimpleNamespace(type=pygraph.NodeType[n]) for n in type_names])


# --- the generated table ----------------------------------------------------------------------


def test_table_in_use_matches_a_fresh_generation():
    proc = subprocess.run([sys.executable, str(GENERATE), "--check"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


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
    lock = lock_entries([_family(slots={"old": EngineSlot(0)})])
    with pytest.raises(
        ManifestError, match="slot 'new': id 29000 reuses the shipped id of family 'fam' slot 'old'"
    ):
        check_against_lock([_family(slots={"new": EngineSlot(0)})], lock)


def test_removed_engine_keeps_its_id_reserved():
    lock = lock_entries([_family(slots={"old": EngineSlot(0)})])
    merged = check_against_lock([_family(slots={"other": EngineSlot(1)})], lock)
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
        check_families([_family(slots={"a": EngineSlot(100)})])


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
    with pytest.raises(KeyError, match="20499 is in family 'gemm'"):
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
    fam = _family(slots={"stable": EngineSlot(0), "young": EngineSlot(1, opt_in=True)})
    monkeypatch.delenv(mf.OPT_IN_ENV, raising=False)
    assert pygraph.engines.offered_ids(fam) == {"stable": 29000}
    monkeypatch.setenv(mf.OPT_IN_ENV, "young")
    assert pygraph.engines.offered_ids(fam) == {"stable": 29000, "young": 29001}
    monkeypatch.setenv(mf.OPT_IN_ENV, "1")
    assert pygraph.engines.offered_ids(fam) == {"stable": 29000, "young": 29001}
    monkeypatch.setenv(mf.OPT_IN_ENV, "someone_else")
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
    assert "package for family 'fam' is not installed" in result.unavailable["a"]


def test_instantiate_hands_each_engine_its_id(tmp_path, monkeypatch):
    (tmp_path / "standin_family_pkg.py").write_text(
        "class E:\n"
        "    def __init__(self, engine_id):\n"
        "        self.engine_id = engine_id\n"
        "        self.name = 'a'\n"
        "def make(ids):\n"
        "    return [E(ids['a'])]\n"
        "def make_wrong(ids):\n"
        "    return [E(12345)]\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    fam = EngineFamily(
        "fam", 29000, "standin_family_pkg", "make", {"a": EngineSlot(0), "b": EngineSlot(1)}, ("MATMUL",)
    )
    with manifest_override([fam]):
        result = pygraph.engines.instantiate(fam)
    assert [e.engine_id for e in result.engines] == [29000]
    assert result.unavailable == {"b": "family 'fam' ships no engine for slot 'b' yet"}
    wrong = EngineFamily("fam", 29000, "standin_family_pkg", "make_wrong", {"a": EngineSlot(0)}, ("MATMUL",))
    with (
        manifest_override([wrong]),
        pytest.raises(ValueError, match="with id 12345; it was handed \\[29000\\]"),
    ):
        pygraph.engines.instantiate(wrong)
