"""Charts of an analysis, as PNG and SVG files (for the HTML report and for slides).

Each chart answers one question a performance engineer asks:
- `blocking`: which kernels and late launches made the collectives wait, on which rank;
- `timeline`: what the worst collectives looked like on every rank, on the aligned clock;
- `wait_heatmap`: which rank waited in which collective;
- `transfer_vs_overlap`: which kernel overlapping the transfers made them slower, and by how much;
- `alignment`: how far apart the clocks were, and how well the alignment brought them together.

Figures are built with `matplotlib.figure.Figure` and the Agg canvas, never pyplot, so nothing
global changes and any thread or server can call this. A chart with nothing to draw is skipped
(the report says why in a sentence).

Every chart is FIG_WIDTH_IN wide with text sized for it (REPORT_STYLE): the report scales charts
to the page's width, and at a phone's width (about 400 px) their smallest text stays near 9 px.
Panels are stacked, never side by side, for the same reason.
"""

from __future__ import annotations

import textwrap
import warnings
from pathlib import Path

import matplotlib
import matplotlib.image
import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.collections import PolyCollection
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from nsys_collective import causes as cause_kinds
from nsys_collective.render.chart_list import CHART_NAMES, ChartWarning, not_drawn
from nsys_collective.render.names import clock_label, method_words, short_name, unique_labels as _unique_labels
from nsys_collective.render.text import break_name
from nsys_collective.result import Result
from nsys_collective.units import count
from nsys_collective.units import duration as _d
from nsys_collective.units import signed_duration

DPI = 110
MAX_CAUSES = 10
MAX_LEGEND_RANKS = 12
STYLE = {
    "font.size": 9.5,
    "axes.titlesize": 10.5,
    "axes.labelsize": 9.5,
    "xtick.labelsize": 8.5,
    "ytick.labelsize": 8.5,
    "legend.fontsize": 8.5,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "svg.hashsalt": "collectivetrace",  # stable ids: the same analysis gives the same SVG
    "hatch.linewidth": 0.8,
    "text.parse_math": False,  # kernel and NVTX names are data: a '$' is a dollar sign, not TeX
}
# The report's charts: narrow, with text large for their width (see the module's docstring).
FIG_WIDTH_IN = 5.8
AXES_SHARE = 0.78  # of the width, an axes' title has beside the tick labels
REPORT_STYLE = {**STYLE, "font.size": 11, "axes.titlesize": 11, "axes.labelsize": 10.5, "xtick.labelsize": 10,
                "ytick.labelsize": 10, "legend.fontsize": 10, "figure.titlesize": 12.5}
# Timeline colours: compute is quiet, the collective and its cause are loud.
C_COMPUTE = "#9aa7b4"
C_COPY = "#d8c27a"
C_OTHER_NCCL = "#b9d3ea"
C_WAIT = "#f2a65a"
C_TRANSFER = "#1f5fa8"
C_BLAMED = "#d62728"


def write_charts(result: Result, out_dir: Path) -> dict[str, list[Path]]:
    """Write every chart that has something to show as out_dir/<name>.png and .svg, one after
    another; return {name: [png, svg]}. (`--out` draws them in parallel: render/outdir.py.)"""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    written, failed = {}, {}
    for name in CHART_NAMES:
        paths, why = draw_chart(name, result, out_dir)
        if paths:
            written[name] = paths
        if why:
            failed[name] = why
    if failed:
        warnings.warn(not_drawn(failed), ChartWarning, stacklevel=2)
    return written


def draw_chart(name: str, result: Result, out_dir: Path) -> tuple[list[Path] | None, str | None]:
    """One chart (a name of CHART_NAMES) saved as out_dir/<name>.png and .svg: ([png, svg], None);
    (None, None) when it has nothing to show; (None, why) when it could not be drawn."""
    with matplotlib.rc_context(REPORT_STYLE):
        try:
            fig = _DRAW[name](result)
            return (save_figure(fig, out_dir / name) if fig is not None else None), None
        except (OverflowError, ValueError, RuntimeError) as e:
            # Values of absurd magnitude can exceed what Agg and FreeType rasterize: the report
            # goes on without that chart.
            for leftover in (out_dir / f"{name}.png", out_dir / f"{name}.svg"):
                leftover.unlink(missing_ok=True)
            return None, str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__


