"""What the what-if replay reads besides GPU work: CUDA synchronization and event-record activity
(nsys `CUPTI_ACTIVITY_KIND_SYNCHRONIZATION`/`_CUDA_EVENT`, Kineto `cuda_sync`/`cuda_event`) as the
`sync` and `cuda_event` tables, every runtime and driver call in `runtime`, and Kineto `cpu_op`
host ranges as `cpu_ops`. Counts equal a plain sqlite3 or json count; both SQLite readers agree."""

from __future__ import annotations

import gzip
import json
import sqlite3
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from conftest import REAL, need_real, no_real_data, real_params
import reference_reader  # tests/: the pure-Python oracle of the native reader
from nsys_collective import _native
from test_reader_hardening import BASE, assert_same_raw, kernel, launch

STORED = {"sync": "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION", "cuda_event": "CUPTI_ACTIVITY_KIND_CUDA_EVENT", "runtime": "CUPTI_ACTIVITY_KIND_RUNTIME"}
# Counts seen with plain sqlite3 on two files: a silent change fails here even where the readers
# and SQLite agree with each other.
OBSERVED = {
    "nsys-ai-2gpu/mfu_2gpu_before.sqlite": {"sync": 366, "cuda_event": 0, "runtime": 7466},
    "versions/nsys-2023.2-sgemm.sqlite": {"sync": 81, "cuda_event": 42, "runtime": 2307},
}
SYNC_COLUMNS = ["start", "end", "device", "stream", "correlation", "pid", "sync_type", "event", "event_sync_id",
                "event_record_correlation", "event_stream"]
CUDA_EVENT_COLUMNS = ["device", "stream", "correlation", "pid", "event", "event_sync_id", "time"]
CPU_OP_COLUMNS = ["start", "end", "type", "name", "domain", "pid", "tid", "domain_name"]


def count(path: Path, table: str) -> int:
    with sqlite3.connect(path.absolute().as_uri() + "?mode=ro&immutable=1", uri=True) as db:
        if db.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (table,)).fetchone() is None:
            return 0
        return db.execute(f'SELECT COUNT(*) FROM "{table}"').fetchone()[0]


def names(export: dict, ids) -> list:
    return [export["strings"][i] if i >= 0 else None for i in ids.tolist()]


def real_export(relative: str) -> Path:
    return need_real(REAL / relative)


@pytest.mark.parametrize("facts", real_params())
def test_real_sync_event_and_runtime_rows_equal_sqlite_counts(facts):
    path = REAL / facts["file"]
    (export,) = _native.read_exports([str(path)], 1)
    assert_same_raw(export, reference_reader.read_raw(path))
    assert list(export["sync"]) == SYNC_COLUMNS and list(export["cuda_event"]) == CUDA_EVENT_COLUMNS
    assert list(export["cpu_ops"]) == CPU_OP_COLUMNS and len(export["cpu_ops"]["start"]) == 0  # Kineto only
    for name, table in STORED.items():
        assert len(export[name]["correlation"]) == count(path, table), name
    if facts["file"] in OBSERVED:
        assert {name: len(export[name]["correlation"]) for name in STORED} == OBSERVED[facts["file"]]
    sync = export["sync"]
    assert np.all(np.diff(sync["start"]) >= 0) and np.all(sync["end"] >= sync["start"])
    assert set(sync["sync_type"].tolist()) <= {0, 1, 2, 3, 4}
    assert not np.any(sync["event"] == 0xFFFFFFFF) and not np.any(sync["stream"] == 0xFFFFFFFF)


