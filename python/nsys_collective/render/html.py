"""One self-contained HTML report of a result: verdict, key numbers, charts, tables.

Everything is inside the file (CSS inline, charts as base64 SVG data URIs, no fonts, scripts or
fetches), so it can be mailed, attached to a ticket or opened offline. The page is the Jinja2
template templates/report.html.j2, autoescaped; this module only prepares its context. Kernel
names are shortened as the terminal shortens them (render/names.py: kernels that share a short
name in one table are told apart), with the full name in a title, and may break only between
their parts (after '::', '_', ',' or '/', before '<', '(' or '.'), never inside a word.
"""

from __future__ import annotations

import base64
import re
from collections import Counter
from functools import cache
from pathlib import Path

from jinja2 import Environment, PackageLoader, select_autoescape
from markupsafe import Markup

from nsys_collective.render.names import clock_label, distinct_names, method_words, short_name
from nsys_collective.render.terminal import stopped_lines, verdict, wait_saved_text
from nsys_collective.result import AlignmentInfo, Blame, Document, Result
from nsys_collective import causes as cause_kinds, glossary
from nsys_collective.units import count
from nsys_collective.units import duration as _d

MAX_CAUSES = 30
MAX_CONTENTION = 20
WORST = 20
LONG_WORD = 24  # a word this long in prose is a name: it may break between its parts
CHARTS = {
    "blocking": ("What made the collectives wait",
                 "The causes the replay found (kernels, host ranges, slow transfers, idle gaps), by the wait fixing each "
                 "would save (GPU time), stacked by the rank or host it is on; the label says how much of it is high confidence.",
                 "No chart of causes: no cause the replay tried would save wait."),
    "timeline": ("The worst collectives, rank by rank",
                 "The collectives with the highest wait cost on the aligned clock: each rank's GPU work, its NCCL kernel "
                 "split into waiting (hatched) and transfer (blue), and the blamed cause in red.",
                 "No timeline: no collective was matched across ranks."),
    "wait_heatmap": ("Who waited where",
                     "Each rank's wait for the last rank in each collective; circles mark the straggler (last to arrive).",
                     "No chart of waits: no collective ran on two ranks or more."),
    "transfer_vs_overlap": ("Did compute slow the transfers",
                            "Per kernel of the most contention: each collective's overlap with it against its transfer time "
                            "less its class's fitted baseline and the other kernels' share; the red line is the contention "
                            "fit (coefficient x overlap), so points on it are explained and a flat line means no slowdown.",
                            None),  # its sentence depends on the fit: _no_contention_chart
    "alignment": ("Clock alignment",
                  "End-time spread of each collective across ranks before and after aligning the clocks (log scale), "
                  "and the offset fitted for each clock.",
                  "No chart of the clocks: no collective ran on two ranks or more."),
}


@cache
def _environment() -> Environment:
    env = Environment(loader=PackageLoader("nsys_collective.render", "templates"), autoescape=select_autoescape(["j2"]),
                      trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True)
    env.globals["zip"] = zip
    env.globals["count"] = count
    env.filters["breakable"] = breakable
    return env


def _pct(share) -> str:
    return "-" if share is None else f"{share:.0%}"


# Where a name may break: after '::', '_', ',', '/', '-' or '…', before '<', '(', '{', '…' or '.' (a host's labels),
# each between a word and the next, never inside a run of separators ('__next__').
_BREAKS = re.compile(r"(?<=::)(?=[^:\s])|(?<=[_,/\-…])(?=[A-Za-z0-9{<])|(?<=[A-Za-z0-9>])(?=[<(.…{])")


def name_parts(name: str) -> list[str]:
    """A name cut at the places a line may end inside it (the template joins them with <wbr>)."""
    return [p for p in _BREAKS.split(name) if p]


# The space between a figure and its unit ('968 µs'): no line ends there.
_FIGURE_UNIT = re.compile(r"(?<=\d) (?=(?:ns|µs|us|ms|s|MB|GB|GB/s|ppm)\b)")


def breakable(text: str) -> Markup:
    """Prose whose long words (kernel names, paths) may break between their parts, and whose
    figures stay beside their units, escaped."""
    text = _FIGURE_UNIT.sub("\u00a0", str(text))
    return Markup("").join(Markup("<wbr>").join(name_parts(word)) if len(word) > LONG_WORD else word
                           for word in re.split(r"([ \t\n]+)", text) if word)


