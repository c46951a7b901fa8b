"""The native Kineto (PyTorch profiler) reader: the real 2-rank traces beside the checkout, and
damaged or foreign inputs. Expected counts are computed here, independently, with gzip + json."""

from __future__ import annotations

import gzip
import json
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from conftest import REAL, need_real, no_real_data
from nsys_collective.errors import InputError
from nsys_collective.ingest.capture import NVTX_PUSH_POP_RANGE, TABLES, read_exports, read_kineto

KINETO = REAL / "kineto" / "hta-trace_filter-2rank"
TRACES = [KINETO / f"sampled_rank-{rank}.json.gz" for rank in (0, 1)]
NO_TRACES = no_real_data(KINETO)

needs_real = pytest.mark.skipif(not all(p.is_file() for p in TRACES), reason=NO_TRACES)

# 2023-01-01 and 2030-01-01 in UTC ns: absolute times of a real trace fall in between.
PLAUSIBLE_NS = (1_672_531_200_000_000_000, 1_893_456_000_000_000_000)


def _events(path: Path) -> list[dict]:
    with gzip.open(path, "rt") as f:
        return json.load(f)["traceEvents"]


@pytest.fixture(scope="module")
def real():
    if not all(p.is_file() for p in TRACES):
        pytest.skip(NO_TRACES)
    return read_kineto(TRACES, threads=2)


@needs_real
@pytest.mark.parametrize("rank", [0, 1])
def test_real_traces_parse_with_their_counts(real, rank):
    events = _events(TRACES[rank])
    count = Counter(e.get("cat") for e in events if e.get("ph") == "X")
    export = real[rank]
    assert len(export.kernels["start"]) == count["kernel"]
    assert len(export.memcpy["start"]) == count["gpu_memcpy"]
    assert len(export.memset["start"]) == count["gpu_memset"]
    assert len(export.runtime["start"]) == count["cuda_runtime"]
    assert len(export.nvtx["start"]) == count["user_annotation"]
    assert set(export.nvtx["type"].tolist()) == {NVTX_PUSH_POP_RANGE}
    assert all(len(getattr(export, t)) for t in TABLES)  # every table present, with its columns
    assert export.session.schema_version == "kineto"
    assert export.warnings == []


@needs_real
@pytest.mark.parametrize("rank", [0, 1])
def test_real_nccl_kernels_are_found(real, rank):
    expected = sum(e.get("cat") == "kernel" and e["name"].startswith("nccl") for e in _events(TRACES[rank]))
    export = real[rank]
    names = export.names(export.kernels["short_name"])
    nccl = [n for n in names if n.startswith("nccl")]
    assert expected == 10 and len(nccl) == expected
    # Short names drop the parameter list, as nsys's do.
    assert set(nccl) == {"ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t"}


@needs_real
@pytest.mark.parametrize("rank", [0, 1])
def test_real_launches_link_to_kernels_by_correlation(real, rank):
    export = real[rank]
    k, rt = export.kernels, export.runtime
    pid = int(k["pid"][0])
    assert (k["pid"] == pid).all() and (rt["pid"] == pid).all(), "GPU rows carry the host pid"
    assert pid == {0: 4037, 1: 4045}[rank]
    linked = np.isin(k["correlation"], rt["correlation"][rt["pid"] == pid])
    assert linked.mean() > 0.99
    # A launch precedes its kernel.
    order = np.argsort(rt["correlation"])
    at = order[np.searchsorted(rt["correlation"][order], k["correlation"])]
    assert (rt["start"][at] <= k["start"]).all()


@needs_real
@pytest.mark.parametrize("rank", [0, 1])
def test_real_rank_is_readable_from_metadata(real, rank):
    meta = real[rank].metadata
    assert meta["distributedInfo.rank"] == str(rank)
    assert meta["distributedInfo.world_size"] == "128"
    assert meta["distributedInfo.backend"] == "nccl"


@needs_real
def test_real_times_are_plausible_absolute_ns(real):
    for export, path in zip(real, TRACES):
        k = export.kernels
        assert (np.diff(k["start"]) >= 0).all()
        assert (k["end"] >= k["start"]).all()
        assert PLAUSIBLE_NS[0] < k["start"].min() and k["end"].max() < PLAUSIBLE_NS[1]
        first = min(e["ts"] for e in _events(path) if e.get("cat") == "kernel")
        assert k["start"][0] == first * 1000  # these (2023) traces: absolute µs, no baseTimeNanoseconds
        assert export.session.time_normalized and export.session.utc_epoch_ns is None
    # Both ranks ran the same seconds.
    assert abs(int(real[0].kernels["start"][0]) - int(real[1].kernels["start"][0])) < 10**9


BASE = 1_760_000_000_000_000_000


def _trace(events, **top) -> str:
    return json.dumps({"schemaVersion": 1, **top, "traceEvents": events})


KERNEL = {"ph": "X", "cat": "kernel", "name": "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
          "pid": 0, "tid": 7, "ts": 1000.25, "dur": 5.5, "args": {"device": 0, "stream": 7, "correlation": 3}}
LAUNCH = {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 77, "tid": 78, "ts": 999.0, "dur": 1.0,
          "args": {"correlation": 3}}
