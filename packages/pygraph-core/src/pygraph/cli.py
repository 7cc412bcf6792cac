"""The ``pygraph`` command (also ``python -m pygraph``).

    pygraph info                      versions, the device, the plan cache, every family's engines
    pygraph families                  the engine manifest: every family and its engines
    pygraph explain TARGET            a graph's family, facts, candidates, backend entries, plan list
    pygraph bench TARGET              time the head of the plan list on the GPU
    pygraph autotune TARGET           time, select the fastest, record it in the plan cache
    pygraph cache list|show|clear     the plan cache's entries
    pygraph demo                      the README's main job on the built-in examples

TARGET is a built-in example (``pygraph explain --help`` lists them; ``--shape``, ``--dtype``) or
a serialized graph file. Every command that prints data takes ``--json``. Exit codes: 0 done, 1 the
command could not do its job (the message says why), 2 a usage error, 130 interrupted, 141 the
reader closed the pipe. Tables, colour and progress bars come from rich; click parses the line.
Both are imported here only: ``import pygraph`` loads neither.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import sys
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import click

from pygraph._version import __version__

__all__ = ["main"]

EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130
EXIT_PIPE_CLOSED = 141  # the shell's status for a writer killed by SIGPIPE (128 + 13)


class CommandError(click.ClickException):
    """A command that cannot do its job: the message says why; ``exit_code`` 1 (or 2 for usage)."""

    def __init__(self, message: str, code: int = EXIT_FAILED) -> None:
        super().__init__(message)
        self.exit_code = code

    def show(self, file: Any = None) -> None:
        click.echo(f"pygraph: error: {self.format_message()}", file=file or sys.stderr)


# --- output -----------------------------------------------------------------------------------------


def _console(stderr: bool = False) -> Any:
    """A rich console on the current stdout (or stderr); piped output is wide, not 80 columns."""
    from rich.console import Console

    class _Console(Console):
        def on_broken_pipe(self) -> None:
            # rich exits 1 here; the reader closing the pipe is EXIT_PIPE_CLOSED, decided in one place
            raise BrokenPipeError

    stream = sys.stderr if stderr else sys.stdout
    width = None if stream.isatty() else int(os.environ.get("COLUMNS", 0) or 200)
    return _Console(file=stream, width=width, highlight=False, soft_wrap=True)


def _table(*columns: str, title: str | None = None) -> Any:
    from rich.table import Table

    return Table(*columns, title=title, title_justify="left", header_style="bold")


def _print_json(data: Any) -> None:
    """One JSON document on stdout, written piece by piece: a reader that closes the pipe early
    (``| head``) ends the command with EXIT_PIPE_CLOSED, as a long table does."""
    write = sys.stdout.write
    for chunk in json.JSONEncoder(indent=2, default=str).iterencode(data):
        write(chunk)
    write("\n")


def _escape(text: Any) -> str:
    from rich.markup import escape

    return escape(str(text))


def _progress() -> Any:
    """A transient progress bar on stderr, drawn only where stderr is a terminal."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    console = _console(stderr=True)
    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("{task.fields[plan]}"),
        console=console,
        transient=True,
        disable=not console.is_terminal,
    )


def _closed_pipe() -> None:
    """The reader went away: point stdout at /dev/null so the interpreter's last flush is quiet."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):  # stdout is not a file descriptor (captured): nothing to silence
        pass


def _command(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Run a command body: flush its output inside, turn our typed refusals into messages."""
    from pygraph.errors import DeserializationError, GraphNotSupportedError, InvalidGraphError, OpInputError
    from pygraph.examples import UnknownTargetError
    from pygraph.tuning.timing import TimerUnavailableError

    @functools.wraps(fn)
    def run(*args: Any, **kwargs: Any) -> Any:
        try:
            result = fn(*args, **kwargs)
            sys.stdout.flush()
            return result
        except BrokenPipeError:
            _closed_pipe()
            raise click.exceptions.Exit(EXIT_PIPE_CLOSED) from None
        except (UnknownTargetError, OpInputError, DeserializationError) as exc:
            raise CommandError(str(exc), EXIT_USAGE) from exc
        except (GraphNotSupportedError, InvalidGraphError, TimerUnavailableError) as exc:
            raise CommandError(str(exc)) from exc

    return run


