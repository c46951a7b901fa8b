"""The job's dependency graph for the replays: every rank's CUDA API calls and GPU ops on the
aligned clock, the recorded synchronization and event records, and the collectives' members, handed
to the native `ReplayGraph` (crates/core/src/whatif; docs/whatif-replay.md), which infers what is
not recorded and replays the whole job in one forward pass. Also the training step of each op."""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from nsys_collective import _native, memory
from nsys_collective.model.job import Job


@dataclass
class JobGraph:
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


def steps_of(job: Job, rank: int, points: np.ndarray, step_index: dict[str, int]) -> np.ndarray:
    """The step (dense, -1 none; int32) each point (UTC on the rank's clock) falls in. Steps are the
    job's step ranges (model/steps.py): a name that repeats on a rank (`train_step`) is a step per
    range."""
    steps = job.steps.ranks.get(int(rank)) if job.steps is not None and step_index else None
    if steps is None or not len(points):
        return np.full(len(points), -1, dtype=np.int32)
    codes = np.array([step_index.get(label, -1) for label in steps.label] + [-1], dtype=np.int32)
    return codes[steps.index_of(points)]  # outside every range (-1): the last code, -1


def _replay_graph(job: _native.ReplayJob, tolerance_ns: int):
    graph = job.build(tolerance_ns=tolerance_ns)
    memory.release()  # the build's temporaries, more than the graph itself
    return graph


def rank_tables(job: Job, rank: int, dense: int, step_index: dict[str, int]) -> dict:
    """One rank's rows of the graph's tables, of rank `dense` (one int): calls (a list of parts: its
    calls, then, a part of their own, the anchors of its threads' first calls), ops (one part), and
    syncs and events (lists of at most one part). The graph borrows the rank's own columns where it
    takes them as they are, its call and op times too where its clock correction is a constant
    shift (the graph adds it)."""
    trace, work = job.traces[rank], job.timeline[rank]
    c = trace.calls
    correct, shift = job.alignment.correct_rank, job.alignment.rank_shift_ns(rank)
    launch_utc = trace.gpu.launch
    op_step = steps_of(job, rank, np.where(launch_utc >= 0, launch_utc, trace.gpu.start), step_index)
    if not step_index:
        op_step[:] = 0  # no steps marked: the capture is one step
    # Each op's launching call: its row in the rank's calls, found in the map (-1 unknown). Its
    # times: the trace's own with the shift, not the timeline's aligned copies, which are let go
    # while the graph is built (whatif.replay.analyze).
    ops = {"rank": dense, "stream": work.stream, "launch": trace.gpu.launch_call, "step": op_step,
           "start": work.start if shift is None else (trace.gpu.start, shift),
           "end": work.end if shift is None else (trace.gpu.end, shift)}
    # Each gap inside a range is a segment of its own, named by its call's row (own_segment): a
    # host cause cuts the gaps it chooses (host.HostTime.change).
    calls = [{"rank": dense, "thread": c.tid, "correlation": c.correlation, "blocking": c.blocking,
              "start": correct(rank, c.start) if shift is None else (c.start, shift),
              "end": correct(rank, c.end) if shift is None else (c.end, shift),
              "own_segment": c.gap_range}]
    # Each thread starts at its first call, or at the host work before it (a data loader, say):
    # a zero-length call there anchors the thread, so that the work before its first call can
    # be shortened too.
    first = np.flatnonzero(_first_of_thread(c.tid))  # threads in the order of thread_origin
    is_early = c.thread_origin < c.start[first]
    if is_early.any():
        origin = correct(rank, c.thread_origin[is_early])
        calls.append({"rank": dense, "thread": c.tid[first[is_early]], "start": origin, "end": origin, "correlation": -1})
    out = {"calls": calls, "ops": ops, "syncs": [], "events": []}
    recorded_syncs, recorded_events = trace.stream_waits
    for table, columns in (("syncs", recorded_syncs), ("events", recorded_events)):
        if columns is not None and len(columns["correlation"]):
            out[table].append({"rank": dense, **columns})
    return out


def build_graph(job: Job, tolerance_ns: int, step_pattern: str | None = None) -> JobGraph | None:
    """The job's ReplayGraph (None when there is nothing to replay: no collective, no GPU work)."""
    ranks = [r.rank for r in job.ranks if job.traces[r.rank].gpu is not None]
    if not ranks or not len(job.collectives):
        return None
    # The job's steps (model/steps.py); those left out as incomplete are no steps here.
    step_names = list(job.steps.kept) if job.steps is not None else []
    step_index = {n: i for i, n in enumerate(step_names)}
    calls, ops, syncs, events = [], [], [], []
    op_offset, call_offset = {}, {}
    op_step = np.empty(sum(len(job.timeline[rank]) for rank in ranks), np.int32)
    n_ops = n_calls = 0
    for dense, rank in enumerate(ranks):
        op_offset[rank], call_offset[rank] = n_ops, n_calls
        t = rank_tables(job, rank, dense, step_index)
        mine = op_step[n_ops:n_ops + len(t["ops"]["step"])]
        mine[:] = t["ops"]["step"]
        t["ops"]["step"] = mine  # the job's steps, a rank's part of them each
        calls += t["calls"]
        ops.append(t["ops"])
        syncs += t["syncs"]
        events += t["events"]
        n_ops += len(mine)
        n_calls += sum(len(part["thread"]) for part in t["calls"])
    col = job.collectives
    member_rows = np.full(len(col.obs_rank), -1, dtype=np.int64)
    for rank in ranks:
        rows = np.flatnonzero(col.obs_rank == rank)
        found = job.timeline[rank].index_of(job.aligned_start[rows], job.aligned_end[rows])
        member_rows[rows] = np.where(found >= 0, op_offset[rank] + found, -1)
    if (member_rows < 0).any():  # every observation came from a rank's GPU work: cannot happen
        raise RuntimeError(f"{int((member_rows < 0).sum())} collective members not found in their rank's GPU work")
    members = {"instance": col.obs_instance, "op": member_rows}

    # The graph's input: the ranks' parts, borrowed as they are (kept until the graph is built).
    job_input = _native.ReplayJob(calls, ops, members, syncs=syncs, events=events)
    del calls, ops, syncs, events
    # Building the graph is the what-if's largest single cost: it runs beside the candidate picking.
    pool = ThreadPoolExecutor(max_workers=1)
    building = pool.submit(_replay_graph, job_input, int(tolerance_ns))
    pool.shutdown(wait=False)  # the thread ends with the build
    del job_input  # the build frees it
    return JobGraph(building=building, ranks=ranks, op_offset=op_offset, call_offset=call_offset,
                  op_step=op_step, member_rows=member_rows, step_names=step_names or ["(the whole capture)"],
                  has_steps=bool(step_names))

