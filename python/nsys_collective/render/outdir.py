"""`--out DIR`: tables, charts and the HTML report, written whole or not at all.

Everything is written into a temporary folder beside DIR and moved into place at the end, so an
interrupted or failed run leaves no half-written output. DIR is never an input or a folder
holding one, and an existing DIR is replaced only with --force and only when this tool wrote it
(see nsys_collective.outputs).
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import importlib
import multiprocessing
import os
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


_started: list[_ChartServer] = []  # started ahead (start_chart_processes), not yet used


class _ChartServer:
    """A process forked at the start of the command that loads the charts, then, handed the
    result, forks the processes that draw them (as write_outputs would: they inherit what it
    loaded) and sends back each chart's outcome as it is done. One import of matplotlib, off the
    command's path."""

    def __init__(self):
        ctx = multiprocessing.get_context("fork")
        jobs, self._jobs = ctx.Pipe(duplex=False)
        self._done, done = ctx.Pipe(duplex=False)
        self.process = ctx.Process(target=_serve, args=(os.getpid(), jobs, done), name="collectivetrace charts")
        self.process.start()
        jobs.close()
        done.close()

    def outcomes(self, result: Result, out_dir: Path) -> Iterator[tuple]:
        """Each chart's outcome (_draw's) as it is done; here those the server did not send (it died)."""
        return _then_here(self._sent(result, out_dir), result, out_dir)

    def _sent(self, result: Result, out_dir: Path) -> Iterator[tuple]:
        """The outcomes the server sends, until it has sent every chart's or died."""
        from nsys_collective.render.chart_list import CHART_NAMES

        with contextlib.suppress(OSError, EOFError):
            self._jobs.send((Result(result.document, result.evidence, result.source), out_dir))
            for _ in CHART_NAMES:
                yield self._done.recv()
        self.process.join()

    def stop(self) -> None:
        self.process.kill()  # its chart processes die with it
        self.process.join()


def _serve(parent: int, jobs, done) -> None:
    """The chart server (_ChartServer): dies with the command, loads the charts, waits for the
    result, draws."""
    _ready(parent)
    importlib.import_module("nsys_collective.render.charts")  # while the command analyzes
    try:
        result, out_dir = jobs.recv()
    except EOFError:  # the command ended without a result
        return
    with _chart_processes(result, out_dir) as futures:
        for outcome in _outcomes(futures, result, out_dir):
            done.send(outcome)


def start_chart_processes() -> None:
    """Start the chart server now, before the result exists: it loads matplotlib and the charts
    while this process goes on (the analysis); that was most of what drawing them cost once the
    result was there. The next write_outputs of this process draws with it; stop_chart_processes
    ends it if none comes (and so does leaving the interpreter). Call it before any thread starts (it is forked from this process);
    where the charts are drawn here (one core, no fork), it does nothing."""
    if not _started and _cores() > 1 and "fork" in multiprocessing.get_all_start_methods():
        _started.append(_ChartServer())
        atexit.register(stop_chart_processes)  # before multiprocessing's own, which would wait for it


def stop_chart_processes() -> None:
    """End the chart server that no write_outputs took (the analysis failed), at once."""
    while _started:
        _started.pop().stop()


def _cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


_shared: dict = {}  # the result, for chart processes forked from this one (nothing is pickled)


@contextlib.contextmanager
def _chart_processes(result: Result, out_dir: Path) -> Iterator[list]:
    """Futures of every chart drawn in processes forked from this one, the costliest first, on as
    many cores as there are (none where they are drawn here: one core, no fork)."""
    from nsys_collective.render.chart_list import CHART_NAMES, COSTLIEST_FIRST

    importlib.import_module("nsys_collective.render.charts")  # here once, not in each process
    pool = None
    if _cores() > 1 and "fork" in multiprocessing.get_all_start_methods():
        pool = ProcessPoolExecutor(min(_cores(), len(CHART_NAMES)), mp_context=multiprocessing.get_context("fork"),
                                   initializer=_ready, initargs=(os.getpid(),))
    try:
        _shared["result"] = result
        yield [pool.submit(_draw_shared, name, out_dir) for name in COSTLIEST_FIRST] if pool else []
    finally:
        _shared.clear()
        if pool:
            pool.shutdown(cancel_futures=True)


@contextlib.contextmanager
def _chart_drawing(result: Result, out_dir: Path, on_chart) -> Iterator[_Charts]:
    """Draws the charts into out_dir while the body runs: in chart processes, the costliest first,
    on as many cores as there are (saving a PNG and an SVG is most of `--out`'s time), else one
    after another here. On leaving, every chart is done: `.written` is {name: [png, svg]} as
    write_charts returns it, and the charts that could not be drawn are one ChartWarning."""
    from nsys_collective.render.chart_list import CHART_NAMES, ChartWarning, not_drawn

    charts, done, failed = _Charts(), {}, {}
    with contextlib.ExitStack() as stack:
        if _started:
            server = _started.pop()
            stack.callback(server.stop)  # at once, should the body fail
            outcomes = server.outcomes(result, out_dir)
        else:
            outcomes = _outcomes(stack.enter_context(_chart_processes(result, out_dir)), result, out_dir)
        yield charts
        for k, (name, paths, error, caught) in enumerate(outcomes, 1):
            done[name] = paths
            if error:
                failed[name] = error
            for message, category, filename, lineno in caught:  # the drawing's own warnings, said here
                warnings.warn_explicit(message, category, filename, lineno)
            if on_chart:
                on_chart(k, len(CHART_NAMES))
    charts.written = {name: done[name] for name in CHART_NAMES if done.get(name)}
    if failed:
        warnings.warn(not_drawn(failed), ChartWarning, stacklevel=3)


def _outcomes(futures: list, result: Result, out_dir: Path) -> Iterator[tuple]:
    """Each chart's outcome (_draw's) as it is done: from the chart processes, then drawn here
    every chart they did not draw (none started, or one died: the pool is then broken)."""
    return _then_here(_completed(futures), result, out_dir)


def _completed(futures: list) -> Iterator[tuple]:
    """The outcomes of the chart processes' futures as they are done, until the pool broke."""
    with contextlib.suppress(BrokenProcessPool):
        for future in as_completed(futures):
            yield future.result()


def _then_here(done: Iterator[tuple], result: Result, out_dir: Path) -> Iterator[tuple]:
    """Each outcome of `done` (chart processes' work) as it comes, then every chart it did not
    give, drawn here, byte for byte as a chart process would."""
    from nsys_collective.render.chart_list import CHART_NAMES

    left = list(CHART_NAMES)
    for outcome in done:
        left.remove(outcome[0])
        yield outcome
    for name in left:
        yield _draw(name, result, out_dir)


def _ready(parent: int) -> None:
    """A chart process ends with the one it was forked from (Linux: the kernel kills it when the
    parent dies), so a killed run leaves no process writing into its temporary folder."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (AttributeError, OSError):
        pass
    if os.getppid() != parent:  # it died before that took effect
        os._exit(1)


def _draw_shared(name: str, out_dir: Path) -> tuple[str, list[Path] | None, str | None, list]:
    return _draw(name, _shared["result"], out_dir)


def _draw(name: str, result: Result, out_dir: Path) -> tuple[str, list[Path] | None, str | None, list]:
    """(name, [png, svg] or None when there is nothing to draw, why it could not be drawn, the
    warnings drawing it gave) of one chart of the result."""
    from nsys_collective.render.charts import draw_chart

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("default")
        paths, error = draw_chart(name, result, out_dir)
    return name, paths, error, [(w.message, w.category, w.filename, w.lineno) for w in caught]