# --- targets ----------------------------------------------------------------------------------------


def _target_help() -> str:
    """The epilog of the commands that take a TARGET: the examples with their --shape axes."""
    from pygraph.examples import EXAMPLES

    rows = "; ".join(f"{e.name} ({e.shape_spec})" for e in EXAMPLES.values())
    return (
        f"TARGET is a built-in example, with the sizes --shape takes: {rows}; or a serialized graph "
        "file (the JSON repr(graph) prints)."
    )


def _target_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    fn = click.option("--dtype", help="the example's data type: bf16, fp16 or fp32")(fn)
    fn = click.option("--shape", help="the example's sizes, comma-separated (see TARGET)")(fn)
    return click.argument("target")(fn)


def _load(target: str, shape: str | None, dtype: str | None) -> tuple[Any, Any, Any]:
    """(graph, example or None, the parsed shape)."""
    from pygraph.examples import load_graph, parse_shape

    sizes = parse_shape(shape) if shape is not None else None
    graph, example = load_graph(target, sizes, dtype)
    return graph, example, sizes


def _describe_target(graph: Any, example: Any, sizes: Any) -> str:
    if example is None:
        return f"graph {graph.name!r}"
    dims = example.dims(sizes)
    shown = ",".join(str(dims[a]) for a in example.axes)
    dtype = graph.io_data_type.name.lower()
    return f"{example.name} ({','.join(example.axes)} = {shown}, {dtype})"


# --- the group ------------------------------------------------------------------------------------------


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 110})
@click.version_option(__version__, "--version", "-V", prog_name="pygraph", message="%(prog)s %(version)s")
def cli() -> None:
    """pygraph: a graph API for deep-learning ops, planned over kernel engines and the cuDNN backend."""


# --- info -------------------------------------------------------------------------------------------------


@cli.command()
@click.option("--json", "as_json", is_flag=True, help="print the report as JSON")
@_command
def info(as_json: bool) -> None:
    """Versions, the device (or "no GPU"), the plan cache, and every family's engines with why any
    is not offered (planned, opt-in, a missing extra, another arch)."""
    from pygraph.report import info as report

    data = report()
    if as_json:
        _print_json(data)
        return
    out = _console()
    out.print(f"[bold]pygraph {data['pygraph']}[/] (Python {data['python']})")
    device = data["device"]
    if device is None:
        out.print(f"device: no GPU ({_escape(data['device_reason'])})")
    else:
        gib = (device["memory_bytes"] or 0) / 2**30
        out.print(
            f"device: {_escape(device['name'])}, SM{device['sm']}, {device['sm_count']} SMs, {gib:.1f} GiB"
        )
    runtime = data["cudnn_runtime"] or f"not loadable ({data['cudnn_runtime_reason']})"
    out.print(f"cuDNN runtime: {_escape(runtime)}")
    cache = data["plan_cache"]
    if not cache["enabled"]:
        out.print("plan cache: off (PYGRAPH_PLAN_CACHE=off)")
    elif cache.get("problem"):
        out.print(f"plan cache: {_escape(cache['path'])}: not usable: {_escape(cache['problem'])}")
    else:
        out.print(f"plan cache: {_escape(cache['path'])} ({cache['entries']} entries)")
    opt_in = data["opt_in"]
    out.print(f"opt-in engines ({opt_in['env']}): {_escape(opt_in['value'] or 'none enabled')}")
    kept_out = data["disabled"]
    out.print(f"disabled engines ({kept_out['env']}): {_escape(kept_out['value'] or 'none')}")
    packages = _table("package", "version", title="Packages")
    for name, version in data["packages"].items():
        packages.add_row(name, version or "[dim]not installed[/]")
    out.print(packages)
    families = _table(
        "family", "block", "engine", "id", "status", "arch", "why not offered", title="Families"
    )
    for fam in data["families"]:
        block = f"{fam['block'][0]}-{fam['block'][1]}"
        if not fam["installed"]:
            families.add_row(fam["name"], block, "", "", "not installed", "", _escape(fam["install"]))
            continue
        for i, eng in enumerate(fam["engines"]):
            families.add_row(
                fam["name"] if i == 0 else "",
                block if i == 0 else "",
                eng["name"],
                str(eng["id"]),
                _status(eng["status"]),
                eng["arch"] or "",
                _escape(eng["reason"] or ""),
            )
    out.print(families)


