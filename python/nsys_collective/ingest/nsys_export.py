"""Turn Nsight Systems reports (`.nsys-rep`, `.qdrep`) into SQLite exports with the real `nsys`.

The reader only understands `nsys export --type sqlite` files, and the report format is private
to NVIDIA, so reports go through the user's own `nsys`. Exports are cached in a folder the tool
owns (`--cache-dir`, else `default_cache_dir()`), never beside the report: `x.sqlite` there may be
anything (the user's own export, a results store). A cached export is named after the report's
identity (device, inode, size, mtime, ctime), so a report replaced by another, even one with an
older mtime (`cp -p`), is exported again. nsys writes into a temporary, which becomes the cached
export only once it is checked (an SQLite file, whole, with the export's tables). nsys runs in its
own process group, with a time limit; on a timeout or an interrupt the whole group is killed.
"""

from __future__ import annotations

import contextlib
import glob
import hashlib
import os
import re
import secrets
import shutil
import signal
import subprocess
import threading
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path
from typing import Sequence

from nsys_collective.errors import NsysExportError
from nsys_collective.ingest.sqlite_kind import complete_sqlite, sqlite_kind
from nsys_collective.ingest.limits import DEFAULT_TIMEOUT_S

__all__ = ["DEFAULT_TIMEOUT_S", "NsysExportError", "default_cache_dir", "export_path_for", "export_reports", "find_nsys"]

# After SIGTERM, how long nsys's process group has before SIGKILL.
_KILL_GRACE_S = 2.0

_HINT = "install Nsight Systems or pass --nsys PATH (or export the reports to .sqlite yourself)"

# nsys draws its progress bar ("Processing 57141 events: [===45%   ]") with carriage returns.
_PROGRESS_BAR = re.compile(r"\[[=\s]*\d{1,3}%[=\s]*\]\s*$")
# What nsys 2023.4.4 prints (stderr, exit status 1) for a report from a newer nsys:
# "Exportation error: Report was created in Nsight Systems version (2099.4.4.54-...), newer
# than your current version (2023.4.4.54-...)." and a second line asking to update.
_NEWER = re.compile(r"newer than your current version", re.IGNORECASE)
_NEWER_VERSIONS = re.compile(r"version \(([^)]*)\), newer than your current version \(([^)]*)\)")
# What nsys says for files that are not reports at all (random bytes, empty, truncated, .qdstrm).
_NOT_A_REPORT = re.compile(
    r"version tag does not contain a delimiter|version tag is not found|cannot read from stream"
    r"|magic number mismatch|invalid version prefix",
    re.IGNORECASE,
)


def find_nsys(explicit: str | os.PathLike | None = None) -> Path:
    """The nsys to run: `explicit` if given (it must be an executable file), else `nsys` on PATH."""
    if explicit is not None:
        path = Path(explicit).expanduser()
        if path.is_file() and os.access(path, os.X_OK):
            # Absolute, so that a bare "nsys" in the current folder is not looked up on PATH.
            return path.absolute()
        raise NsysExportError(f"nsys not found at {path}: {_HINT}")
    found = shutil.which("nsys")
    if found is None:
        raise NsysExportError(f"nsys not found: {_HINT}")
    return Path(found)


def default_cache_dir() -> Path:
    """`$COLLECTIVETRACE_CACHE`, else ~/.cache/collectivetrace-nsys/exports."""
    env = os.environ.get("COLLECTIVETRACE_CACHE")
    if env:
        return Path(env).expanduser()
    return Path.home() / ".cache" / "collectivetrace-nsys" / "exports"


def report_key(report: Path) -> str:
    """What names a report's cached export: a hash of its identity (device, inode, size, mtime,
    ctime). Any write to the report changes its ctime, which no tool can set back."""
    st = os.stat(report)
    identity = f"{st.st_dev}:{st.st_ino}:{st.st_size}:{st.st_mtime_ns}:{st.st_ctime_ns}"
    return hashlib.sha256(identity.encode()).hexdigest()[:16]


def export_path_for(report: Path, cache_dir: Path | None = None) -> Path:
    """Where the SQLite export of `report` is cached: in cache_dir (default: `default_cache_dir()`),
    `<report name>-<report_key>.sqlite`; never beside the report, where a file of that name is the
    user's."""
    report = Path(report)
    folder = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    return folder / f"{report.stem}-{report_key(report)}.sqlite"


def _usable_export(path: Path) -> bool:
    """Whether path is a whole Nsight Systems export: what nsys wrote is checked before it is
    cached (an nsys that exits 0 after writing half a file), a cached one before it is reused."""
    return path.is_file() and complete_sqlite(path) and sqlite_kind(path) == "nsys"


def _meaningful_lines(text: str) -> list[str]:
    """nsys's output without blank lines and progress-bar frames."""
    # Non-printable characters (nsys may echo bytes of a damaged file) would break the line.
    text = "".join(c if c.isprintable() or c in "\r\n" else " " for c in text)
    lines = (line.strip() for line in re.split(r"[\r\n]+", text))
    return [line for line in lines if line and not _PROGRESS_BAR.search(line)]


