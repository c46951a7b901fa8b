"""Kernel and NVTX names are data, never markup or formulas: mathtext is off in every chart, CSV
cells a spreadsheet would evaluate are neutralized (CSV only), and values of absurd magnitude do
not break the charts (issue 13, item 4)."""

from __future__ import annotations

import csv
import gzip
import json
import shutil
import sqlite3
import subprocess
import sys

import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from conftest import FIXTURES, gen
from nsys_collective.cli import app

DEMO = FIXTURES / "demo-4rank-2host"
# The kernel that blocks the demo's collectives (rank 3) and the NVTX range of its late launches (rank 0).
GEMM = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_nn_n_tilesize128x256x64_warpgroupsize2x1x1_execute_segment_k_off_kernel__5x_cublas"
NVTX = "DataLoader.__next__"


def renamed(tmp_path, names: dict[str, str]):
    """The demo job with strings renamed in every rank's export."""
    job = tmp_path / "job"
    shutil.copytree(DEMO, job)
    for export in job.glob("*.sqlite"):
        with sqlite3.connect(export) as db:
            for old, new in names.items():
                db.execute("UPDATE StringIds SET value = ? WHERE value = ?", (new, old))
        db.close()
    return job


def test_names_with_dollar_signs_are_drawn_as_text(tmp_path):
    kernel, nvtx = r"gemm_$\undefinedmacro{x}$_kernel", r"Data$\frac{1}{$Loader$"
    job = renamed(tmp_path, {GEMM: kernel, NVTX: nvtx})
    result = CliRunner().invoke(app, ["analyze", str(job), "--out", str(tmp_path / "out")])
    assert result.exit_code == 0, result.stderr
    assert (tmp_path / "out" / "charts" / "blocking.svg").is_file() and (tmp_path / "out" / "charts" / "timeline.png").is_file()
    doc = json.loads((tmp_path / "out" / "analysis.json").read_text())
    assert doc["blocking_kernels"][0]["kernel_full"] == kernel
    assert {e["nvtx"] for e in doc["blocking_launches"]} >= {nvtx}
    compared = CliRunner().invoke(app, ["compare", str(DEMO), str(job), "--chart", str(tmp_path / "cmp.png")])
    assert compared.exit_code == 0, compared.stderr


@pytest.mark.parametrize("cell, csv_text", [
    ("=1+2", "'=1+2"), ("+1", "'+1"), ("-2+3", "'-2+3"), ("@SUM(A1)", "'@SUM(A1)"), ("\tx", "'\tx"), ("\rx", "'\rx"),
    ("gemm=1", "gemm=1"), ("", ""), (-5, -5), (1.5, 1.5), (None, None),
])
def test_csv_cells_a_spreadsheet_would_evaluate_are_neutralized(cell, csv_text):
    from nsys_collective.render.tables import csv_cell

    assert csv_cell(cell) == csv_text


def test_formula_names_are_quoted_in_csv_and_exact_in_parquet_and_json(tmp_path):
    kernel, nvtx = '=HYPERLINK("http://evil.example","x")', "@SUM(1+1)*cmd|' /C calc'!A0"
    job = renamed(tmp_path, {GEMM: kernel, NVTX: nvtx})
    out = tmp_path / "out"
    result = CliRunner().invoke(app, ["analyze", str(job), "--out", str(out)])
    assert result.exit_code == 0, result.stderr
    with open(out / "blocking.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert {r["name_full"] for r in rows} >= {"'" + kernel, "'" + nvtx}
    assert not any(v.startswith(("=", "+", "@")) for r in rows for v in r.values())
    assert all(not r["excess_ns"].startswith("'") for r in rows), "numbers stay numbers"
    parquet = pq.read_table(out / "blocking.parquet").to_pylist()
    assert {r["name_full"] for r in parquet} >= {kernel, nvtx}
    doc = json.loads((out / "analysis.json").read_text())
    assert doc["blocking_kernels"][0]["kernel_full"] == kernel


def test_absurd_kineto_durations_do_not_break_the_report(tmp_path):
    job = tmp_path / "job"
    gen.generate(job, ranks=2, hosts=1, steps=3, kernels_per_step=20, buckets=2, scenario="slow_kernel", seed=5, format="kineto")
    trace = sorted(job.glob("*.json.gz"))[1]
    with gzip.open(trace, "rt") as f:
        doc = json.load(f)
    kernels = [e for e in doc["traceEvents"] if e.get("cat") == "kernel"]
    nccl = [e for e in kernels if e["name"].startswith("nccl")]
    compute = [e for e in kernels if not e["name"].startswith("nccl")]
    nccl[2]["dur"] = compute[3]["dur"] = 9.2e15  # µs: 290 years
    compute[-5]["dur"] = 2.5e15
    with gzip.open(trace, "wt") as f:
        json.dump(doc, f)
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, "-m", "nsys_collective", "analyze", str(job), "--out", str(out)],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert (out / "report.html").is_file()
    assert all(line.startswith(("warning: ", "wrote ")) for line in proc.stderr.splitlines()), proc.stderr


def test_a_chart_that_cannot_be_drawn_is_left_out_with_a_warning(tmp_path, monkeypatch):
    from nsys_collective.render import charts

    def overflow(result):
        raise RuntimeError("In draw_glyphs_to_bitmap: Could not convert glyph to bitmap (raster overflow)")

    monkeypatch.setitem(charts._DRAW, "alignment", overflow)
    out = tmp_path / "out"
    result = CliRunner().invoke(app, ["analyze", str(DEMO), "--out", str(out)])
    assert result.exit_code == 0, result.stderr
    assert (out / "report.html").is_file() and (out / "charts" / "blocking.png").is_file()
    assert not (out / "charts" / "alignment.png").exists()
    [line] = [w for w in result.stderr.splitlines() if "alignment" in w]
    assert line.startswith("warning: ") and "1 chart" in line and "raster overflow" in line


def test_chart_style_turns_mathtext_off():
    from nsys_collective.render.charts import STYLE

    assert STYLE["text.parse_math"] is False
