"""Every figure is defined once (the glossary, in --help, the `glossary` command and the report) and
printed from one rounded value everywhere: terminal, findings, charts, HTML (issue 14)."""

from __future__ import annotations

import io
import re

import pytest
from rich.console import Console
from typer.testing import CliRunner

from conftest import FIXTURES, analyzed
from nsys_collective import glossary
from nsys_collective.cli import app
from nsys_collective.render import charts, html
from nsys_collective.render.terminal import render
from nsys_collective.units import count, duration, signed_duration


@pytest.mark.parametrize("ns, text", [
    (None, "-"), (0, "0 ms"), (850, "850 ns"), (1_000, "1.00 µs"), (99_960, "100 µs"), (968_348, "968 µs"),
    (999_600, "1.00 ms"), (3_712_000, "3.71 ms"), (17_685_000, "17.7 ms"), (25_447_966, "25.4 ms"),
    (123_456_789, "123 ms"), (1_500_000_000, "1.50 s"), (-197_000, "-197 µs"), (12_345_000_000_000, "12,300 s"),
])
def test_one_rounding_rule(ns, text):
    assert duration(ns) == text


def test_signed_and_counted():
    assert signed_duration(1_200_000) == "+1.20 ms" and signed_duration(-968_348) == "-968 µs" and signed_duration(0) == "0 ms"
    assert count(1, "collective") == "1 collective" and count(18, "collective") == "18 collectives"
    assert count(0, "host") == "0 hosts" and count(1_000, "rank") == "1,000 ranks"


@pytest.fixture(scope="module")
def demo():
    return analyzed([FIXTURES / "demo-4rank-2host"])[1]


def _terminal(result) -> str:
    out = Console(width=100, file=io.StringIO(), highlight=False, color_system=None)
    render(result, out)
    return out.file.getvalue()


def _other_roundings(ns: int, shown: str) -> set[str]:
    """The figure as the other roundings this project used before wrote it (a table cell in ms with
    3 decimals, a sentence or chart in ms with 1 or 2), leaving out those equal to the one shown."""
    candidates = {f"{ns / 1e6:,.3f}", f"{ns / 1e6:,.2f} ms", f"{ns / 1e6:,.1f} ms"}
    return {c for c in candidates if c != shown}


def test_a_figure_reads_the_same_in_terminal_findings_chart_and_report(demo):
    top = demo.doc["whatif"]["causes"][0]
    figures = [top["wait_saved_ns"], top["step_time_saved_ns"], demo.doc["summary"]["wait_ns"]]
    terminal = _terminal(demo)
    findings = " ".join(demo.doc["findings"])
    report = html.render(demo, {})
    import matplotlib

    with matplotlib.rc_context(charts.STYLE):
        chart = " ".join(t.get_text() for t in charts._blocking(demo).axes[0].texts)
    for ns in figures:
        text = duration(ns)
        assert text in terminal and text in report, text
        for other in _other_roundings(ns, text):
            for where in (terminal, report, findings, chart):
                assert not re.search(rf"(?<![\d.,]){re.escape(other)}(?![\d])", where), (text, other)
    assert duration(top["wait_saved_ns"]) in findings and duration(top["wait_saved_ns"]) in chart
    assert duration(top["step_time_saved_ns"]) in findings


def test_the_glossary_defines_every_figure_the_outputs_name():
    terms = dict(glossary.TERMS)
    assert {"skew", "spread", "wait", "transfer", "wait saved", "step time saved", "excess", "confidence", "fidelity"} <= set(terms)
    assert "median arrival" in terms["skew"] and "first" in terms["spread"]


def test_the_glossary_is_in_help_the_command_and_the_report(demo):
    runner = CliRunner()
    helped = runner.invoke(app, ["analyze", "--help"], terminal_width=200).stdout
    listed = runner.invoke(app, ["glossary"]).stdout
    report = html.render(demo, {})
    for term, definition in glossary.TERMS:
        assert f"{term}: {definition}" in " ".join(helped.split()).replace("│", "") or f"{term}:" in helped, term
        assert f"{term}: {definition}" in listed.splitlines()
        assert f"<dt>{term}</dt><dd>{html_escape(definition)}</dd>" in report
    # The terminal points to it.
    assert "collectivetrace-nsys glossary" in _terminal(demo)


def html_escape(text: str) -> str:
    from markupsafe import escape

    return str(escape(text))
