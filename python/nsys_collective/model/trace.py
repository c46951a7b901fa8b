"""The per-rank map: what the model and the attribution need from one rank's capture, taken in one
pass over its export, so that the export itself can be released (and, on a cluster, so that only
this travels between workers).

`trace_export(export, index, report)` returns the input's facts and one `RankTrace` per rank the
export holds: its identity, its GPU work counted, its NCCL operations, its GPU work as columns
(UTC, sorted by start), its host ranges (NVTX push/pop and start/end ranges, Kineto annotations),
its CUDA API calls (which block, which host range each gap before a call fell in), its stream
waits (recorded, else inferred from the calls), its launch calls whose GPU work was lost, its
synchronize calls, its GPU's SM count and its GPU metric samples. Names are ids into a string
table shared by the export's ranks, holding only the names they use.
"""

from __future__ import annotations

import dataclasses
import secrets
from dataclasses import dataclass, field

import re

import numpy as np

from nsys_collective import _native
from nsys_collective.ingest.capture import MEMCPY_NAME, MEMSET_NAME, NVTX_PUSH_POP_RANGE, NVTX_START_END_RANGE, Export, Session
from nsys_collective.ingest.discover import shown
from nsys_collective.ingest.identity import Candidate, rank_from_environment, rank_from_file_name
from nsys_collective.model import cuda_api
from nsys_collective.model.grouping import ids
from nsys_collective.model.nccl import NcclOps, nccl_kernel_mask, nccl_ops
from nsys_collective.model.per_name import PerName
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


class GpuNames:
    """The short names and kinds of GPU items (GpuItems, timeline.GpuWork): the short names held
    per name (model/per_name.py; read a few times per rank), the kinds as one byte an item (read
    some 25 times per rank: a `take` of the name column each time would cost more than the byte)."""

    name: np.ndarray
    short_name_by_name: PerName
    kind: np.ndarray  # uint8 per item: KERNEL (a kernel, not a copy or memset) | NCCL (an NCCL kernel)

    KERNEL, NCCL = 1, 2

    @classmethod
    def of_columns(cls, short_name: np.ndarray, is_nccl: np.ndarray, is_kernel: np.ndarray, **columns):
        """The items of `columns`, the short names held per name and the kinds as bits."""
        kind = is_kernel.astype(np.uint8) * cls.KERNEL | is_nccl.astype(np.uint8) * cls.NCCL
        return cls(**columns, short_name_by_name=PerName.of(columns["name"], short_name), kind=kind)

    @property
    def short_name(self) -> np.ndarray:
        """int32 id of each item's short name, for people."""
        return self.short_name_by_name.at(self.name)

    @property
    def is_nccl(self) -> np.ndarray:
        """bool: an NCCL kernel."""
        return (self.kind & self.NCCL) != 0

    @property
    def is_kernel(self) -> np.ndarray:
        """bool: a kernel, not a copy or a memset."""
        return (self.kind & self.KERNEL) != 0

    @property
    def is_compute(self) -> np.ndarray:
        """bool: a compute kernel (a kernel, not NCCL's): is_kernel & ~is_nccl in one pass."""
        return self.kind == self.KERNEL


@dataclass(frozen=True)
class GpuItems(GpuNames):
    """A rank's GPU work (kernels, copies, memsets) sorted by start, on its own clock (UTC)."""

    start: np.ndarray
    end: np.ndarray
    name: np.ndarray  # int32 id of the full (demangled) name: what pairs kernels across ranks
    # The launching runtime call: its row in `calls`, -1 when unknown. Its start and thread are read
    # off the calls (launch, launch_tid), not held again for every op (12 bytes an op).
    launch_call: np.ndarray
    ctas: np.ndarray  # thread blocks (grid x*y*z) of kernels, 0 for copies
    stream: np.ndarray
    # launch_call, ctas and stream are int32 where their values fit: held for every rank until the
    # analysis ends, they are only compared, searched, indexed or divided. The launching call's
    # correlation id is not held: the map's lost launches are its only reader (trace_ranks).
    # short_name held per name; is_nccl, is_kernel and is_compute read off kind (GpuNames).
    short_name_by_name: PerName
    kind: np.ndarray
    calls: HostCalls  # the rank's calls (RankTrace.calls, the same object): launch and launch_tid read them

    @property
    def launch(self) -> np.ndarray:
        """int64: the start of each op's launching runtime call, -1 when unknown."""
        return self._of_launching_call(self.calls.start)

    @property
    def launch_tid(self) -> np.ndarray:
        """The thread of each op's launching runtime call, -1 when unknown."""
        return self._of_launching_call(self.calls.tid)

    def _of_launching_call(self, column: np.ndarray) -> np.ndarray:
        if not len(column):
            return np.full(len(self.launch_call), -1, column.dtype)
        out = column.take(self.launch_call)  # -1 takes the last call: set apart below
        out[self.launch_call < 0] = -1
        return out


