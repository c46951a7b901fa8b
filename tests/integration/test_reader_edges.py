"""Export variants no real file shows: GPU metrics, a newer schema, no session start, renamed
columns. Each is a copy of a committed fixture, altered in tmp_path; both readers must agree."""

from __future__ import annotations

import shutil
import sqlite3

import numpy as np
import pytest

from conftest import FIXTURES
import reference_reader  # tests/: the pure-Python oracle of the native reader
from nsys_collective import read_exports
from conftest import assert_same_export

SOURCE = FIXTURES / "demo-4rank-2host" / "rep_0.sqlite"


@pytest.fixture
def export_copy(tmp_path):
    path = tmp_path / "rank.sqlite"
    shutil.copy(SOURCE, path)
    return path


def alter(path, *statements):
    with sqlite3.connect(path) as db:
        for sql in statements:
            db.execute(sql)
    db.close()


def read_both(path):
    (native,) = read_exports([path])
    (reference,) = reference_reader.read_exports([path])
    assert_same_export(native, reference)
    return native


def test_gpu_metrics_are_read_with_their_names(export_copy):
    # Layout of the 2026.4 schema reference: samples keyed by (typeId, metricId), names apart.
    alter(
        export_copy,
        "CREATE TABLE TARGET_INFO_GPU_METRICS (typeId INTEGER, sourceId INTEGER, typeName TEXT, metricId INTEGER, metricName TEXT)",
        "INSERT INTO TARGET_INFO_GPU_METRICS VALUES (7, 0, 'GH100', 1, 'SMs Active [Throughput %]'), (7, 0, 'GH100', 2, 'NVLink RX Bandwidth [Throughput %]')",
        "CREATE TABLE GPU_METRICS (timestamp INTEGER, typeId INTEGER, metricId INTEGER, value INTEGER)",
        "INSERT INTO GPU_METRICS VALUES (2000, 7, 2, 40), (1000, 7, 1, 55), (1000, 7, 2, 10), (2000, 7, 1, NULL)",
    )
    export = read_both(export_copy)
    m = export.gpu_metrics
    epoch = export.session.utc_epoch_ns
    np.testing.assert_array_equal(m["start"], [epoch + 1000, epoch + 1000, epoch + 2000, epoch + 2000])  # sorted, stable
    np.testing.assert_array_equal(m["metric"], [1, 2, 2, 1])
    np.testing.assert_array_equal(m["value"], [55, 10, 40, -1])
    names = export.gpu_metric_names
    assert list(export.names(names["name"])) == ["SMs Active [Throughput %]", "NVLink RX Bandwidth [Throughput %]"]


def test_newer_schema_major_warns_and_still_reads(export_copy):
    alter(export_copy, "UPDATE META_DATA_EXPORT SET value = '4.0.0' WHERE name = 'EXPORT_SCHEMA_VERSION'")
    export = read_both(export_copy)
    assert export.session.schema_version == "4.0.0"
    assert any("newer than this reader knows" in w for w in export.warnings)
    assert len(export.kernels["start"]) > 0


def test_without_session_start_times_stay_relative_and_say_so(export_copy):
    (original,) = read_exports([SOURCE])
    alter(export_copy, "DROP TABLE TARGET_INFO_SESSION_START_TIME")
    export = read_both(export_copy)
    assert export.session.utc_epoch_ns is None
    assert any("no session start time" in w for w in export.warnings)
    np.testing.assert_array_equal(export.kernels["start"], original.kernels["start"] - original.session.utc_epoch_ns)


def test_older_names_and_missing_columns(export_copy):
    """Old exports: metadata in EXPORT_META_DATA, no time-normalize key, kernels without
    demangledName (falls back to shortName) and without gridZ (filled with -1)."""
    alter(
        export_copy,
        "ALTER TABLE META_DATA_EXPORT RENAME TO EXPORT_META_DATA",
        "DELETE FROM EXPORT_META_DATA WHERE name = 'EXPORT_PARAM_TIME_NORMALIZE'",
        "ALTER TABLE CUPTI_ACTIVITY_KIND_KERNEL DROP COLUMN demangledName",
        "ALTER TABLE CUPTI_ACTIVITY_KIND_KERNEL DROP COLUMN gridZ",
    )
    (original,) = read_exports([SOURCE])
    export = read_both(export_copy)
    assert export.session.nsys_version == original.session.nsys_version
    assert export.session.time_normalized is False  # recognised from the size of the stored times
    np.testing.assert_array_equal(export.kernels["start"], original.kernels["start"])
    np.testing.assert_array_equal(export.kernels["name"], original.kernels["short_name"])
    assert np.all(export.kernels["grid_z"] == -1)


def test_nvtx_marks_end_where_they_start(export_copy):
    alter(export_copy, "INSERT INTO NVTX_EVENTS (start, end, eventType, text, globalTid, domainId) VALUES (5, NULL, 34, 'checkpoint', 281480295088445, 0)")
    export = read_both(export_copy)
    nvtx = export.nvtx
    mark = np.flatnonzero(nvtx["type"] == 34)
    assert len(mark) == 1 and nvtx["end"][mark[0]] == nvtx["start"][mark[0]]
    assert export.name(int(nvtx["name"][mark[0]])) == "checkpoint"


def test_gpu_metrics_during_transfers_reach_the_collectives(tmp_path):
    """SM activity sampled during each rank's transfer phase, averaged per collective."""
    import json

    from typer.testing import CliRunner

    from nsys_collective.cli import app

    folder = tmp_path / "job"
    shutil.copytree(FIXTURES / "demo-4rank-2host", folder)
    (export,) = read_exports([folder / "rep_0.sqlite"])
    epoch = export.session.utc_epoch_ns
    k = export.kernels
    nccl = [i for i, n in enumerate(export.names(k["short_name"])) if n.startswith("nccl")]
    # Rank 0 samples 80% SM activity from the middle to the end of each NCCL kernel, 5% elsewhere.
    rows = []
    for i in nccl:
        s, e = int(k["start"][i]) - epoch, int(k["end"][i]) - epoch
        rows += [(s - 50_000, 5), (e - 1_000, 80), (e + 50_000, 5)]
    alter(
        folder / "rep_0.sqlite",
        "CREATE TABLE TARGET_INFO_GPU_METRICS (typeId INTEGER, sourceId INTEGER, typeName TEXT, metricId INTEGER, metricName TEXT)",
        "INSERT INTO TARGET_INFO_GPU_METRICS VALUES (7, 0, 'GH100', 1, 'SMs Active [Throughput %]')",
        "CREATE TABLE GPU_METRICS (timestamp INTEGER, typeId INTEGER, metricId INTEGER, value INTEGER)",
        *[f"INSERT INTO GPU_METRICS VALUES ({t}, 7, 1, {v})" for t, v in rows],
    )
    doc = json.loads(CliRunner().invoke(app, ["analyze", str(folder), "--json"]).stdout)
    assert [c["gpu_metrics"]["sm_active"] for c in doc["collectives"]] == [80.0] * len(nccl)
    assert all(c["gpu_metrics"]["nvlink"] is None for c in doc["collectives"])