def _status(status: str) -> str:
    colour = {
        "offered": "green",
        "accepts": "green",
        "planned": "dim",
        "opt-in": "yellow",
        "disabled": "yellow",
    }.get(status, "red")
    return f"[{colour}]{status}[/]"


@cli.command()
@click.option("--json", "as_json", is_flag=True, help="print the families as JSON")
@_command
def families(as_json: bool) -> None:
    """The engine manifest: every family, its id block, its engines with their ids and whether each
    is default-on, opt-in or planned, the distribution that ships it and the ops it anchors on."""
    from pygraph import engines

    table = engines.families()
    if as_json:
        _print_json([fam.to_row() for fam in table])
        return
    out = _table(
        "family", "block", "engine", "id", "status", "distribution", "anchors", title="Engine families"
    )
    for fam in table:
        head = [fam.name, f"{fam.block.start}-{fam.block.stop - 1}"]
        tail = [_escape(fam.distribution or fam.package), ", ".join(fam.anchors)]
        rows = [
            [name, str(fam.engine_id + slot.slot), _escape(slot.describe().strip(" ()") or "default-on")]
            for name, slot in fam.slots_in_order()
        ] or [["", "", "no engine declared"]]
        for i, row in enumerate(rows):
            out.add_row(*(head if i == 0 else ["", ""]), *row, *(tail if i == 0 else ["", ""]))
    _console().print(out)


# --- explain -------------------------------------------------------------------------------------------


_MODES = ("A", "B", "FALLBACK", "OPENSOURCE")


@cli.command(epilog=_target_help())
@_target_options
@click.option("--mode", "modes", multiple=True, type=click.Choice(_MODES, case_sensitive=False),
              help="heuristic mode (repeatable; default A and FALLBACK)")  # fmt: skip
