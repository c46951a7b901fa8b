"""What `analyze` prints for a person: a verdict first, then tables (rich), on stdout."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.table import Table

from nsys_collective.analysis import Analysis
from nsys_collective.findings import dominant_straggler, findings
from nsys_collective.steps import per_step
from nsys_collective.units import ms_cell as _ms
from nsys_collective.units import us_cell as _us

WORST = 10


TEXT_COLUMNS = {"host", "report", "clock", "op", "comm", "cause", "kernel", "kernel or NVTX range", "confidence", "step", "top blocker"}


def _shorten(name: str, width: int = 60) -> str:
    return name if len(name) <= width else name[: width - 1] + "…"


def _table(title: str, columns: list[str]) -> Table:
    table = Table(title=title, title_justify="left", title_style="bold")
    for column in columns:
        table.add_column(column, justify="left" if column in TEXT_COLUMNS else "right")
    return table


def verdict(analysis: Analysis) -> list[str]:
    t, c = analysis.timing, analysis.collectives
    hosts = len({r.host for r in analysis.ranks})
    lines = [f"{len(analysis.ranks)} ranks on {hosts} host{'s' * (hosts != 1)}, {len(c)} collectives matched "
             f"in {len(c.communicators)} communicator{'s' * (len(c.communicators) != 1)}."]
    total_wait = int(t.wait_cost.sum())
    if len(c):
        lines.append(f"Ranks spent {_ms(total_wait)} ms of GPU time waiting for the last rank to arrive.")
    dominant = dominant_straggler(analysis)
    if dominant:
        rank, count, caused = dominant
        lines.append(f"Rank {rank} arrived last in {count} of {len(c)} collectives and cost the others "
                     f"{_ms(caused)} ms ({caused / total_wait:.0%} of all wait).")
    return lines + findings(analysis)


MAX_RANK_ROWS = 32


def _blocking(analysis: Analysis) -> Table | None:
    b = analysis.blocking
    if not (b.kernels or b.launches):
        return None
    table = _table("What made the stragglers late", ["rank", "cause", "kernel or NVTX range", "blamed ms", "wait inflicted ms", "collectives", "confidence"])
    rows = [(e["inflicted_wait_ns"], e["rank"], e["cause"], e["kernel"], e["blame_ns"], e["collectives"], e["confidence"]) for e in b.kernels]
    rows += [(e["inflicted_wait_ns"], e["rank"], "host_launch", e["nvtx"] or "-", e["blame_ns"], e["collectives"], e["confidence"]) for e in b.launches]
    for inflicted, rank, cause, what, blamed, count, confidence in sorted(rows, key=lambda r: -r[0])[:WORST]:
        table.add_row(str(rank), cause, _shorten(what), _ms(blamed), _ms(inflicted), str(count), confidence)
    if b.explained_wait_share is not None:
        table.caption = f"Explained: {b.explained_wait_share:.0%} of the wait; the rest is lateness no step of the GPU work explains."
    return table


def _contention(analysis: Analysis) -> Table | None:
    entries = analysis.contention.entries
    if not entries:
        return None
    table = _table("What slowed the transfers", ["kernel", "overlap ms", "slowdown ms", "SM footprint", "collectives"])
    for e in entries[:WORST]:
        table.add_row(_shorten(e["kernel"]), _ms(e["overlap_ns"]), _ms(e["contention_ns"]), f"{e['sm_footprint']:.2f}", str(e["collectives"]))
    return table


def _stragglers(analysis: Analysis) -> Table:
    t, c = analysis.timing, analysis.collectives
    table = _table("Stragglers", ["rank", "host", "last to arrive", "skew ms", "wait caused ms"])
    host_of = {r.rank: r.host for r in analysis.ranks}
    for rank in sorted(set(t.straggler.tolist()), key=lambda r: -t.wait_cost[t.straggler == r].sum())[:WORST]:
        mine = t.straggler == rank
        table.add_row(str(rank), host_of.get(rank) or "-", f"{int(mine.sum())} of {len(c)}",
                      _ms(int(t.skew[mine].sum())), _ms(int(t.wait_cost[mine].sum())))
    return table


def _steps(analysis: Analysis) -> Table | None:
    steps = per_step(analysis)
    if not steps:
        return None
    table = _table("Per step", ["step", "collectives", "wait ms", "transfer ms", "straggler", "top blocker", "its wait ms"])
    for st in steps:
        table.add_row(st["step"], str(st["collectives"]), _ms(st["wait_ns"]), _ms(st["transfer_ns"]),
                      "-" if st["top_straggler_rank"] is None else str(st["top_straggler_rank"]),
                      _shorten(st["top_blocker"] or "-", 50), _ms(st["top_blocker_wait_ns"]))
    return table


def _worst(analysis: Analysis) -> Table:
    t, c = analysis.timing, analysis.collectives
    table = _table(f"Worst collectives by wait (top {min(WORST, len(c))})",
                   ["id", "op", "comm", "seq", "ranks", "straggler", "skew ms", "wait ms", "transfer ms", "shortest ms"])
    for i in np.argsort(-t.wait_cost, kind="stable")[:WORST]:
        table.add_row(str(i), analysis.op_name(i), c.comm[i], str(c.seq[i]), str(c.nranks[i]), str(t.straggler[i]),
                      _ms(t.skew[i]), _ms(t.wait_cost[i]), _ms(t.transfer[i]), _ms(t.shortest_duration[i]))
    return table


def _alignment(analysis: Analysis) -> Table | None:
    a = analysis.alignment
    if a.spread_before is None:
        return None
    table = _table(f"Clock alignment ({a.method}, {a.instances_used} instances)", ["clock", "offset µs", "drift ppm"])
    for i, name in enumerate(a.clock_names[:MAX_RANK_ROWS]):
        table.add_row(name, _us(a.offset_ns[i]), f"{a.drift_ppm[i]:.2f}")
    b, f = a.spread_before, a.spread_after
    table.caption = (f"End-time spread p50/p95/max: before {_us(b.p50)}/{_us(b.p95)}/{_us(b.max)} µs, after "
                     f"{_us(f.p50)}/{_us(f.p95)}/{_us(f.max)} µs; causality violations {a.violations_before} -> {a.violations_after}."
                     + (f" ({len(a.clock_names) - MAX_RANK_ROWS} more clocks in --json)" if len(a.clock_names) > MAX_RANK_ROWS else ""))
    return table


def _ranks(analysis: Analysis) -> Table:
    a = analysis.alignment
    table = _table("Ranks", ["rank", "host", "report", "pid", "device", "kernels", "NCCL kernels", "NCCL ms", "clock offset µs"])
    for r in analysis.ranks[:MAX_RANK_ROWS]:
        offset = a.rank_offset_ns(r.rank) if analysis.clock_fitted(r.rank) else None
        table.add_row(str(r.rank), r.host or "-", Path(r.report).name, "-" if r.pid is None else str(r.pid),
                      "-" if r.device is None else str(r.device), f"{r.kernels:,}", f"{r.nccl_kernels:,}", _ms(r.nccl_time_ns), _us(offset))
    if len(analysis.ranks) > MAX_RANK_ROWS:
        table.caption = f"{len(analysis.ranks) - MAX_RANK_ROWS} more ranks in --json"
    return table


def render(analysis: Analysis) -> None:
    """The verdict first, then what blocked and what slowed the collectives, then the evidence."""
    # A pipe gets every column in full, not a table squeezed to 80 characters.
    out = Console(width=None if sys.stdout.isatty() else 240, highlight=False)
    for line in verdict(analysis):
        out.print(line)
    sections = [_blocking, _contention, _stragglers, _steps, _worst] if len(analysis.collectives) else []
    for section in sections + [_alignment, _ranks]:
        table = section(analysis)
        if table is not None:
            out.print(table)
