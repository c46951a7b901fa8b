"""The cross-rank model against planted truth and real jobs: matching, clock alignment, timing."""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from conftest import analyzed, gen
from nsys_collective.cli import app


def analyze_dir(folder):
    """The model (model.job.Job) of the folder's exports."""
    job, _ = analyzed(sorted(folder.glob("*.sqlite")))
    return job


def clock_errors(analysis, truth) -> list[float]:
    """|aligned - true| in ns for every host, at the start, middle and end of the capture."""
    t0 = truth["t0_ns"]
    times = np.linspace(truth["collectives"][0]["arrival_ns"][0], truth["collectives"][-1]["end_ns"][0], 5).astype(np.int64)
    errors = []
    for host, clock in truth["hosts"].items():
        rank = clock["ranks"][0]
        recorded = times + clock["offset_ns"] + np.rint(clock["drift_ppm"] * 1e-6 * (times - t0)).astype(np.int64)
        aligned = analysis.alignment.correct(np.full(len(times), rank), recorded)
        errors += np.abs(aligned - times).tolist()
    return errors


@pytest.fixture(scope="module")
def three_hosts(tmp_path_factory):
    folder = tmp_path_factory.mktemp("three-hosts")
    truth = gen.generate(folder, ranks=6, hosts=3, steps=8, kernels_per_step=28, buckets=2, scenario="slow_kernel", seed=11)
    return folder, truth


def test_offsets_of_three_hosts_recovered_within_10us(three_hosts):
    folder, truth = three_hosts
    offsets = [h["offset_ns"] for h in truth["hosts"].values()]
    assert max(offsets) - min(offsets) > 1_000_000, "planted offsets are milliseconds apart"
    analysis = analyze_dir(folder)
    errors = clock_errors(analysis, truth)
    print(f"max clock error {max(errors) / 1e3:.2f} us over {len(truth['hosts'])} hosts")
    assert max(errors) <= 10_000
    a = analysis.alignment
    assert a.violations_before > 0 and a.violations_after == 0
    assert a.spread_after.max < a.spread_before.max


def test_planted_straggler_found_on_every_instance(three_hosts):
    folder, truth = three_hosts
    analysis = analyze_dir(folder)
    t = analysis.timing
    assert len(analysis.collectives) == len(truth["collectives"])
    assert t.straggler.tolist() == [c["straggler_rank"] for c in truth["collectives"]]
    planted = {c["straggler_rank"] for c in truth["collectives"]}
    assert planted == {truth["causes"][0]["rank"]}
    # Wait cost and transfer on aligned clocks match the true ones to a few µs per rank.
    np.testing.assert_allclose(t.wait_cost, [c["wait_cost_ns"] for c in truth["collectives"]], atol=6 * 10_000)
    np.testing.assert_allclose(t.transfer, [c["transfer_ns"] for c in truth["collectives"]], atol=10_000)
    assert all(r.rank_source == "environment (RANK)" for r in analysis.ranks)


def test_drift_of_40ppm_over_seconds_recovered_within_30us(tmp_path):
    truth = gen.generate(tmp_path, ranks=4, hosts=3, steps=500, kernels_per_step=28, buckets=2, scenario="balanced",
                         seed=12, drift_ppm=40.0)
    span = truth["collectives"][-1]["end_ns"][0] - truth["collectives"][0]["arrival_ns"][0]
    assert span >= 2_000_000_000, f"capture of {span / 1e9:.1f} s is too short to show drift"
    analysis = analyze_dir(tmp_path)
    assert analysis.alignment.drift_fitted
    errors = clock_errors(analysis, truth)
    print(f"max clock error {max(errors) / 1e3:.2f} us, drift {analysis.alignment.drift_ppm} ppm")
    assert max(errors) <= 30_000
    assert analysis.alignment.violations_after == 0


def test_no_drift_is_fitted_when_there_is_none(three_hosts):
    folder, _ = three_hosts
    analysis = analyze_dir(folder)
    assert not analysis.alignment.drift_fitted and np.all(analysis.alignment.drift_ppm == 0)


@pytest.mark.parametrize("job, collectives", [("fs24-allreduce2x-9rank-3node", 2), ("fs24-ring-6rank-2node", 1)])
def test_real_fs24_jobs(real_dir, job, collectives):
    folder = real_dir / job
    analysis = analyze_dir(folder)
    c, a = analysis.collectives, analysis.alignment
    n = len(list(folder.glob("*.sqlite")))
    assert len(analysis.ranks) == n and len(c) == collectives
    assert list(c.communicators.values()) == [list(range(n))], "every rank in the one communicator"
    assert all(r.rank_source.startswith("environment (") for r in analysis.ranks)  # PMI_RANK, SLURM_PROCID
    print(f"{job}: end spread before {a.spread_before}, after {a.spread_after}; violations {a.violations_before} -> {a.violations_after}")
    assert a.violations_after == 0
    assert a.spread_after.max <= a.spread_before.max
    assert [w for w in analysis.warnings if "match" in w] == []


