"""What `analyze` prints for a person: a verdict first, then tables (rich), on stdout.

Readable at 80 columns: kernel and NVTX names, the main output, are never cut. They sit in a column
beside the figures when the console leaves them room, else they are numbered and listed in full
under their table. Notes are printed as prose under a table, not as captions squeezed to its width.
"""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from rich import box
from rich.console import Console, Group, RenderableType
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

from nsys_collective.causes import table_label
from nsys_collective.glossary import ZERO_OVERLAP
from nsys_collective.render.names import distinct_names
from nsys_collective.result import AlignmentInfo, ContentionEntry, ContentionFit, Document, Result, WhatIfCause
from nsys_collective.units import count
from nsys_collective.units import duration as _d
from nsys_collective.render.text import break_name, longest_part, wrap

WORST = 10
MAX_RANK_ROWS = 32
# A name column sits beside the figures only when it gets at least this many characters (or all its
# names fit whole): narrower, a long name would take more lines than a list under the table.
NAME_MIN = 60
# A pipe (a file, `less`, grep) gets lines this wide: no table squeezed, no name split.
PIPE_WIDTH = 240
TEXT_COLUMNS = {"", "#", "where", "host", "report", "clock", "op", "comm", "cause", "kernel", "kernel or NVTX range",
                "confidence", "step", "top blocker", "job", "status", "top blocking kernel"}


def stdout_console() -> Console:
    """stdout for a person: the terminal's width; a pipe gets PIPE_WIDTH and prose on one line each."""
    if sys.stdout.isatty():
        return Console(highlight=False)
    return Console(width=PIPE_WIDTH, highlight=False, soft_wrap=True)


def prose(out: Console, text: str) -> str:
    """A sentence for the console: wrapped between words, a figure kept with its unit (rich would
    break '0 ms' apart); a pipe gets it on one line."""
    return text if out.soft_wrap else wrap(text, out.width)


def title_line(text: str) -> Text:
    """A table's title, on its own line after a blank one: a caption or title inside the table would
    wrap to the table's width."""
    return Text.assemble("\n", (text, "bold"))


def plain_table(out: Console, columns: list[str], rows: list[list[str]], fold: dict[str, int] | None = None) -> RenderableType:
    """A compact table: no vertical rules, no cell cut or wrapped but those of the `fold` columns
    ({column: its least width}: names, wrapped rather than cut); when the console is too narrow for
    the headers, their words are stacked, and if that is not enough the widest text cells (a host,
    a job) are broken where their parts meet ('ault43' / '.cscs.ch'), never inside a word."""
    fold = fold or {}
    one_line = sum(fold[c] if c in fold else max([len(c)] + [len(r[k]) for r in rows]) for k, c in enumerate(columns))
    stacked = one_line + 2 * (len(columns) - 1) > out.width
    table = _layout(columns, rows, fold, stacked)

    cells = rows

    def longest(k: int) -> int:
        return max(len(line) for r in rows for line in r[k].splitlines())

    def least(k: int) -> int:  # below it a word or a name's part would be cut
        return max([len(w) for w in columns[k].split()] + [longest_part(r[k]) for r in cells] + [fold.get(columns[k], 0)])

    breakable = [k for k, c in enumerate(columns) if (c in fold or stacked and c in TEXT_COLUMNS) and rows]
    while (over := _width(out, table) - out.width) > 0:
        shrinkable = [k for k in breakable if longest(k) > least(k)]
        if not shrinkable:
            break
        widest = max(shrinkable, key=longest)
        width = max(least(widest), longest(widest) - over)
        rows = [r[:widest] + [break_name(c[widest], width)] + r[widest + 1:] for r, c in zip(rows, cells)]
        table = _layout(columns, rows, fold, stacked)
    if stacked and len(columns) > 2 and _width(out, table) > out.width:
        # Still too wide (figures are never cut): the columns that do not fit continue in a second
        # table below, beside the first column again so its rows can be told apart.
        for k in range(len(columns) - 1, 1, -1):
            head = _layout(columns[:k], [r[:k] for r in rows], fold, stacked)
            if _width(out, head) <= out.width:
                rest = plain_table(out, columns[:1] + columns[k:], [r[:1] + r[k:] for r in rows], fold)
                return Group(head, Text(""), rest)
    return table