def save_figure(fig: Figure, stem: Path) -> list[Path]:
    """The figure drawn twice, once per file: the PNG's draw solves the layout and fills the
    pixels, the SVG keeps that layout. (savefig would draw four times: with a layout engine set it
    first makes a draw to lay out, for each file.)"""
    canvas = FigureCanvasAgg(fig)
    png, svg = stem.with_suffix(".png"), stem.with_suffix(".svg")
    fig.set_dpi(DPI)
    canvas.draw()  # the constrained layout, then the pixels, at the PNG's resolution
    matplotlib.image.imsave(png, canvas.buffer_rgba(), format="png", origin="upper", dpi=DPI,
                            metadata={"Software": None})
    fig.set_layout_engine(None)  # the layout is done (REPORT_STYLE sets no default engine)
    fig.savefig(svg, metadata={"Date": None})
    return [png, svg]


def _lines(text: str, points: float, share: float = 0.96) -> str:
    """Text wrapped between words to the chart's width (or a share of it: an axes' title starts
    right of the tick labels) at this font size."""
    chars = max(12, int(FIG_WIDTH_IN * 72 * share / (points * 0.6)))
    return "\n".join(textwrap.fill(line, chars, break_long_words=False, break_on_hyphens=False)
                     for line in text.split("\n"))


def _title_points(key: str = "figure.titlesize") -> float:
    return float(matplotlib.rcParams[key]) if not isinstance(matplotlib.rcParams[key], str) else 12.0


