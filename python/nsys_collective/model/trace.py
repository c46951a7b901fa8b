"""The per-rank map: what the model and the attribution need from one rank's capture, taken in one
pass over its export, so that the export itself can be released (and, on a cluster, so that only
this travels between workers).

`trace_export(export, index, report)` returns the input's facts and one `RankTrace` per rank the
export holds: its identity, its GPU work counted, its NCCL operations, its GPU work as columns
(UTC, sorted by start), its host ranges (NVTX push/pop and start/end ranges, Kineto annotations),
its CUDA API calls (which block, which host range each gap before a call fell in), its GPU's SM
count and its GPU metric samples. Names are ids into a string table shared by the
export's ranks, holding only the names they use.
"""

from __future__ import annotations

import dataclasses
import secrets
from dataclasses import dataclass, field
from functools import cached_property

import re

import numpy as np

from nsys_collective import _native
from nsys_collective.ingest.capture import NVTX_PUSH_POP_RANGE, NVTX_START_END_RANGE, Export, Session
from nsys_collective.ingest.discover import shown
from nsys_collective.ingest.identity import Candidate, rank_from_environment, rank_from_file_name
from nsys_collective.model import cuda_api, grouping
from nsys_collective.model.nccl import NcclOps, nccl_kernel_mask, nccl_ops
from nsys_collective.model.stream_waits import stream_waits_from_calls

GPU_ACTIVITY_TABLES = ("kernels", "memcpy", "memset")
# SMs of GPUs, for exports without TARGET_INFO_GPU (public specifications). Longest match wins.
KNOWN_SM_COUNTS = {
    "H100 PCIe": 114, "H100": 132, "H200": 132, "H20": 78, "GH200": 132, "B200": 148, "GB200": 152, "A100": 108,
    "A30": 56, "A40": 84, "A10": 72, "L40S": 142, "L40": 142, "L4": 58, "V100": 80, "T4": 40,
    "RTX 4090": 128, "RTX 3090": 82, "RTX 4060 Ti": 34, "RTX 3060 Laptop": 30,
}
# GPU metric fields, matched by pattern (names carry units and vary by GPU).
METRIC_FIELDS = {
    "sm_active": re.compile(r"SMs? Active", re.I),
    "nvlink": re.compile(r"NVLink", re.I),
    "pcie": re.compile(r"PCIe", re.I),
}


@dataclass(frozen=True)
class InputFacts:
    """What the analysis keeps of an input once its export has been traced."""

    report: str  # as the user gave it
    export: str  # what was read (a report's SQLite export)
    session: Session
    warnings: tuple[str, ...]


@dataclass(frozen=True)
class GpuItems:
    """A rank's GPU work (kernels, copies, memsets) sorted by start, on its own clock (UTC)."""

    start: np.ndarray
    end: np.ndarray
    name: np.ndarray  # int32 id of the full (demangled) name: what pairs kernels across ranks
    short_name: np.ndarray  # id of the short name, for people
    launch: np.ndarray  # start of the launching runtime call, -1 when unknown
    launch_tid: np.ndarray
    is_nccl: np.ndarray
    is_kernel: np.ndarray
    ctas: np.ndarray  # thread blocks (grid x*y*z) of kernels, 0 for copies
    stream: np.ndarray
    correlation: np.ndarray  # of the launching call (several ops share one under a CUDA graph)
    # launch_tid, ctas and correlation are int32 where their values fit (narrow_ids).


@dataclass(frozen=True)
class HostCalls:
    """The process's CUDA API calls (runtime and driver), sorted by start, on its own clock."""

    start: np.ndarray
    end: np.ndarray
    tid: np.ndarray
    correlation: np.ndarray
    name: np.ndarray  # string id (int32)
    blocking: np.ndarray  # bool: the call returns only once GPU work it waits for has ended
    # tid, correlation and gap_range are int32 where their values fit (narrow_ids).
    # Where the host work before the call began: the previous call's end on its thread, for a
    # thread's first call the start of the outermost host range around it (else its own start).
    gap_start: np.ndarray
    # The innermost host range (index into the rank's HostRanges) on the call's thread that covers
    # the middle of the gap before the call: what the host was doing meanwhile; -1 where none.
    gap_range: np.ndarray


