"""What `analyze` prints for a person: a verdict first, then tables (rich), on stdout."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.table import Table

from nsys_collective.analysis import Analysis
from nsys_collective.findings import dominant_straggler, findings

WORST = 10


def _ms(ns) -> str:
    return "-" if ns is None else f"{ns / 1e6:,.3f}"


def _us(ns) -> str:
    return "-" if ns is None else f"{ns / 1e3:,.1f}"


TEXT_COLUMNS = {"host", "report", "clock", "op", "comm", "cause", "kernel", "kernel or NVTX range", "confidence"}


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


def render(analysis: Analysis) -> None:
    # A pipe gets every column in full, not a table squeezed to 80 characters.
    out = Console(width=None if sys.stdout.isatty() else 240, highlight=False)
    for line in verdict(analysis):
        out.print(line)
    a, t, c = analysis.alignment, analysis.timing, analysis.collectives

    ranks = _table("Ranks", ["rank", "host", "report", "pid", "device", "kernels", "NCCL kernels", "NCCL ms", "clock offset µs"])
    for r in analysis.ranks:
        offset = a.rank_offset_ns(r.rank) if analysis.clock_fitted(r.rank) else None
        ranks.add_row(str(r.rank), r.host or "-", Path(r.report).name, "-" if r.pid is None else str(r.pid),
                      "-" if r.device is None else str(r.device), f"{r.kernels:,}", f"{r.nccl_kernels:,}", _ms(r.nccl_time_ns), _us(offset))
    out.print(ranks)

    if a.spread_before is not None:
        align = _table(f"Clock alignment ({a.method}, {a.instances_used} instances)", ["clock", "offset µs", "drift ppm"])
        for i, name in enumerate(a.clock_names):
            align.add_row(name, _us(a.offset_ns[i]), f"{a.drift_ppm[i]:.2f}")
        out.print(align)
        b, f = a.spread_before, a.spread_after
        out.print(f"End-time spread p50/p95/max: before {_us(b.p50)}/{_us(b.p95)}/{_us(b.max)} µs, after "
                  f"{_us(f.p50)}/{_us(f.p95)}/{_us(f.max)} µs; causality violations {a.violations_before} -> {a.violations_after}.")
    if not len(c):
        return

    stragglers = _table("Stragglers", ["rank", "host", "last to arrive", "skew ms", "wait caused ms"])
    host_of = {r.rank: r.host for r in analysis.ranks}
    for rank in sorted(set(t.straggler.tolist()), key=lambda r: -t.wait_cost[t.straggler == r].sum()):
        mine = t.straggler == rank
        stragglers.add_row(str(rank), host_of.get(rank) or "-", f"{int(mine.sum())} of {len(c)}",
                           _ms(int(t.skew[mine].sum())), _ms(int(t.wait_cost[mine].sum())))
    out.print(stragglers)

    b = analysis.blocking
    if b.kernels or b.launches:
        blocking = _table("What made the stragglers late", ["rank", "cause", "kernel or NVTX range", "blamed ms", "wait inflicted ms", "collectives", "confidence"])
        rows = [(e["inflicted_wait_ns"], e["rank"], e["cause"], e["kernel"], e["blame_ns"], e["collectives"], e["confidence"]) for e in b.kernels]
        rows += [(e["inflicted_wait_ns"], e["rank"], "host_launch", e["nvtx"] or "-", e["blame_ns"], e["collectives"], e["confidence"]) for e in b.launches]
        for inflicted, rank, cause, what, blamed, count, confidence in sorted(rows, key=lambda r: -r[0])[:WORST]:
            blocking.add_row(str(rank), cause, _shorten(what), _ms(blamed), _ms(inflicted), str(count), confidence)
        out.print(blocking)
        if b.explained_wait_share is not None:
            out.print(f"Explained: {b.explained_wait_share:.0%} of the wait (the rest is unexplained lateness).")
    ct = analysis.contention
    if ct.entries:
        contention = _table("What slowed the transfers", ["kernel", "overlap ms", "slowdown ms", "SM footprint", "collectives"])
        for e in ct.entries[:WORST]:
            contention.add_row(_shorten(e["kernel"]), _ms(e["overlap_ns"]), _ms(e["contention_ns"]), f"{e['sm_footprint']:.2f}", str(e["collectives"]))
        out.print(contention)

    worst = _table(f"Worst collectives by wait (top {min(WORST, len(c))})",
                   ["id", "op", "comm", "seq", "ranks", "straggler", "skew ms", "wait ms", "transfer ms", "shortest ms"])
    for i in np.argsort(-t.wait_cost, kind="stable")[:WORST]:
        worst.add_row(str(i), analysis.op_name(i), c.comm[i], str(c.seq[i]), str(c.nranks[i]), str(t.straggler[i]),
                      _ms(t.skew[i]), _ms(t.wait_cost[i]), _ms(t.transfer[i]), _ms(t.shortest_duration[i]))
    out.print(worst)
