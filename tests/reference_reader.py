"""The pure-Python reference reader: the standard `sqlite3` module, row by row.

It returns the same `Export` as the native reader and is the oracle the tests compare that reader
against, and the baseline of `scripts/bench_reader.py`. It reads the tables the native reader
declares (`_native.table_specs()`), so the two differ only in how they read, never in what.
Written for clarity, not speed.
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

import numpy as np

from nsys_collective import _native
from nsys_collective.errors import InputError
from nsys_collective.reader import NVTX_DOMAIN_CREATE, Export

MISSING = -1
NULL_TIME = np.iinfo(np.int64).min
ABSOLUTE_TIME_FLOOR = 10**18
NSYS_TABLES = ("META_DATA_EXPORT", "EXPORT_META_DATA", "TARGET_INFO_SESSION_START_TIME", "StringIds")


class _Strings:
    """StringIds as dense indices (ascending id order), plus interned inline text."""

    def __init__(self, rows: list[tuple[int, str]]):
        by_id = dict(sorted(rows, key=lambda r: r[0], reverse=True))  # first row of a repeated id wins
        self.ids = sorted(by_id)
        self.values = [by_id[i] for i in self.ids]
        self.dense_of = {sid: i for i, sid in enumerate(self.ids)}
        self.index: dict[str, int] | None = None

    def dense(self, sid: int) -> int:
        return self.dense_of.get(sid, MISSING)

    def intern(self, text: str) -> int:
        if self.index is None:
            self.index = {}
            for i, v in enumerate(self.values):
                self.index.setdefault(v, i)
        if text not in self.index:
            self.values.append(text)
            self.index[text] = len(self.values) - 1
        return self.index[text]


def _convert(value, kind: str, offset: int, strings: _Strings) -> int:
    if value is None:
        return NULL_TIME if kind == "Time" else MISSING
    if isinstance(value, str):
        return strings.intern(value) if kind == "Text" else MISSING
    if isinstance(value, bytes):
        return MISSING
    value = int(value)  # REAL values truncate, as in Rust's `as i64`
    if kind == "Time":
        return value + offset
    if kind == "Pid":
        return (value >> 24) & 0xFFFFFF
    if kind == "Tid":
        return value & 0xFFFFFF
    if kind == "StringId":
        return strings.dense(value)
    if kind == "Text":
        return MISSING
    return value


def _read_table(conn, schema, spec, offset, strings, warnings) -> dict[str, np.ndarray]:
    name, tables, columns = spec
    table = next((t for t in tables if t in schema), None)
    sources = [next((s for s in srcs if table and s in schema[table]), None) for _, srcs, _ in columns]
    if table is not None and any(c == "start" and s is None for (c, _, _), s in zip(columns, sources)):
        warnings.append(f"{table} has no 'start' column; skipped")
        table = None
    present = [i for i, s in enumerate(sources) if s is not None] if table else []
    values: list[list[int]] = [[] for _ in columns]
    rows = []
    if present:
        select = ", ".join(f'"{sources[i]}"' for i in present)
        rows = conn.execute(f'SELECT {select} FROM "{table}"').fetchall()
        for row in rows:  # row-major, so interned text gets the ids the native reader gives it
            for j, i in enumerate(present):
                values[i].append(_convert(row[j], columns[i][2], offset, strings))
    for i in range(len(columns)):
        if i not in present:
            values[i] = [MISSING] * len(rows)
    out = {c[0]: np.array(v, dtype=np.int64) for c, v in zip(columns, values)}
    if "start" in out and "end" in out:
        out["end"] = np.where(out["end"] == NULL_TIME, out["start"], out["end"])
    if "start" in out and np.any(np.diff(out["start"]) < 0):
        order = np.argsort(out["start"], kind="stable")
        out = {k: v[order] for k, v in out.items()}
    return out


def _resolve_nvtx_names(nvtx: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    name = np.where(nvtx["text"] != MISSING, nvtx["text"], nvtx["text_id"])
    creates = nvtx["type"] == NVTX_DOMAIN_CREATE
    domains = dict(zip(zip(nvtx["pid"][creates].tolist(), nvtx["domain"][creates].tolist()), name[creates].tolist()))
    domain_name = [domains.get(key, MISSING) for key in zip(nvtx["pid"].tolist(), nvtx["domain"].tolist())]
    out = {k: v for k, v in nvtx.items() if k not in ("text", "text_id")}
    ordered = list(out.items())
    ordered.insert(3, ("name", name))
    out = dict(ordered)
    out["domain_name"] = np.array(domain_name, dtype=np.int64)
    return out


def read_export(path: str | os.PathLike) -> Export:
    return Export.from_dict(read_raw(path))


def read_raw(path: str | os.PathLike) -> dict:
    """What the native `_native.read_exports` returns for one path: a dict of every declared table."""
    path = Path(path)
    if not path.is_file():
        raise InputError(f"{path}: no such file")
    uri = path.absolute().as_uri() + "?mode=ro&immutable=1"
    try:
        conn = sqlite3.connect(uri, uri=True)
        conn.text_factory = lambda b: b.decode("utf-8", "replace")
        conn.execute("PRAGMA mmap_size = 1099511627776")  # as the native reader: no page copies
        return _read(conn, path)
    except sqlite3.DatabaseError as e:
        raise InputError(f"{path}: unreadable SQLite export ({e})") from None


def _read(conn: sqlite3.Connection, path: Path) -> dict:
    schema = {
        t: [c[1] for c in conn.execute(f'PRAGMA table_info("{t}")')]
        for (t,) in conn.execute("SELECT name FROM sqlite_master WHERE type IN ('table', 'view')")
    }
    if not any(t in schema for t in NSYS_TABLES):
        raise InputError(f"{path}: an SQLite file but not an Nsight Systems export (no nsys tables)")
    as_text = lambda v: "" if v is None else v if isinstance(v, str) else str(v)  # noqa: E731
    meta_table = next((t for t in ("META_DATA_EXPORT", "EXPORT_META_DATA") if t in schema), None)
    metadata = [(as_text(k), as_text(v)) for k, v in conn.execute(f'SELECT name, value FROM "{meta_table}"')] if meta_table else []
    env = "TARGET_INFO_SYSTEM_ENV"
    system_env = [(as_text(k), as_text(v)) for k, v in conn.execute(f"SELECT name, value FROM {env}")] if "name" in schema.get(env, []) else []
    capture = [(as_text(k), as_text(v)) for k, v in conn.execute("SELECT name, value FROM META_DATA_CAPTURE")] if "name" in schema.get("META_DATA_CAPTURE", []) else []
    lookup = lambda pairs, key: next((v for k, v in pairs if k == key), None)  # noqa: E731
    utc = None
    if "utcEpochNs" in schema.get("TARGET_INFO_SESSION_START_TIME", []):
        row = conn.execute("SELECT utcEpochNs FROM TARGET_INFO_SESSION_START_TIME LIMIT 1").fetchone()
        utc = row[0] if row else None
    warnings: list[str] = []
    schema_version = lookup(metadata, "EXPORT_SCHEMA_VERSION")
    major = (schema_version or "").split(".")[0]
    if major.isdigit() and int(major) > _native.KNOWN_SCHEMA_MAJOR:
        warnings.append(
            f"export schema {schema_version} is newer than this reader knows "
            f"(up to {_native.KNOWN_SCHEMA_MAJOR}.x); columns were matched by name"
        )
    normalize = lookup(metadata, "EXPORT_PARAM_TIME_NORMALIZE")
    if normalize is not None:
        time_normalized = normalize.lower() == "true"
    else:
        first = next((t for t in ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_RUNTIME", "NVTX_EVENTS") if t in schema), None)
        row = conn.execute(f'SELECT start FROM "{first}" WHERE start IS NOT NULL LIMIT 1').fetchone() if first else None
        time_normalized = bool(row) and row[0] >= ABSOLUTE_TIME_FLOOR
    if utc is None and not time_normalized:
        warnings.append("no session start time (TARGET_INFO_SESSION_START_TIME): times are relative to the session")
    offset = 0 if time_normalized else (utc or 0)

    strings = _Strings(conn.execute("SELECT id, value FROM StringIds").fetchall() if "StringIds" in schema else [])
    tables = {spec[0]: _read_table(conn, schema, spec, offset, strings, warnings) for spec in _native.table_specs()}
    tables["nvtx"] = _resolve_nvtx_names(tables["nvtx"])
    return {
        "path": str(path),
        "session": {
            "nsys_version": lookup(metadata, "EXPORT_PRODUCT_VERSION"),
            "schema_version": schema_version,
            "time_normalized": time_normalized,
            "utc_epoch_ns": utc,
            "hostname": lookup(system_env, "Hostname"),
        },
        "metadata": metadata,
        "system_env": system_env,
        "capture": capture,
        "strings": strings.values,
        "warnings": warnings,
        **tables,
    }


def read_exports(paths, threads: int | None = None) -> list[Export]:
    """Same signature as the native `read_exports`; always one file at a time."""
    return [read_export(p) for p in paths]