def test_sync_rows_of_a_two_process_export():
    path = real_export("nsys-ai-2gpu/mfu_2gpu_before.sqlite")
    (export,) = _native.read_exports([str(path)], 1)
    sync = export["sync"]
    assert Counter(sync["sync_type"].tolist()) == {1: 133, 2: 200, 3: 33}  # event sync, stream wait, stream sync
    stream_sync = sync["sync_type"] == 3
    assert np.all(sync["event"][stream_sync] == -1) and np.all(sync["event_sync_id"][stream_sync] == -1)
    assert np.all(sync["event"][~stream_sync] >= 0) and np.all(sync["event_sync_id"][~stream_sync] > 0)
    assert set(sync["pid"].tolist()) == set(export["kernels"]["pid"].tolist())
    # No CUDA_EVENT rows in this derived file: nothing to link the waits to.
    assert np.all(sync["event_record_correlation"] == -1) and np.all(sync["event_stream"] == -1)
    # Driver calls (eventClass 1) come through beside runtime calls, under their own names.
    calls = Counter(names(export, export["runtime"]["name"]))
    assert calls["cuLaunchKernelEx"] == 402 and calls["cuKernelGetAttribute"] == 672
    assert (calls["cudaStreamWaitEvent_v3020"], calls["cudaEventRecord_v3020"], calls["cudaStreamSynchronize_v3020"]) == (200, 198, 33)


def test_a_wait_is_linked_to_its_event_record_by_event_sync_id():
    """nsys 2025+ writes eventSyncId on both tables; a context sync has no stream (0xFFFFFFFF)."""
    path = real_export("versions/nsys-2026.1-test-cuda.sqlite")
    (export,) = _native.read_exports([str(path)], 1)
    events, sync = export["cuda_event"], export["sync"]
    assert events["event"].tolist() == [1, 2] and events["event_sync_id"].tolist() == [1, 2]
    assert events["correlation"].tolist() == [130, 147] and events["stream"].tolist() == [7, 7]
    assert events["time"].tolist() == [-1, -1]  # timestamp 0: not collected
    assert (sync["sync_type"].tolist(), sync["stream"].tolist(), sync["event"].tolist()) == ([1], [-1], [2])
    assert (sync["event_record_correlation"].tolist(), sync["event_stream"].tolist()) == ([147], [7])
    assert sync["start"].tolist() == [export["session"]["utc_epoch_ns"] + 1453810849]


def test_older_exports_have_no_event_sync_ids():
    path = real_export("versions/nsys-2023.2-sgemm.sqlite")
    (export,) = _native.read_exports([str(path)], 1)
    assert np.all(export["sync"]["event_sync_id"] == -1) and np.all(export["cuda_event"]["event_sync_id"] == -1)
    assert np.all(export["cuda_event"]["time"] == -1)
    assert Counter(export["sync"]["sync_type"].tolist()) == {1: 48, 2: 33}


# ---------------------------------------------------------------------------------------------
# Kineto

DLRM = REAL / "kineto" / "param-dlrm-8rank"
HTA = REAL / "kineto" / "hta-trace_filter-2rank"


def _events(path: Path) -> list[dict]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as f:
        return json.load(f)["traceEvents"]


def kineto_traces() -> list[Path]:
    paths = sorted(DLRM.glob("*.json")) + sorted(HTA.glob("*.json.gz"))
    if not paths:
        pytest.skip(no_real_data(REAL / "kineto"))
    return paths


def test_real_kineto_cpu_ops_and_runtime_calls_equal_json_counts():
    paths = kineto_traces()
    for path, export in zip(paths, _native.read_kineto_traces([str(p) for p in paths], 2)):
        events = [e for e in _events(path) if e.get("ph") == "X"]
        cpu_ops = [e for e in events if e.get("cat") == "cpu_op"]
        ops = export["cpu_ops"]
        assert list(ops) == CPU_OP_COLUMNS
        assert len(ops["start"]) == len(cpu_ops), path.name
        assert np.all(np.diff(ops["start"]) >= 0) and np.all(ops["end"] >= ops["start"])
        assert set(names(export, ops["domain_name"])) == {"cpu_op"} and set(ops["type"].tolist()) == {59}
        assert Counter(names(export, ops["name"])) == Counter(e["name"] for e in cpu_ops)
        assert Counter(ops["tid"].tolist()) == Counter(e["tid"] for e in cpu_ops)
        calls = [e["name"] for e in events if e.get("cat") in ("cuda_runtime", "cuda_driver")]
        assert Counter(names(export, export["runtime"]["name"])) == Counter(calls)
        assert len(export["sync"]["start"]) == sum(e.get("cat") == "cuda_sync" for e in events) == 0
    by_name = {p.name: e for p, e in zip(paths, _native.read_kineto_traces([str(p) for p in paths], 2))}
    # Counts seen with json on two traces.
    assert len(by_name["worker0_step_12.1694128201545.pt.trace.json"]["cpu_ops"]["start"]) == 1633
    assert len(by_name["sampled_rank-0.json.gz"]["cpu_ops"]["start"]) == 2329
    assert Counter(names(by_name["worker0_step_12.1694128201545.pt.trace.json"], by_name["worker0_step_12.1694128201545.pt.trace.json"]["runtime"]["name"]))["cudaStreamWaitEvent"] == 44


