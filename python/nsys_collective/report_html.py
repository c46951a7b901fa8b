"""One self-contained HTML report of an analysis: verdict, key numbers, charts, tables.

Everything is inside the file (CSS inline, charts as base64 PNG data URIs, no fonts, scripts or
fetches), so it can be mailed, attached to a ticket or opened offline. All text goes through
html.escape; kernel names that are too long are shortened, with the full name in a title.
"""

from __future__ import annotations

import base64
import html
from collections import Counter
from pathlib import Path

from nsys_collective.charts import short_name
from nsys_collective.terminal import verdict
from nsys_collective.units import ms_cell as _ms
from nsys_collective.units import us_cell as _us

MAX_CAUSES = 30
MAX_CONTENTION = 20
WORST = 20
CHARTS = {
    "blocking": ("What made the collectives wait",
                 "Kernels and late launches that made stragglers late, by the wait they inflicted on the other ranks "
                 "(GPU time), stacked by the rank they delayed."),
    "timeline": ("The worst collectives, rank by rank",
                 "The collectives with the highest wait cost on the aligned clock: each rank's GPU work, its NCCL kernel "
                 "split into waiting (hatched) and transfer (blue), and the blamed cause in red."),
    "wait_heatmap": ("Who waited where",
                     "Each rank's wait for the last rank in each collective; circles mark the straggler (last to arrive)."),
    "transfer_vs_footprint": ("Did compute slow the transfers",
                              "Transfer time against the SM pressure of the compute kernels overlapping it; stems show the "
                              "excess over the clean baseline of the same kind of collective."),
    "alignment": ("Clock alignment",
                  "End-time spread of each collective across ranks before and after aligning the clocks (log scale), "
                  "and the offset fitted for each host's clock."),
}

CSS = """
:root { --ink: #1d2430; --muted: #5f6b7a; --line: #e3e7ed; --bg: #f6f8fa; --accent: #1f5fa8; --bad: #c0392b; }
* { box-sizing: border-box; }
body { margin: 0; font: 14px/1.5 -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, sans-serif;
       color: var(--ink); background: #fff; }
main { max-width: 1240px; margin: 0 auto; padding: 28px 32px 48px; }
h1 { font-size: 24px; margin: 0 0 4px; }
h2 { font-size: 18px; margin: 36px 0 10px; padding-bottom: 4px; border-bottom: 2px solid var(--line); }
h3 { font-size: 15px; margin: 22px 0 8px; }
.sub { color: var(--muted); margin: 0 0 20px; }
.verdict { overflow-wrap: anywhere; background: var(--bg); border-left: 4px solid var(--accent); padding: 12px 18px; border-radius: 4px; }
.verdict p { margin: 4px 0; }
.verdict ul { margin: 8px 0 4px; padding-left: 20px; }
.verdict li { margin: 4px 0; font-weight: 600; }
.cards { display: grid; grid-template-columns: repeat(auto-fit, minmax(200px, 1fr)); gap: 12px; margin: 20px 0 4px; }
.card { border: 1px solid var(--line); border-radius: 6px; padding: 10px 14px; min-width: 0; }
.card .label { color: var(--muted); font-size: 12px; text-transform: uppercase; letter-spacing: .04em; }
.card .value { font-size: 22px; font-weight: 600; overflow-wrap: anywhere; }
.card .value.small { font-size: 15px; }
.card .note { color: var(--muted); font-size: 12px; }
figure { margin: 18px 0 26px; }
figure img { max-width: 100%; height: auto; border: 1px solid var(--line); border-radius: 4px; }
figcaption { color: var(--muted); font-size: 13px; margin-top: 4px; }
table { border-collapse: collapse; width: auto; max-width: 100%; margin: 6px 0 4px; font-size: 13px; }
th, td { padding: 5px 8px; border-bottom: 1px solid var(--line); vertical-align: top; text-align: left; }
th { background: var(--bg); font-weight: 600; white-space: nowrap; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
tbody tr:nth-child(even) { background: #fbfcfd; }
.name { font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; font-size: 12px; overflow-wrap: anywhere; }
.high { color: var(--bad); font-weight: 600; }
.low { color: var(--muted); }
.more, .empty { color: var(--muted); font-size: 13px; }
.warnings li { margin: 3px 0; }
footer { margin-top: 40px; color: var(--muted); font-size: 12px; }
details summary { cursor: pointer; }
"""