def _width(out: Console, renderable) -> int:
    """How wide a renderable is with no console limit."""
    return Measurement.get(out, out.options.update_width(10_000), renderable).maximum


def _layout(columns: list[str], rows: list[list[str]], fold: dict[str, int], stacked: bool) -> Table:
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, padding=(0, 1, 0, 0), header_style="bold")
    for column in columns:
        header = "\n".join(column.split()) if stacked else column
        justify = "left" if column in TEXT_COLUMNS else "right"
        if column in fold:
            table.add_column(header, justify=justify, min_width=fold[column], overflow="fold")
        else:
            table.add_column(header, justify=justify, no_wrap=True)
    for row in rows:
        table.add_row(*map(Text, row))  # names are data: a '[' is a bracket, not markup
    return table


def named_table(out: Console, title: str, columns: list[str], rows: list[list[str]], names: list[str],
                name_header: str, at: int = 1, list_below: bool = True, fold: dict[str, int] | None = None) -> list[RenderableType]:
    """A table whose rows are told apart by a name (a kernel, an NVTX range, a file): the name column
    is inserted at `at` when the console leaves it room; else the rows are numbered and the names
    listed in full under the table (or, with list_below=False, left to --json). `fold`: as plain_table."""
    fold = fold or {}
    figures = plain_table(out, columns, rows, fold)
    room = out.width - Measurement.get(out, out.options, figures).maximum - 2
    fit = max(min(NAME_MIN, max((len(n) for n in names), default=0)), *(len(w) for w in name_header.split()))
    if room >= fit:
        whole = min(room, max((len(n) for n in names), default=0))  # the names whole where they fit
        return [title_line(title), plain_table(out, columns[:at] + [name_header] + columns[at:],
                                               [r[:at] + [n] + r[at:] for r, n in zip(rows, names)], {**fold, name_header: max(fit, whole)})]
    if not list_below:
        return [title_line(title), figures]
    numbered = plain_table(out, ["#"] + columns, [[str(k + 1)] + r for k, r in enumerate(rows)], fold)
    legend = Table.grid(padding=(0, 1, 0, 0))
    legend.add_column(justify="right")
    legend.add_column(overflow="fold")
    for k, name in enumerate(names):
        legend.add_row(f"{k + 1}", Text(break_name(name, out.width - len(str(len(names))) - 1)))
    return [title_line(title), numbered, Text(f"{name_header}, by #:", style="dim"), legend]


def verdict(result: Result) -> list[str]:
    """The job, its total wait and dominant straggler, then the findings."""
    return list(result.evidence.verdict) + list(result.document.findings)


def _where(cause: WhatIfCause) -> str:
    """Where a cause acts, short: a cause on several hosts says how many (its name says which)."""
    if cause.rank is not None:
        return f"rank {cause.rank}"
    hosts = (cause.host or "").split(", ")
    return f"{len(hosts)} hosts" if len(hosts) > 1 else (cause.host or "all")


def _named(cause: WhatIfCause) -> str:
    """A cause's name in a table, with the hosts of a cause on several."""
    label = table_label(cause)
    return f"{label} on {cause.host}" if _where(cause).endswith(" hosts") else label


def wait_saved_text(ns: int) -> str:
    """A replayed saving of wait; a fix that moves wait to other ranks says so, never a negative saving."""
    return _d(ns) if ns >= 0 else f"adds {_d(-ns)}"


