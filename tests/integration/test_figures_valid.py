"""No output figure is negative and no share lies outside [0, 1]: asserted where the document is
built, and odd-but-valid input (swapped or missing times) never gets that far (issue 13, item 3)."""

from __future__ import annotations

import dataclasses
import json
import shutil
import sqlite3

import numpy as np
import pytest
from typer.testing import CliRunner

from conftest import FIXTURES, analyzed
from nsys_collective.cli import app
from nsys_collective.result import InvalidFigure, check_figures, checked_plain, plain

DEMO = FIXTURES / "demo-4rank-2host"
# What may be negative: clock corrections, relative changes, instants on the aligned clock, and
# what-if savings (a fix can make others wait longer).
SIGNED = {"clock_offset_ns", "offset_ns", "clock_drift_ppm", "drift_ppm", "slowdown", "t_ref_ns", "start_ns",
          "last_arrival_ns", "first_ns", "last_ns", "wait_saved_ns", "step_time_saved_ns", "avoidable_wait_ns"}


def invalid_figures(value, where="$", name=None) -> list[str]:
    """Every number of a JSON document that is negative where it must not be, or a share outside [0, 1]."""
    if isinstance(value, dict):
        return [p for k, v in value.items() for p in invalid_figures(v, f"{where}.{k}", k if not k.isdigit() else name)]
    if isinstance(value, list):
        return [p for i, v in enumerate(value) for p in invalid_figures(v, f"{where}[{i}]", name)]
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return []
    if name and name.endswith("_share") and not 0 <= value <= 1:
        return [f"{where}={value}"]
    return [f"{where}={value}"] if value < 0 and name not in SIGNED else []


@pytest.fixture(scope="module")
def demo():
    return analyzed(sorted(DEMO.glob("*.sqlite")))[1]


def replace_in(document, path: str, value):
    """The document with one field (a path such as 'collectives.3.transfer_ns') replaced."""
    head, _, rest = path.partition(".")
    if isinstance(document, tuple):
        items = list(document)
        items[int(head)] = replace_in(items[int(head)], rest, value) if rest else value
        return tuple(items)
    if isinstance(document, dict):
        return {**document, int(head): value}
    return dataclasses.replace(document, **{head: replace_in(getattr(document, head), rest, value) if rest else value})


# The walk that builds the JSON data checks as check_figures does (Result.checked).
CHECKS = pytest.mark.parametrize("check", [check_figures, checked_plain], ids=["check_figures", "checked_plain"])


def test_the_demo_document_passes_the_check(demo):
    check_figures(demo.document)
    assert invalid_figures(demo.doc) == []
    assert json.dumps(checked_plain(demo.document), indent=2) == json.dumps(plain(demo.document), indent=2)


@pytest.mark.parametrize("path, value, shown", [
    ("collectives.3.transfer_ns", -5, "collectives[3].transfer_ns"),
    ("collectives.0.wait_cost_ns", -1, "collectives[0].wait_cost_ns"),
    ("ranks.1.nccl_time_ns", -7, "ranks[1].nccl_time_ns"),
    ("summary.wait_ns", -5_390_000_000_000_000_000, "summary.wait_ns"),
    ("summary.explained_wait_share", -5.11, "summary.explained_wait_share"),
    ("summary.explained_wait_share", 1.2, "summary.explained_wait_share"),
    ("ranks.0.overlap_share", 1.5, "ranks[0].overlap_share"),
    ("summary.idle_wait_ns.0", -3, "summary.idle_wait_ns[0]"),
    ("blocking_kernels.0.inflicted_wait_ns", -9, "blocking_kernels[0].inflicted_wait_ns"),
    ("blocking_kernels.0.blame_ns", -9, "blocking_kernels[0].blame_ns"),
    ("whatif.fidelity.explained_start_share", 1.5, "whatif.fidelity.explained_start_share"),
    ("collectives.2.sm_pressure", float("nan"), "collectives[2].sm_pressure"),
    ("blocking_kernels.0.slowdown", -1.5, "blocking_kernels[0].slowdown"),
])
@CHECKS
def test_an_invalid_figure_is_an_error_naming_the_field(demo, path, value, shown, check):
    with pytest.raises(InvalidFigure, match=shown.replace("[", r"\[").replace("]", r"\]")):
        check(replace_in(demo.document, path, value))


@pytest.mark.parametrize("path, value", [("ranks.2.clock_offset_ns", -1_128_524), ("blocking_kernels.0.slowdown", -0.2),
                                         ("alignment.t_ref_ns", -1), ("blocking_kernels.0.wait_saved_ns", -3_000_000)])
@CHECKS
def test_signed_figures_may_be_negative(demo, path, value, check):
    check(replace_in(demo.document, path, value))


