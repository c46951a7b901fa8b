"""The analysis as flat tables, CSV and Parquet, for pandas, spreadsheets and SQL engines:
collectives, blame (one row per cause per collective), blocking, contention, ranks, steps."""

from __future__ import annotations

import csv
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq


def _flat(row: dict, prefix: str = "") -> dict:
    """Nested dicts become prefixed columns; lists are left out (they have their own table)."""
    out = {}
    for key, value in row.items():
        if isinstance(value, dict):
            out.update(_flat(value, f"{prefix}{key}_"))
        elif not isinstance(value, list):
            out[f"{prefix}{key}"] = value
    return out


def tables(doc: dict) -> dict[str, list[dict]]:
    blame = [{"collective": c["id"], "op": c["op"], "cause": e["cause"], "rank": e["rank"], "ns": e["ns"],
              "kernel": e.get("kernel"), "kernel_full": e.get("kernel_full"), "nvtx": e.get("nvtx")}
             for c in doc["collectives"] for e in (c["blame"] or [])]
    blocking = [{"cause": e["cause"], **e} for e in doc["blocking_kernels"]]
    blocking += [{"cause": "host_launch", **e} for e in doc["blocking_launches"]]
    return {
        "collectives": [_flat(c) for c in doc["collectives"]],
        "blame": blame,
        "blocking": [_flat(e) for e in blocking],
        "contention": [_flat(e) for e in doc["contention"]],
        "ranks": [_flat(r) for r in doc["ranks"]],
        "steps": [_flat(s) for s in doc["steps"]],
    }


def write_tables(doc: dict, folder: Path) -> list[Path]:
    written = []
    for name, rows in tables(doc).items():
        columns = list(dict.fromkeys(k for row in rows for k in row))
        with open(folder / f"{name}.csv", "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=columns)
            writer.writeheader()
            writer.writerows(rows)
        # Columns are typed from their values; an all-null column is a null column.
        pq.write_table(pa.Table.from_pylist(rows, schema=None) if rows else pa.table({c: [] for c in columns}), folder / f"{name}.parquet")
        written += [folder / f"{name}.csv", folder / f"{name}.parquet"]
    return written
