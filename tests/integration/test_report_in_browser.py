"""The report as a user sees it, in a real headless Chromium at a desktop width (1280 px) and a
phone's (420 px), on the demo and the real sets: nothing scrolls the page sideways, tables fit a
desktop window, charts fill a phone's width, no word breaks across lines, no chart is empty, and
the clocks are named (a host, or one clock per rank where the traces record none). One browser
per report; full-page screenshots of both widths are left in the test's tmp folder."""

from __future__ import annotations

import base64
import re

import pytest

import browser
from conftest import FIXTURES, REAL, analyzed, need_real
from nsys_collective.render.charts import write_charts
from nsys_collective.render.html import CHARTS, write_report

SETS = {
    "demo": FIXTURES / "demo-4rank-2host",
    "fs24-9rank": REAL / "fs24-allreduce2x-9rank-3node",
    "nsys-ai-2gpu": REAL / "nsys-ai-2gpu",
    "dlrm-8rank": REAL / "kineto" / "param-dlrm-8rank",
    "hta-2rank": REAL / "kineto" / "hta-trace_filter-2rank",
}
WIDTHS = (1280, 420)

# Measured in the page: the page's width against the window's, each table box that scrolls
# sideways, each chart's width, and each word of the verdict, cards and name cells that the
# layout split over two lines (a part of a name between two <wbr> is one word here, and so is
# each side of a hyphen or of the ellipsis of a shortened name).
MEASURE = r"""(() => {
  const broken = [];
  for (const el of document.querySelectorAll('.verdict, .card, td .name, .warnings li')) {
    const walker = document.createTreeWalker(el, NodeFilter.SHOW_TEXT);
    for (let node = walker.nextNode(); node; node = walker.nextNode()) {
      for (const m of node.data.matchAll(/[^\s\-…]+/g)) {  // a line may end after a hyphen or an ellipsis
        const range = document.createRange();
        range.setStart(node, m.index);
        range.setEnd(node, m.index + m[0].length);
        const tops = new Set([...range.getClientRects()].filter(r => r.width > 0).map(r => Math.round(r.top)));
        if (tops.size > 1) broken.push(m[0]);
      }
    }
  }
  return {
    page: document.documentElement.scrollWidth, window: window.innerWidth,
    tables: [...document.querySelectorAll('.scroll')].filter(b => b.scrollWidth > b.clientWidth + 1)
              .map(b => (b.previousElementSibling || {}).textContent || '?'),
    charts: [...document.querySelectorAll('figure img')].map(i => [i.alt, Math.round(i.getBoundingClientRect().width)]),
    broken: broken,
  };
})()"""


@pytest.fixture(scope="module", params=list(SETS), ids=list(SETS))
def shown(request, tmp_path_factory):
    """(result, report text, measures per width) of one set, from one browser."""
    if browser.find_browser() is None:
        pytest.skip(browser.NO_BROWSER)
    path = SETS[request.param] if request.param == "demo" else need_real(SETS[request.param])
    out = tmp_path_factory.mktemp(request.param)
    _, result = analyzed([path])
    write_report(result, write_charts(result, out / "charts"), out / "report.html")
    measures = {}
    with browser.open_page(out / "report.html") as page:
        for width in WIDTHS:
            page.set_width(width)
            measures[width] = page.evaluate(MEASURE)
            (out / f"report-{width}.png").write_bytes(page.screenshot(full_page=True))
        measures["errors"] = page.errors
    return result, (out / "report.html").read_text(encoding="utf-8"), measures


def _svgs(text: str) -> dict[str, str]:
    """Each chart's SVG in the report, by its figure id."""
    return {name: base64.b64decode(data).decode("utf-8")
            for name, data in re.findall(r'<figure id="(\w+)"><img src="data:image/svg\+xml;base64,([^"]+)"', text)}


def _svg_texts(svg: str) -> list[str]:
    """The texts of a chart (matplotlib writes each as a comment beside its drawn glyphs)."""
    return re.findall(r"<!-- (.*?) -->", svg)


@pytest.mark.parametrize("width", WIDTHS)
def test_nothing_scrolls_the_page_sideways(shown, width):
    _, _, measures = shown
    m = measures[width]
    assert m["page"] <= m["window"], f"the page is {m['page']} px wide in a {m['window']} px window"
    assert measures["errors"] == []


def test_every_table_fits_a_desktop_window(shown):
    _, _, measures = shown
    assert measures[1280]["tables"] == [], "tables that scroll sideways at 1280 px (after these headings)"


def test_charts_fill_a_phones_width(shown):
    _, _, measures = shown
    m = measures[420]
    assert m["charts"], "the report shows charts"
    narrow = [(alt, w) for alt, w in m["charts"] if w < m["window"] - 40]
    assert not narrow, f"charts narrower than the {m['window']} px window less its margins: {narrow}"


@pytest.mark.parametrize("width", WIDTHS)
def test_no_word_breaks_across_lines(shown, width):
    _, _, measures = shown
    assert measures[width]["broken"] == [], "words broken mid-word (names break only between their parts)"


def test_no_empty_chart_but_a_sentence(shown):
    result, text, _ = shown
    svgs = _svgs(text)
    for name in CHARTS:
        sentence = re.search(rf'<p class="empty" id="{name}">(.*?)</p>', text)
        assert (name in svgs) != bool(sentence), f"{name}: a chart or a sentence saying why there is none, one of them"
    slowed = any((e.contention_ns or 0) > 0 for e in result.document.contention)
    assert ("transfer_vs_overlap" in svgs) == slowed, "the chart of transfers against compute only where compute slowed them"
    for name, svg in svgs.items():
        assert len(_svg_texts(svg)) > 3, f"{name}: a chart with hardly any text"


def test_charts_print_plain_numbers_and_named_clocks(shown):
    result, text, _ = shown
    svgs = _svgs(text)
    for name, svg in svgs.items():
        assert "mathdefault" not in svg and "$" not in "".join(_svg_texts(svg)), f"{name}: raw mathtext in a label"
    clocks = _svg_texts(svgs["alignment"])
    assert "?" not in clocks and not any(t.startswith("?") for t in clocks), "a clock labelled '?'"
    if not any(r.host for r in result.document.ranks):  # profiler traces record no host
        assert "one clock per rank" in text.replace("<wbr>", "")
        assert any("one per rank" in t for t in clocks)
        assert any(t.startswith("rank 1") for t in clocks)
    else:
        hosts = {r.host for r in result.document.ranks}
        assert len(hosts) == 1 or all(any(t.startswith(h[:20]) for t in clocks) for h in hosts)
