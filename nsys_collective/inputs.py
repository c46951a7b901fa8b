"""Turning the user's paths into one SQLite export per report.

Paths may be exports (`.sqlite`), reports (`.nsys-rep`, `.qdrep`: exported with `nsys export`,
cached) or directories holding either (searched recursively). A report and its own export side by
side count once, as the report, whose cached export is reused when up to date.
"""

from __future__ import annotations

import glob
import os
from collections.abc import Sequence
from pathlib import Path

from nsys_collective.errors import InputError

EXPORT_SUFFIXES = (".sqlite",)
REPORT_SUFFIXES = (".nsys-rep", ".qdrep")


def _is_input(path: Path) -> bool:
    return path.suffix in EXPORT_SUFFIXES + REPORT_SUFFIXES


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
                raise InputError(f"{given}: no Nsight Systems exports (.sqlite) or reports (.nsys-rep, .qdrep) in this directory")
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
    return unique


def is_report(path: Path) -> bool:
    return path.suffix in REPORT_SUFFIXES
