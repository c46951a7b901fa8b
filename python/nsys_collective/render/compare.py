"""Drawing a comparison (compare.compare_documents' document, `compare --json`): the terminal
tables of `collectivetrace-nsys compare` and its chart. It reads the comparison's data only."""

from __future__ import annotations

from pathlib import Path

import matplotlib
import numpy as np
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from nsys_collective import causes as cause_kinds
from nsys_collective.render.charts import STYLE, save_figure
from nsys_collective.render.names import unique_labels as _unique_labels
from nsys_collective.render.terminal import named_table, plain_table, stdout_console, title_line
from nsys_collective.units import count
from nsys_collective.units import duration as _d
from nsys_collective.units import signed_duration as _signed

WORST = 12
MAX_CHART_CAUSES = 10
# Tables and charts leave out causes below this share of the wait (they stay in --json).
SHOWN_SHARE = 0.01


def _is_host(kind: str) -> bool:
    return cause_kinds.of(kind).family is cause_kinds.HOST


def _shown_causes(cmp: dict, limit: int) -> tuple[list[dict], int]:
    """The blocking rows worth a line in a table or a bar in a chart (at least SHOWN_SHARE of the
    larger run's wait), biggest change first; and how many were left out."""
    floor = SHOWN_SHARE * max(cmp["summary"]["wait_ns"]["a"] or 0, cmp["summary"]["wait_ns"]["b"] or 0)
    rows = [r for r in cmp["blocking"] if max(r["wait_saved_ns"]["a"], r["wait_saved_ns"]["b"]) > max(floor, 0)]
    return rows[:limit], len(cmp["blocking"]) - len(rows[:limit])


# Terminal ---------------------------------------------------------------------------------------

def _where(side: dict) -> str:
    """Where a run came from, in a few words: its source, its one input, or its inputs' folder."""
    inputs = side["inputs"]
    if side["source"]:
        return side["source"]
    if len(inputs) == 1:
        return inputs[0]
    return f"{Path(inputs[0]).parent}/ ({count(len(inputs), 'file')})" if inputs else "?"


def _describe(side: dict) -> str:
    return (f"{_where(side)}: {count(side['ranks'], 'rank')} on {count(side['hosts'], 'host')}, "
            f"{count(side['collectives'], 'collective')}")


def render_comparison(cmp: dict, console=None) -> None:
    """Verdict lines first, then blocking deltas, operations, stragglers, alignment (rich, stdout)."""
    out = console or stdout_console()
    parts = [f"A: {_describe(cmp['a'])}", f"B: {_describe(cmp['b'])}"]
    parts += cmp["findings"] + [f"warning: {w}" for w in cmp["warnings"]]
    rows, left_out = _shown_causes(cmp, WORST)
    if rows:
        names = [f"host in '{r['nvtx'] or 'no NVTX range'}'" if _is_host(r["cause"]) else r["kernel"] or r["cause"] for r in rows]
        parts += named_table(out, "What fixing each cause saves, A → B (wait saved, replayed)",
                             ["rank", "cause", "A", "B", "Δ", "A excess", "B excess"],
                             [[str(r["rank"]), r["cause"], _d(r["wait_saved_ns"]["a"]), _d(r["wait_saved_ns"]["b"]),
                               _signed(r["wait_saved_ns"]["delta"]), _d(r["blame_ns"]["a"]), _d(r["blame_ns"]["b"])] for r in rows],
                             names, "kernel or NVTX range", at=2)
        if left_out:
            parts.append(f"{count(left_out, 'smaller cause')} in --json.")
    if cmp["operations"]:
        parts += [title_line("Operations, A → B"), plain_table(out, [
            "op", "A count", "B count", "A wait", "B wait", "Δ wait", "A transfer", "B transfer", "Δ transfer"],
            [[o["op"], str(o["count"]["a"]), str(o["count"]["b"]), _d(o["wait_ns"]["a"]), _d(o["wait_ns"]["b"]),
              _signed(o["wait_ns"]["delta"]), _d(o["transfer_ns"]["a"]), _d(o["transfer_ns"]["b"]), _signed(o["transfer_ns"]["delta"])]
             for o in cmp["operations"]]),
            "Transfer is GPU time: each collective's transfer on each of its ranks."]
    if cmp["stragglers"]:
        parts += [title_line("Stragglers, A → B"), plain_table(out, [
            "rank", "host", "A last in", "B last in", "A wait caused", "B wait caused", "Δ wait caused"],
            [[str(r["rank"]), r["host"]["b"] or r["host"]["a"] or "-", str(r["last"]["a"]), str(r["last"]["b"]),
              _d(r["wait_caused_ns"]["a"]), _d(r["wait_caused_ns"]["b"]), _signed(r["wait_caused_ns"]["delta"])]
             for r in cmp["stragglers"][:WORST]])]
    al = cmp["alignment"]
    rows = [["method", str(al["method"]["a"]), str(al["method"]["b"])]]
    rows += [[f"end spread after, {q}", _d(v["a"]), _d(v["b"])] for q, v in al["end_spread_ns_after"].items()]
    rows.append(["causality violations after", str(al["violations_after"]["a"]), str(al["violations_after"]["b"])])
    parts += [title_line("Clock alignment, A → B"), plain_table(out, ["", "A", "B"], rows)]
    for part in parts:
        out.print(part, markup=False) if isinstance(part, str) else out.print(part)


