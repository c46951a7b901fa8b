"""The Python API, for notebooks and scripts:

    import nsys_collective as nc
    run = nc.load("fixtures/demo-4rank-2host")          # or a list of paths, a glob, a run id
    run.summary["wait_ns"], run.findings, run.tables["blocking"]   # pyarrow tables
    diff = run.compare(nc.load("fixtures/slow-kernel-8rank-3host"))
    print(diff.findings); diff.render(); diff.chart("diff.png")

`load` runs the same analysis as `collectivetrace-nsys analyze` (or fetches a stored run's
document), so `Result.doc` is exactly the `--json` document.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

from nsys_collective.analysis import Analysis, Filters
from nsys_collective.errors import InputError

DEFAULT_DB = "sqlite:///collectivetrace.db"
FILTERS = {"ranks", "hosts", "window_s", "steps"}
PathLike = str | os.PathLike


@dataclass
class Comparison:
    """Run A against run B (deltas are B - A); `doc` is `compare --json`."""

    doc: dict

    @property
    def findings(self) -> list[str]:
        return self.doc["findings"]

    def render(self) -> None:
        """Print the comparison as `collectivetrace-nsys compare` does (verdict, then tables)."""
        from nsys_collective.compare import render_comparison

        render_comparison(self.doc)

    def chart(self, path: PathLike) -> list[Path]:
        """Write the comparison chart as path (PNG) and the same name with .svg; return both."""
        from nsys_collective.compare import write_compare_chart

        return write_compare_chart(self.doc, path)


@dataclass
class Result:
    """One analyzed run. `doc` is the `analyze --json` document; `analysis` the live model
    (kernels, timelines, alignment) when loaded from exports, None when fetched from the store."""

    doc: dict
    source: str
    analysis: Analysis | None = field(default=None, repr=False)

    @property
    def summary(self) -> dict:
        return self.doc["summary"]

    @property
    def findings(self) -> list[str]:
        return self.doc["findings"]

    @cached_property
    def tables(self) -> dict:
        """name -> pyarrow.Table: the tables `analyze --out` writes (collectives, blame, blocking,
        contention, ranks, steps)."""
        from nsys_collective.tables import arrow_tables

        return arrow_tables(self.doc)

    def to_pandas(self, name: str):
        """One table as a pandas DataFrame (pandas is not a dependency: install it to use this)."""
        try:
            import pandas  # noqa: F401  (pyarrow needs it for to_pandas; fail with our message first)
        except ImportError:
            raise ImportError("to_pandas needs pandas: pip install pandas (or use .tables, pyarrow)") from None
        return self.tables[name].to_pandas()

    def compare(self, other: Result | PathLike | Sequence[PathLike] | int) -> Comparison:
        """This run (A) against other (B): what changed from A to B."""
        from nsys_collective.compare import compare_documents

        if not isinstance(other, Result):
            other = load(other)
        return Comparison(compare_documents(self.doc, other.doc, sources=(self.source, other.source)))

    def __repr__(self) -> str:
        s = self.summary
        return (f"<Result {self.source}: {s['ranks']} ranks, {s['collectives']} collectives, "
                f"wait {s['wait_ns'] / 1e6:,.3f} ms>")


def parse_source(text: str) -> int | str:
    """A command-line run: an integer that names no file is a run id in the store, anything
    else a path or glob."""
    return int(text) if text.isdigit() and not Path(text).exists() else text


def load(source: PathLike | Sequence[PathLike] | int, *, db: str | None = None, nsys: str | None = None,
         **filters) -> Result:
    """Analyze a run, or fetch one from the results store.

    source: a job folder, an export (.sqlite), a report (.nsys-rep, .qdrep), a glob pattern, or a
    list of these; or an int, the id of a run stored by `collectivetrace-nsys batch` in `db`
    (an SQLAlchemy URL or engine, default sqlite:///collectivetrace.db).
    nsys: the nsys executable that exports reports (default: nsys on PATH).
    filters (paths only), as `analyze`'s options: ranks (iterable of ints, or '0-3,7'),
    hosts (iterable of patterns, or 'node1,node2*'), window_s ((start, end) seconds from the start
    of the capture), steps (an NVTX range name pattern such as 'ProfilerStep#*').

    Raises InputError (nsys_collective.InputError) for unusable input: a missing path, an export
    that is not one, an unknown run id.
    """
    if isinstance(source, int) and not isinstance(source, bool):
        if filters:
            raise ValueError("filters apply when analyzing exports; a stored run is compared as it was analyzed")
        return Result(doc=_stored(db or DEFAULT_DB, source), source=f"run {source}")
    unknown = set(filters) - FILTERS
    if unknown:
        raise TypeError(f"load() got unknown filters {sorted(unknown)}; the filters are {sorted(FILTERS)}")
    paths = [source] if isinstance(source, (str, os.PathLike)) else list(source)
    if not paths:
        raise InputError("no paths given")
    analysis, doc = _analyze(paths, nsys, _filters(**filters))
    named = os.fspath(paths[0]) + (f" and {len(paths) - 1} more" if len(paths) > 1 else "")
    return Result(doc=doc, source=named, analysis=analysis)


def _filters(ranks=None, hosts=None, window_s=None, steps=None) -> Filters:
    """analysis.Filters from load()'s keyword arguments, which also take analyze's text forms."""
    if isinstance(ranks, str):
        ranks = Filters.parse(ranks=ranks).ranks
    if isinstance(hosts, str):
        hosts = Filters.parse(hosts=hosts).hosts
    return Filters(ranks=None if ranks is None else set(ranks), hosts=None if hosts is None else list(hosts),
                   window_s=None if window_s is None else (float(window_s[0]), float(window_s[1])), steps=steps)


def _analyze(paths: Iterable[PathLike], nsys: str | None, filters: Filters) -> tuple[Analysis, dict]:
    """What `analyze --json` computes, without printing anything."""
    from nsys_collective.analysis import analyze_exports
    from nsys_collective.inputs import discover, exports_of, read_inputs
    from nsys_collective.json_output import document

    inputs = discover(list(paths))
    export_paths = exports_of(inputs, nsys)
    analysis = analyze_exports(read_inputs(export_paths), [str(p) for p in inputs], filters)
    return analysis, document(analysis, [str(p) for p in export_paths])


def _stored(db, run_id: int) -> dict:
    """The --json document of a stored run; an unknown id is unusable input."""
    try:
        from nsys_collective.store import load_document
    except ImportError:
        raise InputError(f"run {run_id}: this installation has no results store to look run ids up in") from None
    try:
        doc = load_document(db, run_id)
    except (LookupError, ValueError) as e:  # the store's "no such run", however it says it
        raise InputError(f"run {run_id}: not in the results store at {_safe_url(db)} ({e})") from None
    if doc is None:
        raise InputError(f"run {run_id}: not in the results store at {_safe_url(db)}")
    return doc


def _safe_url(db) -> str:
    """The store's URL for a message, without a password."""
    from sqlalchemy.engine import make_url

    try:
        return make_url(getattr(db, "url", db)).render_as_string(hide_password=True)
    except Exception:  # not a URL we can parse: say nothing that could hold a secret
        return "the given database"
