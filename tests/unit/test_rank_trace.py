"""model/trace.py's per-rank GPU items, counts and host calls, made in the core
(crates/core/src/rank_trace.rs), against the numpy version they replaced (kept here as the
definition), on random exports: several processes and devices, ties in start times, correlation
ids shared by several calls or by none, nested and overlapping host ranges, threads without
ranges, calls that overlap on one thread."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from nsys_collective import _native
from nsys_collective.model import cuda_api
from nsys_collective.model.intervals import covered_ns, overlap_ns
from nsys_collective.model.trace import HostRanges, _gpu_items, _host_calls

NAMES = ["cudaLaunchKernel", "cudaStreamSynchronize", "cudaMemcpyAsync", "cudaMemcpy", "ncclDevKernel_AllReduce", "gemm"]


# The numpy version (model/trace.py before the core took it over).

def _on(table, pid, device):
    return (table["pid"] == pid) & (table["device"] == device)


def _launches(export, pid, correlation):
    rt = export.runtime
    mine = np.flatnonzero(rt["pid"] == pid)
    order = mine[np.argsort(rt["correlation"][mine], kind="stable")]
    if len(order) == 0:
        return np.full(len(correlation), -1), np.full(len(correlation), -1)
    at = np.minimum(np.searchsorted(rt["correlation"][order], correlation), len(order) - 1)
    found = rt["correlation"][order[at]] == correlation
    return np.where(found, rt["tid"][order[at]], -1), np.where(found, rt["start"][order[at]], -1)


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
    tid, launch = _launches(export, pid, correlation)
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
    blocking = cuda_api.matches(cuda_api.BLOCKING, rt["name"][rows], export)
    gap_range = np.full(len(rows), -1, dtype=np.int64)
    gap_start = start.copy()
    for t in np.unique(tid).tolist():
        mine = np.flatnonzero(tid == t)
        own = np.flatnonzero(ranges.tid == t)
        around = own[(ranges.start[own] <= start[mine[0]]) & (ranges.end[own] >= start[mine[0]])]
        first = int(ranges.start[around].min()) if len(around) else int(start[mine[0]])
        gap_start[mine] = np.r_[first, end[mine[:-1]]]
        if len(own):
            middle = gap_start[mine] + (start[mine] - gap_start[mine]) // 2
            found = _native.innermost_covering(ranges.start[own], ranges.end[own], middle)
            gap_range[mine] = np.where(found >= 0, own[np.maximum(found, 0)], -1)
    return {"start": start, "end": end, "tid": tid, "correlation": rt["correlation"][rows], "name": rt["name"][rows],
            "blocking": blocking, "gap_start": gap_start, "gap_range": gap_range}


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
    export = SimpleNamespace(kernels=_activity(rng, int(rng.integers(0, 150)), kernels=True),
                             memcpy=_activity(rng, int(rng.integers(0, 20))), memset=_activity(rng, int(rng.integers(0, 10))),
                             runtime={c: np.ascontiguousarray(v, np.int64) for c, v in runtime.items()}, strings=list(NAMES))
    export.names = lambda ids: np.array(NAMES + [None], dtype=object)[np.where(ids >= 0, ids, len(NAMES))]
    n_ranges = int(rng.integers(0, 12))
    rs = rng.integers(0, 300, n_ranges)
    ranges = HostRanges(start=rs, end=rs + rng.integers(0, 150, n_ranges), tid=rng.integers(1, 4, n_ranges),
                        name=rng.integers(-1, len(NAMES), n_ranges))
    is_nccl = rng.random(len(export.kernels["start"])) < 0.3
    return export, ranges, is_nccl


@pytest.mark.parametrize("seed", range(60))
def test_gpu_items_and_counts_equal_the_numpy_version(seed):
    export, _, is_nccl = random_export(seed)
    for pid in (1, 2):
        for device in (0, 1):
            items, counts = _gpu_items(export, pid, device, is_nccl)
            want = reference_gpu_items(export, pid, device, is_nccl)
            for column, values in want.items():
                got = getattr(items, column)
                assert got.dtype == values.dtype and np.array_equal(got, values), (seed, pid, device, column)
            assert counts == reference_counts(export, pid, device, is_nccl), (seed, pid, device)


@pytest.mark.parametrize("seed", range(60))
def test_host_calls_equal_the_numpy_version(seed):
    export, ranges, _ = random_export(seed)
    for pid in (1, 2):
        calls = _host_calls(export, pid, ranges)
        for column, values in reference_host_calls(export, pid, ranges).items():
            got = getattr(calls, column)
            assert got.dtype == values.dtype and np.array_equal(got, values), (seed, pid, column)


def test_columns_that_differ_in_length_are_refused():
    export, _, is_nccl = random_export(3)
    with pytest.raises(ValueError, match="differ in length"):
        _native.trace_host_calls(export.runtime, 1, np.arange(3), np.arange(2), np.arange(3))
    with pytest.raises(ValueError, match="differ in length"):
        _native.trace_gpu_items(export.kernels, is_nccl[:-1], [], export.runtime, 1, 0)