class _Html(str):
    """Markup already built (and escaped) here: not escaped again."""


def _e(value) -> str:
    return value if isinstance(value, _Html) else html.escape("-" if value is None else str(value))


def _pct(share) -> str:
    return "-" if share is None else f"{share:.0%}"


def _name(short: str | None, full: str | None = None, width: int = 120) -> _Html:
    """A kernel or NVTX name, shortened for the table, the full name in the tooltip."""
    full = full or short
    if not full:
        return _Html('<span class="low">-</span>')
    shown = short_name(short or full, width)
    return _Html(f'<span class="name" title="{html.escape(full)}">{html.escape(shown)}</span>')


def _table(headers: list[str], rows: list[list], numeric: set[str] = frozenset()) -> str:
    head = "".join(f'<th class="num">{_e(h)}</th>' if h in numeric else f"<th>{_e(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f'<td class="num">{_e(v)}</td>' if h in numeric else f"<td>{_e(v)}</td>"
                                    for h, v in zip(headers, row)) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _confidence(value: str) -> _Html:
    return _Html(f'<span class="{"high" if value == "high" else "low"}">{html.escape(value)}</span>')


def _more(shown: int, total: int) -> str:
    return f'<p class="more">{total - shown} more not shown (see the --json output).</p>' if total > shown else ""


def write_report(analysis, doc: dict, charts: dict[str, list[Path]], path: Path) -> None:
    """Write the report of an analysis (and its --json document and charts) to `path`."""
    Path(path).write_text(render(analysis, doc, charts), encoding="utf-8")


def render(analysis, doc: dict, charts: dict[str, list[Path]]) -> str:
    s = doc["summary"]
    hosts = len({r["host"] for r in doc["ranks"]})
    title = (f"{s['ranks']} rank{'s' * (s['ranks'] != 1)} on {hosts} host{'s' * (hosts != 1)}, "
             f"{s['collectives']} collective{'s' * (s['collectives'] != 1)}")
    parts = [
        f"<h1>CollectiveTrace: {_e(title)}</h1>",
        f'<p class="sub">Which kernels block the NCCL collectives, on which rank, by how much. '
        f"collectivetrace-nsys {_e(doc.get('tool_version'))}, {len(doc.get('inputs', []))} input"
        f"{'s' * (len(doc.get('inputs', [])) != 1)}.</p>",
        _verdict(analysis, doc),
        _cards(analysis, doc),
        _charts(charts),
        _blocking(doc),
        _contention(doc),
        _stragglers(analysis, doc),
        _worst(doc),
        _ranks(doc),
        _alignment(doc),
        _warnings(doc),
        _footer(doc),
    ]
    return ("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
            '<link rel="icon" href="data:,">\n'  # no favicon request, so no console error
            f"<title>CollectiveTrace report: {_e(title)}</title>\n<style>{CSS}</style>\n</head>\n"
            f"<body>\n<main>\n" + "\n".join(p for p in parts if p) + "\n</main>\n</body>\n</html>\n")


def _verdict(analysis, doc: dict) -> str:
    lines = verdict(analysis)
    found = set(doc.get("findings", []))
    # The first line is the job summary, already in the title.
    plain = [f"<p>{_e(line)}</p>" for line in lines[1:] if line not in found]
    listed = "".join(f"<li>{_e(line)}</li>" for line in lines if line in found)
    return (f'<h2>Verdict</h2>\n<div class="verdict">{"".join(plain)}'
            + (f"<ul>{listed}</ul>" if listed else "") + "</div>")


def _card(label: str, value, note: str = "", small: bool = False) -> str:
    return (f'<div class="card"><div class="label">{_e(label)}</div>'
            f'<div class="value{" small" if small else ""}">{_e(value)}</div>'
            + (f'<div class="note">{_e(note)}</div>' if note else "") + "</div>")