def _name(short: str | None, full: str | None = None, width: int = 120) -> dict:
    """A kernel or NVTX name cell: shortened for the table, the full name in the tooltip."""
    full = full or short
    if not full:
        return {"empty": True}
    shown = short_name(short or full, width)
    return {"name": shown, "parts": name_parts(shown), "title": full}


def _names(names: list[tuple[str | None, str | None]], width: int = 120) -> list[dict]:
    """Name cells of one table column: (short, full) each, where different full names that share
    a short one are told apart (names.distinct_names), as the terminal's tables do."""
    shown = distinct_names([short_name(short or full, width) if (short or full) else "" for short, full in names],
                           [full or short or "" for short, full in names])
    return [_name(label, full or short, max(width, len(label))) if (short or full) else {"empty": True}
            for label, (short, full) in zip(shown, names)]


def _table(headers: list[str], rows: list[list], numeric: set[str] = frozenset(), total: int | None = None) -> dict:
    return {"headers": headers, "rows": rows, "numeric": set(numeric), "total": len(rows) if total is None else total}


def write_report(result: Result, charts: dict[str, list[Path]], path: Path) -> None:
    """Write the report of a result (with its charts, render.charts) to `path`."""
    Path(path).write_text(render(result, charts), encoding="utf-8")


def render(result: Result, charts: dict[str, list[Path]]) -> str:
    doc = result.document
    s = doc.summary
    hosts = len({r.host for r in doc.ranks if r.host})
    where = f"on {count(hosts, 'host')}" if hosts else "(no host recorded)"
    title = f"{count(s.ranks, 'rank')} {where}, {count(s.collectives, 'collective')}"
    lines, found = verdict(result), set(doc.findings)
    a = doc.alignment
    context = {
        "title": title, "tool_version": doc.tool_version, "inputs": doc.inputs,
        "css": (Path(__file__).parent / "templates" / "report.css").read_text(),
        # The first line is the job summary, already in the title.
        "verdict_plain": [line for line in lines[1:] if line not in found],
        "verdict_listed": [line for line in lines if line in found],
        "cards": _cards(doc),
        "figures": _figures(charts, doc),
        "blocking": _blocking(doc), "fidelity": _fidelity(doc), "contention": _contention(doc), "contention_check": _contention_check(doc), "slowdown": _slowdown(doc),
        "stragglers": _stragglers(doc), "steps": _steps(doc), "worst": _worst(doc), **_ranks(doc),
        "alignment": a, "alignment_words": _alignment_words(a), "clocks_heading": _clocks_heading(a),
        "spread": _spread(a), "clocks": _clocks(a), "warnings": doc.warnings, "stopped": stopped_lines(doc),
        "alignment_issues": [ALIGNMENT_ISSUES.get(i, i) for i in (a.quality.issues if a.quality else ())],
        "glossary": glossary.TERMS,
    }
    return _environment().get_template("report.html.j2").render(context)


def _cards(doc: Document) -> list[dict]:
    s = doc.summary
    straggler = s.top_straggler_rank
    caused = sum(c.wait_cost_ns for c in doc.collectives if c.straggler_rank == straggler) if straggler is not None else 0
    top = s.top_cause
    where = cause_kinds.where(top) if top else ""
    return [
        {"label": "Total wait", "value": _d(s.wait_ns), "note": "GPU time spent waiting for the last rank"},
        {"label": "Avoidable", "value": _d(s.avoidable_wait_ns),
         "note": f"coverage: {_pct(s.explained_wait_share)} of the wait, the causes found fixed together, replayed"}
        if (s.avoidable_wait_ns or 0) > 0 else
        {"label": "Avoidable", "value": "none found",
         "note": "fixing the causes found together would not shorten the wait: it moves it to other ranks"
                 if s.avoidable_wait_ns is not None else "no replay: nothing to attribute"},
        {"label": "GPU transfer", "value": _d(s.transfer_ns), "note": "each collective's transfer summed over its ranks"},
        {"label": "Top straggler", "value": "-" if straggler is None else f"rank {straggler}",
         "note": f"caused {_d(caused)} of wait" if straggler is not None else "no rank stands out"},
        {"label": "Top cause", "value": _name(cause_kinds.table_label(top), top.name_full, 60), "small": True,
         "note": f"{cause_kinds.of(top.cause).label} on {where}: fixing it saves {_d(top.wait_saved_ns)} of wait, "
                 f"{_d(top.step_time_saved_ns)} of step time ({top.confidence} confidence)"} if top else
        {"label": "Top cause", "value": "none", "note": "nothing the replay tried saves wait", "small": True},
    ]