@dataclass(frozen=True)
class HostRanges:
    """The process's host ranges (NVTX push/pop and start/end, Kineto annotations), in capture order."""

    start: np.ndarray
    end: np.ndarray
    tid: np.ndarray
    name: np.ndarray  # string id (int32), -1 when unnamed


@dataclass(frozen=True)
class RankTrace:
    index: int  # which input of the job
    report: str
    host: str | None
    pid: int | None
    device: int | None
    env_rank: Candidate | None
    file_rank: Candidate | None
    counts: dict  # kernels, nccl_kernels, nccl_time_ns, compute_overlap_ns, overlap_share, first_ns, last_ns
    strings: tuple[str, ...]  # shared by the ranks of one export
    ops: NcclOps | None
    gpu: GpuItems | None
    ranges: HostRanges | None
    calls: HostCalls | None
    sm_count: int | None
    # Per metric field: (sample times, values) on the rank's clock; None when none were captured.
    metrics: dict[str, tuple[np.ndarray, np.ndarray]] | None = None
    metrics_shared: bool = False  # the export sampled several GPUs: which is this rank's is unknown
    # The rank's recorded synchronizations and event records, as the replay takes them (columns:
    # kind, stream, event, correlation, record_correlation / stream, event, correlation); None
    # where the capture recorded none.
    syncs: dict | None = None
    events: dict | None = None
    key: int = field(default=0, compare=False)  # identifies the export's string table (Names caches by it)
    gpu_name: str | None = None  # the device's name as the capture records it (TARGET_INFO_GPU, deviceProperties)

    def name(self, string_id: int) -> str | None:
        return self.strings[string_id] if string_id >= 0 else None

    def names(self, string_ids: np.ndarray) -> np.ndarray:
        """Strings of many ids at once (None for -1), as an object array."""
        table = np.array(self.strings + (None,), dtype=object)
        return table[np.where(string_ids >= 0, string_ids, len(self.strings))]

    @cached_property
    def stream_waits(self) -> tuple[dict | None, dict | None]:
        """(syncs, events): the recorded ones, or where the capture recorded none, those inferred
        from the calls; computed once, as the idle split and the what-if both read them."""
        if self.syncs is not None and len(self.syncs["correlation"]):
            return self.syncs, self.events
        return stream_waits_from_calls(self.calls, self.gpu, self)


def _no_gpu_counts() -> dict:
    """The counts of a rank without GPU work."""
    return {"kernels": 0, "nccl_kernels": 0, "nccl_time_ns": 0, "compute_overlap_ns": 0, "overlap_share": None,
            "first_ns": None, "last_ns": None}


def gpu_name(export: Export, device: int | None) -> str | None:
    at = np.flatnonzero(export.gpus["id"] == device)
    return export.name(int(export.gpus["name"][at[0]])) if len(at) else None


def sm_count(export: Export, device: int | None) -> int | None:
    gpus = export.gpus
    at = np.flatnonzero(gpus["id"] == device)
    if len(at) and gpus["sm_count"][at[0]] > 0:
        return int(gpus["sm_count"][at[0]])
    names = [export.name(int(i)) for i in gpus["name"][at]] if len(at) else []
    for known in sorted(KNOWN_SM_COUNTS, key=len, reverse=True):
        if any(n and known in n for n in names):
            return KNOWN_SM_COUNTS[known]
    return None


