"""Turning the user's paths into the exports of one job, and reading them.

Paths may be exports (`.sqlite`), reports (`.nsys-rep`, `.qdrep`: exported with `nsys export`,
cached), PyTorch profiler (Kineto) traces (`.json`, `.json.gz`), directories holding them
(searched recursively) or glob patterns. A report and its own export side by side count once, as
the report, whose cached export is reused when up to date. One job is one kind of input: Nsight
Systems and Kineto inputs together are refused.
"""

from __future__ import annotations

import glob
import gzip
import os
from collections.abc import Sequence
from pathlib import Path

from nsys_collective.errors import InputError
from nsys_collective.reader import Export, read_exports, read_kineto

EXPORT_SUFFIXES = (".sqlite",)
REPORT_SUFFIXES = (".nsys-rep", ".qdrep")
KINETO_SUFFIXES = (".json", ".json.gz")


def is_report(path: Path) -> bool:
    return path.suffix in REPORT_SUFFIXES


def is_kineto(path: Path) -> bool:
    return path.name.endswith(KINETO_SUFFIXES)


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


def _is_input(path: Path) -> bool:
    return path.suffix in EXPORT_SUFFIXES + REPORT_SUFFIXES or (is_kineto(path) and _looks_like_kineto(path))


def _expand(given: Path) -> list[Path]:
    """A path as given, or the files a glob pattern names (quoted on the command line, or from a
    shell that left it unmatched)."""
    text = str(given)
    if given.exists() or not any(ch in text for ch in "*?["):
        return [given]
    matches = sorted(Path(p) for p in glob.glob(text, recursive=True))
    if not matches:
        raise InputError(f"{given}: no file or directory matches this pattern")
    return matches


def discover(paths: Sequence[str | os.PathLike]) -> list[Path]:
    """Every export and report named by `paths` (files, directories, glob patterns), in the order
    given, directories and pattern matches sorted."""
    found: list[Path] = []
    for given in (p for pattern in map(Path, paths) for p in _expand(pattern)):
        if given.is_dir():
            inside = sorted(p for p in given.rglob("*") if p.is_file() and _is_input(p))
            if not inside:
                raise InputError(f"{given}: no Nsight Systems exports (.sqlite), reports (.nsys-rep, .qdrep) "
                                 "or PyTorch profiler traces (.json, .json.gz) in this directory")
            found.extend(inside)
        elif given.exists():
            found.append(given)
        else:
            raise InputError(f"{given}: no such file or directory")
    reports = {p.with_suffix("") for p in found if p.suffix in REPORT_SUFFIXES}
    unique = []
    for p in found:
        if p.suffix in EXPORT_SUFFIXES and p.with_suffix("") in reports:
            continue  # the export of a report also given: read through the report's cache check
        if p not in unique:
            unique.append(p)
    kineto = [p for p in unique if is_kineto(p)]
    if kineto and len(kineto) < len(unique):
        raise InputError(f"{kineto[0]} and {next(p for p in unique if not is_kineto(p))}: PyTorch profiler traces and "
                         "Nsight Systems exports cannot be analyzed together; pass one kind per job")
    return unique


def exports_of(inputs: Sequence[Path], nsys: str | None = None, cache_dir: Path | None = None, progress: bool = False) -> list[Path]:
    """What the reader reads for each input: reports through `nsys export` (cached), the rest as
    they are."""
    reports = [p for p in inputs if is_report(p)]
    if not reports:
        return list(inputs)
    from nsys_collective.nsys_export import export_reports

    exported = dict(zip(reports, export_reports(reports, nsys=nsys, cache_dir=cache_dir, progress=progress)))
    return [exported.get(p, p) for p in inputs]


def read_inputs(paths: Sequence[Path], threads: int | None = None) -> list[Export]:
    """The exports (or Kineto traces) of one job, read in parallel by the native readers."""
    if paths and all(is_kineto(p) for p in paths):
        return read_kineto(paths, threads)
    return read_exports(paths, threads)


class ExportSource(Sequence):
    """The exports of one job read on demand, at most `keep` held at a time.

    The analysis takes what it needs from every rank in one pass and comes back only for a few
    (stragglers, their references, the ranks whose transfers compute overlapped), so a job's
    memory grows with its per-collective summaries, not with its ranks' events; the price is
    reading some exports again.
    """

    def __init__(self, paths: Sequence[Path], keep: int = 2):
        self.paths = list(paths)
        self.keep = max(1, keep)
        self._held: dict[int, Export] = {}
        self.reads = 0

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, index: int) -> Export:
        if index in self._held:
            self._held[index] = self._held.pop(index)  # most recently used last
            return self._held[index]
        [export] = read_inputs([self.paths[index]], 1)
        self.reads += 1
        self._held[index] = export
        while len(self._held) > self.keep:
            self._held.pop(next(iter(self._held)))
        return export