@click.option("--head", default=10, show_default=True, help="how many plan-list entries to show")
@click.option("--all", "show_all", is_flag=True, help="show the whole plan list")
@click.option("--json", "as_json", is_flag=True, help="print the explanation as JSON")
@click.option("--verbose", "-v", is_flag=True, help="the backend's refusal as cuDNN gave it, every line")
@_command
def explain(
    target: str,
    shape: str | None,
    dtype: str | None,
    modes: tuple[str, ...],
    head: int,
    show_all: bool,
    as_json: bool,
    verbose: bool,
) -> None:
    """Plan TARGET and say why: its family, the facts, every candidate engine with its verdict,
    the backend's entries per mode, and the head of the ranked plan list with names and knobs."""
    from pygraph.report import explain as report

    graph, example, sizes = _load(target, shape, dtype)
    data = report(graph, modes=[m.upper() for m in modes] or None, head=None if show_all else head)
    if as_json:
        _print_json(data)
        return
    out = _console()
    out.print(
        f"[bold]{_escape(_describe_target(graph, example, sizes))}[/]: {', '.join(data['graph']['ops'])}"
    )
    out.print(f"family: {data['family'] or 'none (no family claims these ops: the backend serves it)'}")
    facts = data["facts"]
    if isinstance(facts, dict) and facts:
        table = _table("fact", "value", title="Facts (the family analyzer's parse)")
        for key, value in facts.items():
            table.add_row(key, _escape(value if isinstance(value, str) else json.dumps(value, default=str)))
        out.print(table)
    if data["candidates"]:
        table = _table("engine", "id", "verdict", "reason", title="Candidate engines")
        for row in data["candidates"]:
            table.add_row(row["name"], str(row["id"]), _status(row["verdict"]), _escape(row["reason"] or ""))
        out.print(table)
    backend = data["backend"]
    if backend["declined"]:
        out.print(f"backend: declined: {_escape(backend['detail'] if verbose else backend['declined'])}")
    else:
        for mode, names in backend["entries"].items():
            shown = ", ".join(names[:3]) + (f", ... ({len(names)} in all)" if len(names) > 3 else "")
            out.print(f"backend {mode}: {_escape(shown)}")
    if data["no_plan"]:
        out.print(f"[red]no plan[/]: {_escape(data['no_plan'])}")
        return
    if data["recorded"]:
        rec = data["recorded"]
        out.print(
            f"plan cache: entry {rec['id']} recorded {_escape(rec['plan_name'])} for this graph: it leads the list"
        )
    shown = len(data["plans"])
    out.print(
        f"plan list: {data['plan_count']} entries"
        + ("" if shown == data["plan_count"] else f", the first {shown} (--all for all)")
    )
    out.file.flush()
    for plan in data["plans"]:  # plain lines: fast for thousands of entries, and names hold [brackets]
        mode = f" {plan['mode']}" if plan["mode"] else ""
        click.echo(f"  [{plan['index']}] {plan['kind']}{mode} {plan['engine_id']}: {plan['name']}")


# --- bench and autotune -------------------------------------------------------------------------------


class GpuSession:
    """What timing on the GPU needs: random device operands, a workspace allocator, the CUDA-event
    timer and the device's name. Raises `CommandError` where there is no GPU, saying so."""

    def __init__(self, call: str) -> None:
        from pygraph.tuning.timing import CudaEventTimer, TimerUnavailableError

        try:
            self.timer = CudaEventTimer(call)
        except TimerUnavailableError as exc:
            raise CommandError(
                f"{call} times plans on a CUDA GPU: its timer {exc.reason}. Without a GPU, `pygraph explain` "
                "shows the plan list it would time"
            ) from None
        import torch

        self.device = torch.cuda.get_device_name()

    def attach(self, graph: Any) -> None:
        """Give ``graph`` a cuDNN handle before it is planned, so its backend plans run on one (on the
        default stream, where the timer's events are); without the backend there is nothing to give."""
        try:
            import cudnn

            graph.handle = cudnn.create_handle()
        except (ImportError, RuntimeError):  # no frontend, or no runtime: the backend declines anyway
            pass

    def operands(self, graph: Any) -> Any:
        from pygraph.tuning.operands import random_operands

        return random_operands(graph)

    def workspace(self) -> Any:
        from pygraph.tuning.operands import workspace_allocator

        return workspace_allocator()


def gpu_session(call: str) -> GpuSession:
    """The session bench and autotune time in (tests put a host stand-in here)."""
    return GpuSession(call)


def _timing_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    fn = click.option("--warmup", default=3, show_default=True, help="untimed runs of each plan first")(fn)
    return click.option("--reps", default=20, show_default=True, help="timed runs of each plan (median)")(fn)


@contextlib.contextmanager
def _timing_progress(stage: str) -> Iterator[Callable[[str, Any], None]]:
    """A progress bar on stderr for one timing run, and the callback that moves it: each build and
    each timing shows the plan's name; the count is of the plans timed."""
    with _progress() as bar:
        task = bar.add_task(stage, total=None, plan="")

        def progress(step: str, trial: Any) -> None:
            bar.update(task, description=f"{stage}: {step}", plan=trial.name[:60], advance=step == "time")

        yield progress


