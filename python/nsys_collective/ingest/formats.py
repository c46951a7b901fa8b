"""The one registry of input formats: what a file is (by suffix, and by sniffing where a folder may
hold other files of that suffix), which family it belongs to (one job is one family) and how it
becomes a capture. A new input format is one entry here and its reader.
"""

from __future__ import annotations

import gzip
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from nsys_collective.ingest.capture import Export, Limits, read_exports, read_kineto
from nsys_collective.ingest.sqlite_kind import sqlite_kind


def _looks_like_kineto(path: Path) -> bool:
    """A .json in a folder is a PyTorch profiler trace only when it starts like one: folders also
    hold other JSON (fixtures' truth.json, analyze's analysis.json, our own Perfetto traces)."""
    try:
        opener = gzip.open if path.name.endswith(".gz") else open
        with opener(path, "rb") as f:
            head = f.read(1 << 16)
    except (OSError, EOFError):
        return True  # unreadable: let the reader say what is wrong with it
    return b'"schemaVersion"' in head or (b'"traceEvents"' in head and b"collectivetrace" not in head)


def _not_our_store(path: Path) -> bool:
    """A .sqlite in a folder is an export unless it is our own results store (`batch --db`)."""
    return sqlite_kind(path) != "store"


@dataclass(frozen=True)
class Format:
    name: str
    family: str  # inputs of one job are all of one family
    suffixes: tuple[str, ...]
    read: Callable[[Sequence[str | os.PathLike], int | None, Limits], list[Export]]
    # Whether a file of these suffixes found in a folder really is one (named files are taken as given).
    sniff: Callable[[Path], bool] | None = None
    # Reports are read through their SQLite export (ingest.nsys_export).
    exported: bool = False

    def matches(self, path: Path) -> bool:
        return path.name.endswith(self.suffixes)


NSYS_EXPORT = Format("Nsight Systems export", "nsys", (".sqlite",), read_exports, sniff=_not_our_store)
NSYS_REPORT = Format("Nsight Systems report", "nsys", (".nsys-rep", ".qdrep"), read_exports, exported=True)
KINETO = Format("PyTorch profiler trace", "kineto", (".json", ".json.gz"), read_kineto, sniff=_looks_like_kineto)
FORMATS = (NSYS_EXPORT, NSYS_REPORT, KINETO)
# The families, in words (a job mixing two is refused, naming both).
FAMILIES = {"nsys": "Nsight Systems exports or reports", "kineto": "PyTorch profiler traces"}
DESCRIPTION = "Nsight Systems exports (.sqlite), reports (.nsys-rep, .qdrep) or PyTorch profiler traces (.json, .json.gz)"


def format_of(path: Path) -> Format | None:
    """The format a file's name says, or None."""
    return next((f for f in FORMATS if f.matches(path)), None)


def is_input(path: Path) -> bool:
    """Whether a file found in a folder is an input: its suffix names a format, and it sniffs as one."""
    fmt = format_of(path)
    return fmt is not None and (fmt.sniff is None or fmt.sniff(path))


def read(paths: Sequence[Path], threads: int | None = None, limits: Limits = Limits()) -> list[Export]:
    """The captures of one job's files (exports, not reports; one family), read in parallel by
    the native readers."""
    if not paths:
        return []
    fmt = format_of(Path(paths[0])) or NSYS_EXPORT
    return fmt.read([os.fspath(p) for p in paths], threads, limits)


def readable_paths(inputs: Sequence[Path], nsys: str | None = None, cache_dir: Path | None = None,
                   progress: bool = False) -> list[Path]:
    """What the readers read for each input: reports through `nsys export` (cached), the rest as
    they are."""
    reports = [p for p in inputs if (f := format_of(p)) is not None and f.exported]
    if not reports:
        return list(inputs)
    from nsys_collective.ingest.nsys_export import export_reports

    exported = dict(zip(reports, export_reports(reports, nsys=nsys, cache_dir=cache_dir, progress=progress)))
    return [exported.get(p, p) for p in inputs]
