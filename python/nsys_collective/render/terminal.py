"""What `analyze` prints for a person: a verdict first, then tables (rich), on stdout."""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

from rich.console import Console
from rich.table import Table

from nsys_collective.result import Result
from nsys_collective.units import ms_cell as _ms
from nsys_collective.units import us_cell as _us

WORST = 10
MAX_RANK_ROWS = 32
TEXT_COLUMNS = {"host", "report", "clock", "op", "comm", "cause", "kernel", "kernel or NVTX range", "confidence", "step", "top blocker"}


def _shorten(name: str, width: int = 60) -> str:
    return name if len(name) <= width else name[: width - 1] + "…"


def _table(title: str, columns: list[str]) -> Table:
    table = Table(title=title, title_justify="left", title_style="bold")
    for column in columns:
        table.add_column(column, justify="left" if column in TEXT_COLUMNS else "right")
    return table


def verdict(result: Result) -> list[str]:
    """The job, its total wait and dominant straggler, then the findings."""
    return list(result.evidence.verdict) + result.doc["findings"]


def cause_label(cause: dict) -> str:
    """What a what-if cause is, in a table cell."""
    if cause["cause"] in ("host", "host_group"):
        return f"host in '{cause['name'] or 'no named range'}'"
    return cause["name"] or {"idle": "GPU idle, no dependency recorded"}.get(cause["cause"], cause["cause"])


def _whatif(doc: dict) -> Table | None:
    w = doc.get("whatif")
    if not w or not w["causes"]:
        return None
    table = _table("What fixing each cause would save (replayed)",
                   ["rank", "cause", "kernel or NVTX range", "excess ms", "wait saved ms", "per step ms", "collectives", "confidence"])
    for c in w["causes"][:WORST]:
        where = str(c["rank"]) if c["rank"] is not None else (c["host"] or "all")
        table.add_row(where, c["cause"], _shorten(cause_label(c)), _ms(c["excess_ns"]), _ms(c["wait_saved_ns"]),
                      _ms(c["step_time_saved_ns"]), str(c["collectives"]), c["confidence"])
    f, ideal = w["fidelity"], w["ideal"]
    table.caption = (f"All at once: {_ms(ideal['wait_saved_ns'])} ms of wait, {_ms(ideal['step_time_saved_ns'])} ms per step. "
                     f"Replay fidelity: {f['explained_start_share']:.0%} of {f['ops']:,} GPU op starts explained by "
                     f"{f['recorded_dependencies']:,} recorded and {f['inferred_dependencies']:,} inferred dependencies.")
    return table


def _contention(doc: dict) -> Table | None:
    entries = doc["contention"]
    if not entries:
        return None
    table = _table("What slowed the transfers", ["kernel", "overlap ms", "slowdown ms", "SM footprint", "collectives"])
    for e in entries[:WORST]:
        table.add_row(_shorten(e["kernel"]), _ms(e["overlap_ns"]), _ms(e["contention_ns"]), f"{e['sm_footprint']:.2f}", str(e["collectives"]))
    return table


def _stragglers(doc: dict) -> Table:
    collectives = doc["collectives"]
    table = _table("Stragglers", ["rank", "host", "last to arrive", "skew ms", "wait caused ms"])
    host_of = {r["rank"]: r["host"] for r in doc["ranks"]}
    caused, skew, count = Counter(), Counter(), Counter()
    for c in collectives:
        caused[c["straggler_rank"]] += c["wait_cost_ns"]
        skew[c["straggler_rank"]] += c["skew_ns"]
        count[c["straggler_rank"]] += 1
    for rank in sorted(caused, key=lambda r: (-caused[r], r))[:WORST]:
        table.add_row(str(rank), host_of.get(rank) or "-", f"{count[rank]} of {len(collectives)}", _ms(skew[rank]), _ms(caused[rank]))
    return table


def _steps(doc: dict) -> Table | None:
    if not doc["steps"]:
        return None
    table = _table("Per step", ["step", "collectives", "wait ms", "transfer ms", "straggler", "top blocker", "its wait ms"])
    for st in doc["steps"]:
        table.add_row(st["step"], str(st["collectives"]), _ms(st["wait_ns"]), _ms(st["transfer_ns"]),
                      "-" if st["top_straggler_rank"] is None else str(st["top_straggler_rank"]),
                      _shorten(st["top_blocker"] or "-", 50), _ms(st["top_blocker_wait_ns"]))
    return table


def _worst(doc: dict) -> Table:
    collectives = doc["collectives"]
    table = _table(f"Worst collectives by wait (top {min(WORST, len(collectives))})",
                   ["id", "op", "comm", "seq", "ranks", "straggler", "skew ms", "wait ms", "transfer ms", "shortest ms"])
    for c in sorted(collectives, key=lambda c: -c["wait_cost_ns"])[:WORST]:
        table.add_row(str(c["id"]), c["op"], c["comm"], str(c["seq"]), str(c["ranks"]), str(c["straggler_rank"]),
                      _ms(c["skew_ns"]), _ms(c["wait_cost_ns"]), _ms(c["transfer_ns"]), _ms(c["transfer_shortest_ns"]))
    return table


def _alignment(result: Result) -> Table | None:
    a = result.doc["alignment"]
    b, f = a["end_spread_ns_before"], a["end_spread_ns_after"]
    if b is None:
        return None
    clocks = result.evidence.clocks
    table = _table(f"Clock alignment ({a['method']}, {a['instances_used']} instances)", ["clock", "offset µs", "drift ppm"])
    for name, host in zip(clocks[:MAX_RANK_ROWS], a["hosts"]):
        table.add_row(name, _us(host["offset_ns"]), f"{host['drift_ppm']:.2f}")
    table.caption = (f"End-time spread p50/p95/max: before {_us(b['p50'])}/{_us(b['p95'])}/{_us(b['max'])} µs, after "
                     f"{_us(f['p50'])}/{_us(f['p95'])}/{_us(f['max'])} µs; causality violations {a['violations_before']} -> {a['violations_after']}."
                     + (f" ({len(clocks) - MAX_RANK_ROWS} more clocks in --json)" if len(clocks) > MAX_RANK_ROWS else ""))
    return table


def _ranks(doc: dict) -> Table:
    table = _table("Ranks", ["rank", "host", "report", "pid", "device", "kernels", "NCCL kernels", "NCCL ms", "clock offset µs"])
    for r in doc["ranks"][:MAX_RANK_ROWS]:
        table.add_row(str(r["rank"]), r["host"] or "-", Path(r["report"]).name, "-" if r["pid"] is None else str(r["pid"]),
                      "-" if r["device"] is None else str(r["device"]), f"{r['kernels']:,}", f"{r['nccl_kernels']:,}",
                      _ms(r["nccl_time_ns"]), _us(r["clock_offset_ns"]))
    if len(doc["ranks"]) > MAX_RANK_ROWS:
        table.caption = f"{len(doc['ranks']) - MAX_RANK_ROWS} more ranks in --json"
    return table


def render(result: Result, console: Console | None = None) -> None:
    """The verdict first, then what blocked and what slowed the collectives, then the evidence."""
    # A pipe gets every column in full, not a table squeezed to 80 characters.
    out = console or Console(width=None if sys.stdout.isatty() else 240, highlight=False)
    doc = result.doc
    for line in verdict(result):
        out.print(line)
    tables = [_whatif(doc), _contention(doc), _stragglers(doc), _steps(doc), _worst(doc)] if doc["collectives"] else []
    for table in tables + [_alignment(result), _ranks(doc)]:
        if table is not None:
            out.print(table)