def _figures(charts: dict[str, list[Path]], doc: Document) -> list[dict]:
    """Each chart as an SVG (sharp at any width the page scales it to), or the sentence that says
    why it has nothing to show: never an empty chart."""
    if not doc.collectives:
        return []
    figures = []
    for name, (heading, caption, none) in CHARTS.items():
        svg = next((p for p in charts.get(name, []) if Path(p).suffix == ".svg"), None)
        if svg is not None:  # the chart carries its own title: the caption says how to read it
            figures.append({"name": name, "heading": heading, "caption": caption,
                            "data": base64.b64encode(Path(svg).read_bytes()).decode("ascii")})
        else:
            figures.append({"name": name, "heading": heading, "none": none or _no_contention_chart(doc)})
    return figures


def _no_contention_chart(doc: Document) -> str:
    """Why there is no chart of transfers against overlap, in the fit's words."""
    if not any(e.overlap_ns for e in doc.contention):
        return "No chart of transfers against compute: no compute kernel overlapped any transfer."
    return ("No chart of transfers against compute: the contention fit finds no kernel that measurably slowed "
            "the transfers it overlapped (see Contention below).")


def _blocking(doc: Document) -> dict:
    total = doc.summary.wait_ns
    causes = doc.whatif.causes if doc.whatif else ()
    rows = []
    entries = causes[:MAX_CAUSES]
    names = _names([(cause_kinds.table_label(entry), e.name_full) for e, entry in zip(causes, entries)])
    for e, entry, name in zip(causes, entries, names):
        runs = "-" if e.runs is None else f"{e.runs} vs {e.reference_runs}" if e.reference_runs is not None else f"{e.runs}"
        longer = "-" if e.slowdown is None else f"{e.slowdown:+.1%}"
        # A rank-level cause's parts sit under it, marked.
        where = ("└ " if e.parent is not None else "") + cause_kinds.where(entry, job_wide="all")
        rows.append([{"nowrap": where}, e.cause, name, _d(e.excess_ns), wait_saved_text(e.wait_saved_ns),
                     _pct(e.wait_saved_ns / total if total and e.wait_saved_ns > 0 else None), _d(e.step_time_saved_ns),
                     e.collectives, longer, runs, {"confidence": e.confidence}])
    headers = ["where", "cause", "kernel or NVTX range", "excess", "wait saved", "share of wait", "step time saved",
               "collectives", "longer by", "runs vs reference", "confidence"]
    return _table(headers, rows, {"excess", "wait saved", "share of wait", "step time saved", "collectives", "longer by",
                                  "runs vs reference"}, total=len(causes))


def _steps(doc: Document) -> dict:
    blockers = _names([(st.top_blocker, st.top_blocker) for st in doc.steps], 60)
    rows = [[st.step, _d(st.duration_ns), _pct(st.wait_share), _pct(st.idle_share), _d(st.wait_ns),
             "-" if st.top_straggler_rank is None else f"rank {st.top_straggler_rank}", blocker,
             _d(st.top_blocker_wait_ns)] for st, blocker in zip(doc.steps, blockers)]
    return _table(["step", "duration", "waiting", "idle", "wait", "straggler", "top blocker", "its wait"], rows,
                  {"duration", "waiting", "idle", "wait", "its wait"})


def _fidelity(doc: Document) -> str | None:
    w = doc.whatif
    if not w:
        return None
    f, ideal = w.fidelity, w.ideal
    coverage = f" ({w.coverage:.0%} of the wait: the coverage)" if w.coverage is not None else ""
    return (f"The causes found, fixed together, would save {_d(ideal.wait_saved_ns)} of wait{coverage} and "
            f"{_d(ideal.step_time_saved_ns)} of step time. Replay fidelity: {f.explained_start_share:.0%} of {count(f.ops, 'GPU operation start')} "
            f"explained by {f.recorded_dependencies:,} recorded and {f.inferred_dependencies:,} inferred dependencies "
            f"(start error p50 {_d(f.start_error_ns.p50)}, p99 {_d(f.start_error_ns.p99)}).")


