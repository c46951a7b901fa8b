"""`--out DIR`: tables, charts and the HTML report, written whole or not at all.

Everything is written into a temporary folder beside DIR and moved into place at the end, so an
interrupted or failed run leaves no half-written output. DIR is never an input or a folder
holding one, and an existing DIR is replaced only with --force and only when this tool wrote it
(see nsys_collective.outputs).
"""

from __future__ import annotations

import contextlib
import ctypes
import importlib
import multiprocessing
import os
import pickle
import signal
import warnings
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path

from nsys_collective import outputs
from nsys_collective.result import Result


def check_target(out: Path, force: bool, protect: Iterable[str | os.PathLike] = ()) -> None:
    """Refuse (InputError) an --out folder that must not be written, before any work."""
    outputs.check_folder(out, force, protect)


def input_paths(result: Result) -> list[str]:
    """The files a result was analyzed from (reports and what was read of them): never replaced."""
    return [p for i in result.document.inputs for p in (i.path, i.export)]


def write_outputs(result: Result, out: Path, force: bool, protect: Iterable[str | os.PathLike] = (),
                  on_chart: Callable[[int, int], None] | None = None) -> list[Path]:
    """Writes analysis.json, the tables (CSV, Parquet), the charts (PNG, SVG) and report.html.
    `on_chart(drawn, total)` is called as each chart is done (a progress display)."""

    def fill(tmp: Path) -> None:
        charts_dir = tmp / "charts"
        charts_dir.mkdir()
        with _chart_drawing(result, charts_dir, on_chart) as charts:
            # While the charts are drawn: the document, the tables, and loading what writes them.
            from nsys_collective.render.html import write_report
            from nsys_collective.render.tables import write_tables

            (tmp / "analysis.json").write_text(result.to_json())
            write_tables(result, tmp)
        write_report(result, charts.written, tmp / "report.html")

    outputs.write_folder(out, force, [*input_paths(result), *protect], fill)
    return sorted(p for p in out.rglob("*") if p.is_file() and p.name != outputs.MARKER)


class _Charts:
    def __init__(self):
        self.written: dict[str, list[Path]] = {}


# Chart processes started ahead (start_chart_processes): the pool, and its processes.
_started: list[tuple[ProcessPoolExecutor, list]] = []


def start_chart_processes() -> None:
    """Start the chart processes now, before the result they draw exists: each loads matplotlib and
    the charts while this process goes on (the analysis); that was most of what drawing them cost
    once the result was there. The next write_outputs of this process draws with them;
    stop_chart_processes ends them if none comes. Call it before any thread starts (they are
    forked from this process); where the charts are drawn here (one core, no fork), it does
    nothing."""
    if not _started:
        pool = _chart_pool()
        if pool is not None:
            before = set(multiprocessing.active_children())
            pool.submit(int)  # a fork pool forks its processes at the first task: now
            _started.append((pool, [p for p in multiprocessing.active_children() if p not in before]))


def stop_chart_processes() -> None:
    """End the chart processes started ahead that no write_outputs took (the analysis failed), at
    once: leaving, the interpreter would wait for each to finish loading the charts."""
    while _started:
        pool, processes = _started.pop()
        for process in processes:
            process.kill()
        pool.shutdown(wait=False, cancel_futures=True)


def _chart_pool() -> ProcessPoolExecutor | None:
    """As many processes forked from this one as there are cores (one per chart at most), each
    loading the charts as it starts; None where the charts are drawn here."""
    from nsys_collective.render.chart_list import CHART_NAMES

    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    if cores < 2 or "fork" not in multiprocessing.get_all_start_methods():
        return None
    return ProcessPoolExecutor(min(cores, len(CHART_NAMES)), mp_context=multiprocessing.get_context("fork"),
                               initializer=_ready, initargs=(os.getpid(),))


@contextlib.contextmanager
def _chart_drawing(result: Result, out_dir: Path, on_chart) -> Iterator[_Charts]:
    """Draws the charts into out_dir while the body runs: in chart processes, the costliest first,
    on as many cores as there are (saving a PNG and an SVG is most of `--out`'s time), else one
    after another here. On leaving, every chart is done: `.written` is {name: [png, svg]} as
    write_charts returns it, and the charts that could not be drawn are one ChartWarning."""
    from nsys_collective.render.chart_list import CHART_NAMES, COSTLIEST_FIRST, ChartWarning, not_drawn

    charts, done, failed = _Charts(), {}, {}
    if _started:
        pool = _started.pop()[0]
    else:  # forked now: the charts loaded here once, not in each process
        importlib.import_module("nsys_collective.render.charts")
        pool = _chart_pool()
    try:
        futures = []
        if pool:
            # What the charts read (not the timeline), pickled once for all of them.
            shared = pickle.dumps(Result(result.document, result.evidence, result.source), pickle.HIGHEST_PROTOCOL)
            futures = [pool.submit(_draw_pickled, name, shared, out_dir) for name in COSTLIEST_FIRST]
        yield charts
        for k, (name, paths, error, caught) in enumerate(_outcomes(futures, result, out_dir), 1):
            done[name] = paths
            if error:
                failed[name] = error
            for message, category, filename, lineno in caught:  # the drawing's own warnings, said here
                warnings.warn_explicit(message, category, filename, lineno)
            if on_chart:
                on_chart(k, len(CHART_NAMES))
    finally:
        if pool:
            pool.shutdown(cancel_futures=True)
    charts.written = {name: done[name] for name in CHART_NAMES if done.get(name)}
    if failed:
        warnings.warn(not_drawn(failed), ChartWarning, stacklevel=3)


def _outcomes(futures: list, result: Result, out_dir: Path) -> Iterator[tuple]:
    """Each chart's outcome (_draw's) as it is done: from the chart processes, then drawn here
    every chart they did not draw (none started, or one died: the pool is then broken)."""
    from nsys_collective.render.chart_list import CHART_NAMES

    left = list(CHART_NAMES)
    try:
        for future in as_completed(futures):
            outcome = future.result()
            left.remove(outcome[0])
            yield outcome
    except BrokenProcessPool:
        pass
    for name in left:
        yield _draw(name, result, out_dir)


def _ready(parent: int) -> None:
    """A chart process ends with the command (Linux: the kernel kills it when the parent dies), so
    a killed run leaves no process writing into its temporary folder; then it loads the charts."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (AttributeError, OSError):
        pass
    if os.getppid() != parent:  # it died before that took effect
        os._exit(1)
    importlib.import_module("nsys_collective.render.charts")


def _draw_pickled(name: str, result: bytes, out_dir: Path) -> tuple[str, list[Path] | None, str | None, list]:
    return _draw(name, pickle.loads(result), out_dir)


def _draw(name: str, result: Result, out_dir: Path) -> tuple[str, list[Path] | None, str | None, list]:
    """(name, [png, svg] or None when there is nothing to draw, why it could not be drawn, the
    warnings drawing it gave) of one chart of the result."""
    from nsys_collective.render.charts import draw_chart

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("default")
        paths, error = draw_chart(name, result, out_dir)
    return name, paths, error, [(w.message, w.category, w.filename, w.lineno) for w in caught]
