"""Where outputs may go: the rules every file and folder the tool writes follows.

- Never an input, nor a folder holding one, with or without --force.
- An existing destination is replaced only with --force, and only when the tool wrote it: a
  folder carrying our marker file (which lists the files we wrote there, so a file someone added
  is never lost), an empty folder, or a file `ours` recognizes.
- Everything is written into a temporary beside the destination and moved into place whole: a
  new destination appears by one rename that never replaces (of concurrent runs one wins, the
  others are refused); an old folder is swapped with the new one in one step where the OS can
  (Linux renameat2 RENAME_EXCHANGE), so a crash at any point leaves the old or the new folder.
- Temporaries have recognizable names and are locked while written; input discovery ignores
  them, and the next run writing beside them removes those of ours that nothing holds.

Problems with the destination (missing folder, a file where a folder is needed, a read-only or
full disk) are `InputError`s: one line, exit status 2.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import re
import secrets
import shutil
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import IO

from nsys_collective.errors import InputError

try:
    import fcntl
except ImportError:  # not POSIX: no locks, only the grace periods protect temporaries
    fcntl = None

MARKER = ".collectivetrace-out"
_MARKER_HEADER = "# written by collectivetrace-nsys: `--force` may replace this folder; the files it wrote:\n"
# Our temporaries: `.<destination name>.ct-<8 hex>.tmp`, folders and files alike.
_TEMP = re.compile(r"^\..*\.ct-[0-9a-f]{8}\.tmp$")
# What an interrupted `nsys export` leaves beside a report (ingest.nsys_export names them).
EXPORT_TEMP = re.compile(r"^\..+\.[0-9a-f]{8}\.tmp\.sqlite$")
# A temporary younger than this may belong to a run that has not locked it yet.
_GRACE_S = 60
# Where locks cannot be taken, a temporary this old is abandoned.
_ABANDONED_S = 24 * 3600


def is_leftover(name: str) -> bool:
    """Whether a file or folder name is one of our temporaries (never an input)."""
    return bool(_TEMP.match(name) or EXPORT_TEMP.match(name))


def _temp_path(dest: Path) -> Path:
    # The destination's name (cut: names have a length limit) says whose temporary it is.
    return dest.with_name(f".{dest.name[:100]}.ct-{secrets.token_hex(4)}.tmp")


def _destination_error(dest: Path, e: OSError) -> InputError:
    return InputError(f"{dest}: cannot write: {e.strerror or e}")


# Atomic renames ---------------------------------------------------------------------------------

_RENAME_NOREPLACE, _RENAME_EXCHANGE = 1, 2
_AT_FDCWD = -100


def _load_renameat2():
    try:
        fn = ctypes.CDLL(None, use_errno=True).renameat2
    except (AttributeError, OSError):  # not glibc 2.28+ / not Linux
        return None
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    return fn


_renameat2 = _load_renameat2()


def _rename2(src: Path, dst: Path, flags: int) -> bool:
    """renameat2(src, dst, flags); False where the OS or the filesystem cannot do it."""
    if _renameat2 is None:
        return False
    if _renameat2(_AT_FDCWD, os.fsencode(src), _AT_FDCWD, os.fsencode(dst), flags) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP):
        return False
    raise OSError(err, os.strerror(err), str(src), None, str(dst))


def exchange(a: Path, b: Path) -> None:
    """Swap two folders in one step; where the OS cannot, two renames (a crash between them
    leaves b under a temporary name, which is still found and cleaned)."""
    if _rename2(a, b, _RENAME_EXCHANGE):
        return
    aside = _temp_path(b)
    os.rename(b, aside)
    try:
        os.rename(a, b)
    except BaseException:
        os.rename(aside, b)
        raise
    os.rename(aside, a)


def rename_new(src: Path, dst: Path) -> None:
    """Move src to dst, which must not exist: FileExistsError when something got there first."""
    if _rename2(src, dst, _RENAME_NOREPLACE):
        return
    if src.is_dir():
        if dst.exists() or dst.is_symlink():
            raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST), str(dst))
        os.rename(src, dst)  # never replaces a non-empty folder
    else:
        os.link(src, dst)  # fails when dst exists
        os.unlink(src)


# Locks on temporaries -----------------------------------------------------------------------------

def _unheld(path: Path) -> bool | None:
    """Whether no process holds a lock on path (None when locks cannot be taken there)."""
    if fcntl is None:
        return None
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False
    except OSError:
        return None
    finally:
        os.close(fd)  # releases the lock we may have taken


# What versions before the marker wrote, to tell their leftovers of `--out NAME` (`.NAME.XXXXXXXX`,
# `.NAME.old.XXXXXXXX` holding NAME/) from anything else: only these files, nothing else.
_LEGACY_FILES = re.compile(r"(analysis\.json|report\.html|[a-z_]+\.(csv|parquet)|charts/[a-z_]+\.(png|svg))")


def _legacy_leftover(path: Path, out_name: str) -> bool:
    if not re.fullmatch(rf"\.{re.escape(out_name)}\.(old\.)?[a-z0-9_]{{8}}", path.name) or not path.is_dir():
        return False
    files = [p.relative_to(path).as_posix() for p in path.rglob("*") if not p.is_dir()]
    prefix = f"{out_name}/"
    return bool(files) and all(_LEGACY_FILES.fullmatch(f[len(prefix):] if f.startswith(prefix) else f) for f in files)


def clean_leftovers(folder: Path, out_name: str | None = None) -> None:
    """Remove the temporaries of our runs that died in `folder`: only our names, only what no
    live run holds (and, for folders, only those holding our marker or nothing); with `out_name`,
    also what earlier versions left of that --out folder."""
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return
    now = time.time()
    for entry in entries:
        if out_name and _legacy_leftover(Path(entry.path), out_name):
            with contextlib.suppress(OSError):
                if now - entry.stat(follow_symlinks=False).st_mtime > _ABANDONED_S:
                    shutil.rmtree(entry.path)
            continue
        if not _TEMP.match(entry.name):
            continue
        path = Path(entry.path)
        with contextlib.suppress(OSError):
            age = now - entry.stat(follow_symlinks=False).st_mtime
            if age < _GRACE_S:
                continue
            if entry.is_dir(follow_symlinks=False):
                marker = path / MARKER
                if marker.is_file():
                    unheld = _unheld(marker)
                    if unheld or (unheld is None and age > _ABANDONED_S):
                        shutil.rmtree(path, ignore_errors=True)
                elif not any(path.iterdir()):
                    path.rmdir()  # killed before it held anything
            elif entry.is_file(follow_symlinks=False):
                unheld = _unheld(path)
                if unheld or (unheld is None and age > _ABANDONED_S):
                    path.unlink()


# What must never be replaced ------------------------------------------------------------------------

def _resolved(paths: Iterable[str | os.PathLike]) -> list[tuple[str, Path]]:
    return [(os.fspath(p), Path(p).resolve()) for p in paths if p]


def _inputs_inside(dest: Path, protect: Iterable[str | os.PathLike]) -> str | None:
    """The first protected path that is dest or lies inside it."""
    target = dest.resolve()
    for given, path in _resolved(protect):
        if path == target or target in path.parents:
            return given
    return None


def listed_files(folder: Path) -> set[str] | None:
    """The files our marker in folder says we wrote (relative, '/'-separated); None without one."""
    try:
        text = (folder / MARKER).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    return {line for line in text.splitlines() if line and not line.startswith("#")}


def _foreign_file(folder: Path) -> str | None:
    """A file in folder the tool did not write ('' when the folder carries no marker at all)."""
    listed = listed_files(folder)
    if listed is None:
        return ""
    for root, dirs, files in os.walk(folder):
        links = [d for d in dirs if os.path.islink(os.path.join(root, d))]
        for name in files + links:
            rel = Path(root, name).relative_to(folder).as_posix()
            if rel != MARKER and rel not in listed:
                return rel
    return None


def check_folder(out: Path, force: bool, protect: Iterable[str | os.PathLike] = ()) -> None:
    """Refuse (InputError) an --out folder that must not be written."""
    out = Path(out)
    held = _inputs_inside(out, protect)
    if held is not None:
        raise InputError(f"{out}: holds {held}, one of the inputs; choose another folder for the outputs")
    if out.exists() and not out.is_dir():
        raise InputError(f"{out}: exists and is not a directory")
    if not out.is_dir():
        return
    try:
        if not any(out.iterdir()):
            return
        foreign = _foreign_file(out)
    except OSError as e:
        raise InputError(f"{out}: cannot read this folder: {e.strerror or e}") from None
    if foreign == "":
        raise InputError(f"{out}: exists, is not empty and was not written by collectivetrace-nsys (no {MARKER} in it); "
                         "--force replaces only folders it wrote: choose another folder")
    if foreign is not None:
        raise InputError(f"{out}: holds {foreign}, which collectivetrace-nsys did not write; move it away or choose "
                         "another folder")
    if not force:
        raise InputError(f"{out}: exists and is not empty; pass --force to replace it")


def check_apart(folder: Path, file: Path, folder_option: str, file_option: str) -> None:
    """Refuse (InputError) an output file that is an output folder or lies in it: the folder is
    written whole, so one of the two would be lost."""
    folder, target = Path(folder).resolve(), Path(file).resolve()
    if target == folder or folder in target.parents:
        raise InputError(f"{file}: {file_option} names {'the' if target == folder else 'a file in the'} {folder_option} "
                         "folder; choose a file outside it")


def check_file(path: Path, force: bool, protect: Iterable[str | os.PathLike] = (),
               ours: Callable[[Path], bool] = lambda p: False) -> None:
    """Refuse (InputError) an output file that must not be written: a folder, in a missing
    folder, an input, or an existing file (without --force, or one `ours` does not recognize)."""
    path = Path(path)
    if path.is_dir():
        raise InputError(f"{path}: is a directory; name a file in it, e.g. {path / 'trace.json'}")
    if not path.parent.is_dir():
        raise InputError(f"{path}: no such folder: {path.parent}")
    if path.name in ("", ".", ".."):
        raise InputError(f"{path}: not a file name")
    target = path.resolve()
    for given, p in _resolved(protect):
        if p == target or (path.exists() and p.exists() and os.path.samefile(p, path)):
            raise InputError(f"{path}: is one of the inputs ({given}); choose another file")
    if not (path.exists() or path.is_symlink()):
        return
    if not force:
        raise InputError(f"{path}: exists; pass --force to replace it")
    if not path.is_file() or not (path.stat().st_size == 0 or ours(path)):
        raise InputError(f"{path}: exists and was not written by collectivetrace-nsys; --force replaces only files "
                         "it wrote: choose another name")


# Writing ------------------------------------------------------------------------------------------

@contextlib.contextmanager
def _locked_temp(dest: Path, folder: bool) -> Iterator[tuple[Path, int]]:
    """A fresh temporary beside dest, locked while we hold it: (path, fd of the locked file: the
    marker in a folder, or the file itself). Removed on failure."""
    tmp = _temp_path(dest)
    if folder:
        tmp.mkdir()
        fd = os.open(tmp / MARKER, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
    else:
        fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        with contextlib.suppress(OSError, AttributeError):  # no locks here: only the grace periods protect it
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield tmp, fd
    except BaseException:
        if folder:
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            with contextlib.suppress(OSError):
                tmp.unlink()
        raise
    finally:
        os.close(fd)


def write_folder(out: Path, force: bool, protect: Iterable[str | os.PathLike], fill: Callable[[Path], object]) -> None:
    """Write a folder: `fill(tmp)` writes the files into a temporary folder, which then becomes
    `out` whole (see the module's rules). Raises InputError when out must not be written or the
    disk refuses."""
    out = Path(os.path.abspath(out))  # '.' has a name and a parent this way
    if out.is_symlink():
        out = out.resolve()  # write where it points; never swap the link itself away
    if not out.name:
        raise InputError(f"{out}: cannot be replaced; choose a folder below it")
    protect = list(protect)
    check_folder(out, force, protect)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        clean_leftovers(out.parent, out.name)
        with _locked_temp(out, folder=True) as (tmp, fd):
            fill(tmp)
            files = sorted(p.relative_to(tmp).as_posix() for p in tmp.rglob("*") if p.is_file() and p.name != MARKER)
            os.write(fd, (_MARKER_HEADER + "".join(f"{f}\n" for f in files)).encode())
            os.chmod(tmp, 0o755)
            check_folder(out, force, protect)  # again: another run may have written it meanwhile
            if out.is_dir() and not out.is_symlink():
                exchange(tmp, out)
                shutil.rmtree(tmp)  # the old folder, now under the temporary name
            else:
                _rename_new(tmp, out)
    except InputError:
        raise
    except OSError as e:
        raise _destination_error(out, e) from None


def _rename_new(tmp: Path, target: Path) -> None:
    """Move tmp to target, which must still not exist: a run that wrote it meanwhile keeps it."""
    try:
        rename_new(tmp, target)
    except FileExistsError:
        raise InputError(f"{target}: was written by another run meanwhile; pass --force to replace it") from None


@contextlib.contextmanager
def write_file(path: Path, force: bool, protect: Iterable[str | os.PathLike],
               ours: Callable[[Path], bool] = lambda p: False) -> Iterator[IO[str]]:
    """Write a text file: yields a temporary file beside path, which replaces path whole once the
    block ends without error (see the module's rules)."""
    path = Path(path)
    protect = list(protect)
    check_file(path, force, protect, ours)
    try:
        clean_leftovers(path.parent)
        with _locked_temp(path, folder=False) as (tmp, fd):
            with open(fd, "w", encoding="utf-8", closefd=False) as f:
                yield f
            _move_into_place(tmp, path, force, protect, ours)
    except InputError:
        raise
    except OSError as e:
        raise _destination_error(path, e) from None


def _move_into_place(tmp: Path, path: Path, force: bool, protect: list, ours: Callable[[Path], bool]) -> None:
    """The written temporary onto `path`, checked again first (another process may have written it
    meanwhile): over what is there (a link is replaced, never followed), or only where nothing is."""
    check_file(path, force, protect, ours)
    if path.exists() or path.is_symlink():
        os.replace(tmp, path)
    else:
        _rename_new(tmp, path)


def write_files(fills: dict[Path, Callable[[Path], object]], force: bool, protect: Iterable[str | os.PathLike] = (),
                ours: Callable[[Path], bool] = lambda p: False) -> list[Path]:
    """Write files that belong together (a chart's PNG and SVG): every one checked (check_file)
    before any is written, each written by `fill(tmp)` into a temporary beside it and moved into
    place whole (a link at the destination is replaced, never what it points to). Returns the
    paths, in order."""
    paths = [Path(p) for p in fills]
    protect = list(protect)
    for path in paths:
        check_file(path, force, protect, ours)
    for path, fill in zip(paths, fills.values()):
        try:
            clean_leftovers(path.parent)
            with _locked_temp(path, folder=False) as (tmp, _fd):
                fill(tmp)
                _move_into_place(tmp, path, force, protect, ours)
        except InputError:
            raise
        except OSError as e:
            raise _destination_error(path, e) from None
    return paths