def _contention(doc: Document) -> dict:
    entries = doc.contention
    shown = entries[:MAX_CONTENTION]
    rows = [[name, _d(e.overlap_ns), _d(e.contention_ns),
             "-" if e.contention_low_ns is None else f"{_d(e.contention_low_ns)} - {_d(e.contention_high_ns)}",
             e.confidence or "-", f"{e.sm_footprint:.2f}", e.collectives]
            for e, name in zip(shown, _names([(e.kernel, e.kernel_full) for e in shown]))]
    return _table(["kernel", "overlap", "transfer slowdown", "90% range", "confidence", "SM footprint", "collectives"], rows,
                  {"overlap", "transfer slowdown", "90% range", "SM footprint", "collectives"}, total=len(entries))


def _contention_check(doc: Document) -> str | None:
    check = doc.contention_fit.clean_check if doc.contention_fit else None
    if not check:
        return None
    return (f"The {count(check.instances, 'transfer')} nothing overlapped agree with the fitted baselines within "
            f"{check.median_error:.2%} (median, {count(check.classes, 'class', 'classes')}).")


def _slowdown(doc: Document) -> dict:
    slowed = doc.compute_slowdown
    shown = slowed[:MAX_CONTENTION]
    rows = [[name, _d(e.overlapped_mean_ns), _d(e.alone_mean_ns),
             f"{e.slowdown:+.1%}", _d(e.slowed_ns),
             f"{_d(e.slowed_low_ns)} - {_d(e.slowed_high_ns)}", e.confidence or "-",
             _d(e.step_time_saved_ns), f"{e.overlapped_runs} / {e.alone_runs}"]
            for e, name in zip(shown, _names([(e.kernel, e.kernel_full) for e in shown]))]
    return _table(["kernel", "mean beside NCCL", "mean alone", "compute slowdown", "NCCL added", "90% range", "confidence",
                   "step time saved", "runs beside / alone"], rows,
                  {"mean beside NCCL", "mean alone", "compute slowdown", "NCCL added", "90% range", "step time saved",
                   "runs beside / alone"}, total=len(slowed))


def _stragglers(doc: Document) -> dict:
    host = {r.rank: r.host for r in doc.ranks}
    collectives = doc.collectives
    total, n = doc.summary.wait_ns, len(collectives)
    caused, skew, counts = Counter(), Counter(), Counter()
    for c in collectives:
        caused[c.straggler_rank] += c.wait_cost_ns
        skew[c.straggler_rank] += c.skew_ns
        counts[c.straggler_rank] += 1
    rows = [[rank, _host(host.get(rank)), f"{counts[rank]} of {n}", _d(skew[rank]), _d(caused[rank]),
             _pct(caused[rank] / total if total else None)] for rank in sorted(counts, key=lambda r: (-caused[r], r))]
    return _table(["rank", "host", "last to arrive", "skew", "wait caused", "share of wait"], rows,
                  {"rank", "last to arrive", "skew", "wait caused", "share of wait"})


def _blame_cell(blame: tuple[Blame, ...], limit: int = 3) -> dict:
    parts = []
    for b in blame[:limit]:
        ms = _d(b.ns)
        kind = cause_kinds.of(b.cause)
        if kind.family is cause_kinds.KERNEL:
            parts.append({**_name(b.kernel, b.kernel_full), "before": "",
                          "after": f" ({kind.qualifier})" if kind.qualifier else "", "ms": ms})
        elif kind.family is cause_kinds.HOST:
            parts.append({**_name(b.nvtx or "(no NVTX range)", None, 80), "before": "host in ", "after": "", "ms": ms})
        else:
            parts.append({"text": getattr(b, "name", None) or b.cause, "ms": ms})
    return {"blame": parts, "more": max(0, len(blame) - limit)}


def _worst(doc: Document) -> dict:
    collectives = sorted(doc.collectives, key=lambda c: -c.wait_cost_ns)[:WORST]
    rows = [[c.id, c.op, c.comm, c.seq, c.ranks, c.straggler_rank, _d(c.skew_ns), _d(c.wait_cost_ns),
             _d(c.transfer_ns), "-" if c.busbw_gbps is None else f"{c.busbw_gbps:.1f}", c.blame_method,
             _blame_cell(c.blame)] for c in collectives]
    headers = ["id", "op", "comm", "seq", "ranks", "straggler", "skew", "wait", "transfer", "busbw GB/s", "method", "blame"]
    return _table(headers, rows, {"id", "seq", "ranks", "straggler", "skew", "wait", "transfer", "busbw GB/s"})


