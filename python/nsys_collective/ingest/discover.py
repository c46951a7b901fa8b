"""Turning the user's paths into the inputs of one job, and a batch root into jobs.

Paths may be files of any format in `formats` (exports, reports, Kineto traces), folders holding
them (searched recursively) or glob patterns. A report and its own export side by side count
once, as the report, whose cached export is reused when up to date. One file reached twice (a
symbolic or hard link, `x` and `/abs/x`) is one input, identified by (device, inode) once links
are resolved: read once, and a warning says so. One job is one family of inputs: Nsight Systems
and Kineto inputs together are refused. Temporaries an interrupted run of this tool left
(outputs.is_leftover) and its results store are never inputs, nor anything but regular files
(a FIFO would block the reader forever).

Paths are kept as the OS gives them (bytes that are no UTF-8 survive as surrogates); `shown` is
what a path becomes wherever it is text for people, documents or the store.
"""

from __future__ import annotations

import glob
import os
from collections.abc import Sequence
from pathlib import Path

from nsys_collective.errors import InputError
from nsys_collective.ingest.formats import DESCRIPTION, FAMILIES, NSYS_EXPORT, NSYS_REPORT, format_of, is_input
from nsys_collective.ingest.sqlite_kind import is_regular, sqlite_kind
from nsys_collective.outputs import is_leftover
from nsys_collective.units import count


def shown(path: str | os.PathLike) -> str:
    """A path as text that any UTF-8 writer takes: bytes that are no UTF-8 shown escaped (\\xff)."""
    return os.fsencode(path).decode("utf-8", "backslashreplace")


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


def _identity(path: Path) -> tuple[int, int]:
    st = os.stat(path)  # links followed
    return st.st_dev, st.st_ino


def discover(paths: Sequence[str | os.PathLike]) -> list[Path]:
    """Every input named by `paths` (files, directories, glob patterns), in the order given,
    directories and pattern matches sorted, each file once."""
    return find_inputs(paths)[0]


def find_inputs(paths: Sequence[str | os.PathLike]) -> tuple[list[Path], list[str]]:
    """`discover`'s inputs, and its warnings (the files reached more than once)."""
    found: list[Path] = []
    for text in paths:
        if not os.fspath(text):
            raise InputError("an empty path names no file; pass '.' for the current folder")
    for given in (p for pattern in map(Path, paths) for p in _expand(pattern)):
        if given.is_dir():
            inside = sorted(p for p in given.rglob("*")
                            if p.is_file() and not _in_leftover(p.relative_to(given)) and is_input(p))
            if not inside:
                raise InputError(f"{given}: no {DESCRIPTION} in this directory")
            found.extend(inside)
        elif given.exists():
            if not is_regular(given):
                raise InputError(f"{given}: not a regular file (a FIFO, device or socket); pass the export, report "
                                 "or trace file itself")
            if format_of(given) in (None, NSYS_EXPORT) and sqlite_kind(given) == "store":
                raise InputError(f"{given}: a collectivetrace-nsys results store, not an input "
                                 "(its runs are read by `report` and `compare`)")
            found.append(given)
        else:
            raise InputError(f"{given}: no such file or directory")
    reports = {p.with_suffix("") for p in found if NSYS_REPORT.matches(p)}
    unique: list[Path] = []
    first: dict[tuple[int, int], Path] = {}
    again: dict[Path, list[Path]] = {}
    for p in found:
        if NSYS_EXPORT.matches(p) and p.with_suffix("") in reports:
            continue  # the export of a report also given: read through the report's cache
        try:
            key = _identity(p)
        except OSError as e:
            raise InputError(f"{p}: cannot read it: {e.strerror or e}") from None
        if key in first:
            if p != first[key]:
                again.setdefault(first[key], []).append(p)
            continue
        first[key] = p
        unique.append(p)
    families = {}
    for p in unique:
        fmt = format_of(p)
        families.setdefault(fmt.family if fmt else NSYS_EXPORT.family, p)
    if len(families) > 1:
        (a, first), (b, second) = list(families.items())[:2]
        raise InputError(f"{first} and {second}: {FAMILIES[a]} and {FAMILIES[b]} cannot be "
                         "analyzed together; pass one kind per job")
    warnings = []
    if again:
        pairs = [f"{shown(p)} is {shown(others[0])}" + (f" (and {len(others) - 1} more paths)" if len(others) > 1 else "")
                 for p, others in again.items()]
        shown_pairs = "; ".join(pairs[:3]) + (f"; and {len(pairs) - 3} more files" if len(pairs) > 3 else "")
        warnings.append(f"{count(sum(map(len, again.values())), 'path')} named a file already given, read once: "
                        f"{shown_pairs}")
    return unique, warnings


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
