"""Turning the user's paths into the inputs of one job, and a batch root into jobs.

Paths may be files of any format in `formats` (exports, reports, Kineto traces), folders holding
them (searched recursively) or glob patterns. A report and its own export side by side count
once, as the report, whose cached export is reused when up to date. One job is one family of
inputs: Nsight Systems and Kineto inputs together are refused. Temporaries an interrupted run of
this tool left (outputs.is_leftover) and its results store are never inputs.
"""

from __future__ import annotations

import glob
import os
from collections.abc import Sequence
from pathlib import Path

from nsys_collective.errors import InputError
from nsys_collective.ingest.formats import DESCRIPTION, FAMILIES, NSYS_EXPORT, NSYS_REPORT, format_of, is_input
from nsys_collective.ingest.sqlite_kind import sqlite_kind
from nsys_collective.outputs import is_leftover


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


def _in_leftover(relative: Path) -> bool:
    """Whether a file found in a folder is, or lies in, a temporary of an interrupted run of ours."""
    return any(is_leftover(part) for part in relative.parts)


def discover(paths: Sequence[str | os.PathLike]) -> list[Path]:
    """Every input named by `paths` (files, directories, glob patterns), in the order given,
    directories and pattern matches sorted."""
    found: list[Path] = []
    for given in (p for pattern in map(Path, paths) for p in _expand(pattern)):
        if given.is_dir():
            inside = sorted(p for p in given.rglob("*")
                            if p.is_file() and not _in_leftover(p.relative_to(given)) and is_input(p))
            if not inside:
                raise InputError(f"{given}: no {DESCRIPTION} in this directory")
            found.extend(inside)
        elif given.exists():
            if format_of(given) in (None, NSYS_EXPORT) and sqlite_kind(given) == "store":
                raise InputError(f"{given}: a collectivetrace-nsys results store, not an input "
                                 "(its runs are read by `report` and `compare`)")
            found.append(given)
        else:
            raise InputError(f"{given}: no such file or directory")
    reports = {p.with_suffix("") for p in found if NSYS_REPORT.matches(p)}
    unique = []
    for p in found:
        if NSYS_EXPORT.matches(p) and p.with_suffix("") in reports:
            continue  # the export of a report also given: read through the report's cache check
        if p not in unique:
            unique.append(p)
    families = {}
    for p in unique:
        fmt = format_of(p)
        families.setdefault(fmt.family if fmt else NSYS_EXPORT.family, p)
    if len(families) > 1:
        (a, first), (b, second) = list(families.items())[:2]
        raise InputError(f"{first} and {second}: {FAMILIES[a]} and {FAMILIES[b]} cannot be "
                         "analyzed together; pass one kind per job")
    return unique


def find_jobs(root: str | os.PathLike, pattern: str | None = None) -> list[Path]:
    """The job folders under root, sorted, absolute. With `pattern`: the folders matching that glob
    relative to root. Without: every folder directly holding inputs of any format, not looking
    further into it (its subfolders are part of it, as `analyze FOLDER` reads them too)."""
    root = Path(root)
    if not root.is_dir():
        raise InputError(f"{root}: not a directory")
    root = root.resolve()
    if pattern:
        return sorted({p for p in root.glob(pattern) if p.is_dir() and not any(map(is_leftover, p.relative_to(root).parts))})
    jobs = []
    for folder, subfolders, files in os.walk(root):
        subfolders[:] = sorted(d for d in subfolders if not is_leftover(d))
        if any(not is_leftover(f) and is_input(Path(folder) / f) for f in files):
            jobs.append(Path(folder))
            subfolders.clear()
    return sorted(jobs)
