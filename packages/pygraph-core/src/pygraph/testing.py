"""Test helpers. The only way tests inject stand-in engines is through the manifest table
(`manifest_override`); `capture_against_eager` is the families' CUDA-graph check of an op."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

from pygraph.engines import manifest as _manifest
from pygraph.engines.manifest import EngineFamily
from pygraph.engines.manifest_rules import check_families

__all__ = ["capture_against_eager", "manifest_override"]


@contextlib.contextmanager
def manifest_override(families: Iterable[EngineFamily]) -> Iterator[tuple[EngineFamily, ...]]:
    """Make ``families`` the manifest table for the duration of the block.

    The records obey the same rules as a generated table (blocks, slots, anchors). Engine
    instances and classification caches are dropped on entry and on exit.
    """
    table = tuple(families)
    check_families(table)
    previous = _manifest._set_override(table)
    try:
        yield table
    finally:
        _manifest._set_override(previous)


def capture_against_eager(
    step: Callable[[], Sequence[Any]],
    refill: Callable[[int], None],
    names: Sequence[str],
    seeds: Sequence[int] = (1, 2),
) -> dict[str, float]:
    """``step`` (an op's forward and backward, returning its outputs and gradients) in a CUDA graph,
    replayed against eager runs: two warm-up calls (they build the op's graphs outside any capture),
    one capture, then per seed ``refill(seed)`` writes new values into the captured inputs, the graph
    replays and ``step`` runs eagerly. Returns the worst relative difference (float64 Frobenius
    norms) per output, named by ``names`` in ``step``'s order; a replayed output holding a non-finite
    value counts as an infinite difference, so a tolerance check on the result fails on it.

    Everything runs on one side stream: a leaf's gradient accumulator keeps the stream it was made on,
    and torch warns (an error in the suites) when a backward on another stream feeds it."""
    import torch

    def rel(got: Any, want: Any) -> float:
        got, want = got.detach().double(), want.detach().double()
        return float((got - want).norm() / want.norm().clamp_min(1e-30))

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            step()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=side):
        captured = step()
    worst: dict[str, float] = {}
    with torch.cuda.stream(side):
        for seed in seeds:
            refill(seed)
            graph.replay()
            eager = step()
            side.synchronize()
            for name, got, want in zip(names, captured, eager):
                diff = rel(got, want) if bool(torch.isfinite(got).all()) else float("inf")
                worst[name] = max(worst.get(name, 0.0), diff)
    torch.cuda.current_stream().wait_stream(side)
    return worst
