"""What an SQLite file is, read-only and without SQLAlchemy: an Nsight Systems export, our results
store, an empty database, or something else. Input discovery uses it so that our store is never
read as an input; the store uses it so that it never writes its tables into anything else."""

from __future__ import annotations

import os
import sqlite3
import stat
from pathlib import Path

# PRAGMA application_id of our stores ("CTst"), at offset 68 of the file's header.
STORE_APPLICATION_ID = 0x43547374
_HEADER = b"SQLite format 3\x00"
# Tables and columns only a results store has (store.schema).
_STORE_TABLES = {"runs", "alignment_hosts"}
_STORE_RUN_COLUMNS = {"job_path", "input_hash", "status", "document"}


def is_regular(path: str | Path) -> bool:
    """Whether path (links followed) is a regular file: the only kind of input opened."""
    try:
        return stat.S_ISREG(os.stat(path).st_mode)
    except (OSError, ValueError):
        return False


def complete_sqlite(path: str | Path) -> bool:
    """Whether an SQLite file holds every page its header counts (a write cut short does not;
    the native reader's own check, for files this tool writes itself)."""
    try:
        with open(path, "rb") as f:
            head = f.read(100)
            size = os.fstat(f.fileno()).st_size
    except OSError:
        return False
    if len(head) < 100 or not head.startswith(_HEADER):
        return False
    page_size = int.from_bytes(head[16:18], "big")
    page_size = 65536 if page_size == 1 else page_size
    counter, pages, valid_for = (int.from_bytes(head[at:at + 4], "big") for at in (24, 28, 92))
    # The in-header page count is trusted only when its change counter is current.
    return counter != valid_for or size >= page_size * pages


def sqlite_kind(path: str | Path) -> str:
    """'empty' (no bytes or no tables), 'store', 'nsys' (an Nsight Systems export), 'other' (an
    SQLite file with other tables), 'not-sqlite', or 'unreadable' (also a FIFO, device or folder:
    never opened, an open of a FIFO would block)."""
    path = Path(path)
    if not is_regular(path):
        return "unreadable"
    try:
        with open(path, "rb") as f:
            head = f.read(100)
    except OSError:
        return "unreadable"
    if not head:
        return "empty"
    if not head.startswith(_HEADER):
        return "not-sqlite"
    if head[68:72] == STORE_APPLICATION_ID.to_bytes(4, "big"):
        return "store"
    try:
        # Read-only, and immutable unless a writer has the file open in WAL mode: nothing is
        # created beside an export, not even the -wal and -shm files a WAL-mode file gets from a
        # plain read-only open; where both exist already (a store being written), the WAL holds
        # tables the file alone may not have yet (as_uri escapes '?', '%' and '#').
        live_wal = all(Path(f"{path}{suffix}").is_file() for suffix in ("-wal", "-shm"))
        mode = "mode=ro" if live_wal else "mode=ro&immutable=1"
        con = sqlite3.connect(f"{path.absolute().as_uri()}?{mode}", uri=True)
        try:
            tables = {name for (name,) in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            columns = {row[1] for row in con.execute("PRAGMA table_info(runs)")} if "runs" in tables else set()
        finally:
            con.close()
    except sqlite3.Error:
        return "unreadable"
    if not tables:
        return "empty"
    if _STORE_TABLES <= tables and _STORE_RUN_COLUMNS <= columns:
        return "store"
    if "StringIds" in tables or any(t.startswith(("CUPTI_ACTIVITY_", "TARGET_INFO_")) for t in tables):
        return "nsys"
    return "other"