def test_the_analysis_refuses_to_print_a_negative_figure(monkeypatch):
    import nsys_collective.model.job as job

    real = job.instance_timing

    def broken(*args):
        timing = real(*args)
        timing.transfer[0] = -5  # as a bug would
        return timing

    monkeypatch.setattr(job, "instance_timing", broken)
    result = CliRunner().invoke(app, ["analyze", str(DEMO), "--json"])
    assert result.exit_code == 1 and result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "collectives[0].transfer_ns" in lines[0] and "-5" in lines[0], result.stderr


def _crafted(tmp_path, update: str):
    """The demo job with one statement run on rank 1's export (one of its NCCL kernels)."""
    job = tmp_path / "job"
    shutil.copytree(DEMO, job)
    with sqlite3.connect(job / "rep_1.sqlite") as db:
        [row] = db.execute("SELECT k.rowid FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s ON s.id = k.shortName "
                           "WHERE s.value LIKE 'nccl%' ORDER BY k.start LIMIT 1 OFFSET 1").fetchall()
        db.execute(update.format(row=row[0]))
    db.close()
    return job


@pytest.mark.parametrize("case, update", [
    ("swapped", "UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET start = end, end = start WHERE rowid = {row}"),
    ("text", "UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET start = 'abc' WHERE rowid = {row}"),
    ("negative", "UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET start = -5, end = -3 WHERE rowid = {row}"),
    ("63 years long", "UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET end = start + 2000000000000000000 WHERE rowid = {row}"),
])
def test_odd_kernel_times_give_no_invalid_figure_and_a_warning(tmp_path, case, update):
    job = _crafted(tmp_path, update)
    result = CliRunner().invoke(app, ["analyze", str(job), "--json", "--out", str(tmp_path / "out")])
    assert result.exit_code == 0, result.stderr
    doc = json.loads(result.stdout)
    assert invalid_figures(doc) == []
    assert any("rep_1.sqlite" in w and "1 " in w for w in doc["warnings"]), doc["warnings"]
    # One kernel less on one rank: the job's totals stay of the demo's magnitude (22 ms of wait).
    assert doc["summary"]["wait_ns"] < 1e9 and doc["alignment"]["violations_after"] >= 0
    assert (tmp_path / "out" / "report.html").is_file()


def _screened_kernels(start, end, capture_start=None):
    """(kept kernel starts, dropped-row warnings) of an export whose kernels have these times."""
    from nsys_collective.ingest.capture import Export, Session
    from nsys_collective.model.trace import screen_gpu_work

    n = len(start)
    kernels = {"start": np.array(start, np.int64), "end": np.array(end, np.int64), "pid": np.ones(n, np.int64),
               "device": np.zeros(n, np.int64), "stream": np.full(n, 7), "correlation": np.arange(n)}
    empty = {c: np.zeros(0, np.int64) for c in kernels}
    export = Export(path=None, session=Session(None, None, True, None, None, capture_start_ns=capture_start), metadata={},
                    system_env={}, capture=[], strings=[], kernels=kernels, memcpy=empty, memset=empty, runtime={}, nvtx={},
                    gpu_metrics={}, gpu_metric_names={}, gpus={}, sync={}, cuda_event={}, cpu_ops={})
    warnings = []
    screened, _ = screen_gpu_work(export, "rep.sqlite", warnings)
    return screened.kernels["start"].tolist(), warnings


def test_rows_with_missing_negative_reversed_or_absurd_times_are_dropped_and_counted():
    kept, warnings = _screened_kernels([10, -1, 30, 50, 2**62 + 1], [20, 5, 25, 60, 2**62 + 9])
    assert kept == [10, 50] and warnings == ["rep.sqlite: 3 kernels rows with missing, negative, reversed or out-of-range times dropped"]
    # Nothing before the capture started, nothing more than 30 days after.
    day = 24 * 3600 * 10**9
    capture = 1_750_000_000 * 10**9
    kept, warnings = _screened_kernels([capture - 1, capture, capture + 29 * day], [capture, capture + 5, capture + 31 * day], capture)
    assert kept == [capture] and "2 kernels rows" in warnings[0]
    # Where the capture's start is unknown (Kineto), nothing lasts longer than 30 days either.
    kept, warnings = _screened_kernels([capture, capture + 400 * day], [capture + 31 * day, capture + 400 * day + 5])
    assert kept == [capture + 400 * day] and "1 kernels rows" in warnings[0]


def test_causality_violations_are_counted_right_whatever_the_durations():
    from nsys_collective.model.alignment import count_violations

    rng = np.random.default_rng(7)
    inst = np.repeat(np.arange(40), 4)
    start = rng.integers(0, 10**6, len(inst)) + 1_750_000_000 * 10**9
    end = start + rng.integers(0, 10**6, len(inst))
    end[5] = start[5] + 2 * 10**18  # a 63-year kernel made instance * span overflow int64

    def brute(inst, start, end):
        return sum(int(e < s2) for i, e in zip(inst, end) for j, s2 in zip(inst, start) if i == j)

    assert count_violations(inst, start, end) == brute(inst, start, end) > 0