def _cards(analysis, doc: dict) -> str:
    s, t = doc["summary"], analysis.timing
    straggler = s.get("top_straggler_rank")
    caused = int(t.wait_cost[t.straggler == straggler].sum()) if straggler is not None and len(t.straggler) else 0
    top = s.get("top_blocking_kernel")
    full = next((k["kernel_full"] for k in doc.get("blocking_kernels", []) if k["kernel"] == top), top)
    cards = [
        _card("Total wait", f"{_ms(s['wait_ns'])} ms", "GPU time spent waiting for the last rank"),
        _card("Explained", _pct(s.get("explained_wait_share")), "share of the wait with a named cause"),
        _card("Transfer", f"{_ms(s['transfer_ns'])} ms", "GPU time moving data once all ranks arrived"),
        _card("Top straggler", "-" if straggler is None else f"rank {straggler}",
              f"caused {_ms(caused)} ms of wait" if straggler is not None else "no rank stands out"),
        (f'<div class="card"><div class="label">Top blocking kernel</div><div class="value small">{_name(top, full, 60)}</div>'
         '<div class="note">named with high confidence</div></div>') if top else
        _card("Top blocking kernel", "none", "no kernel named with high confidence", small=True),
    ]
    return f'<div class="cards">{"".join(cards)}</div>'


def _charts(charts: dict[str, list[Path]]) -> str:
    figures = []
    for name, (heading, caption) in CHARTS.items():
        png = next((p for p in charts.get(name, []) if Path(p).suffix == ".png"), None)
        if png is None:
            continue
        data = base64.b64encode(Path(png).read_bytes()).decode("ascii")
        # The chart carries its own title: the caption says how to read it.
        figures.append(f"<figure id=\"{_e(name)}\"><img src=\"data:image/png;base64,{data}\" alt=\"{_e(heading)}\">"
                       f"<figcaption><b>{_e(heading)}.</b> {_e(caption)}</figcaption></figure>")
    if not figures:
        return '<h2>Charts</h2>\n<p class="empty">No charts: no collective was matched across ranks.</p>'
    return "<h2>Charts</h2>\n" + "\n".join(figures)


def _blocking(doc: dict) -> str:
    total = doc["summary"]["wait_ns"]
    rows = []
    for e in doc.get("blocking_kernels", []):
        runs = f"{e['runs']} vs {e['reference_runs']}" if e.get("runs") is not None else "-"
        slowdown = "-" if e.get("slowdown") is None else f"{e['slowdown']:+.1%}"
        rows.append((e["inflicted_wait_ns"], [e["rank"], e["cause"], _name(e["kernel"], e.get("kernel_full")), _ms(e["blame_ns"]),
                                              _ms(e["inflicted_wait_ns"]), _pct(e["inflicted_wait_ns"] / total if total else None),
                                              e["collectives"], slowdown, runs, _confidence(e["confidence"])]))
    for e in doc.get("blocking_launches", []):
        rows.append((e["inflicted_wait_ns"], [e["rank"], "host_launch", _name(e["nvtx"] or "(no NVTX range)"), _ms(e["blame_ns"]),
                                              _ms(e["inflicted_wait_ns"]), _pct(e["inflicted_wait_ns"] / total if total else None),
                                              e["collectives"], "-", "-", _confidence(e["confidence"])]))
    out = "<h2>Blocking causes</h2>\n"
    if not rows:
        return out + '<p class="empty">Nothing made a straggler late (no collective was waited for).</p>'
    rows.sort(key=lambda r: -r[0])
    headers = ["rank", "cause", "kernel or NVTX range", "blamed ms", "wait inflicted ms", "share of wait", "collectives",
               "slowdown", "runs vs reference", "confidence"]
    return (out + '<p class="more">What made the straggler late, per rank; the wait each cause inflicted on the other ranks. '
            "Slowdown and runs compare the kernel on the straggler with the same kernel on the reference ranks.</p>"
            + _table(headers, [r for _, r in rows[:MAX_CAUSES]],
                     {"rank", "blamed ms", "wait inflicted ms", "share of wait", "collectives", "slowdown", "runs vs reference"})
            + _more(min(len(rows), MAX_CAUSES), len(rows)))


