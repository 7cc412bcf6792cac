"""uid ownership: the IR assigns every uid; a user uid steals an auto one; user-user collisions raise."""

from __future__ import annotations

import pytest

import pygraph


def test_every_tensor_has_a_unique_uid() -> None:
    g = pygraph.Graph("u")
    a, b = g.tensor([2, 2]), g.tensor([2, 2])
    c = g.add(a, b)
    uids = [t.uid for t in g.tensors]
    assert len(set(uids)) == len(uids) == 3 and all(u > 0 for u in uids)
    assert not c.uid_assigned and g.find_tensor(c.uid) is c


def test_user_uid_steals_auto_uid() -> None:
    g = pygraph.Graph("u")
    a = g.tensor([2, 2], name="a")
    assert a.uid == 1 and not a.uid_assigned
    b = g.tensor([2, 2], name="b", uid=1)
    assert b.uid == 1 and b.uid_assigned
    assert a.uid not in (1,) and g.find_tensor(a.uid) is a and g.find_tensor(1) is b
    c = g.relu(b)
    c.set_uid(a.uid)
    assert c.uid_assigned and g.find_tensor(c.uid) is c
    assert len({t.uid for t in g.tensors}) == 3


def test_user_uid_collision_names_both_tensors() -> None:
    g = pygraph.Graph("u")
    g.tensor([2], name="first", uid=7)
    second = g.tensor([2], name="second")
    with pytest.raises(ValueError, match="second") as info:
        second.set_uid(7)
    assert "first" in str(info.value)
    with pytest.raises(ValueError, match="third"):
        g.tensor([2], name="third", uid=7)


def test_reassigning_own_uid_and_bad_uid() -> None:
    g = pygraph.Graph("u")
    t = g.tensor([2], uid=5)
    t.uid = 5
    t.uid = 9
    assert g.find_tensor(9) is t
    with pytest.raises(KeyError):
        g.find_tensor(5)
    with pytest.raises(ValueError, match="positive int"):
        t.set_uid(0)