def _run_timing(graph: Any, session: GpuSession, bound: Any, reps: int, warmup: int, stage: str) -> list[Any]:
    from pygraph.tuning.autotune import time_plans

    if not graph.state.planned:
        graph.create_execution_plans()
    operands = session.operands(graph)
    with _timing_progress(stage) as progress:
        return time_plans(
            graph, operands, session.workspace(), bound=bound, reps=reps, warmup=warmup,
            timer=session.timer, progress=progress, call=f"pygraph {stage}",
        )  # fmt: skip


def _trial_rows(
    trials: list[Any], flops: float | None, anchor: Any, best: Any = None
) -> list[dict[str, Any]]:
    rows = []
    for t in trials:
        row = t.to_dict()
        row["tflops"] = flops / (t.time_ms * 1e9) if flops and t.time_ms else None
        row["vs_anchor"] = anchor.time_ms / t.time_ms if anchor is not None and t.time_ms else None
        row["best"] = best is not None and t is best
        rows.append(row)
    return rows


def _tflops(value: float | None) -> str:
    """Throughput with three significant digits below 100 TFLOP/s (a small problem reads 0.0421)."""
    if not value:
        return "-"
    return f"{value:.1f}" if value >= 100 else f"{value:.3g}"


def _trial_table(rows: list[dict[str, Any]], anchor_label: str, title: str) -> Any:
    table = _table("#", "kind", "plan", "ms", "TFLOP/s", anchor_label, title=title)
    for row in rows:
        if row["time_ms"] is None:
            table.add_row(
                str(row["index"]), row["kind"], _escape(row["name"]), "-", "-", _escape(row["skipped"] or "")
            )
            continue
        mark = "[bold green]*[/] " if row["best"] else ""
        table.add_row(
            str(row["index"]), row["kind"], mark + _escape(row["name"]), f"{row['time_ms']:.4f}",
            _tflops(row["tflops"]),
            f"{row['vs_anchor']:.3f}" if row["vs_anchor"] else "-",
        )  # fmt: skip
    return table


@cli.command(epilog=_target_help())
@_target_options
@click.option("--top", default=8, show_default=True, help="how many plans of the head of the list to time")
@_timing_options
@click.option("--json", "as_json", is_flag=True, help="print the timings as JSON")
@_command
def bench(
    target: str, shape: str | None, dtype: str | None, top: int, reps: int, warmup: int, as_json: bool
) -> None:
    """Time the first --top plans of TARGET's plan list on the GPU (CUDA events, median of --reps
    after --warmup), with throughput and the ratio to the backend's first plan, which is timed too."""
    from pygraph.tuning.autotune import head_bound

    graph, example, sizes = _load(target, shape, dtype)
    session = gpu_session("pygraph bench")
    session.attach(graph)
    trials = _run_timing(graph, session, head_bound(top), reps, warmup, "bench")
    anchor = next((t for t in trials if t.kind == "backend" and t.time_ms is not None), None)
    flops = example.flop_count(sizes) if example is not None else None
    rows = _trial_rows(trials, flops, anchor)
    if as_json:
        _print_json({"target": _describe_target(graph, example, sizes), "device": session.device, "trials": rows,
                     "backend_anchor": None if anchor is None else anchor.index})  # fmt: skip
        return
    out = _console()
    title = f"bench {_describe_target(graph, example, sizes)} on {session.device}: median of {reps} after {warmup}"
    out.print(_trial_table(rows, "/backend" if anchor is not None else "vs backend", _escape(title)))
    if anchor is None:
        why = graph.backend_decline_reason() or "no backend entry built"
        out.print(f"no backend plan to compare with: {_escape(why)}")
    if not any(r["time_ms"] for r in rows):
        raise CommandError(f"no plan of {target} could be timed (the reasons are in the table)")