def _gpu_items(export: Export, pid: int, device: int, is_nccl: np.ndarray) -> tuple[GpuItems, dict]:
    """The rank's GPU work sorted by start (copies named by two labels past the export's strings),
    and its counts: kernels, NCCL's, the time NCCL kernels cover and how much of it compute
    kernels cover too, its first start and last end. One pass in the core
    (crates/core/src/rank_trace.rs); tests/unit/test_rank_trace.py keeps the numpy version."""
    labels = [(export.memcpy, len(export.strings)), (export.memset, len(export.strings) + 1)]  # "[CUDA memcpy]", "[CUDA memset]"
    columns, (kernels, nccl_kernels, nccl_time, overlap, first, last) = _native.trace_gpu_items(
        export.kernels, np.ascontiguousarray(is_nccl, bool), labels, export.runtime, pid, device)
    counts = {
        "kernels": kernels,
        "nccl_kernels": nccl_kernels,
        "nccl_time_ns": nccl_time,
        "compute_overlap_ns": overlap,
        # HTA's and NVIDIA's headline figure: the share of NCCL time with compute running beside it.
        "overlap_share": overlap / nccl_time if nccl_time else None,
        "first_ns": first,
        "last_ns": last,
    }
    return GpuItems(**columns), counts


def _host_ranges(export: Export, pid: int) -> HostRanges:
    """NVTX ranges, then (profiler traces) CPU operators: what the host was doing."""
    parts = []
    for table in (export.nvtx, export.cpu_ops):
        rows = np.flatnonzero(np.isin(table["type"], [NVTX_PUSH_POP_RANGE, NVTX_START_END_RANGE]) & (table["pid"] == pid))
        parts.append([table[c][rows] for c in ("start", "end", "tid", "name")])
    start, end, tid, name = (np.concatenate(c) for c in zip(*parts))
    return HostRanges(start=start, end=end, tid=tid, name=name)


def _sync_records(export: Export, pid: int, device: int, own_process: bool) -> tuple[dict | None, dict | None]:
    """The rank's synchronization and event records, as the replay takes them (None: none
    recorded). A profiler trace names the recording call and stream in its cuda_sync events
    instead of keeping event records: those give the records then. `own_process`: the rank is
    the only one of its process; then every record of the process is its own, whatever deviceId
    says (the 2 processes of the real nsys-ai-2gpu report both record deviceId 0 there)."""
    s, e = export.sync, export.cuda_event

    def of_rank(table):
        return (table["pid"] == pid) & ((table["device"] == device) | own_process)

    rows = np.flatnonzero(of_rank(s))
    if not len(rows):
        return None, None
    syncs = {"kind": s["sync_type"][rows], "stream": s["stream"][rows], "event": s["event"][rows],
             "correlation": s["correlation"][rows], "record_correlation": s["event_record_correlation"][rows]}
    mine = np.flatnonzero(of_rank(e))
    if len(mine):
        events = {"stream": e["stream"][mine], "event": e["event"][mine], "correlation": e["correlation"][mine]}
    else:
        named = rows[(s["event_record_correlation"][rows] >= 0) & (s["event_stream"][rows] >= 0)]
        events = {"stream": s["event_stream"][named], "event": s["event"][named], "correlation": s["event_record_correlation"][named]}
    return syncs, events


def _host_calls(export: Export, pid: int, ranges: HostRanges) -> HostCalls:
    """The process's calls by start and the gap before each (in the core,
    crates/core/src/rank_trace.rs; tests/unit/test_rank_trace.py keeps the numpy version)."""
    rt = export.runtime
    rows, gap_start, gap_range = _native.trace_host_calls(rt, pid, *(np.ascontiguousarray(c, np.int64) for c in
                                                                     (ranges.start, ranges.end, ranges.tid)))
    name = rt["name"][rows]
    return HostCalls(start=rt["start"][rows], end=rt["end"][rows], tid=rt["tid"][rows], correlation=rt["correlation"][rows],
                     name=name, blocking=cuda_api.matches(cuda_api.BLOCKING, name, export), gap_start=gap_start,
                     gap_range=gap_range)


def _metric_samples(export: Export) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Per field, the export's samples of every metric whose name matches it, in capture order."""
    m, names = export.gpu_metrics, export.gpu_metric_names
    label = {(int(ty), int(me)): export.name(int(na)) or "" for ty, me, na in zip(names["type"], names["metric"], names["name"])}
    out = {}
    for field_name, pattern in METRIC_FIELDS.items():
        pick = np.zeros(len(m["start"]), bool)
        for ty, me in (k for k, v in label.items() if pattern.search(v)):
            pick |= (m["type"] == ty) & (m["metric"] == me)
        if pick.any():
            out[field_name] = (m["start"][pick], m["value"][pick])
    return out