# Chart -----------------------------------------------------------------------------------------------

C_A = "#9aa7b4"  # the baseline is quiet, the new run loud
C_B = "#1f5fa8"


def write_compare_chart(cmp: dict, path_png) -> list[Path]:
    """Paired bars, A against B: the wait each top cause inflicted, per cause and late rank (so a
    cause that moved between ranks shows as one bar gone and one new), then wait and transfer per
    operation. Writes path_png and the same name with .svg; returns both paths."""
    stem = Path(path_png).with_suffix("")
    stem.parent.mkdir(parents=True, exist_ok=True)
    rows, _ = _shown_causes(cmp, MAX_CHART_CAUSES)
    rows.sort(key=lambda r: -max(r["wait_saved_ns"]["a"], r["wait_saved_ns"]["b"]))
    ops = cmp["operations"]
    sides = (("a", C_A, -0.2), ("b", C_B, 0.2))
    with matplotlib.rc_context(STYLE):
        fig = Figure(figsize=(11, 3.6 + 0.45 * max(len(rows), 1)), layout="constrained")
        # Subfigures: the cause labels are wide, the operation panels need not share their margin.
        top, bottom = fig.subfigures(2, 1, height_ratios=[0.45 * max(len(rows), 1) + 1.0, 2.6])
        ax = top.subplots()
        if rows:
            names = _unique_labels([r["kernel_full"] or r["kernel"] or r["nvtx"] or "no NVTX range" for r in rows], width=46)
            labels = [f"{'rank ' + str(r['rank']) if isinstance(r['rank'], int) else r['rank'] or 'all'} · "
                      f"{'host in ' if _is_host(r['cause']) else ''}{n}" for r, n in zip(rows, names)]
            y = np.arange(len(rows))
            for side, colour, shift in sides:
                values = np.array([r["wait_saved_ns"][side] for r in rows], float)
                ax.barh(y + shift, values / 1e6, height=0.38, color=colour)
                for k in np.flatnonzero(values):
                    ax.text(values[k] / 1e6, y[k] + shift, " " + _d(values[k]), va="center", fontsize=7.5, color="#444444")
            ax.set_yticks(y, labels, fontsize=8.5)
            ax.invert_yaxis()
            ax.set_xlim(0, ax.get_xlim()[1] * 1.12)  # room for the value labels
        else:
            ax.text(0.5, 0.5, "no blocking cause in either run", ha="center", va="center", transform=ax.transAxes)
            ax.set_yticks([])
        ax.set_xlabel("wait fixing it saves (ms of GPU time, replayed)")
        ax.grid(axis="x", color="#e5e5e5", linewidth=0.6)
        ax.set_axisbelow(True)
        top.suptitle("What made the collectives wait, per late rank and cause: A against B", x=0.01, ha="left",
                     fontsize=11, fontweight="bold")
        top.legend(handles=[Patch(color=C_A, label=f"A: {_short_source(cmp['a'])}"),
                            Patch(color=C_B, label=f"B: {_short_source(cmp['b'])}")],
                   loc="outside upper right", ncols=2, frameon=False)
        for ax, key in zip(bottom.subplots(1, 2), ("wait", "transfer")):
            x = np.arange(len(ops))
            for side, colour, shift in sides:
                values = np.array([o[f"{key}_ns"][side] for o in ops], float)
                ax.bar(x + shift, values / 1e6, width=0.38, color=colour)
                for k in range(len(ops)):
                    ax.text(x[k] + shift, values[k] / 1e6, _d(values[k]), ha="center", va="bottom", fontsize=7.5, color="#444444")
            ax.set_xticks(x, [o["op"] for o in ops])
            ax.set_xlim(-0.8, max(len(ops), 1) - 0.2)
            ax.set_title(f"{key} per operation (ms of GPU time, all ranks)", loc="left")
            ax.grid(axis="y", color="#e5e5e5", linewidth=0.6)
            ax.set_axisbelow(True)
        return save_figure(fig, stem)


def _short_source(side: dict) -> str:
    text = _where(side)
    return text if len(text) <= 48 else "…" + text[-47:]