def test_real_two_gpu_report_pairs_its_send_recv_kernels(real_dir):
    analysis = analyze_dir(real_dir / "nsys-ai-2gpu")
    c = analysis.collectives
    assert [r.device for r in analysis.ranks] == [0, 1]
    assert len(c) == 33 and set(c.nranks.tolist()) == {2}, "33 kernels on each GPU, matched in pairs"
    # PyTorch's NVTX ranges say what the SendRecv kernels did: all-to-all.
    assert {analysis.op_name(i) for i in range(len(c))} == {"AllToAll", "SendRecv"}
    assert analysis.alignment.method.startswith("none"), "one host, one clock: nothing to fit"
    # Paired kernels overlap in time on the shared clock: each is the other's partner.
    s, e = analysis.aligned_start.reshape(-1, 2), analysis.aligned_end.reshape(-1, 2)
    assert np.all(s.max(axis=1) <= e.min(axis=1))


def run_json(*paths):
    result = CliRunner().invoke(app, ["analyze", *map(str, paths), "--json"])
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout), result


def test_truncated_capture_warns_and_analyzes_the_common_part(tmp_path):
    gen.generate(tmp_path, ranks=3, hosts=2, steps=4, kernels_per_step=28, buckets=2, scenario="balanced", seed=13)
    import sqlite3

    victim = tmp_path / "rep_2.sqlite"
    with sqlite3.connect(victim) as db:  # the last two NCCL kernels of rank 2 were never captured
        db.execute("DELETE FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE rowid IN (SELECT rowid FROM CUPTI_ACTIVITY_KIND_KERNEL "
                   "WHERE streamId = 13 ORDER BY start DESC LIMIT 2)")
    db.close()
    doc, result = run_json(tmp_path)
    assert doc["summary"]["collectives"] == 8 - 2
    assert any("2 NCCL operations on stream 13 beyond the 6" in w for w in doc["warnings"])


def test_single_rank_and_rank_without_nccl_work(real_dir):
    doc, _ = run_json(real_dir / "fs24-ring-6rank-2node" / "example_2_nsys_report_ault43.cscs.ch_485050.sqlite")
    assert doc["summary"]["ranks"] == 1 and any("nothing to match across ranks" in w for w in doc["warnings"])
    doc, _ = run_json(real_dir / "fs24-ring-6rank-2node", real_dir / "versions" / "nsys-2024.6-fuser-h200.sqlite")
    assert doc["summary"]["ranks"] == 7 and doc["summary"]["collectives"] == 1
    assert any("no NCCL work" in w and "fuser" in w for w in doc["warnings"])


def test_json_contract_fields(real_dir):
    doc, result = run_json(real_dir / "fs24-allreduce2x-9rank-3node")
    a = doc["alignment"]
    assert {"method", "t_ref_ns", "hosts", "end_spread_ns_before", "end_spread_ns_after", "violations_before", "violations_after"} <= set(a)
    assert a["hosts"][0]["offset_ns"] == 0 and a["hosts"][0]["drift_ppm"] == 0.0
    host0 = next(r for r in doc["ranks"] if r["rank"] == 0)["host"]
    assert a["hosts"][0]["host"] == host0, "the host of rank 0 is the reference"
    for r in doc["ranks"]:
        clock = next(h for h in a["hosts"] if h["host"] == r["host"])
        assert r["clock_offset_ns"] == clock["offset_ns"] and r["clock_drift_ppm"] == clock["drift_ppm"]
    fields = {"id", "comm", "seq", "op", "bytes", "ranks", "start_ns", "last_arrival_ns", "straggler_rank", "skew_ns",
              "wait_cost_ns", "transfer_ns", "busbw_gbps", "blame"}
    assert all(fields <= set(c) for c in doc["collectives"]) and len(doc["collectives"]) == 2
    s = doc["summary"]
    assert s["collectives"] == 2 and s["ranks"] == 9 and s["wait_ns"] == sum(c["wait_cost_ns"] for c in doc["collectives"])
    assert s["top_straggler_rank"] in range(9)
    assert "Stragglers" in CliRunner().invoke(app, ["analyze", str(real_dir / "fs24-allreduce2x-9rank-3node")]).stdout