@dataclass
class HostCalls:
    """The process's CUDA API calls (runtime and driver), sorted by start, on its own clock. Not
    frozen: `release` lets the columns go in place."""

    start: np.ndarray
    end: np.ndarray
    tid: np.ndarray
    correlation: np.ndarray
    name: np.ndarray  # string id (int32)
    kind: np.ndarray  # uint8: which of cuda_api.KINDS its name matches (cuda_api.kinds: asked once per name)
    # tid, correlation and gap_range are int32 where their values fit (as GpuItems' ids).
    # Where the host work before each thread's first call began (threads in the order their first
    # calls come): the start of the outermost host range around the call, else its own start.
    thread_origin: np.ndarray
    # The innermost host range (index into the rank's HostRanges) on the call's thread that covers
    # the middle of the gap before the call: what the host was doing meanwhile; -1 where none.
    gap_range: np.ndarray
    # Where the calls begin (the first call's start; None where there are none): kept when the
    # columns go (release).
    first_start: int | None = field(init=False)

    def __post_init__(self) -> None:
        self.first_start = int(self.start[0]) if len(self.start) else None

    @property
    def blocking(self) -> np.ndarray:
        """bool: the call returns only once GPU work it waits for has ended."""
        return cuda_api.of_kind(self.kind, cuda_api.BLOCKING)

    def release(self) -> None:
        """Let go of the calls, keeping where they begin (`first_start`): after the what-if's host
        pickers nothing reads more of them (65 MB at 1.9M kernels, held under the kernel pickers
        and the replays otherwise). In place, since the rank's trace and its GPU items share this
        object; a column read later is None, so that a late reader fails instead of reading none."""
        for column in dataclasses.fields(self):
            if column.name != "first_start":
                setattr(self, column.name, None)

    def gap_start(self) -> np.ndarray:
        """Where the host work before each call began: the previous call's end on its thread, for
        a thread's first call its `thread_origin`. Derived when asked, not held (8 bytes a call
        for every rank; one pass in the core)."""
        return _native.gap_starts(ids(self.tid), np.ascontiguousarray(self.end, np.int64), self.thread_origin)


@dataclass(frozen=True)
class HostRanges:
    """The process's host ranges (NVTX push/pop and start/end, Kineto annotations), in capture order."""

    start: np.ndarray
    end: np.ndarray
    tid: np.ndarray  # int32 where every value fits
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
    # The rank's stream waits, as the idle split and the replay take them: (syncs, events), its
    # recorded synchronizations and event records (columns: kind, stream, event, correlation,
    # record_correlation / stream, event, correlation), or where the capture recorded none, those
    # inferred from its calls (model/stream_waits.py); (None, None) where there are neither.
    # Derived in the map, beside the rest of the rank's trace.
    stream_waits: tuple[dict | None, dict | None] = (None, None)
    # Start times of its kernel launch calls whose GPU work is not in the capture (the steps they
    # fell in lost GPU work: model/steps.py).
    lost_launches: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    # Its process's synchronize calls (rows of `calls`): where its host waited for the GPU
    # (attribution/host_sync.py).
    synchronize_calls: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    key: int = field(default=0, compare=False)  # identifies the export's string table (Names caches by it)
    gpu_name: str | None = None  # the device's name as the capture records it (TARGET_INFO_GPU, deviceProperties)

    def name(self, string_id: int) -> str | None:
        return self.strings[string_id] if string_id >= 0 else None

    def names(self, string_ids: np.ndarray) -> np.ndarray:
        """Strings of many ids at once (None for -1), as an object array."""
        table = np.array(self.strings + (None,), dtype=object)
        return table[np.where(string_ids >= 0, string_ids, len(self.strings))]


