"""The aligned multi-rank timeline as a Chrome trace-event JSON file, for ui.perfetto.dev and
chrome://tracing.

Layout: one process per rank (pid = rank + 1: pid 0 is avoided), one thread per CUDA stream
(tid = stream + 1), every kernel, memcpy and memset of the rank as a complete ("X") event. The
NCCL kernel of each collective instance carries the instance's timing in its args and two
children on its track: "wait" (its arrival -> the last arrival) and "transfer" (last arrival ->
its end). Flow arrows ("delayed", cat "blame") go from the kernel blamed for a straggler's
lateness to the straggler's NCCL slice, and from the top-blamed kernel to every waiting rank's
"wait" slice: they show who made whom wait. Late host launches become instant events on the
straggler's NCCL track, named by their NVTX range.

Times are microseconds (floats with ns precision) on the aligned clock. Their origin is
`alignment.t_ref_ns`, moved earlier to the first GPU work item when some work precedes it:
Perfetto refuses negative timestamps. `otherData` records both. Every `ts` and `dur` carries
0.1 ns more than the exact ns: Perfetto reads `int(us * 1000.0)`, which truncates, and 4186.999 µs
would become 4186998 ns; one ns off breaks the nesting of back-to-back slices and children, and
Perfetto drops a slice that overlaps its track's open slice partially.

Events are written rank by rank (one rank's events in memory at a time), into a temporary file
in the destination folder that replaces the destination only once complete. The trace needs the
whole aligned timeline, which only a fresh result holds (a stored run keeps the evidence the
report draws, not every kernel).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from pathlib import Path

import numpy as np

from nsys_collective import outputs
from nsys_collective.errors import InputError
from nsys_collective.render.outdir import input_paths
from nsys_collective.result import Blame, HostBlame, KernelBlame, RankRow, Result, blamed_name
from nsys_collective.version import __version__

# Flows drawn per instance to the straggler: its largest kernel causes of at least the alignment
# tolerance (a window fallback can blame dozens of kernels; more arrows stop being readable).
MAX_SOURCES = 3
# Lanes beyond a stream's own track, for the rare items that overlap on one stream
# (programmatic dependent launch): Perfetto needs the slices of one track properly nested.
LANE_TID_STRIDE = 1_000_000


_HEAD = '{"traceEvents": [\n'
_TAG = b'"tool": "collectivetrace-nsys"'


def written_by_us(path: Path) -> bool:
    """Whether a file is a trace this tool wrote (its head, and the tool's name in its tail)."""
    try:
        with open(path, "rb") as f:
            head = f.read(len(_HEAD))
            f.seek(max(0, os.fstat(f.fileno()).st_size - 4096))
            return head == _HEAD.encode() and _TAG in f.read()
    except OSError:
        return False


def write_trace(result: Result, path: Path, force: bool = False, protect: Iterable[str | os.PathLike] = ()) -> dict:
    """Write the trace of a fresh result to `path` (an existing file only with `force`, and only
    a trace of ours; never an input nor `protect`); return {"events": n, "flows": n}."""
    if result.timeline is None:
        raise InputError(f"{result.source or 'this run'}: a stored run keeps no timeline for a Perfetto trace; "
                         "analyze its inputs again with --perfetto")
    path = Path(path)
    view = _View(result)
    work = view.work
    firsts = [int(work[r.rank].start[0]) for r in view.ranks if r.pid is not None and len(work[r.rank])]
    t_ref = int(result.document.alignment.t_ref_ns)
    origin = min([t_ref] + firsts)
    item_of = _observation_items(view)

    def us(ns):  # aligned ns (int or array) -> trace µs
        return _micros(ns - origin)

    other = {"tool": "collectivetrace-nsys", "version": __version__, "clock": "aligned",
             "t_ref_ns": t_ref, "origin_ns": origin, "reports": [i.path for i in result.document.inputs]}
    counts = {"events": 0, "flows": 0}
    with outputs.write_file(path, force, [*input_paths(result), *protect], ours=written_by_us) as f:
        f.write(_HEAD)
        first = True

        def emit(lines):
            nonlocal first
            if lines:
                f.write(("" if first else ",\n") + ",\n".join(lines))
                first = False
                counts["events"] += len(lines)

        tids = {}
        for r in view.ranks:
            events, tids[r.rank] = _rank_events(view, r, item_of, us)
            emit(events)
        flows, instants = _blame_events(view, item_of, tids, us)
        emit([_dumps(e) for e in instants + flows])
        counts["flows"] = len(flows) // 2
        f.write('\n],\n"displayTimeUnit": "ns",\n"otherData": ')
        json.dump(other, f)
        f.write("}\n")
    return counts


class _View:
    """What the trace draws from a result, as arrays: the ranks, every observation (instance,
    rank, aligned start and end, wait) and per instance its last arrival, transfer, straggler
    and naming."""

    def __init__(self, result: Result):
        document, o = result.document, result.evidence.observations
        self.work = result.timeline
        self.ranks = document.ranks
        self.collectives = document.collectives
        self.obs_instance, self.obs_rank, self.start, self.end = o.instance, o.rank, o.start, o.end
        self.last_arrival = np.array([c.last_arrival_ns for c in self.collectives], dtype=np.int64)
        self.straggler = np.array([c.straggler_rank for c in self.collectives], dtype=np.int64)
        self.wait = self.last_arrival[o.instance] - o.start if len(o.instance) else np.zeros(0, np.int64)
        self.tolerance_ns = result.evidence.tolerance_ns


def _micros(ns):
    """Trace µs of ns (an int or an int array), 0.1 ns over so that truncation reads ns exactly."""
    return (ns * 10 + 1) / 1e4


def _observation_items(view: _View) -> np.ndarray:
    """Per observation, the index of its NCCL operation in its rank's GPU work (-1 where not found)."""
    items = np.full(len(view.obs_rank), -1)
    for r in np.unique(view.obs_rank).tolist():
        rows = np.flatnonzero(view.obs_rank == r)
        items[rows] = view.work[r].index_of(view.start[rows], view.end[rows])
    return items


def _lanes(start: np.ndarray, end: np.ndarray, stream: np.ndarray) -> np.ndarray:
    """Lane of every item within its stream: 0, except items that overlap an earlier item of
    the same lane (greedy first fit; a Python loop only for streams that have any overlap)."""
    lane = np.zeros(len(start), np.int64)
    for s in np.unique(stream).tolist():
        rows = np.flatnonzero(stream == s)
        e = end[rows]
        if len(rows) < 2 or not np.any(start[rows][1:] < np.maximum.accumulate(e)[:-1]):
            continue
        lane_end: list[int] = []
        for j, (a, b) in zip(rows.tolist(), zip(start[rows].tolist(), e.tolist())):
            k = next((k for k, last in enumerate(lane_end) if a >= last), len(lane_end))
            if k == len(lane_end):
                lane_end.append(b)
            else:
                lane_end[k] = b
            lane[j] = k
    return lane


def _dumps(event: dict) -> str:
    return json.dumps(event, separators=(",", ":"))


def _rank_events(view: _View, r: RankRow, item_of, us) -> tuple[list[str], np.ndarray]:
    """Metadata, GPU work and collective children of one rank, as JSON lines; and each work
    item's tid."""
    rank = r.rank
    pid = rank + 1
    meta = [
        {"ph": "M", "pid": pid, "tid": 0, "ts": 0, "name": "process_name",
         "args": {"name": f"rank {rank} · {r.host} (pid {r.pid}, GPU {r.device})"}},
        {"ph": "M", "pid": pid, "tid": 0, "ts": 0, "name": "process_sort_index", "args": {"sort_index": rank}},
    ]
    if r.pid is None:  # a rank without a process holds no GPU work
        return [_dumps(e) for e in meta], np.zeros(0, np.int64)
    w, names = view.work[rank], view.work.names.values
    lane = _lanes(w.start, w.end, w.stream)
    tid = lane * LANE_TID_STRIDE + w.stream + 1  # int64 before the stream (int32 where it fits) is added

    # One track per (stream, lane), named; NCCL streams say so.
    nccl_tids = set(tid[w.is_nccl].tolist())
    for t, s, k in sorted(set(zip(tid.tolist(), w.stream.tolist(), lane.tolist()))):
        label = f"stream {s}" + (" (NCCL)" if t in nccl_tids else "") + (f" overlap {k}" if k else "")
        meta.append({"ph": "M", "pid": pid, "tid": t, "ts": 0, "name": "thread_name", "args": {"name": label}})
        meta.append({"ph": "M", "pid": pid, "tid": t, "ts": 0, "name": "thread_sort_index", "args": {"sort_index": t}})

    # Each collective's NCCL kernel: the instance's timing in its args, and its wait and
    # transfer as children on its track.
    ts, dur = us(w.start).tolist(), _micros(np.maximum(w.end - w.start, 0)).tolist()
    extra_args: dict[int, str] = {}
    children = []
    for row in np.flatnonzero((view.obs_rank == rank) & (item_of >= 0)).tolist():
        j, i = int(item_of[row]), int(view.obs_instance[row])
        c = view.collectives[i]
        start, end, last = int(w.start[j]), int(w.end[j]), c.last_arrival_ns
        wait = int(view.wait[row])
        args = {"collective": i, "op": c.op, "comm": c.comm, "seq": c.seq,
                "straggler": c.straggler_rank, "wait_ns": wait, "transfer_ns": c.transfer_ns}
        if c.straggler_rank == rank:
            args["blame"] = [_blame_label(b) for b in c.blame]
        extra_args[j] = "," + _dumps(args)[1:-1]
        split = min(max(last, start), end)  # clipped: a slightly violated causality must not leak out
        if split > start:
            children.append({"ph": "X", "pid": pid, "tid": int(tid[j]), "ts": ts[j], "dur": _micros(split - start),
                             "name": "wait", "cat": "collective", "args": {"collective": i, "wait_ns": wait}})
        if end > split:
            children.append({"ph": "X", "pid": pid, "tid": int(tid[j]), "ts": us(split), "dur": _micros(end - split),
                             "name": "transfer", "cat": "collective", "args": {"collective": i}})

    # Every work item, formatted directly (a million dicts through json.dumps take seconds): the
    # names are encoded once each, the numbers are ints and float reprs, as json writes them.
    memset = view.work.names.intern("[CUDA memset]")
    cat = np.where(w.is_nccl, "nccl", np.where(w.is_kernel, "kernel", np.where(w.name == memset, "memset", "memcpy")))
    encoded = {n: json.dumps(names[n]) for n in set(w.short_name.tolist()) | set(w.name.tolist())}
    lines = [_dumps(e) for e in meta]
    for j, (t, a, d, short, full, k, ctas) in enumerate(zip(tid.tolist(), ts, dur, w.short_name.tolist(), w.name.tolist(),
                                                            cat.tolist(), w.ctas.tolist())):
        lines.append(f'{{"ph":"X","pid":{pid},"tid":{t},"ts":{a!r},"dur":{d!r},"name":{encoded[short]},"cat":"{k}",'
                     f'"args":{{"name":{encoded[full]},"ctas":{ctas}{extra_args.get(j, "")}}}}}')
    lines += [_dumps(e) for e in children]
    return lines, tid


def _blame_label(b: Blame) -> str:
    what = blamed_name(b)
    return f"{b.cause}{': ' + str(what) if what else ''}: {b.ns} ns"


def _inside(start: int, end: int, at: int) -> int:
    """A time inside [start, end] near `at`, 1 ns in from the edges where the slice is long
    enough, so that an event binds to that slice and not to its neighbour."""
    return min(max(at, start + 1), end - 1) if end - start >= 2 else start


def _blame_events(view: _View, item_of, tids, us) -> tuple[list[dict], list[dict]]:
    """Flow arrows from blocking kernels to the collectives they delayed, and instants for late
    host launches."""
    work = view.work
    row_of = {(i, r): row for row, (i, r) in enumerate(zip(view.obs_instance.tolist(), view.obs_rank.tolist()))}
    occurrences: dict[tuple[int, int], np.ndarray] = {}  # (rank, name id) -> work items of that name
    flows, instants = [], []
    tolerance = view.tolerance_ns

    def flow(rank_a, item_a, at_a, rank_b, item_b, at_b, args):
        fid = len(flows) // 2 + 1
        common = {"cat": "blame", "name": "delayed", "id": fid, "bp": "e"}
        flows.append({"ph": "s", "pid": rank_a + 1, "tid": int(tids[rank_a][item_a]), "ts": us(at_a), **common, "args": args})
        flows.append({"ph": "f", "pid": rank_b + 1, "tid": int(tids[rank_b][item_b]), "ts": us(at_b), **common})

    for i, collective in enumerate(view.collectives):
        entries = collective.blame
        s = collective.straggler_rank
        row = row_of.get((i, s))
        if row is None or item_of[row] < 0:
            continue
        ws, target = work[s], int(item_of[row])
        t_start, t_end = int(ws.start[target]), int(ws.end[target])
        sources = []
        for b in entries:
            # Parts under the alignment tolerance are clock noise, not a cause worth an arrow.
            if isinstance(b, KernelBlame) and b.rank == s and b.ns >= tolerance and len(sources) < MAX_SOURCES:
                name = work.names.intern(b.kernel_full)
                if (s, name) not in occurrences:
                    occurrences[(s, name)] = np.flatnonzero(ws.name == name)
                items = occurrences[(s, name)]
                # The blamed kernel's last run before the straggler's NCCL kernel.
                k = int(np.searchsorted(ws.start[items], t_start)) - 1
                if k >= 0:
                    sources.append((int(items[k]), b))
            elif isinstance(b, HostBlame) and b.rank in (s, None):
                instants.append({"ph": "i", "s": "t", "pid": s + 1, "tid": int(tids[s][target]), "ts": us(t_start),
                                 "name": f"late: host in {b.nvtx or 'unknown NVTX range'}", "cat": "blame",
                                 "args": {"collective": i, "cause": b.cause, "ns": b.ns}})
        for n, (src, b) in enumerate(sources):
            a, e = int(ws.start[src]), int(ws.end[src])
            args = {"collective": i, "cause": b.cause, "kernel": b.kernel, "blame_ns": b.ns}
            flow(s, src, _inside(a, e, e), s, target, _inside(t_start, t_end, t_start), args)
            if n:  # the waiting ranks' arrows come from the largest cause only
                continue
            last = collective.last_arrival_ns
            lo, hi = np.searchsorted(view.obs_instance, [i, i + 1])  # observations are sorted by instance
            for r in view.obs_rank[lo:hi].tolist():
                row_r = row_of[(i, r)]
                item = int(item_of[row_r])
                if r == s or view.wait[row_r] <= 0 or item < 0:
                    continue
                wr = work[r]
                w_start, w_end = int(wr.start[item]), min(last, int(wr.end[item]))
                if w_end > w_start:  # the "wait" child exists
                    flow(s, src, _inside(a, e, e), r, item, _inside(w_start, w_end, w_end), args)
    return flows, instants