@cli.command(epilog=_target_help())
@_target_options
@click.option("--top", default=8, show_default=True, help="plans that build to time, per python engine")
@click.option("--backend-top", default=2, show_default=True, help="the backend's first entries to time")
@_timing_options
@click.option("--no-record", is_flag=True, help="do not record the winner in the plan cache")
@click.option("--json", "as_json", is_flag=True, help="print the timings and the winner as JSON")
@_command
def autotune(
    target: str, shape: str | None, dtype: str | None, top: int, backend_top: int, reps: int, warmup: int,
    no_record: bool, as_json: bool,
) -> None:  # fmt: skip
    """Time the head of TARGET's plan list (the first --top plans that build per python engine and
    the backend's first --backend-top entries), select the fastest and record it in the plan cache,
    so that planning the same graph on this device builds it first."""
    from pygraph.tuning.autotune import autotune as tune

    graph, example, sizes = _load(target, shape, dtype)
    session = gpu_session("pygraph autotune")
    session.attach(graph)
    graph.create_execution_plans()
    operands = session.operands(graph)
    with _timing_progress("autotune") as progress:
        result = tune(
            graph, operands, session.workspace(), top=top, backend_top=backend_top, reps=reps, warmup=warmup,
            timer=session.timer, record=not no_record, progress=progress,
        )  # fmt: skip
    flops = example.flop_count(sizes) if example is not None else None
    rows = _trial_rows(result.trials, flops, result.first, result.best)
    if as_json:
        _print_json({"target": _describe_target(graph, example, sizes), "device": session.device, "rows": rows,
                     **result.to_dict()})  # fmt: skip
        return
    out = _console()
    title = f"autotune {_describe_target(graph, example, sizes)} on {session.device}: median of {reps} after {warmup}"
    out.print(_trial_table(rows, "/first", _escape(title)))
    best = result.best
    out.print(
        f"winner: [bold]{_escape(best.name)}[/] (#{best.index}), {best.time_ms:.4f} ms, "
        f"{result.speedup:.3f}x the list's first plan ({_escape(result.first.name)})"
    )
    if result.recorded is not None:
        out.print(f"recorded as plan cache entry {result.recorded.id} in {_escape(_cache_path())}")
    else:
        out.print(f"not recorded: {_escape(result.not_recorded)}")


def _cache_path() -> str:
    from pygraph.tuning.plan_cache import cache_path

    path = cache_path()
    return "off" if path is None else str(path)


# --- cache ------------------------------------------------------------------------------------------------


@cli.group()
def cache() -> None:
    """The plan cache: autotune winners, replayed by planning (PYGRAPH_PLAN_CACHE relocates it, =off
    disables it)."""


def _open_cache() -> Any:
    from pygraph.tuning.plan_cache import CACHE_ENV, active_cache

    store = active_cache()
    if store is None:
        raise CommandError(f"the plan cache is off ({CACHE_ENV}={os.environ.get(CACHE_ENV)})")
    problem = store.problem()
    if problem is not None:
        fix = f"remove or move the file, or set {CACHE_ENV}"
        if not store.path.is_file():  # a device or a folder is not the user's to remove
            fix = f"point {CACHE_ENV} at a file, or at a folder to hold plans.sqlite"
        raise CommandError(f"plan cache {store.path}: {problem}; {fix}")
    return store


