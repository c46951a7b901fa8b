"""What-if blame (method.md section 4): what fixing each cause would save, measured by replaying the
job's dependency graph with that cause removed.

1. The graph: every rank's CUDA API calls and GPU ops on the aligned clock, with the recorded
   synchronization and event records, and the collectives' members, go to the native
   `ReplayGraph` (crates/core/src/whatif; docs/whatif-replay.md), which infers what is not recorded
   and replays the whole job in one forward pass.
2. Candidates, picked cheaply from excess over a reference:
   * `kernel`: a compute kernel that ran longer on a rank than the same kernel (same step, same
     occurrence) on the ranks running the same program (`peers`), or, where no other rank runs it
     (pipeline stages), than on the same rank in other steps (`self`). Fixed: it runs as long as
     its reference.
   * `extra_kernel`: kernels a rank ran more often in a step than its peers. Fixed: not run.
   * `host`: host time inside an NVTX range or CPU operator (its gaps between CUDA calls) longer on
     a rank than the same range's occurrence on the peers. Fixed: as long as on the peers.
   * `host_group`: the same late range on every rank of one host. Fixed on all of them, against
     the ranks of the other hosts.
   * `transfer`: transfers slowed by a kernel overlapping them (the contention fit's share), and
     transfers slower than their kind's baseline beyond that (network).
     Fixed: at the baseline.
   * `idle`: a rank's GPU ops starting later than anything recorded or inferred explains (slack).
     Fixed: the slack goes.
   A collective's own kernel is never a cause: wait that travels through an earlier collective is
   charged to what made that one late.
3. Each candidate is replayed alone, and all of them at once (the ideal), in parallel. A cause's
   `wait_saved_ns` is the drop of the summed wait of all ranks over all collectives (GPU time),
   `step_time_saved_ns` the mean over steps of how much shorter each step gets (a step ends at the
   latest end of its ops on any rank), and per collective the wait it saved.
"""

from __future__ import annotations

import fnmatch
import os
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np

from nsys_collective import _native
from nsys_collective.attribution.causes import nvtx_family
from nsys_collective.model.job import Job
from nsys_collective.model.steps import STEP_PATTERN
from nsys_collective.model.stream_waits import stream_waits_from_calls
# A kernel is a candidate when it ran at least this much longer than its reference, summed over its
# runs (run-to-run jitter averages out in the sum: a real slowdown does not).
MIN_SLOWDOWN = 0.05
# ... and when its excess is at least this many tolerances (a few us of jitter is no cause).
MIN_EXCESS_TOLERANCES = 4
# A cause is named with confidence when it is systematic (a kernel 10%+ slower or run more often,
# a host range 50%+ longer, on every or most occurrences) and saves at least this share of the wait.
CONFIDENT_SHARE = 0.10
CONFIDENT_SLOWDOWN = 0.10
CONFIDENT_HOST_EXCESS = 0.5
# Ranks run the same program when their compute kernel names overlap this much (Jaccard).
SAME_PROGRAM = 0.5
# Transfers: the baseline of a kind of collective is this percentile of its transfers, from this
# many of them on; a transfer this many times its baseline is slow.
TRANSFER_BASELINE_PERCENTILE = 10
MIN_TRANSFER_SAMPLES = 4
SLOW_TRANSFER = 1.2
# A cause must save at least its excess threshold of wait, or this share of a step (a transfer
# slowed between queued buckets can cost step time while the ranks wait no more).
MIN_STEP_SHARE = 0.002
# Candidates replayed at most (the largest excess first): each replay is one pass over the job.
MAX_CANDIDATES = 24
_I64_MIN = np.iinfo(np.int64).min


@dataclass
class Candidate:
    cause: str  # kernel | extra_kernel | host | host_group | transfer | idle
    rank: int | None  # rank number; None for host_group and transfer
    host: str | None
    name: str | None  # kernel short name, host range family, or what transferred
    name_full: str | None
    reference: str | None  # peers | self
    excess_ns: int  # the cause's own extra time, what fixing it removes
    systematic: bool
    change: dict  # a ReplayGraph change
    slowdown: float | None = None
    runs: int | None = None
    reference_runs: int | None = None
    ranks: list[int] | None = None  # the ranks it acts on (a host-wide cause: every rank of the host)


@dataclass
class WhatIf:
    fidelity: dict
    ideal: dict  # wait_saved_ns, step_time_saved_ns
    causes: list[dict]  # the contract's whatif.causes entries, by wait_saved_ns
    saved: list[np.ndarray]  # per cause (in `causes` order): wait saved per collective
    ideal_saved: np.ndarray  # per collective: wait the ideal replay saves
    steps: int
    warnings: list[str] = field(default_factory=list)
    compute: dict[int, tuple[int, int]] = field(default_factory=dict)  # compute_slowdown entry -> (wait, step time) saved


@dataclass
class _Graph:
    """The job's graph and the rows it was built from."""

    building: Future  # of the _native.ReplayGraph, built in a thread (without the GIL) while candidates are picked
    ranks: list[int]  # rank number of each dense rank
    op_offset: dict[int, int]  # rank number -> its first op row (ops in timeline order)
    call_offset: dict[int, int]
    op_step: np.ndarray  # per op row, dense step, -1 outside the steps
    member_rows: np.ndarray  # per observation of job.collectives, its member row
    step_names: list[str]
    has_steps: bool  # the ranks mark steps (else the capture is one step)

    @property
    def graph(self):
        return self.building.result()


def _first_of_thread(tid: np.ndarray) -> np.ndarray:
    """Whether each call (sorted by start) is its thread's first."""
    _, first = np.unique(tid, return_index=True)
    out = np.zeros(len(tid), dtype=bool)
    out[first] = True
    return out


