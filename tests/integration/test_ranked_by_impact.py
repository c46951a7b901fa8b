"""Cards, tables and charts rank by impact whatever the cause kind, and say what they show honestly
(issue 14): the report's top card is the top what-if cause, `blocking` is sorted as
`whatif.causes`, empty tables keep their header, the blocking chart's labels are not clipped."""

from __future__ import annotations

import csv
import dataclasses
from dataclasses import replace

import matplotlib
import pyarrow.parquet as pq
import pytest

from conftest import FIXTURES, analyzed
from nsys_collective.model.job import Filters
from nsys_collective.render import charts, html
from nsys_collective.render.tables import SCHEMAS, arrow_tables, write_tables
from nsys_collective.units import duration

DEMO = FIXTURES / "demo-4rank-2host"


@pytest.fixture(scope="module")
def demo():
    return analyzed([DEMO])[1]


def test_the_top_card_is_the_top_whatif_cause_not_the_top_kernel(demo):
    s = demo.doc["summary"]
    top = s["top_cause"]
    # The demo's trap: its top blocking kernel (a GEMM) saves far less than its top cause (a host stall).
    assert top["cause"] == "host" and s["top_blocking_kernel"].startswith("sm90_xmma_gemm")
    [card] = [c for c in html._cards(demo.document) if c["label"] == "Top cause"]
    assert card["value"]["name"] == "host in 'DataLoader.__next__'"
    assert card["note"].startswith("host on rank 0: ")
    assert duration(top["wait_saved_ns"]) in card["note"] and duration(top["step_time_saved_ns"]) in card["note"]
    report = html.render(demo, {}).replace("<wbr>", "")  # names may break between their parts
    assert "Top blocking kernel" not in report and "host in &#39;DataLoader.__next__&#39;" in report


def test_blocking_table_is_sorted_as_whatif_causes(demo):
    causes = demo.doc["whatif"]["causes"]
    blocking = arrow_tables(demo)["blocking"].to_pylist()
    assert [(r["cause"], r["name"], r["rank"]) for r in blocking] == [(c["cause"], c["name"], c["rank"]) for c in causes]
    saved = [r["wait_saved_ns"] for r in blocking]
    assert saved == sorted(saved, reverse=True) and blocking[0]["cause"] == "host"  # README's to_pylist()[0] is the top cause


def test_empty_tables_keep_their_header(demo, tmp_path):
    empty = dataclasses.replace(demo, document=dataclasses.replace(demo.document, contention=(), steps=()))
    write_tables(empty, tmp_path)
    for name in ("contention", "steps"):
        with open(tmp_path / f"{name}.csv", newline="") as f:
            assert list(csv.reader(f)) == [SCHEMAS[name].names], name
        table = pq.read_table(tmp_path / f"{name}.parquet")
        assert table.num_rows == 0 and table.schema.equals(SCHEMAS[name], check_metadata=False), name


def test_the_table_schemas_name_real_columns_with_their_types():
    _, result = analyzed([DEMO], Filters.parse(steps="ProfilerStep#*"))
    for name, table in arrow_tables(result).items():
        assert table.num_rows, name
        assert table.column_names[:len(SCHEMAS[name])] == SCHEMAS[name].names, name
        # A column null in every row (bytes, busbw here) keeps its declared type.
        assert all(table.schema.field(f.name).type == f.type for f in SCHEMAS[name]), name


def _drawn(fig):
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    return canvas.get_renderer()


def _one_cause(demo, causes):
    document = demo.document
    return replace(demo, document=replace(document, whatif=replace(document.whatif, causes=tuple(causes))))


def test_a_single_cause_chart_keeps_its_y_label_clear_of_the_title(demo):
    result = _one_cause(demo, demo.document.whatif.causes[:1])
    with matplotlib.rc_context(charts.STYLE):
        fig = charts._blocking(result)
        renderer = _drawn(fig)
    ax = fig.axes[0]
    label = ax.yaxis.label.get_window_extent(renderer)
    title = fig._suptitle.get_window_extent(renderer)
    whole = fig.bbox
    assert label.y0 >= whole.y0 and label.y1 <= whole.y1, "the y label lies inside the figure"
    assert label.y1 <= title.y0, "the y label stays below the title"
    assert "one cause" in fig._suptitle.get_text() and "1 causes" not in fig._suptitle.get_text()


def test_a_bar_of_high_and_low_parts_says_how_much_is_high(demo):
    kernel = demo.document.whatif.causes[1]
    parts = [replace(kernel, rank=3, wait_saved_ns=12_000_000, confidence="high"),
             replace(kernel, rank=2, wait_saved_ns=2_000_000, confidence="low")]
    with matplotlib.rc_context(charts.STYLE):
        texts = [t.get_text() for t in charts._blocking(_one_cause(demo, parts)).axes[0].texts]
        assert texts == ["14.0 ms\nhigh: 12.0 ms of 14.0 ms"]
        texts = [t.get_text() for t in charts._blocking(_one_cause(demo, parts[:1])).axes[0].texts]
        assert texts == ["12.0 ms\nhigh confidence"]
