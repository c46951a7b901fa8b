"""The charts of a report and their order, apart from the drawing (render/charts.py), which loads
matplotlib: what only orders the charts or says which were not drawn (the `--out` folder, whose
charts other processes draw) needs none of it."""

from __future__ import annotations

from nsys_collective.units import count

# The report's order.
CHART_NAMES = ("blocking", "timeline", "wait_heatmap", "transfer_vs_overlap", "alignment")
# The order to hand the charts to parallel processes: the costliest first, so the last one to
# start is a short one (CPU on the demo: timeline 0.5 s, alignment 0.35, heatmap 0.25, blocking 0.15).
COSTLIEST_FIRST = ("timeline", "alignment", "wait_heatmap", "blocking", "transfer_vs_overlap")


class ChartWarning(UserWarning):
    """A chart could not be drawn; the rest of the report was written."""


def not_drawn(failed: dict[str, str]) -> str:
    """The one warning for the charts that could not be drawn, in chart order."""
    return (f"{count(len(failed), 'chart')} not drawn: "
            + "; ".join(f"{name} ({failed[name]})" for name in CHART_NAMES if name in failed))
