"""benchmarks/anchor_kernels.py on the CPU: its shape list and the kernel rows it keeps from the
profiler's averages (stand-in rows; the device run prints nvjet's names)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest


@pytest.fixture(scope="module")
def anchors(benchmark_module):
    return benchmark_module("anchor_kernels")


def test_shapes_parse_in_order(anchors):
    assert anchors.parse_shapes("1024x1024x4096,200x3000x4104,") == [(1024, 1024, 4096), (200, 3000, 4104)]


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("1024x1024", "want MxNxK"),
        ("8x0x8", "must be positive"),
        ("", "no shape in ''"),
        ("axbxc", "want MxNxK"),
    ],
)
def test_a_bad_shape_is_refused_with_what_was_given(anchors, text, fragment):
    with pytest.raises(ValueError, match=fragment):
        anchors.parse_shapes(text)


def test_only_device_kernels_are_kept_slowest_first(anchors):
    rows = [
        SimpleNamespace(key="cudaLaunchKernel", device_time=0.0),
        SimpleNamespace(key="Memset (Device)", device_time=1.0),
        SimpleNamespace(key="nvjet_sm90_tst_64x64_64x13_2x1_v_bz_TNT", device_time=21.5),
        SimpleNamespace(key="aten::mm", device_time=22.0),
        SimpleNamespace(key="splitKreduce_kernel", cuda_time=3.0),  # an older torch's attribute
    ]
    assert anchors.device_kernels(rows) == [
        ("nvjet_sm90_tst_64x64_64x13_2x1_v_bz_TNT", 21.5),
        ("splitKreduce_kernel", 3.0),
    ]