@cache.command("list")
@click.option("--json", "as_json", is_flag=True, help="print the entries as JSON")
@_command
def cache_list(as_json: bool) -> None:
    """Every recorded winner: the graph, the device, the plan, its time and what tuning gained."""
    store = _open_cache()
    entries = store.entries()
    if as_json:
        _print_json({"path": str(store.path), "entries": [e.to_dict() for e in entries]})
        return
    out = _console()
    table = _table(
        "id", "graph", "device", "plan", "ms", "gain", "recorded", title=_escape(f"plan cache {store.path}")
    )
    for e in entries:
        gain = f"{e.first_ms / e.time_ms:.3f}x" if e.first_ms and e.time_ms else "-"
        ms = f"{e.time_ms:.4f}" if e.time_ms else "-"
        table.add_row(
            str(e.id), _escape(e.summary), _escape(e.device), _escape(e.plan_name), ms, gain, e.recorded_at
        )
    out.print(table)
    if not entries:
        out.print("no entries (pygraph autotune records one)")


@cache.command("show")
@click.argument("entry")
@click.option("--json", "as_json", is_flag=True, help="print the entry as JSON")
@_command
def cache_show(entry: str, as_json: bool) -> None:
    """One entry, by its id or the start of its key."""
    store = _open_cache()
    found = store.get(entry)
    if found is None:
        ids = ", ".join(str(e.id) for e in store.entries()) or "none"
        raise CommandError(f"plan cache {store.path} has no entry {entry!r} (ids: {ids})", EXIT_USAGE)
    data = found.to_dict()
    if as_json:
        _print_json(data)
        return
    out = _console()
    table = _table("field", "value", title=_escape(f"plan cache entry {found.id}"))
    for key, value in data.items():
        table.add_row(key, _escape(value if isinstance(value, str) else json.dumps(value, default=str)))
    out.print(table)


@cache.command("clear")
@click.option("--json", "as_json", is_flag=True, help="print what was removed as JSON")
@_command
def cache_clear(as_json: bool) -> None:
    """Remove every entry."""
    store = _open_cache()
    removed = store.clear()
    if as_json:
        _print_json({"path": str(store.path), "removed": removed})
        return
    click.echo(f"removed {removed} entries from {store.path}")


# --- demo -------------------------------------------------------------------------------------------------


@cli.command()
@click.option("--family", "family_names", multiple=True, help="only this family (repeatable)")
@click.option("--json", "as_json", is_flag=True, help="print each family's report as JSON")
@click.option("--verbose", "-v", is_flag=True, help="the backend's refusals as cuDNN gave them, every line")
@_command
def demo(family_names: tuple[str, ...], as_json: bool, verbose: bool) -> None:
    """The main job on the built-in examples: each installed family's example graph, the engines
    offered with their decline reasons, the ranked plan list, and on a GPU one timed run."""
    from pygraph import engines
    from pygraph.demo import run_demo

    known = [f.name for f in engines.families()]
    unknown = [name for name in family_names if name not in known]
    if unknown:
        raise CommandError(
            f"--family {', '.join(unknown)}: no such family; the manifest has {', '.join(known)}", EXIT_USAGE
        )
    data = run_demo(families=family_names or None, echo=None if as_json else click.echo, verbose=verbose)
    if as_json:
        _print_json(data)


# --- entry point --------------------------------------------------------------------------------------------


def _show_warning(message: Any, category: type[Warning], *args: Any, **kwargs: Any) -> None:
    """A warning as one line a user reads (the plan cache's, the environment's), not a source location."""
    click.echo(f"pygraph: warning: {message}", file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    """Run the command line ``argv`` (default: ``sys.argv[1:]``); returns the exit code."""
    shown, warnings.showwarning = warnings.showwarning, _show_warning
    try:
        return _main(argv)
    finally:
        warnings.showwarning = shown


def _main(argv: list[str] | None) -> int:
    try:
        result = cli.main(args=argv, prog_name="pygraph", standalone_mode=False)
    except click.exceptions.Exit as exc:
        return exc.exit_code
    except click.ClickException as exc:
        exc.show()
        return exc.exit_code
    except (click.exceptions.Abort, KeyboardInterrupt):
        click.echo("pygraph: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        _closed_pipe()
        return EXIT_PIPE_CLOSED
    return result if isinstance(result, int) else 0


if __name__ == "__main__":
    sys.exit(main())
