"""`--out DIR`: tables, charts and the HTML report, written whole or not at all.

Everything is written into a temporary folder beside DIR and moved into place at the end, so an
interrupted or failed run leaves no half-written output. DIR is never an input or a folder
holding one, and an existing DIR is replaced only with --force and only when this tool wrote it
(see nsys_collective.outputs).
"""

from __future__ import annotations

import contextlib
import ctypes
import multiprocessing
import os
import signal
import warnings
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ProcessPoolExecutor, as_completed
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
    from nsys_collective.render.html import write_report
    from nsys_collective.render.tables import write_tables

    def fill(tmp: Path) -> None:
        charts_dir = tmp / "charts"
        charts_dir.mkdir()
        with _chart_drawing(result, charts_dir, on_chart) as charts:
            # The tables and the document are written while the charts are drawn.
            (tmp / "analysis.json").write_text(result.to_json())
            write_tables(result, tmp)
        write_report(result, charts.written, tmp / "report.html")

    outputs.write_folder(out, force, [*input_paths(result), *protect], fill)
    return sorted(p for p in out.rglob("*") if p.is_file() and p.name != outputs.MARKER)


_shared: dict = {}  # the result, for chart processes forked from this one (nothing is pickled)


class _Charts:
    def __init__(self):
        self.written: dict[str, list[Path]] = {}


@contextlib.contextmanager
def _chart_drawing(result: Result, out_dir: Path, on_chart) -> Iterator[_Charts]:
    """Draws the charts into out_dir while the body runs: in processes forked from this one, one
    chart each, on as many cores as there are (saving a PNG and an SVG is most of `--out`'s time),
    else one after another here. On leaving, every chart is done: `.written` is {name: [png, svg]}
    as write_charts returns it, and the charts that could not be drawn are one ChartWarning."""
    from nsys_collective.render.charts import CHART_NAMES, COSTLIEST_FIRST, ChartWarning, not_drawn

    charts, done, failed = _Charts(), {}, {}
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    fork = "fork" in multiprocessing.get_all_start_methods()
    pool = ProcessPoolExecutor(min(cores, len(CHART_NAMES)), mp_context=multiprocessing.get_context("fork"),
                               initializer=_die_with_parent, initargs=(os.getpid(),)) if fork and cores > 1 else None
    try:
        _shared["result"] = result
        futures = [pool.submit(_draw, name, out_dir) for name in COSTLIEST_FIRST] if pool else []
        yield charts
        outcomes = (f.result() for f in as_completed(futures)) if pool else (_draw(name, out_dir) for name in CHART_NAMES)
        for k, (name, paths, error, caught) in enumerate(outcomes, 1):
            done[name] = paths
            if error:
                failed[name] = error
            for message, category, filename, lineno in caught:  # the drawing's own warnings, said here
                warnings.warn_explicit(message, category, filename, lineno)
            if on_chart:
                on_chart(k, len(CHART_NAMES))
    finally:
        _shared.clear()
        if pool:
            pool.shutdown(cancel_futures=True)
    charts.written = {name: done[name] for name in CHART_NAMES if done.get(name)}
    if failed:
        warnings.warn(not_drawn(failed), ChartWarning, stacklevel=3)


def _die_with_parent(parent: int) -> None:
    """A chart process ends with the command (Linux: the kernel kills it when the parent dies), so
    a killed run leaves no process writing into its temporary folder."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (AttributeError, OSError):
        pass
    if os.getppid() != parent:  # it died before that took effect
        os._exit(1)


def _draw(name: str, out_dir: Path) -> tuple[str, list[Path] | None, str | None, list]:
    """(name, [png, svg] or None when there is nothing to draw, why it could not be drawn, the
    warnings drawing it gave) of one chart of the shared result."""
    from nsys_collective.render.charts import draw_chart

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("default")
        paths, error = draw_chart(name, _shared["result"], out_dir)
    return name, paths, error, [(w.message, w.category, w.filename, w.lineno) for w in caught]
