"""What an SQLite file is, read-only and without SQLAlchemy: an Nsight Systems export, our results
store, an empty database, or something else. Input discovery uses it so that our store is never
read as an input; the store uses it so that it never writes its tables into anything else."""

from __future__ import annotations

import sqlite3
from pathlib import Path

# PRAGMA application_id of our stores ("CTst"), at offset 68 of the file's header.
STORE_APPLICATION_ID = 0x43547374
_HEADER = b"SQLite format 3\x00"
# Tables and columns only a results store has (store.schema).
_STORE_TABLES = {"runs", "alignment_hosts"}
_STORE_RUN_COLUMNS = {"job_path", "input_hash", "status", "document"}


def sqlite_kind(path: str | Path) -> str:
    """'empty' (no bytes or no tables), 'store', 'nsys' (an Nsight Systems export), 'other' (an
    SQLite file with other tables), 'not-sqlite', or 'unreadable'."""
    path = Path(path)
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
        # Read-only: nothing is created beside an export (as_uri escapes '?', '%' and '#').
        con = sqlite3.connect(f"{path.absolute().as_uri()}?mode=ro", uri=True)
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
