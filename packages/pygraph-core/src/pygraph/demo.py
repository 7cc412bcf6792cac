"""``pygraph demo``: the main job on the built-in examples, family by family.

For each family of the manifest: the engines offered and why the others are not, its example
graph (`pygraph.examples`), which engines accept it, the backend's answer, the ranked plan list,
and on a GPU one timed run of the plan ``build_plans()`` selects. On a machine without a GPU it
still runs and says what it could not do.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from pygraph import engines
from pygraph.engines.factory import install_command, is_installed

__all__ = ["DEMO_EXAMPLES", "run_demo"]

# family -> (example, --shape): the graph the demo plans for each family, sized to plan and run
# in a moment.
DEMO_EXAMPLES: dict[str, tuple[str, tuple[int, ...] | None]] = {
    "gemm": ("gemm-bias-gelu", (256, 512, 128)),
    "sdpa_fwd": ("sdpa", None),
    "sdpa_bwd": ("sdpa-bwd", None),
    "gdn": ("gdn", None),
    "kda": ("kda", None),
    "gdn2": ("gdn2", None),
}


_HEAD, _TAIL = 6, 3  # plan-list entries shown from the start and from the end of a long list


def _family_record(fam: engines.EngineFamily) -> dict[str, Any]:
    from pygraph.examples import EXAMPLES
    from pygraph.report import explain

    record: dict[str, Any] = {
        "family": fam.name,
        "block": fam.engine_id,
        "anchors": list(fam.anchors),
        "installed": is_installed(fam),
    }
    if not record["installed"]:
        record["install"] = install_command(fam)
        return record
    from pygraph.report import missing_requirements

    built = engines.instantiate(fam)
    offered = engines.offered_ids(fam)
    # an engine whose DSL is absent is built but cannot build a plan: unavailable, with the install
    unavailable = {**missing_requirements(built.engines), **built.unavailable}
    record["offered"] = {name: i for name, i in offered.items() if name not in unavailable}
    record["unavailable"] = unavailable
    record["opt_in"] = [n for n, s in fam.slots.items() if s.opt_in and n not in offered]
    name, shape = DEMO_EXAMPLES.get(fam.name, (None, None))
    example = EXAMPLES.get(name) if name else None
    if example is None:
        record["example"] = None
        return record
    record["example"] = {
        "name": example.name,
        "shape": dict(example.dims(shape)),
        "dtype": example.dtype.name,
    }
    try:
        graph = example.graph(shape)
    except Exception as exc:  # the demo reports what it could not do; it never hides it
        record["example"]["error"] = f"{type(exc).__name__}: {exc}"
        return record
    found = engines.family_for(graph)
    record["example"]["family_for"] = getattr(found, "name", None)
    record["verdicts"] = _verdicts(graph, built.engines)
    report = explain(graph, head=None)
    plans = report["plans"]
    if len(plans) > _HEAD + _TAIL:  # the head and the tail of a long list, as the text shows them
        report["plans"] = [*plans[:_HEAD], *plans[-_TAIL:]]
    record["explain"] = report
    if record["explain"]["no_plan"] is None:
        record["execution"] = _execute_on_gpu(graph)
    return record


def _verdicts(graph: Any, candidates: Iterable[Any]) -> dict[str, str]:
    """Ask each engine, as planning will, whether it serves the graph."""
    from pygraph.engines.base import DECLINE_TYPES

    try:
        request = graph.engine_request()
    except DECLINE_TYPES as exc:
        return {"*": f"engines not asked: {type(exc).__name__}: {exc}"}
    out = {}
    for engine in candidates:
        try:
            engine.check_support(request)
            out[engine.name] = "accepts"
        except DECLINE_TYPES as exc:
            out[engine.name] = f"declines: {exc}"
    return out


def _execute_on_gpu(graph: Any, reps: int = 20) -> dict[str, Any]:
    """Build the plan list's first plan that builds, run it on random inputs, time it."""
    try:
        import torch
    except ImportError:
        return {"skipped": "torch is not installed (pip install pygraph-core[torch])"}
    if not torch.cuda.is_available():
        return {"skipped": "no CUDA device visible; a GPU run walks the plan list above"}
    from pygraph.tuning.operands import random_operands, workspace_allocator
    from pygraph.tuning.timing import CudaEventTimer, median_ms

    try:
        graph.build_plans()
        bindings = random_operands(graph)
        workspace = workspace_allocator()(graph.get_workspace_size())
        times = CudaEventTimer("pygraph demo")(
            lambda: graph.execute(bindings, workspace), warmup=1, reps=reps
        )
    except Exception as exc:  # the demo reports what it could not do
        return {"failed": f"{type(exc).__name__}: {exc}"}
    plan = graph.selected_plan
    return {
        "device": torch.cuda.get_device_name(),
        "kind": plan.kind,
        "plan": plan.name,
        "ms": median_ms(times),
    }