def _contention(doc: dict) -> str:
    out = "<h2>Contention</h2>\n"
    entries = doc.get("contention", [])
    if not entries:
        out += '<p class="empty">No compute kernel overlapped a transfer.</p>'
    else:
        rows = [[_name(e["kernel"], e.get("kernel_full")), _ms(e["overlap_ns"]), _ms(e["contention_ns"]), f"{e['sm_footprint']:.2f}",
                 e["collectives"]] for e in entries[:MAX_CONTENTION]]
        out += ('<p class="more">Compute kernels that ran during transfers, and the transfer time they cost beyond the clean '
                "baseline (GPU time; - where no clean baseline exists).</p>"
                + _table(["kernel", "overlap ms", "slowdown ms", "SM footprint", "collectives"], rows,
                         {"overlap ms", "slowdown ms", "SM footprint", "collectives"}) + _more(len(rows), len(entries)))
    slowed = doc.get("compute_slowdown", [])
    if slowed:
        rows = [[_name(e["kernel"], e.get("kernel_full")), _us(e["overlapped_mean_ns"]), _us(e["alone_mean_ns"]),
                 f"{e['slowdown']:+.1%}", f"{e['overlapped_runs']} / {e['alone_runs']}"] for e in slowed[:MAX_CONTENTION]]
        out += ("<h3>Compute kernels beside NCCL</h3>"
                + _table(["kernel", "mean beside NCCL µs", "mean alone µs", "slowdown", "runs beside / alone"], rows,
                         {"mean beside NCCL µs", "mean alone µs", "slowdown", "runs beside / alone"}) + _more(len(rows), len(slowed)))
    return out


def _stragglers(analysis, doc: dict) -> str:
    t, out = analysis.timing, "<h2>Stragglers</h2>\n"
    if not len(t.straggler):
        return out + '<p class="empty">No collectives.</p>'
    host = {r["rank"]: r["host"] for r in doc["ranks"]}
    total, n = int(t.wait_cost.sum()), len(t.straggler)
    counts = Counter(t.straggler.tolist())
    rows = []
    for rank in sorted(counts, key=lambda r: -int(t.wait_cost[t.straggler == r].sum())):
        mine = t.straggler == rank
        caused = int(t.wait_cost[mine].sum())
        rows.append([rank, host.get(rank), f"{counts[rank]} of {n}", _ms(int(t.skew[mine].sum())), _ms(caused),
                     _pct(caused / total if total else None)])
    return out + _table(["rank", "host", "last to arrive", "skew ms", "wait caused ms", "share of wait"], rows,
                        {"rank", "last to arrive", "skew ms", "wait caused ms", "share of wait"})


def _blame_text(blame: list[dict], limit: int = 3) -> _Html:
    parts = []
    for b in blame[:limit]:
        ns = f"{_ms(b['ns'])} ms"
        if b["cause"] in ("kernel", "window"):
            label = _name(b["kernel"], b.get("kernel_full")) + (" (window)" if b["cause"] == "window" else "")
        elif b["cause"] == "host_launch":
            label = _Html("late launch in " + _name(b.get("nvtx") or "(no NVTX range)", None, 80))
        else:
            label = html.escape(b["cause"])
        parts.append(f"{label} {html.escape(ns)}")
    if len(blame) > limit:
        parts.append(f'<span class="low">+{len(blame) - limit} more</span>')
    return _Html("<br>".join(parts) if parts else '<span class="low">-</span>')