def _steps_of(job: Job, rank: int, points: np.ndarray, step_index: dict[str, int]) -> np.ndarray:
    """The step (dense, -1 none) each point (UTC on the rank's clock) falls in."""
    trace = job.traces[rank]
    out = np.full(len(points), -1, dtype=np.int64)
    ranges = trace.ranges
    if ranges is None or not step_index:
        return out
    names = trace.names(ranges.name)
    rows = np.flatnonzero([bool(n) and n in step_index for n in names.tolist()])
    if not len(rows):
        return out
    found = _native.innermost_covering(ranges.start[rows], ranges.end[rows], points)
    hit = found >= 0
    codes = np.array([step_index[n] for n in names[rows].tolist()], dtype=np.int64)
    out[hit] = codes[found[hit]]
    return out


def _step_names(job: Job, pattern: str) -> list[str]:
    """The training steps every rank marks (ProfilerStep#N, or --steps), in time order."""
    first: dict[str, int] = {}
    for trace in job.traces.values():
        if trace.ranges is None:
            continue
        for name, start in zip(trace.names(trace.ranges.name).tolist(), trace.ranges.start.tolist()):
            if name and fnmatch.fnmatchcase(name, pattern):
                first[name] = min(first.get(name, start), start)
    return sorted(first, key=first.get)


def build_graph(job: Job, tolerance_ns: int, step_pattern: str | None = None) -> _Graph | None:
    """The job's ReplayGraph (None when there is nothing to replay: no collective, no GPU work)."""
    ranks = [r.rank for r in job.ranks if job.traces[r.rank].gpu is not None]
    if not ranks or not len(job.collectives):
        return None
    step_names = _step_names(job, step_pattern or STEP_PATTERN)
    if job.steps is not None and job.steps.restricts:  # steps left out as incomplete are no steps here
        step_names = [n for n in step_names if n not in {lo.step for lo in job.steps.left_out}]
    step_index = {n: i for i, n in enumerate(step_names)}
    calls, ops, syncs, events = [], [], [], []
    op_offset, call_offset = {}, {}
    n_ops = n_calls = 0
    correct = job.alignment.correct_rank
    for dense, rank in enumerate(ranks):
        trace, work = job.traces[rank], job.timeline[rank]
        c = trace.calls
        op_offset[rank], call_offset[rank] = n_ops, n_calls
        launch_utc = trace.gpu.launch
        op_step = _steps_of(job, rank, np.where(launch_utc >= 0, launch_utc, trace.gpu.start), step_index)
        if not step_names:
            op_step[:] = 0  # no steps marked: the capture is one step
        ops.append({"rank": np.full(len(work), dense), "stream": work.stream, "start": work.start, "end": work.end,
                    "correlation": trace.gpu.correlation, "step": op_step})
        # Each gap inside a range is a segment of its own, named by its call's row: a host cause
        # cuts the gaps it chooses (_HostTime.change).
        # Each thread starts at its first call, or at the host work before it (a data loader, say):
        # a zero-length call there anchors the thread, so that the work before its first call can
        # be shortened too.
        first = np.flatnonzero(_first_of_thread(c.tid))
        early = first[c.gap_start[first] < c.start[first]]
        calls.append({"rank": np.full(len(c.start), dense), "thread": c.tid, "start": correct(rank, c.start),
                      "end": correct(rank, c.end), "correlation": c.correlation, "blocking": c.blocking.astype(np.int64),
                      "segment": np.where(c.gap_range >= 0, n_calls + np.arange(len(c.start)), -1)})
        origin = correct(rank, c.gap_start[early])
        calls.append({"rank": np.full(len(early), dense), "thread": c.tid[early], "start": origin, "end": origin,
                      "correlation": np.full(len(early), -1), "blocking": np.zeros(len(early), np.int64),
                      "segment": np.full(len(early), -1)})
        recorded_syncs, recorded_events = trace.syncs, trace.events
        if recorded_syncs is None or not len(recorded_syncs["correlation"]):
            recorded_syncs, recorded_events = stream_waits_from_calls(trace)
        for table, rows in ((syncs, recorded_syncs), (events, recorded_events)):
            if rows is not None and len(rows["correlation"]):
                table.append({"rank": np.full(len(rows["correlation"]), dense), **rows})
        n_ops += len(work)
        n_calls += len(c.start) + len(early)
    col = job.collectives
    member_rows = np.full(len(col.obs_rank), -1, dtype=np.int64)
    for rank in ranks:
        rows = np.flatnonzero(col.obs_rank == rank)
        found = job.timeline[rank].index_of(job.aligned_start[rows], job.aligned_end[rows])
        member_rows[rows] = np.where(found >= 0, op_offset[rank] + found, -1)
    if (member_rows < 0).any():  # every observation came from a rank's GPU work: cannot happen
        raise RuntimeError(f"{int((member_rows < 0).sum())} collective members not found in their rank's GPU work")
    members = {"instance": col.obs_instance, "op": member_rows}

    def joined(parts):
        return {k: np.concatenate([p[k] for p in parts]).astype(np.int64, copy=False) for k in parts[0]} if parts else None

    # Building the graph is the what-if's largest single cost: it runs beside the candidate picking.
    pool = ThreadPoolExecutor(max_workers=1)
    building = pool.submit(_native.ReplayGraph, joined(calls), joined(ops), members, syncs=joined(syncs),
                           events=joined(events), tolerance_ns=int(tolerance_ns))
    pool.shutdown(wait=False)  # the thread ends with the build
    op_step = np.concatenate([o["step"] for o in ops])
    return _Graph(building=building, ranks=ranks, op_offset=op_offset, call_offset=call_offset,
                  op_step=op_step, member_rows=member_rows, step_names=step_names or ["(the whole capture)"],
                  has_steps=bool(step_names))