# No clock reads beyond this (year 2116 in UTC ns); later times are damage, and would overflow int64 sums.
MAX_TIME_NS = 2**62
# No capture lasts this long: later times are damage too (they would make sums of GPU time overflow).
MAX_CAPTURE_NS = 30 * 24 * 3600 * 10**9


def drop_bad_times(table: dict[str, np.ndarray], capture_start: int | None = None) -> tuple[dict[str, np.ndarray], int]:
    """The rows of a GPU work table whose times can be right, and how many were dropped: end >=
    start, lasting at most MAX_CAPTURE_NS, within MAX_CAPTURE_NS from the capture's start where
    known (nothing runs before it), else from 0 (a missing time reads -1) to MAX_TIME_NS."""
    start, end = table["start"], table["end"]
    lo = max(0, capture_start or 0)
    hi = min(MAX_TIME_NS, lo + MAX_CAPTURE_NS) if capture_start else MAX_TIME_NS
    good = (start >= lo) & (end >= start) & (end <= hi) & (end - start <= MAX_CAPTURE_NS)
    dropped = int(len(good) - np.count_nonzero(good))
    return ({c: v[good] for c, v in table.items()} if dropped else table), dropped


# Ids a rank and its streams are keyed on: CUDA device ordinals (CUPTI's 0xFFFFFFFF is "invalid"),
# the 24-bit pid field of nsys's packed globalPid (0 is no user process; -1 none), CUPTI's 32-bit
# stream ids (-1: not recorded). Rows outside are damage: they would become phantom ranks.
MAX_DEVICE = 4096
MAX_PID = (1 << 24) - 1
MAX_STREAM = (1 << 32) - 1


def drop_bad_ids(table: dict[str, np.ndarray]) -> tuple[dict[str, np.ndarray], int]:
    """The rows of a GPU work table whose device, pid and stream can be right, and how many were
    dropped."""
    good = ((table["device"] >= 0) & (table["device"] < MAX_DEVICE) & (table["pid"] >= 1) & (table["pid"] <= MAX_PID)
            & (table["stream"] >= -1) & (table["stream"] <= MAX_STREAM))
    dropped = int(len(good) - np.count_nonzero(good))
    return ({c: v[good] for c, v in table.items()} if dropped else table), dropped


def narrow_ids(column: np.ndarray) -> np.ndarray:
    """An id or count column (thread ids, correlation ids, row indices, thread blocks) as int32
    where every value fits, else as it is: these are held for every rank until the reduce ends,
    and their consumers only compare, search, index or divide with them (the what-if graph's
    input, attribution/whatif/graph.py, takes any integer dtype)."""
    info = np.iinfo(np.int32)
    if column.dtype == np.int64 and (not len(column) or (info.min <= column.min() and column.max() <= info.max)):
        return column.astype(np.int32)
    return column