def lost_launches(calls: HostCalls | None, op_correlation: np.ndarray | None) -> np.ndarray:
    """Start times of the kernel launch calls whose GPU work is not in the capture (none of the
    ops, `op_correlation` their launching calls' ids, has their id)."""
    if calls is None or not len(calls.start):
        return np.zeros(0, dtype=np.int64)
    launch = np.flatnonzero(cuda_api.of_kind(calls.kind, cuda_api.LAUNCH))
    ran = np.isin(calls.correlation[launch], op_correlation) if op_correlation is not None else np.zeros(len(launch), bool)
    return calls.start[launch[~ran]]


def synchronize_calls(calls: HostCalls | None) -> np.ndarray:
    """The synchronize calls (rows of `calls`): where the host waited for the GPU."""
    if calls is None:
        return np.zeros(0, dtype=np.int64)
    return np.flatnonzero(cuda_api.of_kind(calls.kind, cuda_api.SYNCHRONIZE))


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


def _int32_where_it_fits(column: np.ndarray) -> np.ndarray:
    """An id column as int32 where every value fits (as the core makes the calls' and items' ids):
    held for every rank until the analysis ends, it is only compared (a profiler trace's CPU
    operators are host ranges too: 2 million at 1.9M kernels, 8 MB less)."""
    info = np.iinfo(np.int32)
    fits = not len(column) or (info.min <= column.min() and column.max() <= info.max)
    return column.astype(np.int32) if fits else column


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
# Ids a rank and its streams are keyed on: CUDA device ordinals (CUPTI's 0xFFFFFFFF is "invalid"),
# the 24-bit pid field of nsys's packed globalPid (0 is no user process; -1 none), CUPTI's 32-bit
# stream ids (-1: not recorded). Rows outside are damage: they would become phantom ranks.
MAX_DEVICE = 4096
MAX_PID = (1 << 24) - 1
MAX_STREAM = (1 << 32) - 1


def screen_gpu_work(export: Export, report: str, warnings: list[str]) -> tuple[Export, list[tuple[int, int]]]:
    """The export without the GPU work whose times or ids cannot be right, and the ranks (pid,
    device) of the rest, sorted; what was dropped is counted in `warnings`. Times must have end >=
    start, last at most MAX_CAPTURE_NS, and lie within MAX_CAPTURE_NS from the capture's start
    where known (nothing runs before it), else from 0 (a missing time reads -1) to MAX_TIME_NS:
    others would become negative or absurd figures. Ids must be a device 0..MAX_DEVICE - 1, a pid
    1..MAX_PID and a stream -1..MAX_STREAM: others would become phantom ranks. One pass per table
    in the core (crates/core/src/rank_trace.rs); tests/unit/test_rank_trace.py keeps the numpy
    version."""
    capture_start = export.session.capture_start_ns  # None where the format records none
    lo = max(0, capture_start or 0)
    hi = min(MAX_TIME_NS, lo + MAX_CAPTURE_NS) if capture_start else MAX_TIME_NS
    limits = (lo, hi, MAX_CAPTURE_NS, MAX_DEVICE, MAX_PID, MAX_STREAM)
    kept, ranks = {}, set()
    for name in GPU_ACTIVITY_TABLES:
        table = getattr(export, name)
        bad_times, bad_ids, good, found = _native.screen_activity(table, limits)
        if good is not None:
            table = {c: v[good] for c, v in table.items()}
        if bad_times:
            warnings.append(f"{report}: {bad_times} {name} rows with missing, negative, reversed or out-of-range times dropped")
        if bad_ids:
            warnings.append(f"{report}: {bad_ids} {name} rows with a missing or out-of-range device, process or stream id "
                            f"(device 0-{MAX_DEVICE - 1}, pid 1-{MAX_PID}, stream 0-{MAX_STREAM}) dropped")
        kept[name] = table
        ranks.update(found)
    return dataclasses.replace(export, **kept), sorted(ranks)