def _short_version(version: str) -> str:
    """'2023.4.4.54-234433681190v0' -> '2023.4.4.54' (drop the build id)."""
    return version.strip().split("-")[0]


def _nsys_version(nsys: Path) -> str:
    """The version `nsys --version` reports, or 'this nsys' if it cannot say."""
    try:
        out = subprocess.run([str(nsys), "--version"], stdin=subprocess.DEVNULL,
                             capture_output=True, text=True, errors="replace", timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        return "this nsys"
    match = re.search(r"version\s+(\S+)", out)
    return f"nsys {_short_version(match.group(1))}" if match else "this nsys"


def _failure_message(report: Path, nsys: Path, proc: subprocess.CompletedProcess) -> str:
    """One line saying why `nsys export` failed on `report`."""
    output = proc.stderr + "\n" + proc.stdout
    if _NEWER.search(output):
        versions = _NEWER_VERSIONS.search(output)
        if versions:
            made = f" ({_short_version(versions.group(1))})"
            current = f"nsys {_short_version(versions.group(2))}"
        else:
            made, current = "", _nsys_version(nsys)
        return (f"{report}: made by a newer Nsight Systems{made} than {current}; export it with "
                "that version (nsys export --type sqlite) and pass the .sqlite")
    lines = _meaningful_lines(proc.stderr) or _meaningful_lines(proc.stdout)
    if not lines:
        return f"{report}: nsys export failed with exit status {proc.returncode} and no message"
    # nsys follows its error line with advice ("Use `--force-overwrite true` ..."): prefer the
    # error itself, without its "Exportation error:" prefix.
    errors = [line for line in lines if "error" in line.lower()]
    line = re.sub(r"^(exportation\s+)?error:\s*", "", (errors or lines)[-1], flags=re.IGNORECASE)
    if _NOT_A_REPORT.search(line):
        line += " (not an Nsight Systems report, or a damaged one)"
    return f"{report}: nsys export failed: {line}"


# An export left unfinished this long ago was interrupted (nsys writes its output as it goes).
STALE_EXPORT_S = 6 * 3600


def _clean_stale_exports(dest: Path) -> None:
    """Remove what interrupted exports to `dest` left (their temporaries, see _export_one) once
    stale: nothing else, and nothing an export still running may be writing."""
    now = time.time()
    ours = re.compile(rf"\.{re.escape(dest.stem)}\.[0-9a-f]{{8}}\.tmp\.sqlite")
    for tmp in dest.parent.glob(f".{glob.escape(dest.stem)}.*.tmp.sqlite"):
        with contextlib.suppress(OSError):
            if ours.fullmatch(tmp.name) and now - tmp.stat().st_mtime > STALE_EXPORT_S:
                tmp.unlink()


# NCCL 2.19+ records message sizes only in NVTX extended payloads, which an export holds only as
# blobs; nsys versions whose `export --help` lists the option are asked for them.
_BLOBS = re.compile(r"--include-blobs\b")
_HELP_TIMEOUT_S = 60


_BLOB_OPTIONS: dict[Path, tuple[str, ...]] = {}  # per nsys: asked once a run


def blob_options(nsys: Path, timeout_s: float | None = None, running: _Running | None = None) -> tuple[str, ...]:
    """The export options that keep NVTX payload blobs, where this nsys offers them (else none).
    Its `export --help` runs as an export does: under the export's timeout (at most a minute) and
    killed with its process group on interrupt, so a hung nsys cannot hold the run here either."""
    if nsys not in _BLOB_OPTIONS:
        try:
            ran = _run_nsys([str(nsys), "export", "--help"], min(timeout_s or _HELP_TIMEOUT_S, _HELP_TIMEOUT_S),
                            running or _Running())
        except OSError:
            ran = None
        _BLOB_OPTIONS[nsys] = ("--include-blobs", "true") if ran is not None and _BLOBS.search(ran[1] + ran[2]) else ()
    return _BLOB_OPTIONS[nsys]


class _Running:
    """The nsys processes running now, so that an interrupt kills them all (the worker threads
    wait on them, and the pool waits on its threads)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._procs: set[subprocess.Popen] = set()

    def add(self, proc: subprocess.Popen) -> None:
        with self._lock:
            self._procs.add(proc)

    def discard(self, proc: subprocess.Popen) -> None:
        with self._lock:
            self._procs.discard(proc)

    def kill_all(self) -> None:
        with self._lock:
            procs = list(self._procs)
        for proc in procs:
            _kill_group(proc)


def _kill_group(proc: subprocess.Popen) -> None:
    """SIGTERM to nsys's whole process group (it starts helper processes), SIGKILL after a grace
    period: an nsys that ignores signals must not hold the run forever."""
    for sig, wait in ((signal.SIGTERM, _KILL_GRACE_S), (signal.SIGKILL, None)):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, sig)
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def _run_nsys(cmd: list[str], timeout_s: float | None, running: _Running) -> tuple[int, str, str] | None:
    """(exit status, stdout, stderr) of nsys, or None when it ran past timeout_s (then killed)."""
    proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, errors="replace", start_new_session=True)
    running.add(proc)
    try:
        out, err = proc.communicate(timeout=timeout_s)
        return proc.returncode, out, err
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        proc.communicate()
        return None
    except BaseException:
        _kill_group(proc)
        raise
    finally:
        running.discard(proc)


def _export_one(nsys: Path, report: Path, dest: Path, timeout_s: float | None = None,
                running: _Running | None = None) -> None:
    """Run `nsys export` for one report; the export appears at `dest` whole and checked, or not at all."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    _clean_stale_exports(dest)
    # A fresh hidden name in the destination folder, so os.replace() is an atomic rename. It ends
    # in .sqlite because some nsys versions append that suffix when it is missing.
    tmp = dest.with_name(f".{dest.stem}.{secrets.token_hex(4)}.tmp.sqlite")
    running = running or _Running()
    cmd = [str(nsys), "export", "--type", "sqlite", *blob_options(nsys, timeout_s, running), "--output", str(tmp),
           str(report)]
    try:
        try:
            ran = _run_nsys(cmd, timeout_s, running)
        except OSError as exc:
            raise NsysExportError(f"{report}: cannot run {nsys}: {exc.strerror or exc}") from None
        if ran is None:
            raise NsysExportError(f"{report}: nsys export did not finish within {timeout_s:g} s and was stopped; "
                                  "raise --export-timeout if the report is that large")
        code, out, err = ran
        if code != 0:
            raise NsysExportError(_failure_message(report, nsys, subprocess.CompletedProcess(cmd, code, out, err)))
        if not tmp.is_file():
            raise NsysExportError(f"{report}: nsys export reported success but wrote no file")
        if not _usable_export(tmp):
            raise NsysExportError(f"{report}: nsys export reported success but wrote an incomplete or foreign "
                                  "SQLite file (disk full?); nothing was cached: free space and run again")
        # The destination is this tool's cache entry for this very report (or a broken one of ours).
        os.replace(tmp, dest)
    finally:
        tmp.unlink(missing_ok=True)  # gone already after a success; never leave half an export


def _progress_bar(total: int):
    """A rich progress bar on stderr; returns (context manager, advance callback)."""
    # Imported here: only the bar needs rich.
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    bar = Progress(TextColumn("nsys export"), BarColumn(), MofNCompleteColumn(),
                   TextColumn("{task.description}"), TimeElapsedColumn(),
                   console=Console(stderr=True))
    task = bar.add_task("", total=total)

    def advance(report: Path) -> None:
        bar.update(task, advance=1, description=report.name)

    return bar, advance


def export_reports(
    reports: Sequence[Path],
    nsys: str | os.PathLike | None = None,
    cache_dir: Path | None = None,
    jobs: int | None = None,
    progress: bool = False,
    timeout_s: float | None = DEFAULT_TIMEOUT_S,
) -> list[Path]:
    """Export each report to SQLite (see `export_path_for`); return the export paths, in order.

    A whole cached export of the report as it is now is reused without running nsys. The others
    run `jobs` at a time (default min(4, CPUs)), each for at most `timeout_s` seconds (None: no
    limit). The first failure raises NsysExportError naming the report; exports already finished
    stay, unfinished ones leave nothing behind, and an interrupt stops every running nsys.
    """
    reports = [Path(r) for r in reports]
    for report in reports:
        if not report.is_file():
            raise NsysExportError(f"{report}: no such report")
    dests = [export_path_for(r, cache_dir).absolute() for r in reports]

    todo: dict[Path, Path] = {}  # destination -> report; each destination is exported once
    for report, dest in zip(reports, dests):
        if dest not in todo and not _usable_export(dest):
            todo[dest] = report
    if not todo:
        return dests

    exe = find_nsys(nsys)  # only needed when something is left to export
    jobs = max(1, jobs or min(4, os.cpu_count() or 1))
    if progress:
        bar, advance = _progress_bar(len(todo))
    else:
        bar, advance = contextlib.nullcontext(), lambda report: None
    running = _Running()
    with bar, ThreadPoolExecutor(max_workers=jobs) as pool:
        futures = {pool.submit(_export_one, exe, report, dest, timeout_s, running): report
                   for dest, report in todo.items()}
        try:
            for future in as_completed(futures):
                future.result()  # re-raises that report's NsysExportError
                advance(futures[future])
        except BaseException:
            # Stop what has not started and kill what runs (an interrupt, another report's
            # failure); leaving the `with` waits for the running ones, which clean up after
            # themselves.
            for future in futures:
                future.cancel()
            running.kill_all()
            raise
    return dests