def _worst(doc: dict) -> str:
    out = "<h2>Worst collectives</h2>\n"
    collectives = sorted(doc.get("collectives", []), key=lambda c: -c["wait_cost_ns"])[:WORST]
    if not collectives:
        return out + '<p class="empty">No collectives.</p>'
    rows = [[c["id"], c["op"], c["comm"], c["seq"], c["ranks"], c["straggler_rank"], _ms(c["skew_ns"]), _ms(c["wait_cost_ns"]),
             _ms(c["transfer_ns"]), "-" if c.get("busbw_gbps") is None else f"{c['busbw_gbps']:.1f}", c.get("blame_method"),
             _blame_text(c.get("blame", []))] for c in collectives]
    headers = ["id", "op", "comm", "seq", "ranks", "straggler", "skew ms", "wait ms", "transfer ms", "busbw GB/s", "method", "blame"]
    return (out + f'<p class="more">The {len(rows)} collectives with the highest wait cost, and what made their straggler late.</p>'
            + _table(headers, rows, {"id", "seq", "ranks", "straggler", "skew ms", "wait ms", "transfer ms", "busbw GB/s"}))


def _ranks(doc: dict) -> str:
    rows = [[r["rank"], r["host"], _name(Path(r["report"]).name, r["report"], 48), r["pid"], r["device"], f"{r['kernels']:,}",
             f"{r['nccl_kernels']:,}", _ms(r["nccl_time_ns"]), _pct(r.get("overlap_share")), _us(r.get("clock_offset_ns")),
             "-" if r.get("clock_drift_ppm") is None else f"{r['clock_drift_ppm']:.2f}", r.get("rank_source")] for r in doc["ranks"]]
    headers = ["rank", "host", "report", "pid", "device", "kernels", "NCCL kernels", "NCCL ms", "compute overlap",
               "clock offset µs", "drift ppm", "rank from"]
    return "<h2>Ranks</h2>\n" + _table(headers, rows, {"rank", "pid", "device", "kernels", "NCCL kernels", "NCCL ms",
                                                       "compute overlap", "clock offset µs", "drift ppm"})


def _alignment(doc: dict) -> str:
    a = doc["alignment"]
    out = (f"<h2>Alignment quality</h2>\n<p>Method: {_e(a.get('method'))}, from {_e(a.get('instances_used'))} collectives"
           f"{', with drift' if a.get('drift_fitted') else ''}. Causality violations (a rank ending a collective before another "
           f"started it): {_e(a.get('violations_before'))} before, {_e(a.get('violations_after'))} after.</p>")
    before, after = a.get("end_spread_ns_before"), a.get("end_spread_ns_after")
    if before and after:
        rows = [["before (raw clocks)", _us(before["p50"]), _us(before["p95"]), _us(before["max"]), a.get("violations_before")],
                ["after alignment", _us(after["p50"]), _us(after["p95"]), _us(after["max"]), a.get("violations_after")]]
        out += _table(["end-time spread", "p50 µs", "p95 µs", "max µs", "violations"], rows,
                      {"p50 µs", "p95 µs", "max µs", "violations"})
    hosts = [[h["host"], _us(h["offset_ns"]), f"{h['drift_ppm']:.3f}", ", ".join(map(str, h["ranks"])) if h.get("ranks") else "all on the host"]
             for h in a.get("hosts", [])]
    if hosts:
        out += "<h3>Per host clock</h3>" + _table(["host", "offset µs", "drift ppm", "ranks"], hosts, {"offset µs", "drift ppm"})
    return out


def _warnings(doc: dict) -> str:
    warnings = doc.get("warnings", [])
    if not warnings:
        return '<h2>Warnings</h2>\n<p class="empty">None.</p>'
    return '<h2>Warnings</h2>\n<ul class="warnings">' + "".join(f"<li>{_e(w)}</li>" for w in warnings) + "</ul>"


def _footer(doc: dict) -> str:
    inputs = "".join(f"<li><span class=\"name\">{_e(i.get('path'))}</span> (nsys {_e(i.get('nsys_version'))})</li>"
                     for i in doc.get("inputs", []))
    return (f"<footer><details><summary>Inputs ({len(doc.get('inputs', []))})</summary><ul>{inputs}</ul></details>"
            f"<p>Generated by collectivetrace-nsys {_e(doc.get('tool_version'))}; times are on the aligned clock, "
            "totals over ranks are GPU time.</p></footer>")