COMMS = {"ph": "X", "cat": "cpu_op", "name": "record_param_comms", "pid": 77, "tid": 78, "ts": 998.0, "dur": 3.0,
         "args": {"Collective name": "allreduce", "In msg nelems": 256, "Out msg nelems": 256, "Group size": 2,
                  "dtype": "Float", "Process Group Name": "0", "Process Group Description": "default_pg", "Seq": 9}}


def test_relative_ts_plus_base_and_collective_ranges(tmp_path):
    path = tmp_path / "rank1.json"
    path.write_text(_trace([KERNEL, LAUNCH, COMMS], baseTimeNanoseconds=BASE,
                           distributedInfo={"backend": "nccl", "rank": 1, "world_size": 2}))
    (export,) = read_kineto([path])
    assert export.kernels["start"].tolist() == [BASE + 1_000_250]
    assert export.kernels["end"].tolist() == [BASE + 1_005_750]
    assert export.session.utc_epoch_ns == BASE
    assert export.names(export.nvtx["name"]).tolist() == ["nccl:allreduce"]
    assert export.metadata["distributedInfo.rank"] == "1"


def test_gzip_reads_like_plain(tmp_path):
    text = _trace([KERNEL, LAUNCH], baseTimeNanoseconds=BASE)
    (tmp_path / "a.json").write_text(text)
    (tmp_path / "a.json.gz").write_bytes(gzip.compress(text.encode()))
    plain, zipped = read_kineto([tmp_path / "a.json", tmp_path / "a.json.gz"])
    for table in TABLES:
        for column, values in getattr(plain, table).items():
            assert (values == getattr(zipped, table)[column]).all(), (table, column)


def _error(path: Path) -> str:
    with pytest.raises(InputError) as info:
        read_kineto([path])
    message = str(info.value)
    assert message.startswith(str(path)) and "\n" not in message, message
    return message


def test_truncated_gzip(tmp_path):
    whole = gzip.compress(_trace([KERNEL, LAUNCH] * 200, baseTimeNanoseconds=BASE).encode())
    path = tmp_path / "cut.json.gz"
    path.write_bytes(whole[: len(whole) // 2])
    assert "truncated gzip" in _error(path)


def test_invalid_json_names_line_and_column(tmp_path):
    path = tmp_path / "bad.json"
    path.write_text('{"traceEvents": [\n  {"ph": "X", "cat": "kernel",, "ts": 1}\n]}')
    message = _error(path)
    assert "invalid JSON at line 2, column 31" in message, message


def test_trace_without_gpu_events(tmp_path):
    path = tmp_path / "cpu_only.json"
    path.write_text(_trace([LAUNCH, COMMS], baseTimeNanoseconds=BASE))
    assert "no GPU events: profile with ProfilerActivity.CUDA" in _error(path)


def test_foreign_and_empty_files(tmp_path):
    (tmp_path / "empty.json").write_bytes(b"")
    assert "empty file" in _error(tmp_path / "empty.json")
    (tmp_path / "other.json").write_text('{"schemaVersion": 1}')
    assert "no traceEvents" in _error(tmp_path / "other.json")
    (tmp_path / "missing.json.gz").unlink(missing_ok=True)
    assert "no such file" in _error(tmp_path / "missing.json.gz")


@needs_real
def test_an_nsys_reader_refuses_a_trace_and_the_other_way_round(tmp_path):
    with pytest.raises(InputError, match="not an SQLite file"):
        read_exports([TRACES[0]])
    sqlite = next(REAL.rglob("*.sqlite"))
    with pytest.raises(InputError, match="invalid JSON at line 1"):
        read_kineto([sqlite])


def test_analyze_accepts_a_folder_of_traces_and_refuses_mixed_inputs(tmp_path):
    from typer.testing import CliRunner

    from nsys_collective.cli import app

    folder = need_real(REAL / "kineto" / "hta-trace_filter-2rank")
    result = CliRunner().invoke(app, ["analyze", str(folder), "--json"])
    assert result.exit_code == 0, result.stderr
    doc = json.loads(result.stdout)
    assert [(r["rank"], r["rank_source"]) for r in doc["ranks"]] == [(0, "distributedInfo (PyTorch profiler)"), (1, "distributedInfo (PyTorch profiler)")]
    assert [r["kernels"] for r in doc["ranks"]] == [1154, 1104]
    assert doc["summary"]["collectives"] >= 1
    mixed = CliRunner().invoke(app, ["analyze", str(folder / "sampled_rank-0.json.gz"), str(REAL / "versions" / "nsys-2026.1-test-cuda.sqlite")])
    assert mixed.exit_code == 2 and "cannot be analyzed together" in mixed.stderr


def test_overlap_with_hta_filters_equals_htas_published_figures():
    """HTA 0.5.0 reports 11.81% and 20.05% communication/computation overlap on these traces
    (../shared/data/real/README.md); scripts/compare_hta.py computes ours with HTA's filters."""
    folder = need_real(REAL / "kineto" / "hta-trace_filter-2rank")
    import importlib.util

    spec = importlib.util.spec_from_file_location("compare_hta", Path(__file__).resolve().parents[2] / "scripts" / "compare_hta.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    overlap, _ = script.ours(folder)
    assert overlap[0] == pytest.approx(11.81, abs=0.1) and overlap[1] == pytest.approx(20.05, abs=0.1)
