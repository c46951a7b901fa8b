"""The pure-Python reference reader: the standard `sqlite3` module, row by row.

It returns the same `Export` as the native reader and is the oracle the tests compare that reader
against, and the baseline of `scripts/bench_reader.py`. It reads the tables the native reader
declares (`_native.table_specs()`), so the two differ only in how they read, never in what, and it
applies the same rules (`crates/core/src/times.rs`): rows whose times are unusable are dropped and
counted. Written for clarity, not speed.
"""

from __future__ import annotations

import math
import os
import sqlite3
from pathlib import Path

import numpy as np

from nsys_collective import _native
from nsys_collective.errors import InputError
from nsys_collective.ingest.capture import NVTX_DOMAIN_CREATE, Export

MISSING = -1
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
ABSOLUTE_TIME_FLOOR = 10**18
CENTURY_NS = 100 * 365 * 86_400 * 10**9
CUPTI_INVALID = 0xFFFFFFFF
NSYS_TABLES = ("META_DATA_EXPORT", "EXPORT_META_DATA", "TARGET_INFO_SESSION_START_TIME", "StringIds")
TIMES = ("Start", "End", "OpenEnd")


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


class _Clock:
    """Stored times to absolute UTC ns: usable when non-negative, within int64 once the offset is
    added, and within a century of the session origin."""

    def __init__(self, offset: int, origin: int):
        self.offset, self.origin = offset, origin

    def absolute(self, stored: int) -> int | None:
        if stored < 0:
            return None
        t = stored + self.offset
        return t if t <= INT64_MAX and abs(t - self.origin) <= CENTURY_NS else None

    def span(self, start, end) -> tuple[int, int] | None:
        if not isinstance(start, int) or not isinstance(end, int):
            return None
        start, end = self.absolute(start), self.absolute(end)
        return (start, end) if start is not None and end is not None and start <= end else None


def _usable_origin(value) -> int | None:
    return value if isinstance(value, int) and 0 <= value <= INT64_MAX - CENTURY_NS else None


def _text(value) -> str:
    """Any stored value as text, as the native reader writes it (floats like Rust's Display)."""
    if value is None:
        return ""
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, float):
        return np.format_float_positional(value, trim="-")
    return str(value)


def _int(value: float) -> int:
    """A float as Rust's `as i64` makes it: truncated, saturated, NaN 0."""
    if math.isnan(value):
        return 0
    if math.isinf(value):
        return INT64_MAX if value > 0 else INT64_MIN
    return max(INT64_MIN, min(INT64_MAX, int(value)))


class _Payloads:
    """NVTX extended payload layouts by (domain, schema), as crates/core/src/payload.rs reads them."""

    HEADER, MAX_PAYLOAD, MAX_MESSAGE, LOW32 = 32, 1 << 20, 1 << 50, 0xFFFFFFFF
    INTEGERS = {**dict.fromkeys((1, 11), (1, True)), **dict.fromkeys((2, 12), (1, False)),
                **dict.fromkeys((3, 13), (2, True)), **dict.fromkeys((4, 14), (2, False)),
                **dict.fromkeys((5, 15), (4, True)), **dict.fromkeys((6, 16), (4, False)),
                **dict.fromkeys((7, 9, 17), (8, True)), **dict.fromkeys((8, 10, 18, 22), (8, False))}

    def __init__(self, conn, schema):
        self.layouts: dict[tuple[int, int], dict] = {}
        self.undecodable = 0
        entries = "NVTX_PAYLOAD_SCHEMA_ENTRIES"
        columns = ["domainId", "schemaId", "idx", "flags", "type", "name", "offset"]
        if not all(c in schema.get(entries, []) for c in columns):
            self.by_schema = {}
            return
        enums = {}
        if all(c in schema.get("NVTX_PAYLOAD_ENUMS", []) for c in ("domainId", "schemaId", "size")):
            for d, s, n in conn.execute("SELECT domainId, schemaId, size FROM NVTX_PAYLOAD_ENUMS"):
                if all(isinstance(v, int) for v in (d, s, n)) and n in (1, 2, 4, 8):
                    enums.setdefault((d, s), n)
        seen = set()
        for domain, sid, idx, flags, kind, name, offset in conn.execute(
                "SELECT " + ", ".join(f'"{c}"' for c in columns) + f" FROM {entries}"):
            if not all(isinstance(v, int) for v in (domain, sid, idx)) or domain < 0 or sid < 0 or (domain, sid, idx) in seen:
                continue
            seen.add((domain, sid, idx))
            layout = self.layouts.setdefault((domain, sid), {"size": None, "op": None})
            name = name.strip().lower() if isinstance(name, str) else ""
            if isinstance(offset, int) and offset >= 0:
                pass
            elif offset is None and idx == 0:
                offset = 0
            else:
                continue
            if (flags if isinstance(flags, int) else 0) != 0:
                continue
            kind = kind if isinstance(kind, int) else None
            if name.startswith("message size"):
                t = self.INTEGERS.get(kind)
                layout["size"] = (offset, *t) if t else None
            elif name == "reduction operation":
                t = self.INTEGERS.get(kind)
                if t is None and kind is not None and kind >= 1 << 24 and (domain, kind) in enums:
                    t = (enums[(domain, kind)], False)
                layout["op"] = (offset, *t) if t else None
        count: dict[int, int] = {}
        for _, sid in self.layouts:
            count[sid] = count.get(sid, 0) + 1
        self.by_schema = {sid: (layout if count[sid] == 1 else None) for (_, sid), layout in self.layouts.items()}

    def _layout(self, domain: int, sid: int):
        for key in ((domain, sid), (domain & self.LOW32, sid & self.LOW32)):
            if key in self.layouts:
                return self.layouts[key]
        for key in (sid, sid & self.LOW32):
            if key in self.by_schema:
                return self.by_schema[key]
        return None

    def decode(self, blob: bytes) -> tuple[int, int] | None:
        """(message size, reduction operation) of a blob, -1 where its schema has none; None: bad."""
        if len(blob) < self.HEADER:
            return None
        domain, sid, size = (int.from_bytes(blob[at:at + 8], "little") for at in (0, 8, 16))
        layout = self._layout(domain, sid)
        if layout is None or size > self.MAX_PAYLOAD or self.HEADER + size > len(blob):
            return None
        payload = blob[self.HEADER:self.HEADER + size]

        def read(field):
            offset, width, signed = field
            if offset + width > len(payload):
                return None
            raw = payload[offset:offset + width]
            return int.from_bytes(raw, "little"), signed and raw[-1] & 0x80 != 0

        nbytes = op = MISSING
        if layout["size"] is not None:
            got = read(layout["size"])
            if got is None or got[1] or got[0] > self.MAX_MESSAGE:
                return None
            nbytes = got[0]
        if layout["op"] is not None:
            got = read(layout["op"])
            if got is None:
                return None
            if not got[1] and got[0] <= INT64_MAX:
                op = got[0]
        return nbytes, op