def test_kineto_cuda_sync_and_cuda_event_map_to_the_nsys_tables(tmp_path):
    """Event layout from pytorch/kineto libkineto/src/CuptiActivity.cpp (CudaSyncActivity and
    CudaEventActivity::metadataJson): pid = device, tid = stream (-1 for a context sync)."""
    wait = {"ph": "X", "cat": "cuda_sync", "name": "Stream Wait Event", "pid": 0, "tid": 24, "ts": 1001.5, "dur": 0.25,
            "args": {"cuda_sync_kind": "Stream Wait Event", "wait_on_stream": 7, "wait_on_cuda_event_record_corr_id": 20,
                     "wait_on_cuda_event_id": 3, "stream": 24, "correlation": 21, "device": 0, "context": 1}}
    context = {"ph": "X", "cat": "cuda_sync", "name": "Context Sync", "pid": 0, "tid": -1, "ts": 1100.0, "dur": 50.0,
               "args": {"cuda_sync_kind": "Context Sync", "stream": -1, "correlation": 30, "device": 0, "context": 1}}
    stream = {"ph": "X", "cat": "cuda_sync", "name": "Stream Sync", "pid": 0, "tid": 7, "ts": 1050.0, "dur": 5.0,
              "args": {"cuda_sync_kind": "Stream Sync", "stream": 7, "correlation": 25, "device": 0, "context": 1}}
    record = {"ph": "X", "cat": "cuda_event", "name": "cudaEvent", "pid": 0, "tid": 7, "ts": 1000.5, "dur": 1,
              "args": {"event_id": 3, "stream": 7, "correlation": 20, "device": 0, "context": 1}}
    op = {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 77, "tid": 78, "ts": 990.0, "dur": 20.0, "args": {"External id": 5}}
    events = [kernel(1000.0, 5.0, 1), launch(999.0, 1.0, 1), wait, context, stream, record, op]
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"baseTimeNanoseconds": BASE, "traceEvents": events}))
    (export,) = _native.read_kineto_traces([str(path)], 1)
    sync = export["sync"]
    assert list(sync) == SYNC_COLUMNS
    assert sync["start"].tolist() == [BASE + 1_001_500, BASE + 1_050_000, BASE + 1_100_000]
    assert sync["sync_type"].tolist() == [2, 3, 4]  # CUPTI numbering, as nsys stores it
    assert sync["stream"].tolist() == [24, 7, -1] and sync["correlation"].tolist() == [21, 25, 30]
    assert sync["event"].tolist() == [3, -1, -1] and sync["event_sync_id"].tolist() == [-1, -1, -1]
    assert sync["event_record_correlation"].tolist() == [20, -1, -1] and sync["event_stream"].tolist() == [7, -1, -1]
    assert sync["pid"].tolist() == [77, 77, 77] and sync["device"].tolist() == [0, 0, 0]  # the host process, as GPU rows
    ev = export["cuda_event"]
    assert list(ev) == CUDA_EVENT_COLUMNS
    assert [ev[c].tolist() for c in CUDA_EVENT_COLUMNS] == [[0], [7], [20], [77], [3], [-1], [BASE + 1_000_500]]
    ops = export["cpu_ops"]
    assert names(export, ops["name"]) == ["aten::mm"] and ops["tid"].tolist() == [78] and ops["pid"].tolist() == [77]
    assert export["warnings"] == []