def _whatif(out: Console, document: Document) -> list[RenderableType]:
    w = document.whatif
    if not w or not w.causes:
        return []
    causes = w.causes[:WORST]
    # A rank-level cause's parts sit under it, indented.
    rows = [[("  └ " if c.parent is not None else "") + _where(c), c.cause, wait_saved_text(c.wait_saved_ns),
             _d(c.step_time_saved_ns), _d(c.excess_ns), str(c.collectives), c.confidence] for c in causes]
    names = distinct_names([_named(c) for c in causes], [c.name_full or table_label(c) for c in causes])
    shown = named_table(out, "What fixing each cause would save (replayed), most wait saved first",
                        ["where", "cause", "wait saved", "step time saved", "excess", "collectives", "confidence"],
                        rows, names, "kernel or NVTX range", at=2)
    f, ideal = w.fidelity, w.ideal
    more = f" {count(len(w.causes) - WORST, 'smaller cause')} in --json." if len(w.causes) > WORST else ""
    saved = ideal.wait_saved_ns
    wait = f"{_d(saved)} of wait saved" if saved >= 0 else f"no wait saved ({_d(-saved)} more: it moves to other ranks)"
    coverage = "" if w.coverage is None else f" (coverage: {w.coverage:.0%} of the wait)"
    per = "step time" if w.step_times else "the capture's time"
    adds = ("A cause that adds wait saves step time only: fixed alone, its rank would reach the collectives sooner "
            "and wait for another rank. " if any(c.wait_saved_ns < 0 for c in causes) else "")
    return shown + [f"{adds}Fixed together: {wait}{coverage}, {_d(ideal.step_time_saved_ns)} of {per}. "
                    f"Replay fidelity: {f.explained_start_share:.0%} of {count(f.ops, 'GPU op start')} explained by "
                    f"{f.recorded_dependencies:,} recorded and {f.inferred_dependencies:,} inferred dependencies.{more}"]


def _range(e: ContentionEntry) -> str:
    if e.contention_low_ns is None:
        return "-"
    return f"{_d(e.contention_low_ns)}-{_d(e.contention_high_ns)}"


def _contention(out: Console, document: Document) -> list[RenderableType]:
    entries = document.contention[:WORST]
    if not entries:
        return []
    rows = [[_d(e.overlap_ns), _d(e.contention_ns), _range(e), e.confidence or "-", str(e.collectives)] for e in entries]
    names = distinct_names([e.kernel for e in entries], [e.kernel_full or e.kernel for e in entries])
    shown = named_table(out, "What slowed the transfers", ["overlap", "transfer slowdown", "90% range", "confidence", "collectives"],
                        rows, names, "kernel", at=0)
    return shown + [_fit_note(document.contention_fit, document.contention)] if document.contention_fit else shown


def _compute_slowed(out: Console, document: Document) -> list[RenderableType]:
    """Compute kernels NCCL slowed, where the fit is confident."""
    entries = [e for e in document.compute_slowdown if e.confidence == "high"][:WORST]
    if not entries:
        return []
    rows = [[_d(e.slowed_ns), f"{_d(e.slowed_low_ns)}-{_d(e.slowed_high_ns)}", f"{e.slowdown:+.0%}",
             _d(e.step_time_saved_ns)] for e in entries]
    names = distinct_names([e.kernel for e in entries], [e.kernel_full or e.kernel for e in entries])
    return named_table(out, "What NCCL slowed (compute kernels beside NCCL kernels, fitted)",
                       ["NCCL added", "90% range", "compute slowdown", "step time saved"], rows, names, "kernel", at=0)


def _fit_note(fit: ContentionFit, entries: Sequence[ContentionEntry]) -> str:
    """How the slowdowns were measured, as prose under their table."""
    notes = [f"Fitted over {count(fit.collectives, 'collective')} in {count(fit.classes, 'class', 'classes')}: "
             "transfer time = its class's baseline + each kernel's coefficient x its overlap."]
    if any(e.contention_ns is None for e in entries):
        notes.append("'-': the kernel overlapped every transfer of its class alike (or ran through all of them), so its cost "
                     "cannot be told from the baseline.")
    if fit.not_distinguishable:
        notes.append("'0' with a range: the data cannot tell the kernel's effect from none (a partial F test); "
                     "the range is what the fit with it allowed.")
    if any(len(e.kernels) > 1 for e in entries):
        notes.append("'a + b': kernels that always overlapped together; the data cannot split them.")
    check = fit.clean_check
    if check:
        notes.append(f"The {count(check.instances, 'transfer')} nothing overlapped agree with the fitted baselines "
                     f"within {check.median_error:.2%} (median).")
    if not any(e.confidence == "high" for e in entries):
        notes.append("No figure is confident: overlapping compute did not measurably slow the transfers.")
    return " ".join(notes)


