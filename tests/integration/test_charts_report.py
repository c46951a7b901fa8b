"""Charts (PNG + SVG) and the self-contained HTML report: written, readable, not blank, no
external resources, and no crash on jobs with little or nothing to draw."""

from __future__ import annotations

import html
import re
import xml.etree.ElementTree as ET
from html.parser import HTMLParser
from pathlib import Path

import matplotlib.image
import numpy as np
import pytest
from conftest import FIXTURES, REAL, analyzed, gen, need_real

from nsys_collective.render.charts import write_charts
from nsys_collective.render.html import write_report
from nsys_collective.render.names import short_name

ALL_CHARTS = {"blocking", "timeline", "wait_heatmap", "transfer_vs_overlap", "alignment"}
REAL_SET = REAL / "fs24-allreduce2x-9rank-3node"
NO_NCCL_EXPORT = REAL / "versions" / "nsys-2024.6-fuser-h200.sqlite"


def _analyze(paths: list[Path]):
    _, result = analyzed(paths)
    return result, result.doc


def _build(paths: list[Path], out: Path):
    result, doc = _analyze(paths)
    charts = write_charts(result, out)
    write_report(result, charts, out / "report.html")
    return doc, charts, out / "report.html"


class _Resources(HTMLParser):
    """Every src/href of the page, and its tags left open."""

    VOID = {"meta", "link", "img", "br", "hr", "input", "wbr"}

    def __init__(self):
        super().__init__()
        self.urls, self.open = [], []

    def handle_starttag(self, tag, attrs):
        self.urls += [(tag, name, value) for name, value in attrs if name in ("src", "href")]
        if tag not in self.VOID:
            self.open.append(tag)

    def handle_endtag(self, tag):
        assert self.open and self.open[-1] == tag, f"</{tag}> closes <{self.open[-1] if self.open else None}>"
        self.open.pop()


def _check_charts(charts: dict[str, list[Path]]) -> None:
    for name, files in charts.items():
        png, svg = files
        assert png.suffix == ".png" and svg.suffix == ".svg" and png.stat().st_size and svg.stat().st_size, name
        pixels = matplotlib.image.imread(png)
        assert pixels.ndim == 3 and pixels.shape[0] > 200 and pixels.shape[1] > 400, name
        assert float(pixels[..., :3].std()) > 0.05, f"{name}: blank image"
        assert len(np.unique(pixels[..., :3].reshape(-1, 3)[::7], axis=0)) > 8, f"{name}: too few colours"
        assert ET.parse(svg).getroot().tag.endswith("svg"), name


def _check_report(report: Path, doc: dict) -> str:
    text = report.read_text(encoding="utf-8")
    page = _Resources()
    page.feed(text)
    page.close()
    assert not page.open, f"unclosed tags: {page.open}"
    for tag, attr, value in page.urls:
        assert not re.match(r"\s*(https?:)?//", value or ""), f"external resource <{tag} {attr}={value}>"
    images = [v for tag, attr, v in page.urls if tag == "img"]
    assert all(v.startswith("data:image/svg+xml;base64,") for v in images)
    assert not re.search(r"<script|@import|url\(\s*['\"]?https?:", text, re.I)
    for finding in doc["findings"]:
        # escaped as markupsafe does it (&#39;), read back as the text; long names carry <wbr> between their parts, a figure
        # a no-break space before its unit
        assert finding in html.unescape(text.replace("<wbr>", "")).replace("\xa0", " ")
    return text


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    return _build(sorted((FIXTURES / "demo-4rank-2host").glob("*.sqlite")), tmp_path_factory.mktemp("demo"))


def test_demo_charts_are_written_and_not_blank(demo):
    doc, charts, _ = demo
    # Nothing slowed the demo's transfers (the fit finds every kernel indistinguishable from no
    # effect), so its report says so in a sentence instead of the transfers-against-compute chart.
    assert not any(e["contention_ns"] for e in doc["contention"])
    assert set(charts) == ALL_CHARTS - {"transfer_vs_overlap"}
    _check_charts(charts)


def test_saving_draws_what_savefig_draws(tmp_path):
    """save_figure draws each figure once per file (not savefig's extra laying-out draws): its PNG
    must be matplotlib's own savefig PNG of the same figure, pixel for pixel."""
    import matplotlib
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    from nsys_collective.render import charts

    result, _ = _analyze(sorted((FIXTURES / "demo-4rank-2host").glob("*.sqlite")))
    for name in ("timeline", "wait_heatmap"):
        with matplotlib.rc_context(charts.REPORT_STYLE):
            fast = charts.save_figure(charts._DRAW[name](result), tmp_path / name)
            plain = charts._DRAW[name](result)
            FigureCanvasAgg(plain)
            plain.savefig(tmp_path / f"{name}-savefig.png", dpi=charts.DPI)
        assert np.array_equal(matplotlib.image.imread(fast[0]), matplotlib.image.imread(tmp_path / f"{name}-savefig.png")), name
        ET.parse(fast[1])  # the SVG is whole