def _convert(value, kind: str, clock: _Clock, strings: _Strings, payloads: _Payloads | None = None) -> int:
    if kind in ("PayloadBytes", "PayloadOp"):
        if not isinstance(value, (bytes, str)) or payloads is None:
            return MISSING
        decoded = payloads.decode(value.encode("utf-8") if isinstance(value, str) else value)
        if decoded is None:
            payloads.undecodable += kind == "PayloadBytes"
            return MISSING
        return decoded[0] if kind == "PayloadBytes" else decoded[1]
    if kind == "OptionalTime":
        t = clock.absolute(value) if isinstance(value, int) and value > 0 else None
        return MISSING if t is None else t
    if value is None or isinstance(value, bytes):
        return MISSING
    if isinstance(value, str):
        return strings.intern(value) if kind == "Text" else MISSING
    value = _int(value) if isinstance(value, float) else value
    if kind == "Pid":
        return (value >> 24) & 0xFFFFFF
    if kind == "Tid":
        return value & 0xFFFFFF
    if kind == "StringId":
        return strings.dense(value)
    if kind == "CuptiId" and value == CUPTI_INVALID:
        return MISSING
    if kind == "SyncId" and value in (0, CUPTI_INVALID):
        return MISSING
    if kind == "Text":
        return MISSING
    return value


def _read_table(conn, schema, spec, clock, strings, warnings, path, payloads=None) -> dict[str, np.ndarray]:
    name, tables, columns = spec
    table = next((t for t in tables if t in schema), None)
    sources = [next((s for s in srcs if table and s in schema[table]), None) for _, srcs, _ in columns]
    start_missing = table and next((srcs[0] for (_, srcs, kind), s in zip(columns, sources) if kind == "Start" and s is None), None)
    if start_missing:
        warnings.append(f"{table} has no '{start_missing}' column; skipped")
        table = None
    present = [i for i, s in enumerate(sources) if s is not None] if table else []
    kinds = [kind for _, _, kind in columns]
    start = next((j for j, i in enumerate(present) if kinds[i] == "Start"), None)
    end = next((j for j, i in enumerate(present) if kinds[i] in ("End", "OpenEnd")), None)
    values: list[list[int]] = [[] for _ in columns]
    dropped = 0
    if present:
        select = ", ".join(f'"{sources[i]}"' for i in present)
        for row in conn.execute(f'SELECT {select} FROM "{table}"'):  # row-major: interned text gets the native ids
            span = (0, 0)
            if start is not None:
                s = row[start]
                e = s if end is None else row[end]
                if e is None and end is not None and kinds[present[end]] == "OpenEnd":
                    e = s  # an instant (an NVTX mark)
                span = clock.span(s, e)
                if span is None:
                    dropped += 1
                    continue
            for j, i in enumerate(present):
                if kinds[i] == "Start":
                    values[i].append(span[0])
                elif kinds[i] in ("End", "OpenEnd"):
                    values[i].append(span[1])
                else:
                    values[i].append(_convert(row[j], kinds[i], clock, strings, payloads))
    n = len(values[present[0]]) if present else 0
    start_column = next((i for i in present if kinds[i] == "Start"), None)
    for i in range(len(columns)):
        if i not in present:
            ends = kinds[i] in ("End", "OpenEnd") and start_column is not None
            values[i] = list(values[start_column]) if ends else [MISSING] * n  # no end: instants
    if dropped:
        warnings.append(f"{name}: {dropped} rows dropped (NULL, non-integer, negative, reversed or out-of-range times)")
        if name == "kernels" and n == 0:
            raise InputError(
                f"{path}: none of its {dropped} kernel rows has usable times "
                "(NULL, non-integer, negative, reversed or out of range); export the report again"
            )
    out = {c[0]: np.array(v, dtype=np.int64) for c, v in zip(columns, values)}
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