def _wrap(label: str, line: int = 34) -> str:
    """Break a long label once, preferably at an underscore or space."""
    if len(label) <= line:
        return label
    cut = max(label.rfind(sep, line // 2, line + 1) for sep in ("_", " ", ":", ","))
    cut = cut + 1 if cut > 0 else line
    return label[:cut] + "\n" + label[cut:]


def _ms(ns) -> np.ndarray:
    return np.asarray(ns, dtype=np.float64) / 1e6




def _rank_colours(ranks: list[int | str]) -> dict[int | str, str]:
    """A colour per rank (ranks by number, then hosts by name)."""
    cmap = matplotlib.colormaps["tab10" if len(ranks) <= 10 else "tab20"]
    order = sorted(ranks, key=lambda r: (isinstance(r, str), str(r) if isinstance(r, str) else r))
    return {r: matplotlib.colors.to_hex(cmap(i % cmap.N)) for i, r in enumerate(order)}


# Blocking causes --------------------------------------------------------------------------------

def _blocking(result: Result) -> Figure | None:
    whatif = result.document.whatif
    causes: dict[tuple, dict] = {}
    for e in whatif.causes if whatif else ():
        full = e.name_full or e.name or e.cause
        key = (e.cause, full)
        c = causes.setdefault(key, {"name": e.name or e.cause, "full": full, "host": cause_kinds.of(e.cause).family is cause_kinds.HOST,
                                    "cause": e.cause, "by_rank": {}, "high_ns": 0})
        who = e.rank if e.rank is not None else e.host or "all"
        c["by_rank"][who] = c["by_rank"].get(who, 0) + max(0, e.wait_saved_ns)
        if e.confidence == "high":  # a bar stacks several ranks' causes: say how much of it is high
            c["high_ns"] += max(0, e.wait_saved_ns)
    top = sorted((c for c in causes.values() if sum(c["by_rank"].values()) > 0), key=lambda c: -sum(c["by_rank"].values()))[:MAX_CAUSES]
    if not top:
        return None

    labels = _unique_labels([c["full"] for c in top], width=84)
    labels = [_legend(c["cause"], lab) for c, lab in zip(top, labels)]
    # Ranks by what they caused; beyond a legend's worth the rest share one grey segment.
    per_rank: dict[int, float] = {}
    for c in top:
        for r, v in c["by_rank"].items():
            per_rank[r] = per_rank.get(r, 0) + v
    shown = sorted(sorted(per_rank, key=lambda r: -per_rank[r])[:MAX_LEGEND_RANKS], key=str)
    colours = _rank_colours(shown)

    # Room for a y label and a title even with one bar.
    labels = [break_name(lab, 28) for lab in labels]
    rows = [lab.count("\n") + 1 for lab in labels]
    fig = Figure(figsize=(FIG_WIDTH_IN, max(3.0, 2.2 + 0.3 * sum(rows) + 0.22 * len(top))), layout="constrained")
    ax = fig.add_subplot()
    y = np.arange(len(top))
    left = np.zeros(len(top))
    for r in shown + ["other"]:
        if r == "other":
            values = np.array([sum(v for k, v in c["by_rank"].items() if k not in shown) for c in top], float)
        else:
            values = np.array([c["by_rank"].get(r, 0) for c in top], float)
        if not values.any():
            continue
        ax.barh(y, _ms(values), left=left, height=0.62, color=colours.get(r, "#bbbbbb"),
                label=f"rank {r}" if isinstance(r, int) else "other ranks" if r == "other" else str(r),
                edgecolor="white", linewidth=0.5)
        left += _ms(values)
    for k, c in enumerate(top):
        total = sum(c["by_rank"].values())
        ax.text(left[k] + left.max() * 0.015, k, f"{_d(total)}\n{_confidence(c['high_ns'], total)}",
                va="center", fontsize="small", linespacing=1.1, color="#222222" if c["high_ns"] else "#777777")
    ax.set_yticks(y, labels, fontsize="small")
    for tick, c in zip(ax.get_yticklabels(), top):
        tick.set_color("#8a3b00" if c["host"] else "#222222")
    ax.invert_yaxis()
    ax.set_xlim(0, left.max() * 1.6)  # room for the figure beside the longest bar
    ax.set_xlabel("wait its fix saves, replayed (ms of GPU time)")
    ax.set_ylabel("cause")
    which = "the one cause found, by the wait fixing it would save" if len(top) == 1 else \
        f"top {len(top)} causes by the wait fixing each would save"
    fig.suptitle(_lines(f"What made the collectives wait: {which}, by rank", _title_points()),
                 x=0.01, ha="left", fontweight="bold")
    ax.grid(axis="x", color="#e5e5e5", linewidth=0.6)
    ax.set_axisbelow(True)
    fig.legend(title="where", loc="outside lower center", frameon=False, ncols=min(4, len(shown) + 1))
    return fig


def _confidence(high_ns: float, total_ns: float) -> str:
    """The confidence of a bar that may stack high and low parts, said honestly."""
    if high_ns >= total_ns:
        return "high confidence"
    if high_ns <= 0:
        return "low confidence"
    return f"high: {_d(high_ns)} of {_d(total_ns)}"


# Timelines of the worst collectives -------------------------------------------------------------

TIMELINE_WIDTH_IN = FIG_WIDTH_IN
ROW_IN = 0.42


def _timeline(result: Result) -> Figure | None:
    panels = result.evidence.panels
    if not panels:
        return None
    heights = [len(p["rows"]) + 3.2 for p in panels]  # the rows and the panel's title
    row_in = ROW_IN if max(len(p["rows"]) for p in panels) <= 8 else ROW_IN * 0.8  # many ranks: thinner rows
    fig = Figure(figsize=(TIMELINE_WIDTH_IN, 1.0 + row_in * sum(heights)), layout="constrained")
    axes = fig.subplots(len(panels), 1, gridspec_kw={"height_ratios": heights}, squeeze=False)[:, 0]
    blamed = [_draw_timeline_panel(ax, p) for ax, p in zip(axes, panels)]
    handles = [Patch(color=C_COMPUTE, label="compute kernel"), Patch(color=C_COPY, label="memcpy / memset"),
               Patch(color=C_OTHER_NCCL, label="other NCCL kernel"),
               Patch(facecolor=C_WAIT, hatch="////", edgecolor="#b8651b", label="this collective: waiting for the last rank"),
               Patch(color=C_TRANSFER, label="this collective: transfer")]
    if any(blamed):
        handles.append(Patch(color=C_BLAMED, label="blamed kernel (on the straggler)"))
    fig.legend(handles=handles, loc="outside lower center", ncols=2, frameon=False, fontsize="small")
    fig.suptitle(_lines(f"Worst {count(len(panels), 'collective')} by wait cost, on the aligned clock "
                        "(per rank: compute and copies above, NCCL below)", _title_points()),
                 x=0.01, ha="left", fontweight="bold")
    return fig


# A panel's bars, one collection per kind (cheaper to draw than one per kind and rank), drawn in
# this order: on one rank, copies and blamed runs lie over compute, this collective over other NCCL.
_LAYERS = {
    "compute": {"facecolors": C_COMPUTE, "linewidth": 0},
    "copy": {"facecolors": C_COPY, "linewidth": 0},
    "other_nccl": {"facecolors": C_OTHER_NCCL, "linewidth": 0},
    "wait": {"facecolors": C_WAIT, "edgecolor": "#b8651b", "hatch": "////", "linewidth": 0.4},
    "transfer": {"facecolors": C_TRANSFER, "linewidth": 0},
    "blamed": {"facecolors": C_BLAMED, "edgecolor": "#7a0f10", "linewidth": 0.6},
}


def _bars(layer: list, x0, x1, lane, min_width: float = 0.0) -> None:
    """Add bars from x0 to x1 (at least min_width wide) in the lane (bottom, height) to a layer."""
    x0 = np.atleast_1d(np.asarray(x0, dtype=np.float64))
    x1 = x0 + np.maximum(np.atleast_1d(np.asarray(x1, dtype=np.float64)) - x0, min_width)
    layer.append((x0, x1, np.full(len(x0), float(lane[0])), np.full(len(x0), float(lane[0] + lane[1]))))


def _draw_layers(ax, layers: dict[str, list]) -> None:
    for name, style in _LAYERS.items():
        if layers[name]:
            x0, x1, y0, y1 = (np.concatenate(v) for v in zip(*layers[name]))
            corners = np.stack([np.stack([x0, y0], 1), np.stack([x0, y1], 1), np.stack([x1, y1], 1), np.stack([x1, y0], 1)], 1)
            ax.add_collection(PolyCollection(corners, **style))


def _draw_timeline_panel(ax, p: dict) -> bool:
    """Draw one collective's panel (attribution.evidence); True when it highlighted runs of a
    blamed kernel."""
    i, first, lo, hi = p["i"], p["first"], p["lo"], p["hi"]

    def rel(ns):  # aligned ns -> ms after the first arrival
        return (np.asarray(ns, dtype=np.float64) - first) / 1e6

    def clipped(starts_ends):
        starts, ends = (np.asarray(v, dtype=np.int64) for v in starts_ends)
        return rel(np.maximum(starts, lo)), rel(np.minimum(ends, hi))

    min_width = (hi - lo) / 1e6 / 900  # sub-pixel kernels stay visible
    note = None  # (x0, x1, row, texts, ha): the blocking cause's label and the room it has
    blamed = False
    layers: dict[str, list] = {name: [] for name in _LAYERS}
    ranks = [r["rank"] for r in p["rows"]]
    for row, shown in enumerate(p["rows"]):
        rank, a, e = shown["rank"], shown["a"], shown["e"]
        upper, lower = (row - 0.42, 0.38), (row + 0.04, 0.38)  # compute lane above, NCCL lane below
        for kind, lane in (("compute", upper), ("copy", upper), ("other_nccl", lower)):
            if shown[kind][0]:
                _bars(layers[kind], *clipped(shown[kind]), lane, min_width)
        # This collective's kernel: waiting until the last arrival, then the transfer.
        last = max(a, p["last"])
        if last > a:
            _bars(layers["wait"], rel(a), rel(last), lower)
        if e > last:
            _bars(layers["transfer"], rel(last), rel(e), lower)
        if row:
            ax.axhline(row - 0.5, color="#eeeeee", linewidth=0.6, zorder=0)
        blame = p["blame"]
        if rank != p["straggler"] or not blame:
            continue
        # The straggler's NCCL lane is empty until it arrives: the cause's label goes there.
        kind = cause_kinds.of(blame["cause"])
        if kind.family.draws_runs:
            runs = shown["blamed"]
            if runs[0]:
                _bars(layers["blamed"], *clipped(runs), (row - 0.46, 0.46), min_width)
                blamed = True
            if p["ago"] is not None:  # its last run before the collective lies left of the view
                note = (float(rel(lo)), float(rel(a)), row, ["◀ blamed kernel ran earlier", "◀ blamed"], "left")
            elif runs[0]:
                before = [k for k, start in enumerate(runs[0]) if start < p["last"]]
                k = before[-1] if before else 0
                x0, _ = clipped([runs[0][k:k + 1], runs[1][k:k + 1]])
                note = (float(x0[0]), float(rel(a)), row, ["▲ blamed kernel", "▲ blamed"], "left")
        else:
            fields = {**blame, "nvtx": short_name(blame.get("nvtx") or "no NVTX range", 40)}
            note = (float(rel(lo)), float(rel(a)), row, [text.format(**fields) for text in kind.note], "right")

    _draw_layers(ax, layers)
    n = len(ranks)
    ax.set_ylim(n - 0.5 + 0.2, -1.6)  # a band above the rows for the arrival labels
    ax.set_yticks(np.arange(n), [f"rank {r}" + (" ◀" if r == p["straggler"] else "") for r in ranks])
    for tick, r in zip(ax.get_yticklabels(), ranks):
        if r == p["straggler"]:
            tick.set_color(C_BLAMED)
            tick.set_fontweight("bold")
    x_lo, x_hi, x_last = float(rel(lo)), float(rel(hi)), float(rel(p["last"]))
    ax.set_xlim(x_lo, x_hi)
    ax.axvline(0, color="#555555", linewidth=0.7, linestyle=":")
    ax.axvline(x_last, color=C_BLAMED, linewidth=0.8, linestyle="--")
    # Arrival labels in the band above the rows, on two heights so that close ones do not collide.
    close = (x_last - 0) < 0.3 * (x_hi - x_lo)
    ax.text(0, -1.05, "first arrival ", color="#555555", fontsize="small", va="center", ha="right")
    ax.text(x_last, -0.55 if close else -1.05, " last arrival", color=C_BLAMED, fontsize="small", va="center", ha="left")
    if note is not None:
        _note(ax, *note, x_hi - x_lo)
    ax.set_xlabel("ms after the first rank arrived (aligned clock)")
    ax.spines["left"].set_visible(False)
    ax.tick_params(axis="y", length=0)

    shown = "" if n == p["total_ranks"] else f", {n} of {p['total_ranks']} ranks shown"
    title = (f"{p['op']} #{i} (seq {p['seq']}{shown}): straggler rank {p['straggler']}, "
             f"wait cost {_d(p['wait_cost'])}, skew {_d(p['skew'])}, transfer {_d(p['transfer'])}")
    cause = _cause_line(p["blame"], p["wait"])
    if p["ago"] is not None:
        cause += f"; its last run ended {_d(p['ago'])} before the first arrival"
    ax.set_title(_lines(title + "\n" + cause, 10, AXES_SHARE), loc="left", fontsize=10)
    return blamed


def _note(ax, x0: float, x1: float, row: int, texts: list[str], ha: str, x_range: float) -> None:
    """Label the blocking cause in the straggler's NCCL lane, empty between x0 and its arrival x1:
    the longest text that fits there, else the shortest on a white box."""
    px_per_ms = (TIMELINE_WIDTH_IN - 1.2) * DPI / x_range
    points = matplotlib.font_manager.FontProperties(size="small").get_size_in_points()
    char_px = points * DPI / 72 * 0.62  # bold
    text = next((t for t in texts if len(t) * char_px <= (x1 - x0) * px_per_ms * 0.95), None)
    style = {} if text else {"bbox": {"facecolor": "white", "edgecolor": "none", "pad": 1, "alpha": 0.85}}
    # Clear of the arrival line it ends at (the dashed last-arrival line, the straggler's arrival).
    pad = 0.012 * x_range
    ax.text(x0 + pad if ha == "left" else x1 - pad, row + 0.24, text or texts[-1], color=C_BLAMED, fontsize="small",
            fontweight="bold", va="center", ha=ha, clip_on=True, **style)


def _cause_line(blame: dict | None, wait: int) -> str:
    if blame is None:
        return "cause: nothing the replay found explains this collective's wait"
    fields = {**blame, "part": f"fixing it saves {_d(blame['ns'])} of its {_d(max(wait, 0))} wait", "ns": _d(blame["ns"])}
    if "kernel" in blame:
        fields["kernel"] = short_name(blame.get("kernel_full") or blame["kernel"], 100)
    fields["nvtx"] = short_name(blame.get("nvtx") or "no NVTX range", 64)
    return "cause: " + cause_kinds.of(blame["cause"]).caption.format(**fields)


def _legend(kind: str, label: str) -> str:
    """A cause's bar label: host time says where, other kinds than the plain one of their family
    say which they are."""
    k = cause_kinds.of(kind)
    if k.family is cause_kinds.HOST:
        return f"host in '{label}'"
    return f"{label} ({k.label})" if k.kind != k.family.name else label


# Wait per rank and collective -------------------------------------------------------------------

def _wait_heatmap(result: Result) -> Figure | None:
    collectives, o = result.document.collectives, result.evidence.observations
    if not any(c.ranks >= 2 for c in collectives):
        return None
    n = len(collectives)
    last = np.array([c.last_arrival_ns for c in collectives], dtype=np.int64)
    straggler = np.array([c.straggler_rank for c in collectives], dtype=np.int64)
    ranks = np.unique(o.rank)
    row = np.searchsorted(ranks, o.rank)
    grid = np.full((len(ranks), n), np.nan)
    grid[row, o.instance] = _ms(last[o.instance] - o.start)
    finite = grid[np.isfinite(grid)]
    top = float(finite.max()) if finite.size else 0.0
    # One huge wait should not wash the rest out: clip the scale at the 99th percentile.
    p99 = float(np.percentile(finite, 99)) if finite.size else 0.0
    vmax, extend = (p99, "max") if p99 > 0 and top > 1.5 * p99 else (max(top, 1e-6), "neither")

    fig = Figure(figsize=(FIG_WIDTH_IN, min(9.0, 2.8 + 0.32 * len(ranks))), layout="constrained")
    ax = fig.add_subplot()
    cmap = matplotlib.colormaps["YlOrRd"].with_extremes(bad="#eeeeee")
    image = ax.imshow(np.ma.masked_invalid(grid), aspect="auto", cmap=cmap, vmin=0, vmax=vmax, interpolation="nearest",
                      extent=(-0.5, n - 0.5, len(ranks) - 0.5, -0.5))
    if n <= 150 and len(ranks) <= 32:  # mark who was last where a mark still fits
        ax.scatter(np.arange(n), np.searchsorted(ranks, straggler), marker="o", s=10, facecolors="none",
                   edgecolors="#1f3b73", linewidths=0.8, label="straggler (arrived last)")
        fig.legend(loc="outside lower left", frameon=False)
    host_of = {r.rank: r.host for r in result.document.ranks}
    step = max(1, len(ranks) // 24)
    hosts = any(host_of.values())
    ax.set_yticks(np.arange(0, len(ranks), step), [f"rank {r}" + (f"\n{host_of.get(int(r))}" if host_of.get(int(r)) else "")
                                                   for r in ranks[::step]], fontsize="small")
    ax.set_xlabel("collective id (issue order)")
    ax.set_ylabel("rank (host)" if hosts else "rank")
    ax.xaxis.get_major_locator().set_params(integer=True)
    bar = fig.colorbar(image, ax=ax, extend=extend, pad=0.01)
    bar.set_label("wait for the last rank (ms)")
    ax.set_title(_lines(f"Wait per rank and collective: {count(n, 'collective')}, {_d(result.document.summary.wait_ns)} of GPU time in total"
                        + (" (colour scale clipped at the 99th percentile)" if extend == "max" else ""), 11, AXES_SHARE), loc="left")
    for side in ("top", "right"):
        ax.spines[side].set_visible(True)
    return fig


# Transfer time against compute overlap ----------------------------------------------------------

def _known(values) -> np.ndarray:
    """Integer ns with -1 for unknown (null)."""
    return np.array([-1 if v is None else v for v in values], dtype=np.int64)


def _transfer_vs_overlap(result: Result) -> Figure | None:
    """Per kernel of the most contention, one panel: each collective's overlap with it against its
    transfer less its class's baseline and what the other kernels added (so the fit's line,
    coefficient x overlap, is what the points should follow). Only kernels the fit finds slowed
    the transfers (a positive figure): a flat line at zero shows nothing (the report says so)."""
    entries = {e.kernel: e for e in result.document.contention}
    points = [p for p in (result.evidence.contention_points if result.evidence else ())
              if p["overlap_ns"] and (entries[p["kernel"]].contention_ns or 0) > 0 if p["kernel"] in entries]
    if not points:
        return None
    fig = Figure(figsize=(FIG_WIDTH_IN, 1.6 + 3.3 * len(points)), layout="constrained")
    axes = fig.subplots(len(points), 1, squeeze=False)[:, 0]
    for ax, p in zip(axes, points):
        x, y = _ms(p["overlap_ns"]), _ms(p["partial_ns"])
        e = entries[p["kernel"]]
        ax.axhline(0, color="#888888", linewidth=0.8, linestyle="--", zorder=1, label="baseline (nothing added)")
        ax.scatter(x, y, s=22, color="#4c72b0", alpha=0.75, zorder=3, label="collectives (transfer less baseline and others)")
        top = max(float(x.max()), 1e-6)
        line = np.array([0.0, top * 1.05])
        ax.plot(line, line * p["slowdown_per_overlap"], color="#c44e52", linewidth=1.6, zorder=4, label="contention fit")
        rng = f", 90% {_d(e.contention_low_ns)}-{_d(e.contention_high_ns)}" if e.contention_low_ns is not None else ""
        ax.set_title(_lines(f"{short_name(p['kernel'])}: slowed the transfers by {_d(e.contention_ns)}{rng} "
                            f"({e.confidence or 'low'} confidence; {p['slowdown_per_overlap']:.3f} ns per ns of overlap)", 10, AXES_SHARE),
                     loc="left", fontsize=10)
        ax.set_xlabel("overlap with the kernel (ms)")
        ax.set_ylabel("extra transfer (ms)")
        ax.grid(color="#eeeeee", linewidth=0.6)
        ax.set_axisbelow(True)
    # One legend for every panel, below them: never on a line or a point.
    fig.legend(*axes[0].get_legend_handles_labels(), loc="outside lower center", ncols=1, frameon=False, fontsize="small")
    fit = result.document.contention_fit
    fig.suptitle(_lines(f"Did compute slow the transfers? Transfer time against overlap, per kernel, with the fitted line "
                        f"({count(fit.collectives if fit else 0, 'collective')}, {count(fit.classes if fit else 0, 'class', 'classes')})",
                        _title_points()), x=0.01, ha="left", fontweight="bold")
    return fig


# Clock alignment --------------------------------------------------------------------------------

def _spread_per_instance(inst: np.ndarray, end: np.ndarray, n: int) -> np.ndarray:
    hi = np.full(n, np.iinfo(np.int64).min)
    lo = np.full(n, np.iinfo(np.int64).max)
    np.maximum.at(hi, inst, end)
    np.minimum.at(lo, inst, end)
    return (hi - lo).astype(np.float64)


class _PlainLog(matplotlib.ticker.LogFormatter):
    """Log-axis labels as plain numbers (0.3, 20, 300), never mathtext or 3e-01."""

    def _num_to_string(self, x, vmin, vmax):
        return f"{x:g}"


def _alignment(result: Result) -> Figure | None:
    """The spread of each collective's ends before and after alignment, and below it the offset of
    each clock (where there is more than one)."""
    a, o = result.document.alignment, result.evidence.observations
    n = len(result.document.collectives)
    multi = np.flatnonzero([c.ranks >= 2 for c in result.document.collectives])
    if not len(multi):
        return None
    before = _spread_per_instance(o.instance, o.utc_end, n)[multi] / 1e3
    after = _spread_per_instance(o.instance, o.end, n)[multi] / 1e3
    floor = 0.01  # µs: a log axis has no zero
    clocks = a.hosts if len(a.hosts) > 1 else ()
    label_lines = [1 + (k > 0 and bool(h.drift_ppm)) for k, h in enumerate(clocks)]
    offsets_in = 1.2 + 0.34 * sum(label_lines) + 0.12 * len(clocks) if clocks else 0
    fig = Figure(figsize=(FIG_WIDTH_IN, 4.4 + offsets_in), layout="constrained")
    if clocks:
        top, bottom = fig.subplots(2, 1, gridspec_kw={"height_ratios": [3.4, offsets_in]})
    else:
        top, bottom = fig.add_subplot(), None
    size = 18 if len(multi) <= 300 else 6
    top.scatter(multi, np.maximum(before, floor), s=size, marker="o", facecolors="none", edgecolors="#c0504d",
                linewidths=0.9, label="before (raw UTC clocks)")
    top.scatter(multi, np.maximum(after, floor), s=size, marker="o", color="#1f5fa8", label="after alignment")
    for spread, colour in ((a.end_spread_ns_before, "#c0504d"), (a.end_spread_ns_after, "#1f5fa8")):
        if spread and spread.p50 > 0:
            top.axhline(spread.p50 / 1e3, color=colour, linestyle="--", linewidth=0.8)
    top.set_yscale("log")
    # Plain numbers on major and minor ticks: the style turns mathtext off (names are data), and
    # the log scale's default labels are mathtext ($\mathdefault{3\times10^{2}}$).
    top.yaxis.set_major_formatter(_PlainLog())
    top.yaxis.set_minor_formatter(_PlainLog(labelOnlyBase=False, minor_thresholds=(2, 0.5)))
    top.set_xlabel("collective id (issue order)")
    top.set_ylabel("end-time spread (µs, log)")
    # Below the axes: the legend never sits on a point or a median line.
    top.legend(loc="upper left", bbox_to_anchor=(0, -0.2), ncols=2, frameon=False, fontsize="small", borderaxespad=0)
    top.grid(axis="y", which="major", color="#eeeeee", linewidth=0.6)
    top.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True, min_n_ticks=1))
    top.set_xlim(multi[0] - 0.6, multi[-1] + 0.6)  # collective ids are integers, even with one collective
    b, f = a.end_spread_ns_before, a.end_spread_ns_after
    medians = f"; median {_d(b.p50)} → {_d(f.p50)} (dashed)" if b and f else ""
    top.set_title(_lines(f"Ends of one collective should coincide: their spread per collective{medians}", 10, AXES_SHARE),
                  loc="left", fontsize=10)

    if clocks:
        offsets = np.array([h.offset_ns for h in clocks], float) / 1e3
        y = np.arange(len(clocks))
        bottom.barh(y, offsets, color="#7f8fa6", height=0.5)
        bottom.axvline(0, color="#555555", linewidth=0.7)
        notes = ["reference" if k == 0 else signed_duration(h.offset_ns) + (f", {h.drift_ppm:+.2f} ppm" if h.drift_ppm else "")
                 for k, h in enumerate(clocks)]
        bottom.set_yticks(y, [f"{short_name(clock_label(h), 24)}: {note}" for h, note in zip(clocks, notes)], fontsize="small")
        bottom.set_ylim(len(clocks) - 0.5, -0.5)
        bottom.set_xlabel("clock offset (µs)")
        per_rank = not any(h.host for h in clocks)
        bottom.set_title(_lines("Fitted offset per clock: one per rank (no host recorded)" if per_rank else
                                "Fitted offset per host clock", 10, AXES_SHARE), loc="left", fontsize=10)
        lim = max(1.0, float(np.abs(offsets).max()) * 1.1)
        bottom.set_xlim(-lim if (offsets < 0).any() else -0.05 * lim, lim if (offsets > 0).any() else 0.05 * lim)
    fig.suptitle(_lines(f"Clock alignment ({method_words(a)}): causality violations {a.violations_before or 0:,} before → "
                        f"{a.violations_after or 0:,} after", _title_points()), x=0.01, ha="left", fontweight="bold")
    return fig


# The function that draws each chart (None: nothing to show), by name (chart_list.CHART_NAMES).
_DRAW = {"blocking": _blocking, "timeline": _timeline, "wait_heatmap": _wait_heatmap,
         "transfer_vs_overlap": _transfer_vs_overlap, "alignment": _alignment}
assert tuple(_DRAW) == CHART_NAMES, "chart_list.CHART_NAMES names every chart drawn here, in the report's order"
