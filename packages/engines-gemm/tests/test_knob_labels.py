"""Knob-set labels (pygraph_gemm.knob_labels): the names benchmark tables and device scripts use
must read back to the knobs they were made from, or a measurement lands on the wrong config."""

from __future__ import annotations

import dataclasses
import itertools

import pytest

from pygraph_gemm.kernels.config import GemmKnobs
from pygraph_gemm.knob_labels import knob_label, parse_knob_label

# one non-default value per field (every field a label can carry)
_NON_DEFAULT = dict(
    tile_k=32,
    swap_ab=True,
    raster="n",
    swizzle=8,
    pingpong=True,
    split_k=3,
    stagger=2,
    stages=5,
    serpentine=True,
    k_flip=True,
    place_order=True,
)


def test_every_field_has_a_mark():
    assert set(_NON_DEFAULT) | {"tile_m", "tile_n", "cga_m", "cga_n"} == {
        f.name for f in dataclasses.fields(GemmKnobs)
    }
    base = knob_label(GemmKnobs())
    for name, value in _NON_DEFAULT.items():
        assert knob_label(GemmKnobs(**{name: value})) != base, name


@pytest.mark.parametrize("name", list(_NON_DEFAULT))
def test_one_field_reads_back(name):
    kn = GemmKnobs(tile_m=128, tile_n=256, cga_m=2, **{name: _NON_DEFAULT[name]})
    assert parse_knob_label(knob_label(kn)) == kn


def test_pairs_of_fields_read_back():
    for (a, va), (b, vb) in itertools.combinations(_NON_DEFAULT.items(), 2):
        kn = GemmKnobs(tile_m=64, tile_n=128, cga_n=2, **{a: va, b: vb})
        assert parse_knob_label(knob_label(kn)) == kn, (a, b)


def test_the_long_k_rule_reads_as_written_in_the_docs():
    rule = GemmKnobs(tile_m=128, tile_n=256, cga_m=2, swizzle=8, stagger=2, serpentine=True, k_flip=True)
    assert knob_label(rule) == "128x256c21z8g2vf"
    assert parse_knob_label("128x256c21z8g2vfo") == dataclasses.replace(rule, place_order=True)


# the marks of knobs the kernel no longer has (64-wide sub-tiles, store-ring slots, a split tail,
# L2 hints, ...) read as no label rather than as some other config
@pytest.mark.parametrize(
    "bad",
    [
        "",
        "128x256",
        "128x256c2",
        "128x256c21q",
        "128x256c21z8g2ov",
        "128x256c21e",
        "128x256c12z8r3",
        "128x256c21t4",
        "128x256c21h3",
    ],
)
def test_a_label_that_does_not_read_names_itself(bad):
    with pytest.raises(ValueError, match=repr(bad).replace("[", r"\[")):
        parse_knob_label(bad)