def _link_event_records(sync: dict[str, np.ndarray], records: dict[str, np.ndarray]) -> None:
    """A wait's event record: the `cuda_event` row with the same event_sync_id (the first one)."""
    by_id: dict[int, tuple[int, int]] = {}
    for sid, correlation, stream in zip(records["event_sync_id"].tolist(), records["correlation"].tolist(), records["stream"].tolist()):
        if sid != MISSING:
            by_id.setdefault(sid, (correlation, stream))
    for i, sid in enumerate(sync["event_sync_id"].tolist()):
        if sid in by_id:
            sync["event_record_correlation"][i], sync["event_stream"][i] = by_id[sid]


def read_export(path: str | os.PathLike) -> Export:
    return Export.from_dict(read_raw(path), origin_is_capture_start=True)


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
    quoted = lambda name: name.replace('"', '""')  # noqa: E731
    schema = {
        t: [c[1] for c in conn.execute(f'PRAGMA table_info("{quoted(t)}")')]
        for (t,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")  # never views: they run SQL
    }
    if not any(t in schema for t in NSYS_TABLES):
        raise InputError(f"{path}: an SQLite file but not an Nsight Systems export (no nsys tables)")
    meta_table = next((t for t in ("META_DATA_EXPORT", "EXPORT_META_DATA") if t in schema), None)
    metadata = [(_text(k), _text(v)) for k, v in conn.execute(f'SELECT name, value FROM "{meta_table}"')] if meta_table else []
    env = "TARGET_INFO_SYSTEM_ENV"
    system_env = [(_text(k), _text(v)) for k, v in conn.execute(f"SELECT name, value FROM {env}")] if "name" in schema.get(env, []) else []
    capture = [(_text(k), _text(v)) for k, v in conn.execute("SELECT name, value FROM META_DATA_CAPTURE")] if "name" in schema.get("META_DATA_CAPTURE", []) else []
    lookup = lambda pairs, key: next((v for k, v in pairs if k == key), None)  # noqa: E731
    utc = None
    if "utcEpochNs" in schema.get("TARGET_INFO_SESSION_START_TIME", []):
        row = conn.execute("SELECT utcEpochNs FROM TARGET_INFO_SESSION_START_TIME LIMIT 1").fetchone()
        utc = _usable_origin(row[0]) if row else None
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
        query = f"SELECT start FROM \"{first}\" WHERE typeof(start) = 'integer' AND start >= 0 LIMIT 1"
        row = conn.execute(query).fetchone() if first and "start" in schema[first] else None
        time_normalized = bool(row) and row[0] >= ABSOLUTE_TIME_FLOOR
    if utc is None and not time_normalized:
        warnings.append("no session start time (TARGET_INFO_SESSION_START_TIME): times are relative to the session")
    clock = _Clock(offset=0 if time_normalized else (utc or 0), origin=utc or 0)

    string_rows = conn.execute("SELECT id, value FROM StringIds").fetchall() if "StringIds" in schema else []
    strings = _Strings([(i, _text(v)) for i, v in string_rows if isinstance(i, int)])
    try:
        payloads = _Payloads(conn, schema)
    except sqlite3.Error:
        payloads = None
    tables = {spec[0]: _read_table(conn, schema, spec, clock, strings, warnings, path, payloads)
              for spec in _native.table_specs()}
    if payloads is not None and payloads.undecodable:
        warnings.append(f"NVTX_EVENTS: {payloads.undecodable} NVTX payload blobs did not decode (shorter than their header "
                        "says, a value past their payload, an absurd size, or a schema the export does not declare): "
                        "their message sizes are unknown")
    tables["nvtx"] = _resolve_nvtx_names(tables["nvtx"])
    _link_event_records(tables["sync"], tables["cuda_event"])
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
