"""PYGRAPH_ENABLE_OPT_IN_ENGINES and PYGRAPH_DISABLE_ENGINES parsed once per value: garbage or a name
that is no engine is one ConfigurationWarning per process, naming the variable and the value, and is
ignored; a disabled engine is never offered, opted in or not. The other kinds of variable (switches,
cache paths, lists of fixed names) alike: garbage is warned about once and treated as unset."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest
from dispatch_helpers import standin_family

from pygraph import environment
from pygraph.engines.manifest import EngineSlot, family_by_name, offered_ids
from pygraph.environment import DISABLE_ENV, OPT_IN_ENV
from pygraph.errors import ConfigurationWarning
from pygraph.testing import manifest_override


@pytest.fixture
def opt_in_family(monkeypatch):
    monkeypatch.setattr(environment, "_warned", set())
    environment._parse_opt_in.cache_clear()
    slots = {
        "alpha": EngineSlot(0, impl=("pygraph_standins", "Alpha")),
        "beta": EngineSlot(1, impl=("pygraph_standins", "Beta"), opt_in=True),
    }
    with manifest_override([standin_family(**slots)]):
        yield family_by_name("standin")


def _offered(monkeypatch, family, value):
    monkeypatch.setenv(OPT_IN_ENV, value)
    return sorted(offered_ids(family))


@pytest.mark.parametrize(
    ("value", "offered"),
    [("", ["alpha"]), ("0", ["alpha"]), ("off", ["alpha"]), ("1", ["alpha", "beta"]), ("all", ["alpha", "beta"]),
     ("beta", ["alpha", "beta"]), ("standin", ["alpha", "beta"]), (" beta , ", ["alpha", "beta"])],
)  # fmt: skip
def test_accepted_values(monkeypatch, opt_in_family, value, offered):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert _offered(monkeypatch, opt_in_family, value) == offered


@pytest.mark.parametrize(
    ("value", "fragments"),
    [
        ("bta", ["'bta' names no engine or family", "alpha", "beta", "standin"]),
        ("beta;rm -rf", ["'beta;rm -rf' cannot be an engine or family name", "comma-separated"]),
    ],
)
def test_an_unknown_name_or_garbage_is_warned_once_and_ignored(monkeypatch, opt_in_family, value, fragments):
    _warned_once_and_ignored(
        lambda: _offered(monkeypatch, opt_in_family, value), ["alpha"], OPT_IN_ENV, value, fragments
    )


def _warned_once_and_ignored(offered, expected, env, value, fragments):
    """``offered()`` gives ``expected`` with one warning naming ``env``, ``value`` and each fragment, then
    again without one (once per process and value)."""
    with pytest.warns(ConfigurationWarning) as caught:
        assert offered() == expected
    (message,) = [str(w.message) for w in caught]
    assert message.startswith(f"{env}={value!r}: ")
    for fragment in fragments:
        assert fragment in message, (fragment, message)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert offered() == expected


def test_a_known_name_beside_an_unknown_one_still_counts(monkeypatch, opt_in_family):
    with pytest.warns(ConfigurationWarning, match="'nope' names no engine"):
        assert _offered(monkeypatch, opt_in_family, "nope,beta") == ["alpha", "beta"]


def test_the_value_is_parsed_once(monkeypatch, opt_in_family):
    monkeypatch.setenv(DISABLE_ENV, "alpha")
    for _ in range(3):
        _offered(monkeypatch, opt_in_family, "beta")
    info = environment._parse_opt_in.cache_info()
    assert info.misses == 2 and info.hits == 4  # each variable's value once


def _offered_without(monkeypatch, family, value, opted_in="1"):
    monkeypatch.setenv(OPT_IN_ENV, opted_in)
    monkeypatch.setenv(DISABLE_ENV, value)
    return sorted(offered_ids(family))


@pytest.mark.parametrize(
    ("value", "offered"),
    [("", ["alpha", "beta"]), ("0", ["alpha", "beta"]), ("alpha", ["beta"]), ("beta", ["alpha"]),
     (" alpha , beta ", []), ("standin", [])],
)  # fmt: skip
def test_a_disabled_engine_is_never_offered(monkeypatch, opt_in_family, value, offered):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert _offered_without(monkeypatch, opt_in_family, value) == offered


def test_disabling_beats_opting_in(monkeypatch, opt_in_family):
    assert _offered_without(monkeypatch, opt_in_family, "beta", opted_in="beta") == ["alpha"]


@pytest.mark.parametrize(
    ("value", "fragments"),
    [
        ("alpah", ["'alpah' names no engine or family", "alpha", "beta", "standin"]),
        ("1", ["would disable every engine", "comma-separated"]),
        ("alpha;x", ["'alpha;x' cannot be an engine or family name", "kda_sm90,kda_sm90_bwd"]),
    ],
)
def test_a_bad_disable_list_is_warned_once_and_ignored(monkeypatch, opt_in_family, value, fragments):
    offered = lambda: _offered_without(monkeypatch, opt_in_family, value)  # noqa: E731
    _warned_once_and_ignored(offered, ["alpha", "beta"], DISABLE_ENV, value, fragments)


def test_the_engine_settings_are_the_raw_values(monkeypatch):
    monkeypatch.setenv(OPT_IN_ENV, "beta")
    monkeypatch.delenv(DISABLE_ENV, raising=False)
    assert environment.engine_settings() == ("beta", "")
    monkeypatch.setenv(DISABLE_ENV, "alpha")
    assert environment.engine_settings() == ("beta", "alpha")


# --- the other kinds of variable: switches, paths, lists of fixed names ---------------------------------

VAR = "PYGRAPH_TEST_VARIABLE"


@pytest.fixture
def fresh_warnings(monkeypatch):
    monkeypatch.setattr(environment, "_warned", set())


@pytest.mark.parametrize(
    ("value", "default", "expected"),
    [(None, True, True), ("", False, False), ("1", False, True), (" Yes ", False, True), ("on", False, True),
     ("0", True, False), ("OFF", True, False), ("false", True, False), ("no", True, False)],
)  # fmt: skip
def test_a_switch_takes_its_values_and_defaults_when_unset(
    monkeypatch, fresh_warnings, value, default, expected
):
    if value is None:
        monkeypatch.delenv(VAR, raising=False)
    else:
        monkeypatch.setenv(VAR, value)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert environment.switch(VAR, default) is expected


@pytest.mark.parametrize("default", [True, False])
def test_a_switch_that_is_neither_on_nor_off_is_warned_once_and_treated_as_unset(
    monkeypatch, fresh_warnings, default
):
    monkeypatch.setenv(VAR, "banana")
    _warned_once_and_ignored(
        lambda: environment.switch(VAR, default),
        default,
        VAR,
        "banana",
        ["not a switch", "1 (on) or 0 (off)", f"{VAR} is {'on' if default else 'off'} when unset"],
    )


@pytest.mark.parametrize(
    ("value", "expected"),
    [(None, (None, False)), (" ", (None, False)), ("off", (None, True)), ("0", (None, True)),
     ("none", (None, True)), ("/tmp/c", (Path("/tmp/c"), False)), ("~/c", (Path("~/c").expanduser(), False)),
     (" rel/c ", (Path("rel/c"), False))],
)  # fmt: skip
def test_a_path_setting_is_a_path_or_off(monkeypatch, fresh_warnings, value, expected):
    if value is None:
        monkeypatch.delenv(VAR, raising=False)
    else:
        monkeypatch.setenv(VAR, value)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert environment.path_setting(VAR) == expected


@pytest.mark.parametrize("value", ["1", "true", "ON"])
def test_a_path_setting_that_is_a_switch_is_warned_once_and_treated_as_unset(
    monkeypatch, fresh_warnings, value
):
    # taken as a path, "1" would put the cache in ./1 under whatever the working directory is
    monkeypatch.setenv(VAR, value)
    _warned_once_and_ignored(
        lambda: environment.path_setting(VAR), (None, False), VAR, value, ["not a path", "'off'"]
    )


def test_a_list_of_names_keeps_the_known_ones_and_warns_once_about_the_rest(monkeypatch, fresh_warnings):
    monkeypatch.setenv(VAR, " sm90 , hopper,sm100,")
    _warned_once_and_ignored(
        lambda: environment.names(VAR, ("sm90", "sm100", "sm120")),
        frozenset({"sm90", "sm100"}),
        VAR,
        " sm90 , hopper,sm100,",
        ["'hopper' is not one of sm100, sm120, sm90", "comma-separated"],
    )
    monkeypatch.delenv(VAR)
    assert environment.names(VAR, ("sm90",)) == frozenset()