def trace_ranks(export: Export, keys: list[tuple[int, int]], is_nccl: np.ndarray
                ) -> tuple[list[tuple[GpuItems, dict, HostRanges, HostCalls, np.ndarray]], tuple[str, ...]]:
    """Per rank (pid, device) of a screened export: its GPU work sorted by start (copies named by
    two labels past the export's strings) and its counts (kernels, NCCL's, the time NCCL kernels
    cover and how much of it compute kernels cover too, its first start and last end), its host
    ranges, its calls by start with the gap before each, and its ops' launching calls' correlation
    ids (read by the lost launches, not held by the ops); their names ids into one string table
    of only the names the ranks use, in export order, returned beside them. One pass per table
    and rank in the core, each column made in the type it is held in (crates/core/src/rank_trace.rs);
    tests/unit/test_rank_trace.py keeps the numpy version."""
    labels = [(export.memcpy, len(export.strings)), (export.memset, len(export.strings) + 1)]  # MEMCPY_NAME, MEMSET_NAME
    ranges = [_host_ranges(export, pid) for pid, _ in keys]
    traced, used = _native.trace_ranks(
        export.kernels, np.ascontiguousarray(is_nccl, bool), labels, export.runtime,
        [(pid, device, r.start, r.end, r.tid, r.name) for (pid, device), r in zip(keys, ranges)], len(export.strings))
    extended = export.strings + [MEMCPY_NAME, MEMSET_NAME]
    strings = tuple(extended[i] for i in used.tolist())
    out = []
    for (gpu, counted, calls, range_name), r in zip(traced, ranges):
        kernels, nccl_kernels, nccl_time, overlap, first, last = counted
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
        calls = HostCalls(**calls, kind=cuda_api.kinds(calls["name"], strings))
        correlation = gpu.pop("correlation")
        out.append((GpuItems.of_columns(**gpu, calls=calls), counts, dataclasses.replace(r, name=range_name, tid=_int32_where_it_fits(r.tid)),
                    calls, correlation))
    return out, strings


def trace_export(export: Export, index: int, report: str, key: int | None = None) -> tuple[InputFacts, list[RankTrace]]:
    """The facts of one input and a trace per rank it holds (at least one: a report without GPU
    work is a rank with zero kernels, and a warning says so). GPU work with impossible times or
    ids is dropped, counted in a warning (screen_gpu_work)."""
    warnings = [f"{report}: {w}" for w in export.warnings]
    export, keys = screen_gpu_work(export, report, warnings)
    is_nccl = nccl_kernel_mask(export)
    traced, strings = trace_ranks(export, keys, is_nccl)
    if not keys:
        warnings.append(f"{report}: no CUDA kernels or copies captured; counted as a rank with zero kernels")
        keys, traced = [(None, None)], [(None, _no_gpu_counts(), None, None, None)]
    env = rank_from_environment(export) if len(keys) == 1 else None
    file = rank_from_file_name(report) if len(keys) == 1 else None
    metrics = _metric_samples(export) if len(export.gpu_metrics["start"]) else None
    devices = {device for _, device in keys}
    traces = []
    # Unique per export, across chunks and processes: id() is reused once an export is released.
    key = secrets.randbits(63) if key is None else key
    for (pid, device), (gpu, counts, ranges, calls, op_correlation) in zip(keys, traced):
        ops, waits = None, (None, None)
        if pid is not None:
            ops = nccl_ops(export, pid, gpu, strings)
            waits = _sync_records(export, pid, device, own_process=sum(p == pid for p, _ in keys) == 1)
            if waits[0] is None:
                waits = stream_waits_from_calls(calls, gpu)
        traces.append(RankTrace(
            index=index, report=report, host=export.session.hostname, pid=pid, device=device, env_rank=env, file_rank=file,
            counts=counts, strings=strings, ops=ops, gpu=gpu, ranges=ranges, calls=calls,
            sm_count=sm_count(export, device) if pid is not None else None,
            metrics=metrics, metrics_shared=len(devices) > 1, stream_waits=waits,
            lost_launches=lost_launches(calls, op_correlation), synchronize_calls=synchronize_calls(calls), key=key,
            gpu_name=gpu_name(export, device) if pid is not None else None))
    facts = InputFacts(report=report, export=shown(export.path), session=export.session, warnings=tuple(warnings))
    return facts, traces