def _stragglers(out: Console, document: Document) -> list[RenderableType]:
    collectives = document.collectives
    host_of = {r.rank: r.host for r in document.ranks}
    caused, skew, last = Counter(), Counter(), Counter()
    for c in collectives:
        caused[c.straggler_rank] += c.wait_cost_ns
        skew[c.straggler_rank] += c.skew_ns
        last[c.straggler_rank] += 1
    rows = [[str(rank), host_of.get(rank) or "-", f"{last[rank]} of {len(collectives)}", _d(skew[rank]), _d(caused[rank])]
            for rank in sorted(caused, key=lambda r: (-caused[r], r))[:WORST]]
    return [title_line("Stragglers"), plain_table(out, ["rank", "host", "last to arrive", "skew", "wait caused"], rows)]


def _steps(out: Console, document: Document) -> list[RenderableType]:
    steps = document.steps
    if not steps:
        return []
    rows = [[st.step, _d(st.duration_ns), _share(st.wait_share), _share(st.idle_share), _d(st.wait_ns),
             "-" if st.top_straggler_rank is None else str(st.top_straggler_rank), _d(st.top_blocker_wait_ns)]
            for st in steps]
    return named_table(out, "Per step (waiting and idle: shares of the step's GPU time over all ranks)",
                       ["step", "time", "waiting", "idle", "wait", "straggler", "its wait"], rows,
                       [st.top_blocker or "-" for st in steps], "top blocker", at=6)


def _share(x: float | None) -> str:
    return "-" if x is None else f"{x:.0%}"


def _worst(out: Console, document: Document) -> list[RenderableType]:
    collectives = sorted(document.collectives, key=lambda c: -c.wait_cost_ns)[:WORST]
    rows = [[str(c.id), c.op, c.comm, str(c.ranks), str(c.straggler_rank), _d(c.skew_ns),
             _d(c.wait_cost_ns), _d(c.transfer_ns)] for c in collectives]
    return [title_line(f"Worst collectives by wait (top {len(collectives)})"),
            plain_table(out, ["id", "op", "comm", "ranks", "straggler", "skew", "wait", "transfer"], rows)]


def _alignment(out: Console, result: Result) -> list[RenderableType]:
    a = result.document.alignment
    b, f = a.end_spread_ns_before, a.end_spread_ns_after
    if b is None or f is None:
        return []
    clocks = result.evidence.clocks
    rows = [[name, _d(host.offset_ns), f"{host.drift_ppm:.2f}"] for name, host in zip(clocks[:MAX_RANK_ROWS], a.hosts)]
    title = title_line(alignment_title(a))
    table = plain_table(out, ["clock", "offset", "drift ppm"], rows)
    more = f" {count(len(clocks) - MAX_RANK_ROWS, 'more clock')} in --json." if len(clocks) > MAX_RANK_ROWS else ""
    return [title, table, f"End-time spread p50/p95/max: before {_d(b.p50)} / {_d(b.p95)} / {_d(b.max)}, "
                   f"after {_d(f.p50)} / {_d(f.p95)} / {_d(f.max)}; causality violations "
                   f"{a.violations_before} -> {a.violations_after}.{more}"]


def stopped_lines(document: Document) -> list[str]:
    """Per communicator whose ranks did not all reach its last operation: where each rank stopped,
    and which stopped earlier (what a hang or a mismatch needs first)."""
    lines = []
    for s in document.stopped:
        reached = sorted(s.reached, key=lambda r: (-r.operations, r.rank))
        by_point: dict[tuple[int, str], list[int]] = {}
        for r in reached:
            by_point.setdefault((r.operations, r.last_op), []).append(r.rank)
        where = ", ".join(f"{count(len(ranks), 'rank')} ({', '.join(map(str, ranks))}) reached operation {n} ({op})"
                          for (n, op), ranks in by_point.items())
        if s.communicator is None:
            lines.append(f"stream {'/'.join(map(str, s.streams))}: {where}, matching no other rank's operations.")
        else:
            lines.append(f"{s.communicator}: {where}; {'rank' if len(s.stopped_early) == 1 else 'ranks'} "
                         f"{', '.join(map(str, s.stopped_early))} stopped earlier.")
    return lines


