"""A result as flat tables, CSV and Parquet, for pandas, spreadsheets and SQL engines:
collectives, blame (one row per cause per collective), blocking, contention, ranks, steps."""

from __future__ import annotations

import csv
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from nsys_collective.result import Result


def _flat(row: dict, prefix: str = "") -> dict:
    """Nested dicts become prefixed columns; lists are left out (they have their own table)."""
    out = {}
    for key, value in row.items():
        if isinstance(value, dict):
            out.update(_flat(value, f"{prefix}{key}_"))
        elif not isinstance(value, list):
            out[f"{prefix}{key}"] = value
    return out


def rows(result: Result) -> dict[str, list[dict]]:
    """Each table's rows, as dicts."""
    doc = result.doc
    blame = [{"collective": c["id"], "op": c["op"], "cause": e["cause"], "rank": e["rank"], "host": e.get("host"), "ns": e["ns"],
              "wait_saved_ns": e["wait_saved_ns"], "step_time_saved_ns": e["step_time_saved_ns"],
              "kernel": e.get("kernel"), "kernel_full": e.get("kernel_full"), "nvtx": e.get("nvtx"), "name": e.get("name")}
             for c in doc["collectives"] for e in (c["blame"] or [])]
    # Every cause the what-if replayed, most wait saved first (as whatif.causes).
    blocking = list((doc.get("whatif") or {"causes": []})["causes"])
    return {
        "collectives": [_flat(c) for c in doc["collectives"]],
        "blame": blame,
        "blocking": [_flat(e) for e in blocking],
        "contention": [_flat(e) for e in doc["contention"]],
        "ranks": [_flat(r) for r in doc["ranks"]],
        "steps": [_flat(s) for s in doc["steps"]],
    }


def arrow_tables(result: Result) -> dict[str, pa.Table]:
    """The tables as pyarrow Tables, with every row's columns (rows of different kinds carry
    different fields: a kernel row no nvtx, a launch row no kernel), typed from their values."""
    out = {}
    for name, table_rows in rows(result).items():
        columns = dict.fromkeys(k for row in table_rows for k in row)
        out[name] = pa.table({c: [row.get(c) for row in table_rows] for c in columns})
    return out


# What a spreadsheet evaluates at the start of a cell (OWASP, CSV injection).
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def csv_cell(value):
    """A value as a CSV cell: text a spreadsheet would evaluate (a kernel named '=cmd|...') gets a
    leading ' so it stays text. CSV only: Parquet and JSON keep names exactly."""
    return "'" + value if isinstance(value, str) and value.startswith(_FORMULA_START) else value


def write_tables(result: Result, folder: Path) -> list[Path]:
    """Each table as folder/<name>.csv and .parquet."""
    written = []
    for name, table in arrow_tables(result).items():
        with open(folder / f"{name}.csv", "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=table.column_names)
            writer.writeheader()
            writer.writerows({k: csv_cell(v) for k, v in row.items()} for row in table.to_pylist())
        pq.write_table(table, folder / f"{name}.parquet")
        written += [folder / f"{name}.csv", folder / f"{name}.parquet"]
    return written
