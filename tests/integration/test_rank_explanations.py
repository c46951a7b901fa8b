"""Per-rank explanations (issue 14, point 6): why overlap is zero (same stream, with the fix), the
GPU idle time split into host wait, sync wait and other, and host synchronization time per process.
Planted with the generator (a data-loader stall, tensor-parallel compute waiting on every
all-reduce) and counted on the real sets."""

from __future__ import annotations

import sqlite3
from types import SimpleNamespace

import numpy as np
import pytest

from conftest import REAL, analyzed, gen, need_real
from nsys_collective.attribution.idle import idle_split
from nsys_collective.attribution.overlap import zero_overlap

JOB = dict(ranks=4, hosts=2, steps=4, buckets=3, microbatches=2, kernels_per_step=40, seed=9)
IDLE = ("idle_host_wait_ns", "idle_sync_wait_ns", "idle_other_ns")


def ranks_of(folder):
    return analyzed([folder])[1].doc["ranks"]


@pytest.mark.parametrize("style", ["ddp", "fsdp", "tp"])
def test_a_planted_data_loader_stall_is_host_wait_to_the_nanosecond(tmp_path, style):
    """The stalled rank's GPU idles while its host sits in DataLoader.__next__ at the start of each
    step (after the previous step's .item()): the host wait grows by exactly the planted stall of
    steps 1..3 over the no-cause twin (step 0's stall lies before the rank's first GPU op, at the
    capture's edge, where no idle is counted). No other rank's host wait moves."""
    gen.generate(tmp_path / "b", style=style, scenario="balanced", **JOB)
    twin = ranks_of(tmp_path / "b")
    truth = gen.generate(tmp_path / "s", style=style, scenario="host_stall", **JOB)
    stalled = ranks_of(tmp_path / "s")
    (cause,) = truth["causes"]
    for before, after in zip(twin, stalled):
        grew = after["idle_host_wait_ns"] - before["idle_host_wait_ns"]
        assert grew == (sum(cause["extra_ns_per_step"][1:]) if after["rank"] == cause["rank"] else 0), after["rank"]
        assert after["idle_ns"] == sum(after[k] for k in IDLE)


def test_compute_waiting_on_every_collective_is_serialized(tmp_path):
    """Tensor parallel: the compute stream waits for each all-reduce (work.wait()) on NCCL's own
    stream: no overlap, and not because of a shared stream."""
    gen.generate(tmp_path, style="tp", scenario="balanced", **JOB)
    _, result = analyzed([tmp_path])
    assert [(r["overlap_share"], r["zero_overlap_cause"]) for r in result.doc["ranks"]] == [(0.0, "serialized")] * 4
    assert not any("0% communication/computation overlap" in f for f in result.doc["findings"])
    gen.generate(tmp_path / "ddp", style="ddp", scenario="balanced", **JOB)
    assert {r["zero_overlap_cause"] for r in ranks_of(tmp_path / "ddp")} == {None}  # DDP overlaps


def real(name):
    return need_real(REAL / name)


def test_real_nsys_ai_report_runs_nccl_on_the_compute_stream():
    folder = real("nsys-ai-2gpu")
    _, result = analyzed([folder])
    doc = result.doc
    assert [(r["pid"], r["overlap_share"], r["zero_overlap_cause"]) for r in doc["ranks"]] == [
        (144, 0.0, "same_stream"), (145, 0.0, "same_stream")]
    assert ("ranks 0, 1: 0% communication/computation overlap because the NCCL kernels run on the compute streams "
            "7, 15, one kernel at a time; put NCCL on a stream of its own") in doc["findings"][-1]
    assert "async_op=True" in doc["findings"][-1]


def test_real_host_synchronization_is_per_process_not_per_device():
    """Both processes of nsys-ai-2gpu record deviceId 0 in their synchronization records; the
    host's synchronize calls are counted per process, and each rank keeps its own records."""
    folder = real("nsys-ai-2gpu")
    path = next(folder.glob("*.sqlite"))
    with sqlite3.connect(f"file:{path}?immutable=1", uri=True) as db:
        calls = dict(((pid, (ns, n)) for pid, ns, n in db.execute(
            "SELECT (r.globalTid >> 24) & 16777215, SUM(r.end - r.start), COUNT(*) FROM CUPTI_ACTIVITY_KIND_RUNTIME r "
            "JOIN StringIds s ON s.id = r.nameId WHERE s.value LIKE 'cuda%Synchronize%' GROUP BY 1")))
        records = dict(db.execute("SELECT (globalPid >> 24) & 16777215, COUNT(*) FROM CUPTI_ACTIVITY_KIND_SYNCHRONIZATION "
                                  "GROUP BY 1"))
        devices = {d for (d,) in db.execute("SELECT DISTINCT deviceId FROM CUPTI_ACTIVITY_KIND_SYNCHRONIZATION")}
    assert devices == {0} and calls == {144: (163_599_685, 16), 145: (160_935_048, 17)}
    job, result = analyzed([folder])
    assert {r["pid"]: (r["host_sync_ns"], r["host_sync_calls"]) for r in result.doc["ranks"]} == calls
    assert {t.pid: len(t.stream_waits[0]["kind"]) for t in job.traces.values()} == records == {144: 178, 145: 188}


def test_real_sets_without_compute_say_so_and_idle_adds_up():
    for name in ("fs24-ring-6rank-2node", "nccl-net-2rank-2node"):
        for r in ranks_of(real(name)):
            assert r["zero_overlap_cause"] == "no_compute" and r["idle_ns"] == sum(r[k] for k in IDLE)


def test_the_idle_split_of_hand_made_gaps():
    """Ops (stream, start, end, launch): a gap the host caused (launch 40 us into it), a gap where
    the op was launched in time but waited on an event (a stream wait on its stream), and a gap
    with no reason recorded."""
    ops = [(7, 0, 100, 0), (7, 200, 300, 140), (9, 400, 500, 150), (7, 600, 700, 310), (7, 700, 800, 320)]
    stream, start, end, launch = (np.array(c) for c in zip(*ops))
    names = ["cudaStreamWaitEvent_v3020", "cudaLaunchKernel_v7000"]
    gpu = SimpleNamespace(start=start, end=end, launch=launch, stream=stream, is_kernel=np.ones(5, bool),
                          is_nccl=np.array([False, False, True, False, False]))
    calls = SimpleNamespace(start=np.array([145]), end=np.array([146]), correlation=np.array([99]), name=np.array([0]),
                            tid=np.array([1]))
    syncs = {"kind": np.array([2]), "stream": np.array([9]), "event": np.array([1]), "correlation": np.array([99]),
             "record_correlation": np.array([-1])}
    trace = SimpleNamespace(gpu=gpu, calls=calls, stream_waits=(syncs, None),
                            names=lambda ids: np.array([names[i] for i in ids]))
    got = idle_split(trace, np.ones(5, bool))
    # gap 100-200: host until 140, then 60 other; gap 300-400: launched at 150, gated: 100 sync;
    # gap 500-600: launched at 310, nothing recorded: 100 other
    assert got == {"idle_ns": 300, "idle_host_wait_ns": 40, "idle_sync_wait_ns": 100, "idle_other_ns": 160}
    assert zero_overlap(trace, np.ones(5, bool), overlap_ns=0, nccl_time_ns=100) == ("serialized", [9])
    gpu.stream[2] = 7
    assert zero_overlap(trace, np.ones(5, bool), overlap_ns=0, nccl_time_ns=100) == ("same_stream", [7])
    assert zero_overlap(trace, np.ones(5, bool), overlap_ns=5, nccl_time_ns=100) == (None, [])
