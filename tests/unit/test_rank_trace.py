"""model/trace.py's screening of GPU work and its per-rank GPU items, counts and host calls, made in
the core (crates/core/src/rank_trace.rs), against the numpy version they replaced (kept here as
the definition), on random exports: several processes and devices, ties in start times,
correlation ids shared by several calls or by none, nested and overlapping host ranges, threads
without ranges, calls that overlap on one thread, rows with impossible times or ids; names as ids
into a table of only the names the ranks use, ids as int32 where they fit."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from conftest import name_matches

from nsys_collective import _native
from nsys_collective.model import cuda_api
from nsys_collective.model.intervals import covered_ns, overlap_ns
from nsys_collective.model.nccl import launches
from nsys_collective.model import trace
from nsys_collective.model.trace import screen_gpu_work, trace_ranks

NAMES = ["cudaLaunchKernel", "cudaStreamSynchronize", "cudaMemcpyAsync", "cudaMemcpy", "ncclDevKernel_AllReduce", "gemm"]


# The numpy version (model/trace.py before the core took it over).

def _on(table, pid, device):
    return (table["pid"] == pid) & (table["device"] == device)


def reference_counts(export, pid, device, is_nccl):
    k = export.kernels
    mine = _on(k, pid, device)
    nccl, compute = mine & is_nccl, mine & ~is_nccl
    nccl_intervals = (k["start"][nccl], k["end"][nccl])
    nccl_time = covered_ns(*nccl_intervals)
    tables = [export.kernels, export.memcpy, export.memset]
    starts = np.concatenate([t["start"][_on(t, pid, device)] for t in tables])
    ends = np.concatenate([t["end"][_on(t, pid, device)] for t in tables])
    overlap = overlap_ns(nccl_intervals, (k["start"][compute], k["end"][compute]))
    return {"kernels": int(mine.sum()), "nccl_kernels": int(nccl.sum()), "nccl_time_ns": nccl_time,
            "compute_overlap_ns": overlap, "overlap_share": overlap / nccl_time if nccl_time else None,
            "first_ns": int(starts.min()) if len(starts) else None, "last_ns": int(ends.max()) if len(ends) else None}


def reference_gpu_items(export, pid, device, is_nccl):
    k = export.kernels
    kernels = np.flatnonzero(_on(k, pid, device))
    labels = {"[CUDA memcpy]": len(export.strings), "[CUDA memset]": len(export.strings) + 1}
    parts = [(k, kernels, k["name"][kernels], k["short_name"][kernels], is_nccl[kernels],
              k["grid_x"][kernels] * np.maximum(k["grid_y"][kernels], 1) * np.maximum(k["grid_z"][kernels], 1))]
    for table, label in ((export.memcpy, "[CUDA memcpy]"), (export.memset, "[CUDA memset]")):
        rows = np.flatnonzero(_on(table, pid, device))
        label_id = np.full(len(rows), labels[label])
        parts.append((table, rows, label_id, label_id, np.zeros(len(rows), bool), np.zeros(len(rows), np.int64)))
    start = np.concatenate([t["start"][r] for t, r, *_ in parts])
    end = np.concatenate([t["end"][r] for t, r, *_ in parts])
    correlation = np.concatenate([t["correlation"][r] for t, r, *_ in parts])
    tid, launch = launches(export, pid, correlation)
    is_kernel = np.concatenate([np.full(len(r), i == 0) for i, (_, r, *_) in enumerate(parts)])
    order = np.argsort(start, kind="stable")
    return {"start": start[order], "end": end[order], "name": np.concatenate([p[2] for p in parts])[order],
            "short_name": np.concatenate([p[3] for p in parts])[order], "launch": launch[order], "launch_tid": tid[order],
            "is_nccl": np.concatenate([p[4] for p in parts])[order], "is_kernel": is_kernel[order],
            "ctas": np.concatenate([p[5] for p in parts]).astype(np.int64)[order],
            "stream": np.concatenate([t["stream"][r] for t, r, *_ in parts])[order], "correlation": correlation[order]}


def reference_host_calls(export, pid, ranges):
    rt = export.runtime
    rows = np.flatnonzero(rt["pid"] == pid)
    rows = rows[np.argsort(rt["start"][rows], kind="stable")]
    start, end, tid = rt["start"][rows], rt["end"][rows], rt["tid"][rows]
    blocking = name_matches(cuda_api.BLOCKING, rt["name"][rows], export.strings)
    gap_range = np.full(len(rows), -1, dtype=np.int64)
    gap_start = start.copy()
    origin = {}  # by the thread's first call
    for t in np.unique(tid).tolist():
        mine = np.flatnonzero(tid == t)
        own = np.flatnonzero(ranges.tid == t)
        around = own[(ranges.start[own] <= start[mine[0]]) & (ranges.end[own] >= start[mine[0]])]
        first = int(ranges.start[around].min()) if len(around) else int(start[mine[0]])
        origin[int(mine[0])] = first
        gap_start[mine] = np.r_[first, end[mine[:-1]]]
        if len(own):
            middle = gap_start[mine] + (start[mine] - gap_start[mine]) // 2
            found = _native.innermost_covering(ranges.start[own], ranges.end[own], middle)
            gap_range[mine] = np.where(found >= 0, own[np.maximum(found, 0)], -1)
    return {"start": start, "end": end, "tid": tid, "correlation": rt["correlation"][rows], "name": rt["name"][rows],
            "blocking": blocking, "thread_origin": np.array([origin[k] for k in sorted(origin)], np.int64),
            "gap_start": gap_start, "gap_range": gap_range}


def reference_screen(table, capture_start=None):
    """drop_bad_times, then drop_bad_ids: (kept table, bad times, bad ids)."""
    start, end = table["start"], table["end"]
    lo = max(0, capture_start or 0)
    hi = min(trace.MAX_TIME_NS, lo + trace.MAX_CAPTURE_NS) if capture_start else trace.MAX_TIME_NS
    good = (start >= lo) & (end >= start) & (end <= hi) & (end - start <= trace.MAX_CAPTURE_NS)
    table, bad_times = {c: v[good] for c, v in table.items()}, int((~good).sum())
    good = ((table["device"] >= 0) & (table["device"] < trace.MAX_DEVICE) & (table["pid"] >= 1)
            & (table["pid"] <= trace.MAX_PID) & (table["stream"] >= -1) & (table["stream"] <= trace.MAX_STREAM))
    return {c: v[good] for c, v in table.items()}, bad_times, int((~good).sum())


# Random exports.

def _activity(rng, n, kernels=False):
    start = rng.integers(0, 300, n)
    t = {"start": start, "end": start + rng.integers(0, 40, n), "pid": rng.integers(1, 3, n),
         "device": rng.integers(0, 2, n), "stream": rng.integers(7, 10, n), "correlation": rng.integers(0, 60, n)}
    if kernels:
        t |= {"name": rng.integers(-1, len(NAMES), n), "short_name": rng.integers(-1, len(NAMES), n),
              "grid_x": rng.integers(0, 5, n), "grid_y": rng.integers(0, 3, n), "grid_z": rng.integers(0, 3, n)}
    return {c: np.ascontiguousarray(v, np.int64) for c, v in t.items()}


def random_export(seed: int):
    rng = np.random.default_rng(seed)
    n_calls = int(rng.integers(0, 120))
    start = rng.integers(0, 300, n_calls)
    runtime = {"start": start, "end": start + rng.integers(0, 30, n_calls), "pid": rng.integers(1, 3, n_calls),
               "tid": rng.integers(1, 4, n_calls), "correlation": rng.integers(0, 60, n_calls),
               "name": rng.integers(-1, len(NAMES), n_calls)}
    n_ranges = int(rng.integers(0, 12))
    rs = rng.integers(0, 300, n_ranges)
    nvtx = {"start": rs, "end": rs + rng.integers(0, 150, n_ranges), "tid": rng.integers(1, 4, n_ranges),
            "name": rng.integers(-1, len(NAMES), n_ranges), "pid": rng.integers(1, 3, n_ranges),
            "type": rng.choice([59, 60, 75], n_ranges)}
    export = SimpleNamespace(kernels=_activity(rng, int(rng.integers(0, 150)), kernels=True),
                             memcpy=_activity(rng, int(rng.integers(0, 20))), memset=_activity(rng, int(rng.integers(0, 10))),
                             runtime={c: np.ascontiguousarray(v, np.int64) for c, v in runtime.items()}, strings=list(NAMES),
                             nvtx={c: np.ascontiguousarray(v, np.int64) for c, v in nvtx.items()},
                             cpu_ops={c: np.zeros(0, np.int64) for c in nvtx})
    export.names = lambda ids: np.array(NAMES + [None], dtype=object)[np.where(ids >= 0, ids, len(NAMES))]
    is_nccl = rng.random(len(export.kernels["start"])) < 0.3
    return export, is_nccl


KEYS = [(1, 0), (1, 1), (2, 0), (2, 1)]


def _traced(export, is_nccl):
    traced, strings = trace_ranks(export, KEYS, is_nccl)
    names = np.array(strings + (None,), dtype=object)
    extended = np.array(export.strings + ["[CUDA memcpy]", "[CUDA memset]", None], dtype=object)
    return traced, strings, (lambda local: names[local]), (lambda ids: extended[ids])


def _same(got, want, what, names=None):
    """Equal values; ids (names) equal as strings; int32 exactly where int64 was and every value fits."""
    if names is not None:
        assert got.dtype == np.int32 and names[0](got).tolist() == names[1](want).tolist(), what
        return
    assert np.array_equal(got, want), what
    fits = want.dtype == np.int64 and (not len(want) or (want.min() >= -2**31 and want.max() < 2**31))
    assert got.dtype == (np.int32 if fits and what[-1] in NARROWED else want.dtype), what


NARROWED = {"launch_tid", "ctas", "stream", "correlation", "tid", "gap_range"}


@pytest.mark.parametrize("seed", range(60))
def test_gpu_items_and_counts_equal_the_numpy_version(seed):
    export, is_nccl = random_export(seed)
    traced, _, local, exported = _traced(export, is_nccl)
    for (pid, device), (items, counts, _, _, correlation) in zip(KEYS, traced):
        want = reference_gpu_items(export, pid, device, is_nccl)
        for column, values in want.items():
            names = (local, exported) if column in ("name", "short_name") else None
            got = correlation if column == "correlation" else getattr(items, column)  # returned beside, not held
            _same(got, values, (seed, pid, device, column), names)
        assert counts == reference_counts(export, pid, device, is_nccl), (seed, pid, device)


@pytest.mark.parametrize("seed", range(60))
def test_host_ranges_and_calls_equal_the_numpy_version(seed):
    export, is_nccl = random_export(seed)
    traced, _, local, exported = _traced(export, is_nccl)
    for (pid, device), (_, _, ranges, calls, _) in zip(KEYS, traced):
        want_ranges = trace._host_ranges(export, pid)
        for column in ("start", "end", "tid"):
            assert np.array_equal(getattr(ranges, column), getattr(want_ranges, column)), (seed, pid, column)
        _same(ranges.name, want_ranges.name, (seed, pid, "range name"), (local, exported))
        for column, values in reference_host_calls(export, pid, want_ranges).items():
            got = calls.gap_start() if column == "gap_start" else getattr(calls, column)  # derived, not held
            _same(got, values, (seed, pid, column), (local, exported) if column == "name" else None)


def test_calls_that_are_the_whole_runtime_table_keep_its_times():
    export, is_nccl = random_export(11)
    rt = export.runtime
    order = np.argsort(rt["start"], kind="stable")
    export.runtime = {c: (np.ones_like(v) if c == "pid" else v[order]) for c, v in rt.items()}  # one process, by start
    [(_, _, ranges, calls, _)], _ = trace_ranks(export, [(1, 0)], is_nccl)
    assert calls.start is export.runtime["start"] and calls.end is export.runtime["end"]
    for column, values in reference_host_calls(export, 1, trace._host_ranges(export, 1)).items():
        assert np.array_equal(calls.gap_start() if column == "gap_start" else getattr(calls, column), values), column


@pytest.mark.parametrize("seed", range(20))
def test_the_string_table_holds_only_the_names_the_ranks_use_in_export_order(seed):
    export, is_nccl = random_export(seed)
    traced, strings = trace_ranks(export, KEYS[:2 + seed % 3], is_nccl)
    used = set()
    for (pid, device) in KEYS[:2 + seed % 3]:
        g = reference_gpu_items(export, pid, device, is_nccl)
        used |= set(g["name"].tolist()) | set(g["short_name"].tolist())
        used |= set(trace._host_ranges(export, pid).name.tolist())
        used |= set(export.runtime["name"][export.runtime["pid"] == pid].tolist())
    extended = export.strings + ["[CUDA memcpy]", "[CUDA memset]"]
    assert strings == tuple(extended[i] for i in sorted(used - {-1}))


def test_ids_past_int32_stay_int64():
    export, is_nccl = random_export(5)
    export.kernels["correlation"] = export.kernels["correlation"] + 2**31
    export.runtime["tid"] = export.runtime["tid"] + 2**40
    traced, _ = trace_ranks(export, KEYS, is_nccl)
    for (pid, device), (_, _, _, calls, correlation) in zip(KEYS, traced):
        want = reference_gpu_items(export, pid, device, is_nccl)
        assert correlation.dtype == np.int64 and np.array_equal(correlation, want["correlation"])
        assert calls.tid.dtype == np.int64 and calls.correlation.dtype == np.int32


@pytest.mark.parametrize("seed", range(40))
def test_screening_equals_the_numpy_version(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(0, 80))
    capture = [None, 0, 1_000, 2**62 - 5][seed % 4]
    base = 0 if capture is None else capture
    start = base + rng.choice([-1, 0, 5, 2**62, trace.MAX_CAPTURE_NS - 3], n) + rng.integers(0, 3, n)
    end = start + rng.choice([-1, 0, 7, trace.MAX_CAPTURE_NS, trace.MAX_CAPTURE_NS + 1], n)
    table = {"start": start, "end": end, "pid": rng.choice([-1, 0, 1, 2, trace.MAX_PID, trace.MAX_PID + 1], n),
             "device": rng.choice([-1, 0, 3, trace.MAX_DEVICE - 1, trace.MAX_DEVICE], n),
             "stream": rng.choice([-2, -1, 7, trace.MAX_STREAM, trace.MAX_STREAM + 1], n),
             "correlation": rng.integers(0, 9, n)}
    table = {c: np.ascontiguousarray(v, np.int64) for c, v in table.items()}
    empty = {c: np.zeros(0, np.int64) for c in table}
    export = trace.Export(path=None, session=trace.Session(None, None, True, None, None, capture_start_ns=capture),
                          metadata={}, system_env={}, capture=[], strings=[], kernels=table, memcpy=empty, memset=empty,
                          runtime={}, nvtx={}, gpu_metrics={}, gpu_metric_names={}, gpus={}, sync={}, cuda_event={}, cpu_ops={})
    warnings = []
    screened, ranks = screen_gpu_work(export, "r", warnings)
    kept, bad_times, bad_ids = reference_screen(table, capture)
    assert all(np.array_equal(screened.kernels[c], kept[c]) for c in table), seed
    assert ranks == sorted(set(zip(kept["pid"].tolist(), kept["device"].tolist())))
    assert len(warnings) == (bad_times > 0) + (bad_ids > 0)
    assert all(f" {k} kernels rows" in w for k, w in zip([k for k in (bad_times, bad_ids) if k], warnings))
    if not bad_times + bad_ids:
        assert screened.kernels is table  # nothing copied


def test_columns_that_differ_in_length_are_refused():
    export, is_nccl = random_export(3)
    with pytest.raises(ValueError, match="differ in length"):
        _native.trace_ranks(export.kernels, is_nccl, [], export.runtime, [(1, 0, np.arange(3), np.arange(2), np.arange(3), np.arange(3))], 6)
    with pytest.raises(ValueError, match="differ in length"):
        _native.trace_ranks(export.kernels, is_nccl[:-1], [], export.runtime, [(1, 0, *[np.zeros(0, np.int64)] * 4)], 6)


def test_call_kinds_are_the_calls_each_pattern_matches():
    """cuda_api.kinds asks each name once for every kind at once: per kind, the calls matches() finds."""
    names = ["cudaLaunchKernel", "cudaLaunchKernel_v7000", "cuLaunchKernelEx", "cudaGraphLaunch_v10000", "cudaMemcpy",
             "cudaMemcpyAsync", "cuMemcpyDtoH_v2", "cudaMemcpy2DToArray", "cudaStreamSynchronize_ptsz", "cuCtxSynchronize",
             "cudaDeviceSynchronize_v3020", "cudaEventRecord", "cudaEventRecordWithFlags_v11010", "cuEventRecord_ptsz",
             "cudaStreamWaitEvent_v3020", "cuStreamWaitEvent", "cudaEventSynchronize", "cudaFree", None, "",
             "ncclDevKernel_AllReduce", "xcudaLaunchKernel", "cudaLaunchKernel_old"]
    rng = np.random.default_rng(3)
    for ids in (rng.integers(-1, len(names), 2000), np.zeros(0, np.int64), np.array([-1, -1], np.int32)):
        got = cuda_api.kinds(ids, names)
        assert got.dtype == np.uint8 and len(got) == len(ids)
        for pattern in cuda_api.KINDS:
            assert np.array_equal(cuda_api.of_kind(got, pattern), name_matches(pattern, ids, names)), pattern.pattern


def test_host_range_threads_are_held_as_int32_where_they_fit():
    """A rank's host ranges keep their thread ids as int32 where every one fits (a profiler
    trace's CPU operators are millions of ranges), exactly; else as they came."""
    fits = np.array([0, 7, 2**31 - 1, -2**31], np.int64)
    assert trace._int32_where_it_fits(fits).dtype == np.int32
    assert trace._int32_where_it_fits(fits).tolist() == fits.tolist()
    wide = np.array([1, 2**31], np.int64)
    assert trace._int32_where_it_fits(wide) is wide
    assert trace._int32_where_it_fits(np.zeros(0, np.int64)).dtype == np.int32
