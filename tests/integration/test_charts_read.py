"""What the screenshots of the report showed wrong (issue 14, point 9), held right: the alignment
chart's log axis reads as numbers, not as mathtext source, and one collective gets integer ids."""

from __future__ import annotations

import matplotlib
import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg

from conftest import FIXTURES, REAL, analyzed, need_real
from nsys_collective.render import charts


def _labels(result):
    with matplotlib.rc_context(charts.STYLE):
        fig = charts._alignment(result)
        FigureCanvasAgg(fig).draw()
    left = fig.axes[0]
    lo, hi = left.get_xlim()
    shown = [t.get_text() for t, x in zip(left.get_xticklabels(), left.get_xticks()) if lo <= x <= hi]
    return [t.get_text() for t in left.get_yticklabels() if t.get_text()], shown


def test_the_log_axis_reads_as_numbers():
    y, _ = _labels(analyzed([FIXTURES / "demo-4rank-2host"])[1])
    assert y and not any("$" in t or "mathdefault" in t for t in y), y
    assert {"1", "10", "100"} <= set(y)


def test_one_collective_has_integer_ids():
    _, x = _labels(analyzed([need_real(REAL / "fs24-ring-6rank-2node")])[1])
    assert x == ["0"], x
