"""What the planner hands an engine: one EngineRequest per graph (facts, layout, declared device)."""

from __future__ import annotations

import dataclasses

import pytest
from dispatch_helpers import matmul_graph

from pygraph.engines.base import REFERENCE_SM_COUNT, Capabilities, DeviceInfo, EngineRequest
from pygraph.tuning import device as device_mod
from pygraph.tuning.device import CudaDevice


def test_every_engine_is_handed_the_same_request_with_the_facts_and_the_layout(standins):
    g, a, b, c = matmul_graph()
    g.create_execution_plans()
    seen = {name: request for name, request in standins.REQUESTS}
    assert set(seen) == {"alpha", "beta", "gamma"}
    request = seen["alpha"]
    assert all(r is request for r in seen.values())  # built once per graph
    assert request.graph is g and request.facts == standins.Facts(node_count=1)
    assert len(standins.ANALYZED) == 1  # the facts the hook ranked on, parsed once
    assert [request.layout.position(t) for t in (a, b, c)] == [0, 1, 2]
    assert request.layout.declared[0].shape == (1, 16, 32)
    assert g.engine_request() is request


H100_PCIE = CudaDevice("NVIDIA H100 PCIe", 90, 114)


@pytest.fixture
def no_cuda_device(monkeypatch):
    monkeypatch.setattr(device_mod, "current_device", lambda: None)


@pytest.fixture
def h100_pcie(monkeypatch):
    """The process runs on an H100 PCIe (114 SMs), whatever this machine has."""
    monkeypatch.setattr(device_mod, "current_device", lambda: H100_PCIE)


def test_the_device_is_what_the_graph_declares(standins, no_cuda_device):
    g, *_ = matmul_graph()
    assert g.engine_request().device == DeviceInfo()  # nothing declared, no device: nothing known
    assert g.engine_request().device.sms == REFERENCE_SM_COUNT == 132  # rules read the reference card
    g2, *_ = matmul_graph("mm2")
    g2.sm_version, g2.sm_count = 90, 114
    assert g2.engine_request().device == DeviceInfo(sm=90, sm_count=114)
    assert g2.engine_request().device.sms == 114


def test_what_the_graph_does_not_declare_is_read_from_the_cuda_device(standins, h100_pcie):
    g, *_ = matmul_graph()
    assert g.engine_request().device == DeviceInfo(sm=90, name="NVIDIA H100 PCIe", sm_count=114)
    assert g.engine_request().device.sms == 114
    g2, *_ = matmul_graph("mm2")
    g2.sm_version = 90  # the device's arch: its SM count fills the rest
    assert g2.engine_request().device == DeviceInfo(sm=90, name="NVIDIA H100 PCIe", sm_count=114)


def test_a_declared_sm_count_wins_over_the_device(standins, h100_pcie):
    g, *_ = matmul_graph()
    g.sm_count = 132  # planned for a 132-SM card of the device's arch: the count is the caller's
    assert g.engine_request().device == DeviceInfo(sm=90, sm_count=132)


def test_a_graph_declared_for_another_arch_takes_nothing_from_the_device(standins, h100_pcie):
    g, *_ = matmul_graph()
    g.sm_version = 100  # planned for another card: this one's SM count says nothing about it
    assert g.engine_request().device == DeviceInfo(sm=100)
    assert g.engine_request().device.sms == REFERENCE_SM_COUNT


def test_the_hook_ranks_for_the_request_device(standins, h100_pcie):
    g, *_ = matmul_graph()
    g.create_execution_plans()
    assert standins.HOOK["device"] is g.engine_request().device
    assert standins.HOOK["device"].sms == 114


def test_the_request_is_frozen(standins):
    g, *_ = matmul_graph()
    request = g.engine_request()
    assert g.state.frozen  # the request describes a graph that can no longer change
    with pytest.raises(dataclasses.FrozenInstanceError):
        request.facts = None


def test_capabilities_judge_the_declared_device_before_the_facts():
    caps = Capabilities(sm_lo=90, sm_hi=90)
    facts = type("Facts", (), {"sm": None})()
    assert caps.mismatch(facts) is None  # no arch known: not a reason
    assert caps.mismatch(facts, device=DeviceInfo(sm=80)) == "requires SM90..SM90, found SM80"
    facts.sm = 80
    assert caps.mismatch(facts, device=DeviceInfo(sm=90)) is None
    assert caps.mismatch(facts, device=DeviceInfo()) == "requires SM90..SM90, found SM80"


def test_capabilities_decline_an_excluded_arch_inside_their_range_with_its_reason():
    caps = Capabilities(sm_lo=80, sm_hi=121, sm_excluded={100: "the compiler fails kernel X there"})
    facts = type("Facts", (), {"sm": None})()
    assert caps.mismatch(facts, device=DeviceInfo(sm=90)) is None
    assert caps.mismatch(facts, device=DeviceInfo(sm=100)) == "SM100: the compiler fails kernel X there"


def test_a_request_built_by_hand_reads_its_layout_on_demand():
    reads = []
    request = EngineRequest(
        graph=None, facts=None, device=DeviceInfo(), layout_of=lambda: reads.append(1) or "L"
    )
    assert reads == []
    assert request.layout == "L" and reads == [1]
