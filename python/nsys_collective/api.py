"""The Python API, for notebooks and scripts:

    import nsys_collective as nc
    run = nc.load("fixtures/demo-4rank-2host")          # or a list of paths, a glob, a run id
    run.summary["wait_ns"], run.findings, nc.tables(run)["blocking"]   # pyarrow tables
    diff = nc.compare_runs(run, "fixtures/slow-kernel-8rank-3host")
    print(diff.findings); diff.render(); diff.chart("diff.png")

`load` runs the same pipeline as `collectivetrace-nsys analyze` (or fetches a stored run), so
`Result.doc` is exactly the `--json` document. A result is data; what is made of it are functions
that take it: `tables`, `to_pandas`, `compare_runs`.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING

from nsys_collective.errors import InputError

if TYPE_CHECKING:  # loaded where used: the command line reads DEFAULT_DB for its help alone
    from nsys_collective.model.job import Filters
    from nsys_collective.result import Result

DEFAULT_DB = "sqlite:///collectivetrace.db"
FILTERS = {"ranks", "hosts", "window_s", "steps", "keep_all"}
PathLike = str | os.PathLike


def parse_source(text: str) -> int | str:
    """A command-line run: an integer that names no file is a run id in the store, anything
    else a path or glob."""
    from pathlib import Path

    return int(text) if text.isdigit() and not Path(text).exists() else text


def load(source: PathLike | Sequence[PathLike] | int, *, db: str | None = None, nsys: str | None = None,
         nic_gbps: float | None = None, **filters) -> Result:
    """Analyze a run, or fetch one from the results store.

    source: a job folder, an export (.sqlite), a report (.nsys-rep, .qdrep), a PyTorch profiler
    trace, a glob pattern, or a list of these; or an int, the id of a run stored by
    `collectivetrace-nsys batch` in `db` (an SQLAlchemy URL or engine, default
    sqlite:///collectivetrace.db).
    nsys: the nsys executable that exports reports (default: nsys on PATH).
    nic_gbps: the speed of the NIC each GPU uses, in Gb/s, as `--nic-gbps` (paths only).
    filters (paths only), as `analyze`'s options: ranks (iterable of ints, or '0-3,7'),
    hosts (iterable of patterns, or 'node1,node2*'), window_s ((start, end) seconds from the start
    of the capture), steps (an NVTX range name pattern; default 'ProfilerStep#*': only the collectives
    of complete steps count where ranks mark steps), keep_all (True: every collective, as --all).

    Raises InputError (nsys_collective.InputError) for unusable input: a missing path, an export
    that is not one, an unknown run id.
    """
    if isinstance(source, int) and not isinstance(source, bool):
        if filters or nic_gbps is not None:
            raise ValueError("filters apply when analyzing exports; a stored run is compared as it was analyzed")
        from nsys_collective.store import load_result

        return load_result(db or DEFAULT_DB, source)
    unknown = set(filters) - FILTERS
    if unknown:
        raise TypeError(f"load() got unknown filters {sorted(unknown)}; the filters are {sorted(FILTERS)}")
    paths = [source] if isinstance(source, (str, os.PathLike)) else list(source)
    if not paths:
        raise InputError("no paths given")
    from nsys_collective.pipeline import analyze, check_nic_gbps

    check_nic_gbps(nic_gbps)
    return analyze(paths, _filters(**filters), nsys=nsys, nic_gbps=nic_gbps)


def _filters(ranks=None, hosts=None, window_s=None, steps=None, keep_all=False) -> Filters:
    """model.job.Filters from load()'s keyword arguments, which also take analyze's text forms."""
    from nsys_collective.model.job import Filters

    if isinstance(ranks, str):
        ranks = Filters.parse(ranks=ranks).ranks  # intervals: '0-99999999999' is two numbers
    elif ranks is not None:
        ranks = set(ranks)
    if isinstance(hosts, str):
        hosts = Filters.parse(hosts=hosts).hosts
    return Filters(ranks=ranks, hosts=None if hosts is None else list(hosts),
                   window_s=None if window_s is None else (float(window_s[0]), float(window_s[1])), steps=steps,
                   keep_all=bool(keep_all))


def tables(result: Result) -> dict:
    """name -> pyarrow.Table: the tables `analyze --out` writes (collectives, blame, blocking,
    contention, ranks, steps)."""
    from nsys_collective.render.tables import arrow_tables

    return arrow_tables(result)


def to_pandas(result: Result, name: str):
    """One of a result's tables as a pandas DataFrame (pandas is not a dependency: install it to use this)."""
    try:
        import pandas  # noqa: F401  (pyarrow needs it for to_pandas; fail with our message first)
    except ImportError:
        raise ImportError("to_pandas needs pandas: pip install pandas (or use tables(), pyarrow)") from None
    return tables(result)[name].to_pandas()


def compare_runs(a: Result | PathLike | Sequence[PathLike] | int, b: Result | PathLike | Sequence[PathLike] | int, *,
                 db: str | None = None, nsys: str | None = None):
    """Run A (the baseline) against run B, each a Result or what `load` takes: what changed from
    A to B, a compare.Comparison (deltas are B - A)."""
    from nsys_collective.compare import Comparison, compare_documents
    from nsys_collective.result import Result

    a, b = (r if isinstance(r, Result) else load(r, db=db, nsys=nsys) for r in (a, b))
    return Comparison(compare_documents(a.document, b.document, sources=(a.source, b.source)))