# Candidates -------------------------------------------------------------------------------------

def _packed(keys: tuple[np.ndarray, ...]) -> np.ndarray | None:
    """The keys packed into one int64 per row, ordered as the keys are (the first key first);
    None where their ranges do not fit in 62 bits."""
    n = len(keys[0])
    code, bits = np.zeros(n, np.int64), 0
    for key in keys:
        lo = int(key.min()) if n else 0
        width = (int(key.max()) - lo + 1).bit_length() if n else 1
        bits += width
        if bits > 62:
            return None
        code = (code << width) | (key - lo)
    return code


def _sorted_rows(keys: tuple[np.ndarray, ...], then: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Rows in the order of the keys (the first key first), rows with equal keys by `then`, else
    in row order; and where each group of equal keys starts, as a bool per sorted row.
    The keys are packed into one int64 where their ranges fit: a stable argsort of one column is
    several times faster than np.lexsort of many (a million kernel runs, every analysis)."""
    n = len(keys[0])
    code = _packed(keys)
    if code is None:
        order = np.lexsort(((then,) if then is not None else ()) + keys[::-1])
        new = np.r_[True, np.any([k[order][1:] != k[order][:-1] for k in keys], axis=0)] if n else np.zeros(0, bool)
        return order, new
    order = np.argsort(then, kind="stable") if then is not None else np.arange(n)
    order = order[np.argsort(code[order], kind="stable")]
    sorted_code = code[order]
    return order, np.r_[True, sorted_code[1:] != sorted_code[:-1]] if n else np.zeros(0, bool)


def _groups(*keys: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Rows sorted by the keys (the first key first), each row's group number in that order, and
    each group's first position."""
    order, new = _sorted_rows(keys)
    return order, np.cumsum(new) - 1, np.flatnonzero(new)


def _group_medians(value: np.ndarray, *keys: np.ndarray):
    """`_groups` of the keys (rows sorted by the keys, then by value), and the median value of
    each group."""
    order, new = _sorted_rows(keys, then=value)
    if not len(order):
        return order, order, order, np.zeros(0)
    first = np.flatnonzero(new)
    counts = np.diff(np.r_[first, len(order)])
    v_sorted = value[order].astype(np.float64)
    return order, np.cumsum(new) - 1, first, (v_sorted[first + (counts - 1) // 2] + v_sorted[first + counts // 2]) / 2


def _reference(value: np.ndarray, *keys: np.ndarray) -> np.ndarray:
    """Per row, the median of the other rows with the same keys (ranks running the same thing);
    NaN where no other row has them. With three or more rows the median of all of them serves
    (a single outlier never is the median)."""
    out = np.full(len(value), np.nan)
    order, group, first, median = _group_medians(value, *keys)
    if not len(order):
        return out
    counts = np.diff(np.r_[first, len(order)])
    v = value[order].astype(np.float64)
    size = counts[group]
    ref = median[group]
    # Two rows: each one's reference is the other.
    pair = size == 2
    other = np.where(np.r_[False, group[1:] == group[:-1]], np.r_[0, v[:-1]], np.r_[v[1:], 0])
    ref = np.where(pair, other, ref)
    ref[size == 1] = np.nan
    out[order] = ref
    return out


def _occurrence(*keys: np.ndarray) -> np.ndarray:
    """Each row's position among the rows with the same keys, in row order."""
    order, new = _sorted_rows(keys)
    occ = np.empty(len(order), dtype=np.int64)
    starts = np.flatnonzero(new)
    occ[order] = np.arange(len(order)) - np.repeat(starts, np.diff(np.r_[starts, len(order)]))
    return occ


def _programs(job: Job, ranks: list[int]) -> dict[int, int]:
    """Ranks that run the same program (their compute kernel names overlap) share a number."""
    names = {}
    for rank in ranks:
        w = job.timeline[rank]
        names[rank] = set(np.unique(w.name[w.is_kernel & ~w.is_nccl]).tolist())
    program, representatives = {}, []
    for rank in ranks:
        for k, rep in enumerate(representatives):
            union = len(names[rank] | names[rep])
            if union == 0 or len(names[rank] & names[rep]) / union >= SAME_PROGRAM:
                program[rank] = k
                break
        else:
            program[rank] = len(representatives)
            representatives.append(rank)
    return program


@dataclass
class _Kernels:
    """Every compute kernel run of the job, one row each."""

    rank: np.ndarray
    program: np.ndarray
    step: np.ndarray
    name: np.ndarray
    duration: np.ndarray
    op: np.ndarray  # op row in the graph
    occurrence: np.ndarray  # among the same kernel's runs in the same step on the same rank


def _kernel_runs(job: Job, g: _Graph, program: dict[int, int]) -> _Kernels:
    parts = []
    for rank in g.ranks:
        w = job.timeline[rank]
        rows = np.flatnonzero(w.is_kernel & ~w.is_nccl)
        op = g.op_offset[rank] + rows
        parts.append((np.full(len(rows), rank), np.full(len(rows), program[rank]), g.op_step[op], w.name[rows],
                      (w.end - w.start)[rows], op))
    cols = [np.concatenate(c).astype(np.int64) for c in zip(*parts)]
    k = _Kernels(*cols, occurrence=np.zeros(0, np.int64))
    k.occurrence = _occurrence(k.rank, k.step, k.name)
    return k


def _kernel_candidates(job: Job, k: _Kernels, min_excess: int) -> list[Candidate]:
    """Kernels that ran longer than their reference: the same run on the peers, else on the same
    rank in other steps."""
    peers = _reference(k.duration, k.program, k.step, k.name, k.occurrence)
    use_peers = ~np.isnan(peers)
    ref = peers.copy()
    alone = np.flatnonzero(~use_peers)  # only runs no other rank has need their own steps
    if len(alone):
        ref[alone] = _reference(k.duration[alone], k.rank[alone], k.name[alone], k.occurrence[alone])
    known = ~np.isnan(ref)
    out = []
    for reference, pick in (("peers", known & use_peers), ("self", known & ~use_peers)):
        rows = np.flatnonzero(pick)
        if not len(rows):
            continue
        order, group, first = _groups(k.rank[rows], k.name[rows])
        rows = rows[order]
        total = np.add.reduceat(k.duration[rows].astype(np.float64), first)
        total_ref = np.add.reduceat(ref[rows], first)
        over = np.maximum(0, k.duration[rows] - ref[rows])
        excess = np.add.reduceat(over, first)
        slowdown = total / np.maximum(total_ref, 1) - 1
        for g_ in np.flatnonzero((slowdown >= MIN_SLOWDOWN) & (excess >= min_excess)).tolist():
            members = rows[first[g_]:first[g_ + 1] if g_ + 1 < len(first) else len(rows)]
            slow = members[k.duration[members] > ref[members]]
            rank, name = int(k.rank[members[0]]), int(k.name[members[0]])
            out.append(Candidate(
                cause="kernel", rank=rank, host=job.by_number[rank].host, name=_short(job, name),
                name_full=job.timeline.names.values[name], reference=reference, excess_ns=int(excess[g_]),
                systematic=bool(slowdown[g_] >= CONFIDENT_SLOWDOWN), slowdown=float(slowdown[g_]),
                runs=len(members), reference_runs=len(members),
                change={"op": k.op[slow], "op_ns": np.round(ref[slow]).astype(np.int64)}))
    return out


def _short(job: Job, name: int) -> str:
    """The short name of a kernel's full name id."""
    for rank in job.traces:
        short = job.timeline[rank].short_of.get(name)
        if short is not None:
            return job.timeline.names.values[short]
    return job.timeline.names.values[name]


def _extra_candidates(job: Job, k: _Kernels, program: dict[int, int], min_excess: int) -> list[Candidate]:
    """Kernels a rank ran more often in a step than the other ranks of its program did."""
    out = []
    ranks_of = {}
    for rank, p in program.items():
        ranks_of.setdefault(p, []).append(rank)
    for p, members in ranks_of.items():
        if len(members) < 2:
            continue
        mine = np.flatnonzero(k.program == p)
        # Runs per (step, name, rank), zeros included, as a dense table.
        names = int(k.name[mine].max()) + 1 if len(mine) else 1
        key, key_of = np.unique(k.step[mine] * names + k.name[mine], return_inverse=True)
        keys = np.stack([key // names, key % names])
        col = np.full(max(members) + 1, -1, dtype=np.int64)
        col[members] = np.arange(len(members))
        counts = np.zeros((len(key), len(members)), dtype=np.int64)
        np.add.at(counts, (key_of.ravel(), col[k.rank[mine]]), 1)
        peer = np.median(counts, axis=1)
        for j, rank in enumerate(members):
            extra_keys = np.flatnonzero(counts[:, j] > peer)
            if not len(extra_keys):
                continue
            rows = mine[(k.rank[mine] == rank) & np.isin(key_of.ravel(), extra_keys)]
            # The runs beyond the peers' count in each step are the extra ones.
            allowed = np.floor(peer[key_of.ravel()[np.searchsorted(mine, rows)]]).astype(np.int64)
            extra = rows[k.occurrence[rows] >= allowed]
            for name in np.unique(k.name[extra]).tolist():
                removed = extra[k.name[extra] == name]
                excess = int(k.duration[removed].sum())
                if excess < min_excess:
                    continue
                per_rank = counts[np.flatnonzero(keys[1] == name)].sum(axis=0)
                runs, reference_runs = int(per_rank[j]), int(round(np.median(np.delete(per_rank, j))))
                out.append(Candidate(
                    cause="extra_kernel", rank=rank, host=job.by_number[rank].host, name=_short(job, name),
                    name_full=job.timeline.names.values[name], reference="peers", excess_ns=excess,
                    systematic=runs > reference_runs, runs=runs, reference_runs=reference_runs,
                    change={"op": k.op[removed], "op_ns": np.zeros(len(removed), np.int64)}))
    return out


@dataclass
class _HostTime:
    """Host time inside every range occurrence of the job, one row per occurrence: the gaps between
    CUDA calls whose middle fell in it, and the calls after them that do not wait for the GPU (a
    cudaMalloc, a context set-up: host time too). `item_*` lists those pieces, each occurrence's in
    time order, for `change`."""

    rank: np.ndarray
    program: np.ndarray
    step: np.ndarray
    family: np.ndarray  # id into `families`
    occurrence: np.ndarray
    total: np.ndarray
    end: np.ndarray  # when the range ended, on the aligned clock
    families: list[str]
    item_row: np.ndarray  # the occurrence (row) of each piece; rows ascending, time order within
    item_call: np.ndarray  # its graph call row: a gap is the segment of that row, a call is that row
    item_is_call: np.ndarray
    item_ns: np.ndarray

    def excess(self, reference_total: np.ndarray, reference_end: np.ndarray) -> np.ndarray:
        """How much of each occurrence's host time is late: what it took beyond its reference, at
        most how much later than the reference it ended (a rank that entered the range late for
        another reason, or waited in it for the others (a bootstrap), is not made early by it)."""
        over = np.maximum(0, self.total - reference_total)
        late = np.maximum(0, self.end - reference_end)
        return np.where(np.isnan(reference_end), over, np.minimum(over, late))

    def change(self, rows: np.ndarray, cut: np.ndarray) -> dict:
        """The ReplayGraph change that takes `cut[row]` from each of `rows`, latest pieces first (the
        host time that makes a range end late is the time just before its end; a cut from an early
        gap is often absorbed by a later wait in the range and moves nothing)."""
        want = np.zeros(len(self.total))
        want[rows] = cut[rows]
        items = np.flatnonzero(want[self.item_row] > 0)[::-1]  # latest first within each row
        row, ns = self.item_row[items], self.item_ns[items]
        start = np.flatnonzero(np.r_[True, row[1:] != row[:-1]])
        before = np.cumsum(ns) - ns  # taken by the later pieces of the same row ...
        before -= np.repeat(before[start], np.diff(np.r_[start, len(row)]))
        take = np.clip(want[row] - before, 0, ns).round().astype(np.int64)
        items, left = items[take > 0], (ns - take)[take > 0]
        gap = ~self.item_is_call[items]
        return {"segment": self.item_call[items[gap]], "segment_ns": left[gap],
                "call": self.item_call[items[~gap]], "call_ns": left[~gap]}


def _host_time(job: Job, g: _Graph, program: dict[int, int], step_pattern: str) -> _HostTime:
    family_id: dict[str, int] = {}
    parts, items = [], []
    step_index = {n: i for i, n in enumerate(g.step_names)}
    n_rows = 0
    for rank in g.ranks:
        trace = job.traces[rank]
        ranges, calls = trace.ranges, trace.calls
        inside = np.flatnonzero(calls.gap_range >= 0)
        gaps = np.maximum(0, calls.start - calls.gap_start)[inside]  # overlapping calls leave no host time
        own = np.where(calls.blocking[inside], 0, calls.end[inside] - calls.start[inside])
        total = np.bincount(calls.gap_range[inside], weights=gaps + own, minlength=len(ranges.start)).astype(np.int64)
        used = np.flatnonzero(total > 0)
        names = trace.names(ranges.name[used])
        fam = np.array([family_id.setdefault(nvtx_family(n) or "", len(family_id)) if n and not
                        fnmatch.fnmatchcase(n, step_pattern) else -1 for n in names.tolist()], dtype=np.int64)
        used, fam = used[fam >= 0], fam[fam >= 0]
        step = _steps_of(job, rank, ranges.start[used], step_index) if g.has_steps else np.zeros(len(used), np.int64)
        parts.append((np.full(len(used), rank), np.full(len(used), program[rank]), step, fam, total[used],
                      job.alignment.correct_rank(rank, ranges.end[used])))
        row_of = np.full(len(ranges.start), -1, np.int64)
        row_of[used] = n_rows + np.arange(len(used))
        n_rows += len(used)
        mine = row_of[calls.gap_range[inside]] >= 0  # calls are in time order: so are the pieces
        call_row = g.call_offset[rank] + inside[mine]
        items.append((np.repeat(row_of[calls.gap_range[inside[mine]]], 2), np.repeat(call_row, 2),
                      np.tile([False, True], int(mine.sum())), np.column_stack([gaps[mine], own[mine]]).ravel()))
    rank, prog, step, fam, total, end = (np.concatenate(c).astype(np.int64) for c in zip(*parts))
    item_row, item_call, item_is_call, item_ns = (np.concatenate(c) for c in zip(*items))
    order = np.argsort(item_row, kind="stable")
    return _HostTime(rank, prog, step, fam, _occurrence(rank, step, fam), total, end,
                     families=sorted(family_id, key=family_id.get), item_row=item_row[order],
                     item_call=item_call[order].astype(np.int64), item_is_call=item_is_call[order].astype(bool),
                     item_ns=item_ns[order].astype(np.int64))


def _host_candidates(job: Job, h: _HostTime, min_excess: int) -> list[Candidate]:
    """Host ranges that took longer on a rank than on the other ranks of its program, and the same
    range late on every rank of one host."""
    out = []
    ref = _reference(h.total, h.program, h.step, h.family, h.occurrence)
    ref_end = _reference(h.end, h.program, h.step, h.family, h.occurrence)
    cut = h.excess(ref, ref_end)
    rows = np.flatnonzero(~np.isnan(ref))
    if len(rows):
        order, group, first = _groups(h.rank[rows], h.family[rows])
        rows = rows[order]
        total = np.add.reduceat(h.total[rows].astype(np.float64), first)
        excess = np.add.reduceat(cut[rows], first)
        reference = np.add.reduceat(ref[rows], first)
        longer = total / np.maximum(reference, 1) - 1
        # As for kernels: jitter averages out over the occurrences, a real stall does not.
        for g_ in np.flatnonzero((excess >= min_excess) & (excess >= MIN_SLOWDOWN * reference)).tolist():
            members = rows[first[g_]:first[g_ + 1] if g_ + 1 < len(first) else len(rows)]
            late = members[cut[members] > 0]
            rank, family = int(h.rank[members[0]]), int(h.family[members[0]])
            out.append(Candidate(
                cause="host", rank=rank, host=job.by_number[rank].host, name=h.families[family] or None,
                name_full=h.families[family] or None, reference="peers", excess_ns=int(excess[g_]),
                systematic=bool(longer[g_] >= CONFIDENT_HOST_EXCESS), slowdown=float(longer[g_]),
                change=h.change(late, cut)))
    return out + _host_group_candidates(job, h, min_excess)


def _host_group_candidates(job: Job, h: _HostTime, min_excess: int) -> list[Candidate]:
    """Host-wide causes: a range that ended late on every rank of a host (a bootstrap, a shared
    file system, a slow node), against the hosts that were on time in it; each late host alone, and
    all of them together when several were late (fixing one of two late hosts only makes it wait
    for the other)."""
    host_of = hosts_of(job)
    hosts: dict[str, list[int]] = {}
    for r in sorted(r for r in job.traces if job.traces[r].gpu is not None):
        hosts.setdefault(host_of[r], []).append(r)
    if len(hosts) < 2 or not len(h.rank):
        return []
    names = list(hosts)
    index = {r: i for i, name in enumerate(names) for r in hosts[name]}
    host = np.array([index[r] for r in h.rank.tolist()], dtype=np.int64)
    # How late each host ended each occurrence: its earliest rank's end (every rank of it late)
    # after the typical (median) end on the earliest host. Groups come sorted by family, program,
    # step, occurrence, then host.
    order, _, first, median = _group_medians(h.end, h.family, h.program, h.step, h.occurrence, host)
    earliest_rank = np.minimum.reduceat(h.end[order], first) if len(order) else median
    lead = order[first]
    keys = np.column_stack([h.family[lead], h.program[lead], h.step[lead], h.occurrence[lead]])
    new = np.r_[True, (keys[1:] != keys[:-1]).any(axis=1)]
    occ_first = np.flatnonzero(new)
    occ = np.cumsum(new) - 1
    compared = np.diff(np.r_[occ_first, len(lead)])[occ] >= 2  # two hosts ran that occurrence
    late_by = np.where(compared, np.maximum(0, earliest_rank - np.minimum.reduceat(median, occ_first)[occ]), 0)
    size = np.array([len(hosts[n]) for n in names])
    late_ns = np.zeros((len(h.families), len(names)))
    np.add.at(late_ns, (h.family[lead], host[lead]), late_by * size[host[lead]])
    out = []
    for family in np.flatnonzero((late_ns >= min_excess).any(axis=1)).tolist():
        rows = np.flatnonzero(h.family == family)
        ran = set(host[rows].tolist())
        late = [names[k] for k in sorted(ran) if late_ns[family, k] >= min_excess]
        on_time = [names[k] for k in sorted(ran) if late_ns[family, k] < min_excess]
        if not on_time:
            continue
        source = np.isin(h.rank, [r for name in on_time for r in hosts[name]])
        ref_total = _reference_from(h, source, family, h.total)
        ref_end = _reference_from(h, source, family, h.end)
        cut = h.excess(ref_total, ref_end)
        groups = [[name] for name in late if len(hosts[name]) > 1] + ([late] if len(late) > 1 else [])
        for group in groups:
            ranks = sorted(r for name in group for r in hosts[name])
            mine = rows[np.isin(h.rank[rows], ranks) & ~np.isnan(ref_total[rows])]
            fixed = mine[cut[mine] > 0]
            excess = int(cut[fixed].sum())
            per_rank = np.bincount(np.searchsorted(ranks, h.rank[fixed]), weights=cut[fixed], minlength=len(ranks))
            if excess < min_excess or per_rank.min() < 0.5 * excess / len(ranks):
                continue  # every rank of the host(s) late in it, not one rank that held the others up
            # Systematic: late in (nearly) every occurrence, each time by more than jitter.
            systematic = len(fixed) >= 0.8 * len(mine) and excess >= min_excess * len(fixed)
            total, reference = float(h.total[mine].sum()), float(ref_total[mine].sum())
            out.append(Candidate(
                cause="host_group", rank=None, host=", ".join(group), name=h.families[family] or None,
                name_full=h.families[family] or None, reference="peers", excess_ns=excess, systematic=systematic,
                slowdown=total / max(reference, 1) - 1, ranks=ranks, change=h.change(fixed, cut)))
    return out


# Ranks whose fitted clock offsets agree within this share one clock: where the capture does not
# name hosts (PyTorch profiler traces), that is the best sign that they run on one host.
SAME_CLOCK_NS = 20_000


def hosts_of(job: Job) -> dict[int, str]:
    """Each rank's host: its hostname, else (a capture that names none) the ranks sharing its
    fitted clock, named after them."""
    named = {r.rank: r.host for r in job.ranks}
    unnamed = sorted(r for r, h in named.items() if h is None)
    if not unnamed:
        return named
    a = job.alignment
    offset = {r: float(a.offset_ns[a.clock_of_rank[r]]) if r in a.clock_of_rank else None for r in unnamed}
    groups: list[list[int]] = []
    for r in unnamed:
        for g in groups:
            if offset[r] is not None and offset[g[0]] is not None and abs(offset[r] - offset[g[0]]) <= SAME_CLOCK_NS:
                g.append(r)
                break
        else:
            groups.append([r])
    for g in groups:
        label = f"the host of ranks {', '.join(map(str, g))}" if len(g) > 1 else f"the host of rank {g[0]}"
        named.update({r: label for r in g})
    return named


def _reference_from(h: _HostTime, source: np.ndarray, family: int, value: np.ndarray) -> np.ndarray:
    """Per row of `family`, the median value of the same (program, step, occurrence) over the
    `source` rows (NaN where none)."""
    out = np.full(len(h.total), np.nan)
    rows = np.flatnonzero(h.family == family)
    src = np.flatnonzero(source[rows])
    if not len(src):
        return out
    code = _packed((h.program[rows], h.step[rows], h.occurrence[rows]))
    if code is None:  # ranges too wide to pack: number the keys instead
        _, code = np.unique(np.stack([h.program[rows], h.step[rows], h.occurrence[rows]]), axis=1, return_inverse=True)
        code = code.ravel()
    order, _, first, median = _group_medians(value[rows[src]], code[src])
    keys = code[src][order[first]]  # ascending
    at = np.minimum(np.searchsorted(keys, code), len(keys) - 1)
    found = keys[at] == code
    out[rows[found]] = median[at[found]]
    return out


def _transfer_candidates(job: Job, g: _Graph, kind: np.ndarray, min_excess: int, contention=None) -> list[Candidate]:
    """Transfers slowed by a kernel overlapping them, and transfers slow beyond that.

    One candidate per kernel (group) the contention fit found costing time: every transfer it
    overlapped runs without the extra its coefficient x overlap gave it (the fitted baseline
    stands in for a clean run, so this needs no transfer that ran alone). Then one candidate for
    what the kernels do not explain (a slow link, a slow rank): every transfer of the job still
    SLOW_TRANSFER times its baseline back at it (a slow link slows the collectives of every
    communicator that crosses it). The baseline is a low percentile of each kind's transfers on
    every rank, less what the fit says the kernels added."""
    col, t = job.collectives, job.timing
    inst = col.obs_instance
    x = np.maximum(0, job.aligned_end - t.last_arrival[inst])
    out = []
    explained = np.zeros(len(x))
    if contention is not None:
        for j, per_instance in contention.by_group:
            e = contention.entries[j]
            rows = np.flatnonzero(per_instance[inst] >= 1)
            explained += per_instance[inst]
            if e["contention_ns"] < min_excess or not len(rows):
                continue
            out.append(Candidate(cause="transfer", rank=None, host=None, name=e["kernel"], name_full=e["kernel_full"],
                                 reference="fit", excess_ns=int(e["contention_ns"]), systematic=e["confidence"] == "high",
                                 change={"member": rows, "member_ns": np.maximum(0, np.rint(x[rows] - per_instance[inst[rows]])).astype(np.int64)}))
    rest = x - explained
    base = np.full(len(x), -1, dtype=np.int64)
    for k in np.unique(kind).tolist():
        rows = np.flatnonzero(kind[inst] == k)
        if len(rows) >= MIN_TRANSFER_SAMPLES:
            base[rows] = int(np.percentile(rest[rows], TRANSFER_BASELINE_PERCENTILE))
    slow = (base >= 0) & (rest > SLOW_TRANSFER * base)
    rows = np.flatnonzero(slow)
    target = np.rint(base[rows] + explained[rows]).astype(np.int64)
    excess = int((x[rows] - target).sum())
    if not len(rows) or excess < min_excess:
        return out
    ops = sorted({job.op_name(int(i)) for i in inst[rows].tolist()})
    name = f"{'/'.join(ops)} transfers"
    return out + [Candidate(cause="transfer", rank=None, host=None, name=name, name_full=name, reference="baseline",
                            excess_ns=excess, systematic=excess >= 0.1 * max(1, int(x[np.isin(inst, inst[rows])].sum())),
                            change={"member": rows, "member_ns": target})]


def _idle_candidates(job: Job, g: _Graph, tolerance: int, min_excess: int) -> list[Candidate]:
    """GPU ops that started later than anything recorded or inferred explains, per rank."""
    out = []
    graph = g.graph
    for rank in g.ranks:
        n = len(job.timeline[rank])
        if not n:
            continue
        rows = np.arange(g.op_offset[rank], g.op_offset[rank] + n)
        nodes = graph.nodes("op_start", rows)
        slack = graph.slack(nodes)
        late = slack > tolerance
        excess = int(slack[late].sum())
        if excess < min_excess:
            continue
        out.append(Candidate(cause="idle", rank=rank, host=job.by_number[rank].host, name=None, name_full=None,
                             reference=None, excess_ns=excess, systematic=False, change={"zero_slack": nodes[late]}))
    return out


# Replays ----------------------------------------------------------------------------------------

def _merged(changes: list[dict]) -> dict:
    """Every change at once: the shortest duration, gap total and transfer any of them gives."""
    out: dict = {}
    for key, value in (("op", "op_ns"), ("call", "call_ns"), ("segment", "segment_ns"), ("member", "member_ns")):
        ids = [np.asarray(c[key], np.int64) for c in changes if key in c]
        if not ids:
            continue
        ids_all = np.concatenate(ids)
        values = np.concatenate([np.asarray(c[value], np.int64) for c in changes if key in c])
        order = np.lexsort((values, ids_all))
        first = np.r_[True, ids_all[order][1:] != ids_all[order][:-1]]
        out[key], out[value] = ids_all[order][first], values[order][first]
    slack = [np.asarray(c["zero_slack"], np.int64) for c in changes if "zero_slack" in c]
    if slack:
        out["zero_slack"] = np.unique(np.concatenate(slack))
    return out


def _step_time_saved(base: dict, out: dict, job_start: int) -> int:
    """Mean over steps of how much shorter each step got (a step's time: its end minus the
    previous step's end; the first step's: minus the job's start)."""
    ends_base, ends_out = base["step_end"], out["step_end"]
    have = ends_base != _I64_MIN
    if not have.any():
        return 0
    b, o = ends_base[have], ends_out[have]
    saved = np.diff(np.r_[job_start, b]) - np.diff(np.r_[job_start, o])
    return int(round(float(saved.mean())))


def _confidence(c: Candidate, wait_saved: int, total_wait: int) -> str:
    return "high" if c.systematic and total_wait > 0 and wait_saved >= CONFIDENT_SHARE * total_wait else "low"


def analyze(job: Job, kind: np.ndarray, tolerance_ns: int, step_pattern: str | None = None, contention=None) -> WhatIf | None:
    """The what-if of every candidate cause of the job (None when there is nothing to replay).
    `kind`: each collective's kind (contention.Contention.kind): transfers compare within it;
    `contention` (contention.Contention): the fitted baselines and what each kernel added."""
    g = build_graph(job, tolerance_ns, step_pattern)
    if g is None:
        return None
    pattern = step_pattern or STEP_PATTERN
    total_wait = int(job.timing.wait_cost.sum())
    # A cause's own excess is time on one rank: it must be worth a few tolerances and a small share
    # of a rank's wait (the wait summed over the ranks grows with the job, one rank's excess does not).
    min_excess = max(MIN_EXCESS_TOLERANCES * tolerance_ns, int(0.002 * total_wait / len(g.ranks)))
    # What fixing it saves is summed over the ranks, as the wait is.
    min_saved = max(MIN_EXCESS_TOLERANCES * tolerance_ns, int(0.002 * total_wait))
    program = _programs(job, g.ranks)
    kernels = _kernel_runs(job, g, program)
    candidates = (_kernel_candidates(job, kernels, min_excess) + _extra_candidates(job, kernels, program, min_excess)
                  + _host_candidates(job, _host_time(job, g, program, pattern), min_excess)
                  + _transfer_candidates(job, g, kind, min_excess, contention)
                  + _idle_candidates(job, g, tolerance_ns, min_excess))
    candidates.sort(key=lambda c: -c.excess_ns)
    warnings = []
    if len(candidates) > MAX_CANDIDATES:
        warnings.append(f"what-if: {len(candidates)} candidate causes; the {MAX_CANDIDATES} with the most excess were replayed")
        candidates = candidates[:MAX_CANDIDATES]
    # Compute kernels NCCL slowed (contention's other direction): each replayed at its fitted speed alone.
    compute = _compute_changes(g, contention, min_excess)
    changes = [c.change for c in candidates] + [ch for _, ch in compute] + [_merged([c.change for c in candidates])]
    base = g.graph.replay()
    outcomes = g.graph.replay_many(changes, threads=os.cpu_count())
    ideal_out = outcomes.pop()
    compute_out = outcomes[len(candidates):]
    outcomes = outcomes[:len(candidates)]
    job_start = int(min(job.alignment.correct_rank(r, job.traces[r].calls.start[:1]).min()
                        for r in g.ranks if len(job.traces[r].calls.start)))
    rows = []
    have = base["step_end"] != _I64_MIN
    mean_step = float(np.diff(np.r_[job_start, base["step_end"][have]]).mean()) if have.any() else 0.0
    min_step_saved = max(tolerance_ns, MIN_STEP_SHARE * mean_step)
    for c, out in zip(candidates, outcomes):
        saved_wait = base["wait"] - out["wait"]
        wait_saved = int(base["total_wait"] - out["total_wait"])
        step_saved = _step_time_saved(base, out, job_start)
        # A candidate whose fix changes nothing worth a word is no cause.
        if wait_saved >= min_saved or step_saved >= min_step_saved:
            rows.append((c, wait_saved, step_saved, saved_wait))
    rows.sort(key=lambda r: (-r[1], -r[2]))
    causes, saved = [], []
    for c, wait_saved, step_saved, saved_wait in rows:
        causes.append({
            "cause": c.cause, "rank": c.rank, "host": c.host, "name": c.name, "reference": c.reference,
            "excess_ns": c.excess_ns, "wait_saved_ns": wait_saved, "step_time_saved_ns": step_saved,
            "collectives": int((saved_wait > 0).sum()), "confidence": _confidence(c, wait_saved, total_wait),
            "name_full": c.name_full, "slowdown": c.slowdown, "runs": c.runs, "reference_runs": c.reference_runs,
            "ranks": c.ranks if c.ranks is not None else ([c.rank] if c.rank is not None else None)})
        saved.append(saved_wait)
    fidelity = g.graph.fidelity()
    return WhatIf(
        fidelity={k: fidelity[k] for k in ("ops", "explained_start_share", "start_error_ns", "slack_ns",
                                           "inferred_dependencies", "recorded_dependencies")},
        ideal={"wait_saved_ns": int(base["total_wait"] - ideal_out["total_wait"]),
               "step_time_saved_ns": _step_time_saved(base, ideal_out, job_start)},
        causes=causes, saved=saved, ideal_saved=base["wait"] - ideal_out["wait"], steps=len(g.step_names),
        warnings=warnings,
        compute={j: (int(base["total_wait"] - out["total_wait"]), _step_time_saved(base, out, job_start))
                 for (j, _), out in zip(compute, compute_out)})


MAX_COMPUTE_REPLAYS = 8


def _compute_changes(g: _Graph, contention, min_excess: int) -> list[tuple[int, dict]]:
    """(entry, change) per compute kernel the fit says NCCL slowed by at least min_excess: its runs
    beside NCCL at their duration less NCCL's fitted share."""
    if contention is None:
        return []
    out = []
    for j, (e, ch) in enumerate(zip(contention.compute_slowdown, contention.compute_changes)):
        if e["slowed_ns"] < min_excess or len(out) >= MAX_COMPUTE_REPLAYS:
            continue
        known = np.isin(ch["rank"], list(g.op_offset))
        op = np.array([g.op_offset[int(r)] for r in ch["rank"][known].tolist()], np.int64) + ch["row"][known]
        out.append((j, {"op": op, "op_ns": ch["ns"][known].astype(np.int64)}))
    return out