def test_every_chart_is_listed_once_in_each_order():
    from nsys_collective.render import chart_list, charts

    assert tuple(charts._DRAW) == chart_list.CHART_NAMES  # the drawing and the list (no matplotlib) agree
    assert sorted(chart_list.COSTLIEST_FIRST) == sorted(chart_list.CHART_NAMES)


def test_the_transfers_against_compute_chart_where_a_kernel_slowed_them(tmp_path):
    """A generated job where one kernel slows the transfers it overlaps: the chart is drawn, not blank."""
    gen.generate(tmp_path / "job", scenario="kernel_contention", seed=1, ranks=4, hosts=2, steps=6,
                 kernels_per_step=40, buckets=3)
    doc, charts, report = _build(sorted((tmp_path / "job").glob("*.sqlite")), tmp_path / "out")
    assert any((e["contention_ns"] or 0) > 0 for e in doc["contention"])
    assert {"transfer_vs_overlap", "timeline", "wait_heatmap"} <= set(charts)
    _check_charts(charts)


def test_demo_report_is_self_contained_and_complete(demo):
    doc, charts, report = demo
    text = _check_report(report, doc)
    assert text.count("data:image/svg+xml;base64,") == len(charts)
    headings = re.findall(r"<h2>(.*?)</h2>", text)
    assert headings == ["Verdict", "Charts", "Blocking causes", "Contention", "Stragglers", "Steps", "Worst collectives",
                        "Ranks", "Alignment quality", "Warnings"]
    # Each step's duration and its waiting and idle shares (issue 19); the coverage beside the ideal.
    assert "ProfilerStep#0" in text and "coverage" in text
    assert "DataLoader.__next__" in text  # the planted late launch
    # Long kernel names keep their full name in a title attribute.
    full = doc["blocking_kernels"][0]["kernel_full"]
    assert f'title="{html.escape(full)}"' in text


def test_balanced_job_does_not_crash(tmp_path):
    doc, charts, report = _build(sorted((FIXTURES / "balanced-2rank").glob("*.sqlite")), tmp_path)
    _check_charts(charts)
    _check_report(report, doc)


def test_single_rank_skips_charts_gracefully(tmp_path):
    # One rank of the demo: its NCCL work matches no other rank, nothing waits for anything.
    doc, charts, report = _build([FIXTURES / "demo-4rank-2host" / "rep_0.sqlite"], tmp_path)
    assert doc["collectives"] and charts == {}
    _check_report(report, doc)


def test_export_without_nccl_has_no_charts(tmp_path):
    doc, charts, report = _build([need_real(NO_NCCL_EXPORT)], tmp_path)
    assert not doc["collectives"] and charts == {}
    text = _check_report(report, doc)
    assert "No charts" in text and "data:image" not in text


def test_real_multi_host_job(tmp_path):
    doc, charts, report = _build(sorted(need_real(REAL_SET).glob("*.sqlite")), tmp_path)
    assert {"timeline", "wait_heatmap", "alignment"} <= set(charts)
    # the contention chart exists where the fit found some kernel slowed the transfers (here no compute overlaps them)
    assert ("transfer_vs_overlap" in charts) == any((e["contention_ns"] or 0) > 0 for e in doc["contention"])
    _check_charts(charts)
    _check_report(report, doc)


def test_short_name_keeps_names_readable():
    assert short_name("flash_fwd_kernel") == "flash_fwd_kernel"
    templated = "void flash::flash_fwd_kernel<Flash_fwd_kernel_traits<(int)128, (int)64>, (bool)1>(flash::Flash_fwd_params)"
    assert short_name(templated) == "flash_fwd_kernel"
    long = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_nn_n_tilesize128x256x64_warpgroupsize2x1x1_execute_segment_k_off_kernel__5x_cublas"
    cut = short_name(long, 48)
    assert len(cut) == 48 and cut.startswith("sm90_xmma_gemm") and cut.endswith("cublas") and "…" in cut
    assert short_name(None) == "?"


def _relative_hashes(folder: Path) -> dict[str, str]:
    from conftest import tree_hashes

    return {Path(p).relative_to(folder).as_posix(): h for p, h in tree_hashes(folder).items()}


def test_out_draws_the_charts_off_the_command_and_without_a_server_the_same_bytes(tmp_path):
    """`analyze --out` never loads matplotlib in the command (a server forked at its start draws);
    a server that died leaves its charts to the command, which draws the same bytes."""
    import subprocess
    import sys

    probe = ("import sys; sys.argv = ['x', 'analyze', sys.argv[1], '--out', sys.argv[2]]\n"
             "from nsys_collective.cli.commands import app\n"
             "app(standalone_mode=False)\n"
             "print('matplotlib' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", probe, str(FIXTURES / "demo-4rank-2host"), str(tmp_path / "served")],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "False"

    from nsys_collective.render import outdir

    result, _ = _analyze([FIXTURES / "demo-4rank-2host"])
    outdir.start_chart_processes()
    outdir._started[0].process.kill()  # as if killed (the OOM killer) before the result came
    outdir.write_outputs(result, tmp_path / "here", force=False)
    assert not outdir._started
    assert _relative_hashes(tmp_path / "here") == _relative_hashes(tmp_path / "served")
