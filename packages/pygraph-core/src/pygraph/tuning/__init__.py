"""Autotuning and the persistent plan cache.

- `autotune` (also ``graph.autotune(...)``): time the head of a graph's plan list, select the
  fastest, record it. `time_plans` with a `Bound` is the timing loop ``pygraph bench`` uses.
- `plan_cache`: the SQLite file the winners live in, which planning reads back
  (``PYGRAPH_PLAN_CACHE=<path>`` relocates it, ``=off`` disables it).
- `timing`: the `Timer` protocol and the default `CudaEventTimer`.
- `device`: the CUDA device this process runs on, asked of the driver.

Nothing here imports a framework until a timing starts.
"""

from __future__ import annotations

from pygraph.tuning.autotune import (
    AutotuneResult,
    Bound,
    Trial,
    autotune,
    head_bound,
    per_engine_bound,
    time_plans,
)
from pygraph.tuning.plan_cache import CacheEntry, PlanCache, PlanCacheWarning, active_cache, cache_path
from pygraph.tuning.timing import CudaEventTimer, Timer, TimerUnavailableError

__all__ = [
    "AutotuneResult",
    "Bound",
    "CacheEntry",
    "CudaEventTimer",
    "PlanCache",
    "PlanCacheWarning",
    "Timer",
    "TimerUnavailableError",
    "Trial",
    "active_cache",
    "autotune",
    "cache_path",
    "head_bound",
    "per_engine_bound",
    "time_plans",
]
