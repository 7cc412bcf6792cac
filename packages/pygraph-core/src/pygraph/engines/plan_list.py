"""The plan list with a lazy tail: the ranked prefix at once, the rest of a knob domain on first use.

A family's hook may name a block of its proposals without building it: a `Deferred` block (one
engine's configs, produced by a callable). A GEMM domain holds thousands of configs, and building
them (and their identity keys) is most of a first plan list's cost, while a graph usually runs
one of the first few entries.

- `PlanSequence`: what `assemble` returns when a proposal holds a `Deferred` block. It reads as the
  whole list (iteration, indexing and length build every block), so a hook's result means what it
  always meant; the planner reads its ``parts`` instead.
- `PlanList`: the planner's one plan list, each ``(engine_id, knobs)`` at its first position. The
  entries before the first deferred block (the *ranked prefix*) are known at once; the whole list is
  built the first time something reads past them: the count, an index past the prefix, iteration
  to the end (``graph.plans``, autotune, ``explain``). Every index means what it means in the whole
  list, because the prefix of the deduplicated parts is the prefix of the deduplicated whole.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, overload

from pygraph.engines.base import PlanConfig

__all__ = ["Deferred", "PlanList", "PlanSequence", "dedup", "expand", "parts_of"]


class Deferred:
    """A block of proposals built on first use: ``produce()`` returns the block's configs, each of
    engine ``engine_id``, in rank order. It is called at most once."""

    __slots__ = ("_configs", "_lock", "engine_id", "produce")

    def __init__(self, engine_id: int, produce: Callable[[], Iterable[PlanConfig]]) -> None:
        self.engine_id = engine_id
        self.produce = produce
        self._configs: tuple[PlanConfig, ...] | None = None
        self._lock = threading.Lock()

    def configs(self) -> tuple[PlanConfig, ...]:
        if self._configs is None:
            with self._lock:  # two threads reading past the prefix build the block once
                if self._configs is None:
                    configs = tuple(self.produce())
                    for cfg in configs:
                        if not isinstance(cfg, PlanConfig) or cfg.engine_id != self.engine_id:
                            raise ValueError(
                                f"Deferred({self.engine_id}) produced {cfg!r}: a deferred block holds "
                                f"PlanConfigs of engine {self.engine_id} only"
                            )
                    self._configs = configs
        return self._configs

    def __repr__(self) -> str:
        built = "not built" if self._configs is None else f"{len(self._configs)} configs"
        return f"Deferred({self.engine_id}, {built})"


Part = PlanConfig | Deferred


def dedup(plans: Iterable[PlanConfig]) -> list[PlanConfig]:
    """Keep each ``(engine_id, knobs)`` at its first position."""
    seen: set[Any] = set()
    out = []
    for cfg in plans:
        key = cfg.key
        if key not in seen:
            seen.add(key)
            out.append(cfg)
    return out


def expand(parts: Iterable[Part]) -> Iterator[PlanConfig]:
    """Every config of ``parts`` in order, each deferred block built in its place."""
    for part in parts:
        if isinstance(part, Deferred):
            yield from part.configs()
        else:
            yield part


class PlanSequence(Sequence[PlanConfig]):
    """A hook's proposals holding deferred blocks: reads as the whole list (building every block on
    the first read); ``parts`` keeps the blocks for the planner."""

    def __init__(self, parts: Iterable[Part]) -> None:
        self.parts: tuple[Part, ...] = tuple(parts)
        self._all: list[PlanConfig] | None = None

    def _whole(self) -> list[PlanConfig]:
        if self._all is None:
            self._all = list(expand(self.parts))
        return self._all

    @overload
    def __getitem__(self, index: int) -> PlanConfig: ...
    @overload
    def __getitem__(self, index: slice) -> list[PlanConfig]: ...
    def __getitem__(self, index: int | slice) -> PlanConfig | list[PlanConfig]:
        return self._whole()[index]

    def __len__(self) -> int:
        return len(self._whole())

    def __iter__(self) -> Iterator[PlanConfig]:
        return iter(self._whole())

    def __eq__(self, other: object) -> bool:
        return _same_entries(self, other)

    __hash__ = None  # type: ignore[assignment]  # compares by its entries, like a list

    def __repr__(self) -> str:
        return f"PlanSequence({list(self.parts)!r})"


def _same_entries(plans: Sequence[PlanConfig], other: object) -> bool | Any:
    """A plan sequence equals any sequence (a list, a tuple, another plan sequence) of the same
    entries in the same order, as a list would."""
    if isinstance(other, (str, bytes)) or not isinstance(other, Sequence):
        return NotImplemented
    return list(plans) == list(other)


def parts_of(plans: Iterable[Any]) -> list[Any]:
    """The parts of a hook's result: a `PlanSequence`'s, or the items of any other iterable."""
    return list(plans.parts) if isinstance(plans, PlanSequence) else list(plans)


class PlanList(Sequence[PlanConfig]):
    """The plan list: deduplicated, its ranked prefix known at once, the rest built on first use.

    ``parts`` are configs and `Deferred` blocks in rank order; ``finish(configs)`` (optional) is run
    on the whole list's configs, in order, before they are deduplicated (the planner checks a hook's
    deferred configs there). Reading the count, an index past the prefix, or iterating past it
    builds the whole list once (``complete``).
    """

    def __init__(
        self, parts: Iterable[Part] = (), finish: Callable[[list[PlanConfig]], None] | None = None
    ) -> None:
        parts = tuple(parts)
        cut = next((i for i, p in enumerate(parts) if isinstance(p, Deferred)), len(parts))
        self._known: list[PlanConfig] = dedup(parts[:cut])
        # every config a hook named outright, wherever it stands (searched without building a block)
        self._eager: list[PlanConfig] = [p for p in parts if not isinstance(p, Deferred)]
        self._rest: Callable[[], list[PlanConfig]] | None = None
        if cut < len(parts):

            def whole() -> list[PlanConfig]:
                configs = list(expand(parts))
                if finish is not None:
                    finish(configs)
                return dedup(configs)

            self._rest = whole
        # a change and a build of the rest exclude each other (a change wraps the rest)
        self._lock = threading.RLock()

    # -- what is known without building ------------------------------------------------------------
    @property
    def complete(self) -> bool:
        """Whether the whole list is built."""
        return self._rest is None

    @property
    def prefix(self) -> tuple[PlanConfig, ...]:
        """The entries known now: the ranked prefix, or the whole list once complete."""
        return tuple(self._known)

    def find(self, key: Any) -> PlanConfig | None:
        """The first config with this ``(engine_id, knobs)`` key among those known without building a
        deferred block (the prefix and every config named outright); None if none is."""
        for cfg in self._known if self._rest is None else self._eager:
            if cfg.key == key:
                return cfg
        return None

    def named(self) -> list[PlanConfig]:
        """Every config known without building a deferred block."""
        return list(self._known if self._rest is None else self._eager)

    def has(self, index: int) -> bool:
        """Whether ``index`` (>= 0) is a position of the list; builds the rest only past the prefix."""
        if index < len(self._known):
            return True
        self.build()
        return index < len(self._known)

    def build(self) -> None:
        """Build the whole list (once; later calls return at once)."""
        if self._rest is None:
            return
        with self._lock:
            rest = self._rest
            if rest is None:
                return
            whole = rest()
            self._known, self._eager, self._rest = whole, whole, None

    # -- the Sequence --------------------------------------------------------------------------------
    @overload
    def __getitem__(self, index: int) -> PlanConfig: ...
    @overload
    def __getitem__(self, index: slice) -> list[PlanConfig]: ...
    def __getitem__(self, index: int | slice) -> PlanConfig | list[PlanConfig]:
        if isinstance(index, int) and 0 <= index < len(self._known):
            return self._known[index]
        self.build()
        return self._known[index]

    def __len__(self) -> int:
        self.build()
        return len(self._known)

    def __bool__(self) -> bool:
        if self._known:
            return True
        self.build()
        return bool(self._known)

    def __iter__(self) -> Iterator[PlanConfig]:
        i = 0
        while True:
            known = self._known
            if i < len(known):
                yield known[i]
                i += 1
            elif self._rest is None:
                return
            else:
                self.build()

    def __eq__(self, other: object) -> bool:
        return _same_entries(self, other)

    __hash__ = None  # type: ignore[assignment]  # compares by its entries, like a list

    def __repr__(self) -> str:
        tail = "" if self._rest is None else ", ... (not built)"
        return f"PlanList({self._known!r}{tail})"

    # -- changes (the planner's, under its lock) -----------------------------------------------------
    def put_first(self, cfg: PlanConfig) -> None:
        """Move ``cfg`` (or put it, when the list does not hold its key) to the front."""

        def front(plans: list[PlanConfig]) -> list[PlanConfig]:
            return [cfg, *(p for p in plans if p.key != cfg.key)]

        with self._lock:
            self._known, self._eager = front(self._known), [cfg, *self._eager]
            rest = self._rest
            if rest is not None:
                self._rest = lambda: front(rest())

    def keep(self, wanted: Callable[[PlanConfig], bool]) -> dict[int, int]:
        """Drop the entries ``wanted`` refuses; {old index: new index} of the entries known before
        (an index past them was never handed out: reading it builds the whole list)."""
        moved = {}
        with self._lock:
            kept = []
            for i, cfg in enumerate(self._known):
                if wanted(cfg):
                    moved[i] = len(kept)
                    kept.append(cfg)
            self._known, self._eager = kept, [c for c in self._eager if wanted(c)]
            rest = self._rest
            if rest is not None:
                self._rest = lambda: [c for c in rest() if wanted(c)]
        return moved

    def append(self, cfg: PlanConfig) -> None:
        """Add ``cfg`` at the end of the whole list (built first)."""
        with self._lock:
            self.build()
            self._known.append(cfg)
