"""The sdpa families' declarations, as the manifest ships them."""

from __future__ import annotations

import pygraph
from pygraph_sdpa.engines import make_engines


def test_forward_and_backward_are_separate_families_with_their_own_blocks():
    fwd, bwd = pygraph.engines.family_by_name("sdpa_fwd"), pygraph.engines.family_by_name("sdpa_bwd")
    assert (fwd.engine_id, fwd.anchors, fwd.distribution) == (20500, ("SDPA",), "pygraph-engines-sdpa")
    assert (bwd.engine_id, bwd.anchors) == (20600, ("SDPA_BWD",))


def test_unwritten_engines_are_opt_in_and_build_nothing():
    for name in ("sdpa_fwd", "sdpa_bwd"):
        fam = pygraph.engines.family_by_name(name)
        assert all(slot.opt_in for slot in fam.slots.values())
        assert make_engines(fam.ids) == []
