"""A result as flat tables, CSV and Parquet, for pandas, spreadsheets and SQL engines:
collectives, blame (one row per cause per collective), blocking, contention, ranks, steps."""

from __future__ import annotations

import csv
from dataclasses import fields, is_dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from nsys_collective.result import Blame, Collective, Result


def _flat(record, prefix: str = "") -> dict:
    """A record of the document as one row: its fields in order, nested records and mappings as
    prefixed columns (`gpu_metrics_sm_active`); lists are left out (they have their own table)."""
    out = {}
    items = ((f.name, getattr(record, f.name)) for f in fields(record)) if is_dataclass(record) else record.items()
    for key, value in items:
        if is_dataclass(value) or isinstance(value, dict):
            out.update(_flat(value, f"{prefix}{key}_"))
        elif not isinstance(value, (tuple, list)):
            out[f"{prefix}{key}"] = value
    return out


def _blame_row(c: Collective, e: Blame) -> dict:
    """One cause of one collective: the collective, then the entry's fields (each family names its
    cause by its own fields; the others are empty in the table)."""
    return {"collective": c.id, "op": c.op, **_flat(e)}


def rows(result: Result) -> dict[str, list[dict]]:
    """Each table's rows, as dicts."""
    document = result.document
    # Every cause the what-if replayed, most wait saved first (as whatif.causes).
    blocking = document.whatif.causes if document.whatif else ()
    return {
        "collectives": [_flat(c) for c in document.collectives],
        "blame": [_blame_row(c, e) for c in document.collectives for e in c.blame],
        "blocking": [_flat(e) for e in blocking],
        "contention": [_flat(e) for e in document.contention],
        "ranks": [_flat(r) for r in document.ranks],
        "steps": [_flat(s) for s in document.steps],
    }


def _fields(spec: str, kind) -> list[pa.Field]:
    return [pa.field(name, kind) for name in spec.split()]


_I, _S, _F = pa.int64(), pa.string(), pa.float64()
# Each table's columns and types: an empty table keeps its header (CSV) and schema (Parquet), and a
# column null in every row keeps its type. Columns a result adds beyond these follow, typed from
# their values.
SCHEMAS = {
    "collectives": pa.schema(
        _fields("id", _I) + _fields("comm", _S) + _fields("seq", _I) + _fields("op", _S)
        + _fields("bytes ranks start_ns last_arrival_ns straggler_rank skew_ns wait_cost_ns transfer_ns transfer_shortest_ns", _I)
        + _fields("busbw_gbps", _F) + _fields("blame_method", _S) + _fields("compute_overlap_ns", _I) + _fields("sm_pressure", _F)
        + _fields("baseline_transfer_ns contention_excess_ns", _I) + _fields("gpu_metrics_sm_active gpu_metrics_nvlink gpu_metrics_pcie", _F)
        + _fields("step", _S)),
    "blame": pa.schema(_fields("collective", _I) + _fields("op cause", _S) + _fields("rank", _I) + _fields("host", _S)
                       + _fields("ns wait_saved_ns step_time_saved_ns", _I) + _fields("kernel kernel_full nvtx name", _S)),
    "blocking": pa.schema(_fields("cause", _S) + _fields("rank", _I) + _fields("host name reference", _S)
                          + _fields("excess_ns wait_saved_ns step_time_saved_ns collectives", _I) + _fields("confidence name_full", _S)
                          + _fields("slowdown", _F) + _fields("runs reference_runs", _I)),
    "contention": pa.schema(_fields("kernel kernel_full", _S) + _fields("rank overlap_ns contention_ns", _I)
                            + _fields("sm_footprint", _F) + _fields("collectives", _I)),
    "ranks": pa.schema(_fields("rank", _I) + _fields("host", _S) + _fields("pid device", _I) + _fields("report rank_source", _S)
                       + _fields("clock_offset_ns", _I) + _fields("clock_drift_ppm", _F)
                       + _fields("kernels nccl_kernels nccl_time_ns compute_overlap_ns", _I) + _fields("overlap_share", _F)
                       + _fields("first_ns last_ns", _I)),
    "steps": pa.schema(_fields("step", _S) + _fields("collectives first_ns wait_ns transfer_ns top_straggler_rank", _I)
                       + _fields("top_blocker", _S) + _fields("top_blocker_rank top_blocker_wait_ns duration_ns", _I)
                       + _fields("wait_share idle_share", _F)),
}


def arrow_tables(result: Result) -> dict[str, pa.Table]:
    """The tables as pyarrow Tables: the columns of SCHEMAS, then any other column a row carries
    (rows of different kinds carry different fields: a kernel row no nvtx, a launch row no kernel)."""
    out = {}
    for name, table_rows in rows(result).items():
        schema = SCHEMAS[name]
        extra = [c for c in dict.fromkeys(k for row in table_rows for k in row) if c not in schema.names]
        columns = {f.name: pa.array([row.get(f.name) for row in table_rows], type=f.type) for f in schema}
        columns.update({c: pa.array([row.get(c) for row in table_rows]) for c in extra})
        out[name] = pa.table(columns)
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
