"""`--out` and `--perfetto` as users meet them: what is written, refused, and never half-written;
the report in a real headless browser."""

from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

import browser
from conftest import FIXTURES
from nsys_collective.cli import app

DEMO = FIXTURES / "demo-4rank-2host"
TABLES = ("collectives", "blame", "blocking", "contention", "ranks", "steps")


def run(*args):
    return CliRunner().invoke(app, ["analyze", *map(str, args)])


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    out = tmp_path_factory.mktemp("report") / "demo"
    result = run(DEMO, "--out", out, "--steps", "ProfilerStep#*")
    assert result.exit_code == 0, result.stderr
    return out


def test_out_folder_holds_tables_charts_and_report(report):
    names = {p.relative_to(report).as_posix() for p in report.rglob("*") if p.is_file()}
    assert {"report.html", "analysis.json"} <= names
    for table in TABLES:
        assert {f"{table}.csv", f"{table}.parquet"} <= names
    doc = json.loads((report / "analysis.json").read_text())
    collectives = pq.read_table(report / "collectives.parquet")
    assert collectives.num_rows == len(doc["collectives"]) == 18
    blame = pq.read_table(report / "blame.parquet").to_pylist()
    assert sum(len(c["blame"]) for c in doc["collectives"]) == len(blame)
    assert {b["nvtx"] for b in blame if b["cause"] == "host"} >= {"DataLoader.__next__"}
    assert pq.read_table(report / "steps.parquet").num_rows == 6
    rows = pq.read_table(report / "blocking.parquet").to_pylist()
    host = [r for r in rows if r["cause"] == "host"]
    assert host and all(r["name"] for r in host) and all(r["slowdown"] > 0.5 for r in host)  # the loader stall: far longer
    assert any(r["slowdown"] is not None for r in rows), "columns only some rows have survive in Parquet"
    assert any(n.startswith("charts/") and n.endswith(".png") for n in names)
    assert any(n.startswith("charts/") and n.endswith(".svg") for n in names)


def test_report_loads_in_a_real_browser_without_errors(report, tmp_path):
    if browser.find_browser() is None:
        pytest.skip("no headless Chromium on PATH (scripts/test.sh installs Debian's chromium-headless-shell as root)")
    errors, png = browser.load(report / "report.html")
    assert errors == []
    shot = tmp_path / "report.png"
    shot.write_bytes(png)
    import matplotlib.image

    pixels = matplotlib.image.imread(shot)
    assert pixels.shape[0] > 1000 and pixels.std() > 0.05, "the screenshot is not blank"


def test_existing_folder_is_refused_unless_forced(tmp_path):
    out = tmp_path / "out"
    assert run(DEMO, "--out", out).exit_code == 0
    (out / "report.html").write_text("old")
    result = run(DEMO, "--out", out)
    assert result.exit_code == 2 and "not empty" in result.stderr and "--force" in result.stderr
    assert result.stdout == "", "refused before any analysis"
    assert (out / "report.html").read_text() == "old"
    result = run(DEMO, "--out", out, "--force")
    assert result.exit_code == 0, result.stderr
    assert (out / "report.html").read_text() != "old"
    assert [p.name for p in tmp_path.iterdir()] == ["out"], "no temporary folder left"


def test_a_failure_while_writing_leaves_nothing(tmp_path, monkeypatch):
    import nsys_collective.render.html as report_html

    def broken(*args, **kwargs):
        raise KeyboardInterrupt  # as if the user pressed Ctrl-C while the report was written

    monkeypatch.setattr(report_html, "write_report", broken)
    out = tmp_path / "out"
    result = run(DEMO, "--out", out)
    assert result.exit_code != 0
    assert list(tmp_path.iterdir()) == [], "neither the folder nor a temporary one"


def test_perfetto_file_and_json_on_stdout(tmp_path):
    trace = tmp_path / "job.trace.json"
    result = CliRunner().invoke(app, ["analyze", str(DEMO), "--json", "--perfetto", str(trace)])
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["summary"]["collectives"] == 18
    events = json.loads(trace.read_text())["traceEvents"]
    assert {e["pid"] for e in events} == {1, 2, 3, 4}
    assert "wrote" in result.stderr and "wrote" not in result.stdout