def trace_export(export: Export, index: int, report: str, key: int | None = None) -> tuple[InputFacts, list[RankTrace]]:
    """The facts of one input and a trace per rank it holds (at least one: a report without GPU
    work is a rank with zero kernels, and a warning says so). GPU work with impossible times is
    dropped, counted in a warning: it would become negative or absurd figures; so is GPU work whose
    ids cannot be right (drop_bad_ids): it would become a phantom rank."""
    warnings = [f"{report}: {w}" for w in export.warnings]
    capture_start = export.session.capture_start_ns  # None where the format records none
    fixed = {}
    for name in GPU_ACTIVITY_TABLES:
        fixed[name], dropped = drop_bad_times(getattr(export, name), capture_start)
        if dropped:
            warnings.append(f"{report}: {dropped} {name} rows with missing, negative, reversed or out-of-range times dropped")
        fixed[name], dropped = drop_bad_ids(fixed[name])
        if dropped:
            warnings.append(f"{report}: {dropped} {name} rows with a missing or out-of-range device, process or stream id "
                            f"(device 0-{MAX_DEVICE - 1}, pid 1-{MAX_PID}, stream 0-{MAX_STREAM}) dropped")
    export = dataclasses.replace(export, **fixed)
    tables = [getattr(export, t) for t in GPU_ACTIVITY_TABLES]
    # (pid, device) packed in one integer: np.unique on rows is many times slower.
    packed, _ = grouping.unique(np.concatenate([(t["pid"] << 20) + (t["device"] + 1) for t in tables]))
    keys = [(int(k >> 20), int((k & 0xFFFFF) - 1)) for k in packed]
    if not keys:
        warnings.append(f"{report}: no CUDA kernels or copies captured; counted as a rank with zero kernels")
        keys = [(None, None)]
    env = rank_from_environment(export) if len(keys) == 1 else None
    file = rank_from_file_name(report) if len(keys) == 1 else None
    is_nccl = nccl_kernel_mask(export)
    metrics = _metric_samples(export) if len(export.gpu_metrics["start"]) else None
    devices = {device for _, device in keys}

    per_rank, used = [], []
    for pid, device in keys:
        gpu = ranges = ops = calls = syncs = events = None
        counts = _no_gpu_counts()
        if pid is not None:
            gpu, counts = _gpu_items(export, pid, device, is_nccl)
            ranges = _host_ranges(export, pid)
            calls = _host_calls(export, pid, ranges)
            ops = nccl_ops(export, pid, device, is_nccl)
            syncs, events = _sync_records(export, pid, device, own_process=sum(p == pid for p, _ in keys) == 1)
            used += [gpu.name, gpu.short_name, ranges.name, calls.name]
        per_rank.append((pid, device, gpu, ranges, ops, calls, syncs, events, counts))

    # One string table for the export's ranks, holding only the names they use, in export order.
    extended = export.strings + ["[CUDA memcpy]", "[CUDA memset]"]
    # Which ids are used, by marking a table (the last slot stands for -1: none), not by sorting them.
    present = np.zeros(len(extended) + 1, bool)
    for column in used:
        present[np.maximum(column, -1)] = True
    ids = np.flatnonzero(present[:-1])
    # Local ids fit in int32 (a table of at most a few thousand names): half the memory of the
    # name columns held for every rank until the reduce.
    remap = np.full(len(extended) + 1, -1, dtype=np.int32 if len(extended) < 2**31 - 1 else np.int64)
    remap[ids] = np.arange(len(ids))
    strings = tuple(extended[i] for i in ids.tolist())

    def local(column: np.ndarray) -> np.ndarray:
        return remap[np.maximum(column, -1)]

    traces = []
    # Unique per export, across chunks and processes: id() is reused once an export is released.
    key = secrets.randbits(63) if key is None else key
    for pid, device, gpu, ranges, ops, calls, syncs, events, counts in per_rank:
        if gpu is not None:
            gpu = GpuItems(**{**gpu.__dict__, "name": local(gpu.name), "short_name": local(gpu.short_name),
                              **{c: narrow_ids(getattr(gpu, c)) for c in ("correlation", "launch_tid", "ctas")}})
            ranges = HostRanges(start=ranges.start, end=ranges.end, tid=ranges.tid, name=local(ranges.name))
            calls = HostCalls(**{**calls.__dict__, "name": local(calls.name), "tid": narrow_ids(calls.tid),
                                 "correlation": narrow_ids(calls.correlation), "gap_range": narrow_ids(calls.gap_range)})
        traces.append(RankTrace(
            index=index, report=report, host=export.session.hostname, pid=pid, device=device, env_rank=env, file_rank=file,
            counts=counts, strings=strings, ops=ops, gpu=gpu, ranges=ranges, calls=calls,
            sm_count=sm_count(export, device) if pid is not None else None,
            metrics=metrics, metrics_shared=len(devices) > 1, syncs=syncs, events=events, key=key,
            gpu_name=gpu_name(export, device) if pid is not None else None))
    facts = InputFacts(report=report, export=shown(export.path), session=export.session, warnings=tuple(warnings))
    return facts, traces