def _host(host: str | None) -> str:
    return host or "not recorded"


def _ranks(doc: Document) -> dict:
    """Two tables that each fit a desktop window: what each rank is and read, then where its GPU
    sat idle."""
    rows = [[r.rank, _host(r.host), _name(Path(r.report).name, r.report, 48), r.pid, r.device, f"{r.kernels:,}",
             f"{r.nccl_kernels:,}", _d(r.nccl_time_ns), _pct(r.overlap_share), _d(r.clock_offset_ns),
             "-" if r.clock_drift_ppm is None else f"{r.clock_drift_ppm:.2f}", r.rank_source] for r in doc.ranks]
    headers = ["rank", "host", "report", "pid", "device", "kernels", "NCCL kernels", "NCCL time", "compute overlap",
               "clock offset", "drift ppm", "rank from"]
    ranks = _table(headers, rows, {"rank", "pid", "device", "kernels", "NCCL kernels", "NCCL time", "compute overlap",
                                   "clock offset", "drift ppm"})
    rows = [[r.rank, _d(r.idle_ns), _d(r.idle_host_wait_ns), _d(r.idle_sync_wait_ns), _d(r.idle_other_ns),
             _d(r.host_sync_ns), _zero_overlap(r.zero_overlap_cause)] for r in doc.ranks]
    headers = ["rank", "GPU idle", "idle: host wait", "idle: sync wait", "idle: other", "host sync", "why no overlap"]
    idle = _table(headers, rows, {"rank", "GPU idle", "idle: host wait", "idle: sync wait", "idle: other", "host sync"})
    return {"ranks": ranks, "idle": idle}


def _zero_overlap(cause: str | None) -> str:
    """Why a rank's overlap is 0%, with the fix where one is known."""
    if not cause:
        return ""
    words, fix = glossary.ZERO_OVERLAP[cause]
    return f"{words}: {fix}" if fix else words


# alignment.quality.issues, in words.
ALIGNMENT_ISSUES = {
    "few_collectives": "The clocks were fitted from fewer than 3 collectives: the offsets rest on little evidence.",
    "spread_not_shrunk": "Aligning did not shrink the end spread of the collectives: the fit changed nothing.",
    "same_clock_ranks_disagree": "Ranks sharing one host clock end collectives further apart than the tolerance: "
                                 "the assumption that a collective ends together on every rank does not hold here."}


def _spread(a: AlignmentInfo) -> dict:
    before, after = a.end_spread_ns_before, a.end_spread_ns_after
    rows = []
    if before and after:
        rows = [["before (raw clocks)", _d(before.p50), _d(before.p95), _d(before.max), a.violations_before],
                ["after alignment", _d(after.p50), _d(after.p95), _d(after.max), a.violations_after]]
    return _table(["end-time spread", "p50", "p95", "max", "causality violations"], rows, {"p50", "p95", "max", "causality violations"})


def _per_rank_clocks(a: AlignmentInfo) -> bool:
    """No host recorded (PyTorch profiler traces): each rank's clock was fitted on its own."""
    return bool(a.hosts) and all(not h.host for h in a.hosts)


def _alignment_words(a: AlignmentInfo) -> str:
    """How the clocks were aligned, in words."""
    per_rank = " No host is recorded in these traces: one clock per rank, each fitted on its own." if _per_rank_clocks(a) else ""
    return f"Alignment: {method_words(a)}{', with drift' if a.drift_fitted else ''}.{per_rank}"


def _clocks_heading(a: AlignmentInfo) -> str:
    return "Per rank clock (one clock per rank: no host recorded)" if _per_rank_clocks(a) else "Per host clock"


def _clocks(a: AlignmentInfo) -> dict:
    per_rank = _per_rank_clocks(a)
    rows = [[clock_label(h), _d(h.offset_ns), f"{h.drift_ppm:.3f}",
             ", ".join(map(str, h.ranks)) if getattr(h, "ranks", None) else "all on the host"]
            for h in a.hosts]
    if per_rank:  # the clock's label already names its rank
        return _table(["clock", "clock offset", "drift ppm"], [r[:3] for r in rows], {"clock offset", "drift ppm"})
    return _table(["host", "clock offset", "drift ppm", "ranks"], rows, {"clock offset", "drift ppm"})