def _stopped(out: Console, document: Document) -> list[RenderableType]:
    lines = stopped_lines(document)
    return [title_line("Where ranks stopped (not all reached the last operation)"), *lines] if lines else []


def alignment_title(a: AlignmentInfo) -> str:
    """How the clocks were aligned, in words: a fit on N collectives, or why none was needed."""
    if a.method == "none (one clock)":
        return "Clock alignment: none needed, every rank reads one clock"
    if a.method.startswith("none"):
        return "Clock alignment: none, no collective to fit the clocks on"
    return f"Clock alignment (fitted on {count(a.instances_used, 'collective')}, {a.method} method)"


def _ranks(out: Console, document: Document) -> list[RenderableType]:
    ranks = document.ranks[:MAX_RANK_ROWS]
    rows = [[str(r.rank), r.host or "-", "-" if r.pid is None else str(r.pid), "-" if r.device is None else str(r.device),
             f"{r.kernels:,}", f"{r.nccl_kernels:,}", _d(r.nccl_time_ns), _d(r.clock_offset_ns)] for r in ranks]
    shown = named_table(out, "Ranks", ["rank", "host", "pid", "device", "kernels", "NCCL kernels", "NCCL time", "clock offset"],
                        rows, [Path(r.report).name for r in ranks], "report", at=2, list_below=False)
    if len(document.ranks) > MAX_RANK_ROWS:
        shown.append(f"{count(len(document.ranks) - MAX_RANK_ROWS, 'more rank')} in --json.")
    return shown


def _idle(out: Console, document: Document) -> list[RenderableType]:
    """Where each rank's GPU sat idle (host not launching, waiting on a sync, other), the host's
    synchronize time and calls, and, as prose under the table, why overlap is zero where it is."""
    ranks = [r for r in document.ranks[:MAX_RANK_ROWS] if r.idle_ns is not None]
    if not ranks:
        return []
    rows = [[str(r.rank), _d(r.idle_ns), _d(r.idle_host_wait_ns), _d(r.idle_sync_wait_ns), _d(r.idle_other_ns),
             _d(r.host_sync_ns), "-" if r.host_sync_calls is None else f"{r.host_sync_calls:,}",
             "-" if r.overlap_share is None else f"{r.overlap_share:.0%}"] for r in ranks]
    shown = [title_line("GPU idle, host synchronization and overlap per rank"),
             plain_table(out, ["rank", "GPU idle", "host wait", "sync wait", "other", "host sync", "syncs", "overlap"], rows)]
    why: dict[str, list[str]] = {}
    for r in ranks:
        if r.zero_overlap_cause:
            why.setdefault(r.zero_overlap_cause, []).append(str(r.rank))
    for cause, which in why.items():
        words, fix = ZERO_OVERLAP[cause]
        shown.append(f"0% overlap on {count(len(which), 'rank')} ({', '.join(which)}): {words}" + (f"; {fix}." if fix else "."))
    return shown


def render(result: Result, console: Console | None = None) -> None:
    """The verdict first, then what blocked and what slowed the collectives, then the evidence."""
    out = console or stdout_console()
    document = result.document
    say = lambda line: out.print(prose(out, line), markup=False)  # noqa: E731
    for line in result.evidence.verdict:
        say(line)
    if document.findings:
        out.print()
    for line in document.findings:
        say(line)
    parts = (_whatif(out, document) + _contention(out, document) + _compute_slowed(out, document) + _stragglers(out, document)
             + _steps(out, document) + _worst(out, document) if document.collectives else [])
    for part in parts + _stopped(out, document) + _alignment(out, result) + _ranks(out, document) + _idle(out, document):
        say(part) if isinstance(part, str) else out.print(part)
    out.print("What each figure means: collectivetrace-nsys glossary", markup=False, style="dim")