def _lines(record: dict[str, Any], verbose: bool = False) -> list[str]:
    """The demo's text for one family (``verbose``: the backend's refusal as cuDNN gave it)."""
    lines = [f"family {record['family']} (block {record['block']}, anchors {', '.join(record['anchors'])})"]
    if not record["installed"]:
        return [*lines, f"    not installed: {record['install']}"]
    offered = record["offered"]
    lines.append(f"    engines offered: {', '.join(f'{n}={i}' for n, i in offered.items()) or 'none'}")
    if record["unavailable"]:
        lines.append("    unavailable here:")
    lines += [f"      {name}: {reason}" for name, reason in record["unavailable"].items()]
    if record["opt_in"]:
        lines.append(
            f"    opt-in, not offered ({engines.manifest.OPT_IN_ENV}): {', '.join(record['opt_in'])}"
        )
    example = record["example"]
    if example is None:
        return [*lines, "    no example graph for this family yet"]
    sizes = ",".join(str(v) for v in example["shape"].values())
    what = f"{example['name']} ({','.join(example['shape'])} = {sizes}, {example['dtype'].lower()})"
    if "error" in example:
        return [*lines, f"    example graph {what} could not be built: {example['error']}"]
    lines.append(f"    example graph {what}: family_for -> {example['family_for']}")
    lines += [f"      {name}: {verdict}" for name, verdict in record["verdicts"].items()]
    report = record["explain"]
    if report["no_plan"] is not None:
        return [*lines, f"    planning: GraphNotSupportedError: {report['no_plan']}"]
    backend = report["backend"]["detail" if verbose else "declined"]
    lines.append(f"    backend: {'declined: ' + backend if backend else 'offers plans'}")
    count = report["plan_count"]
    lines.append(f"    plan list ({count} entries):")
    plans = report["plans"]
    shown = plans if count <= _HEAD + _TAIL else [*plans[:_HEAD], None, *plans[_HEAD:]]
    for plan in shown:
        more = f"      ... {count - _HEAD - _TAIL} more ..."
        lines.append(more if plan is None else f"      [{plan['index']}] {plan['name']}")
    run = record["execution"]
    if "skipped" in run:
        lines.append(f"    execution: skipped: {run['skipped']}")
    elif "failed" in run:
        lines.append(f"    execution: failed: {run['failed']}")
    else:
        lines.append(
            f"    executed on {run['device']} by the {run['kind']} plan {run['plan']}: {run['ms']:.3f} ms "
            "(median of 20)"
        )
    return lines


def run_demo(
    families: Iterable[str] | None = None, echo: Callable[[str], Any] | None = print, verbose: bool = False
) -> list[dict[str, Any]]:
    """Walk the manifest's families (or those named), printing each one's lines with ``echo`` as it
    is done (None: print nothing; ``verbose``: the backend's refusals whole); returns every family's
    record."""
    wanted = set(families or ())
    records = []
    for fam in engines.families():
        if wanted and fam.name not in wanted:
            continue
        record = _family_record(fam)
        records.append(record)
        if echo is not None:
            for line in _lines(record, verbose):
                echo(line)
    return records
