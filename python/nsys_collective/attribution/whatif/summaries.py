"""The what-if replayed from per-rank summaries (crates/core/src/whatif/summary.rs; docs/method.md
section 4): each rank's graph alone condensed to when it reaches each of its collectives, ends each
step and ends, as max-plus functions of when its collectives' member ops end; the job replayed over
its collectives only from those. What `batch` can do on the workers, rank by rank, so that the
reduce holds O(ranks x collectives), not O(events).

`RankSummaries` answers `replay` and `replay_many` as the job's ReplayGraph does (without chains),
with the same numbers: a change that touches a rank (an op, a call, a host gap, a slack) is that
rank's summary recomputed on its own graph with the change; a transfer change is the reduce's.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from nsys_collective import _native
from nsys_collective.attribution.whatif.graph import JobGraph, rank_tables
from nsys_collective.model.job import Job

_ROW_KEYS = (("op", "op_ns"), ("call", "call_ns"), ("segment", "segment_ns"))


@dataclass
class RankPart:
    """One rank's own graph and where its rows sit in the job's."""

    graph: object  # _native.ReplayGraph of the rank alone (rank 0)
    op_offset: int
    call_offset: int
    member_rows: np.ndarray  # per member row of the rank: the job's member row
    base: dict  # its summary with nothing changed


def _local_instances(instances: np.ndarray) -> np.ndarray:
    """Instance ids made dense in order of first appearance (a rank's own graph's numbering)."""
    _, first, inverse = np.unique(instances, return_index=True, return_inverse=True)
    local = np.empty(len(first), np.int64)
    local[np.argsort(first, kind="stable")] = np.arange(len(first))
    return local[inverse.reshape(-1)]


def own_graph(job, rank: int, step_index: dict[str, int], member_op: np.ndarray, member_instance: np.ndarray,
              tolerance_ns: int):
    """The ReplayGraph of one rank alone: its rows of the job's tables as rank 0 (graph.rank_tables;
    its call rows, and so its segment ids, from 0), its members' op rows in its GPU work and their
    instances.
    `job` needs only traces, timeline, alignment and steps for this rank."""
    t = rank_tables(job, rank, 0, step_index)
    members = {"instance": _local_instances(np.asarray(member_instance, np.int64)), "op": np.asarray(member_op, np.int64)}
    return _native.ReplayJob(t["calls"], [t["ops"]], members, syncs=t["syncs"], events=t["events"]).build(
        tolerance_ns=int(tolerance_ns))


def rank_graph(job: Job, g: JobGraph, rank: int, tolerance_ns: int) -> tuple[object, np.ndarray]:
    """The ReplayGraph of one rank of a modelled job alone, and the job's member row of each of its
    member rows."""
    step_index = {n: i for i, n in enumerate(g.step_names)} if g.has_steps else {}
    rows = np.flatnonzero(job.collectives.obs_rank == rank)
    graph = own_graph(job, rank, step_index, g.member_rows[rows] - g.op_offset[rank], job.collectives.obs_instance[rows],
                      tolerance_ns)
    return graph, rows


@dataclass(frozen=True)
class RankSlice:
    """What one rank's summary needs of the job's model, and no more: the clocks, the steps, its
    collectives' members (O(collectives)). The map stage gets it with the rank's own trace."""

    rank: int
    alignment: object  # model.alignment.Alignment
    steps: object  # model.steps.StepSelection or None
    step_index: dict
    tolerance_ns: int
    member_rows: np.ndarray  # the job's member rows (observations) of the rank
    member_instance: np.ndarray
    aligned_start: np.ndarray  # the members' aligned times, to find their ops in the rank's GPU work
    aligned_end: np.ndarray


def slices(job: Job, ranks: list[int], tolerance_ns: int) -> list[RankSlice]:
    """Each rank's RankSlice of a modelled job (ranks: those with GPU work, in graph order)."""
    step_names = list(job.steps.kept) if job.steps is not None else []
    step_index = {n: i for i, n in enumerate(step_names)}
    col = job.collectives
    a = job.alignment
    out = []
    for rank in ranks:
        rows = np.flatnonzero(col.obs_rank == rank)
        # Its own clock and steps only: a slice of every rank's would make the slices O(ranks^2).
        clock = a.clock_of_rank[rank]
        alignment = dataclasses.replace(a, clock_names=[a.clock_names[clock]], clock_of_rank={rank: 0},
                                        offset_ns=a.offset_ns[[clock]], drift_ppm=a.drift_ppm[[clock]], warnings=[])
        steps = job.steps
        if steps is not None:
            steps = dataclasses.replace(steps, left_out=(), ranks={rank: steps.ranks[rank]} if rank in steps.ranks else {})
        out.append(RankSlice(rank=rank, alignment=alignment, steps=steps, step_index=step_index,
                             tolerance_ns=int(tolerance_ns), member_rows=rows, member_instance=col.obs_instance[rows],
                             aligned_start=job.aligned_start[rows], aligned_end=job.aligned_end[rows]))
    return out


def summarize(trace, s: RankSlice) -> dict:
    """The unchanged summary of one rank from its own trace (model.trace.RankTrace) and its slice:
    what a worker computes and sends back (its size grows with the rank's collectives, not its ops)."""
    from types import SimpleNamespace

    from nsys_collective.model.timeline import Timeline

    view = SimpleNamespace(traces={s.rank: trace}, timeline=Timeline({s.rank: trace}, s.alignment),
                           alignment=s.alignment, steps=s.steps)
    found = view.timeline[s.rank].index_of(s.aligned_start, s.aligned_end)
    if (found < 0).any():
        raise RuntimeError(f"rank {s.rank}: {int((found < 0).sum())} collective members not found in its GPU work")
    graph = own_graph(view, s.rank, s.step_index, found, s.member_instance, s.tolerance_ns)
    [summary] = _native.rank_summaries(graph)
    return summary


def replay(summaries: list[dict], slices_: list[RankSlice], n_members: int, member_instance: np.ndarray,
           change: dict | None = None) -> dict:
    """The job's replay over its collectives from every rank's summary (the reduce)."""
    n_steps = max((int(x["n_steps"]) for x in summaries), default=0)
    assert sum(len(s.member_rows) for s in slices_) == n_members
    return _native.replay_collectives(summaries, [s.member_rows for s in slices_], np.asarray(member_instance, np.int64),
                                      n_steps, change)


class RankSummaries:
    """The job's replays from its ranks' summaries (see the module docs)."""

    def __init__(self, job: Job, g: JobGraph, tolerance_ns: int):
        self.g = g
        self.full = g.graph  # for node ids only: what a zero_slack change names
        self.parts: list[RankPart] = []
        for rank in g.ranks:
            graph, rows = rank_graph(job, g, rank, tolerance_ns)
            [base] = _native.rank_summaries(graph)
            self.parts.append(RankPart(graph=graph, op_offset=g.op_offset[rank], call_offset=g.call_offset[rank],
                                       member_rows=rows, base=base))
        self.op_bounds = np.array([p.op_offset for p in self.parts] + [len(g.op_step)], np.int64)
        self.call_bounds = np.array([p.call_offset for p in self.parts] + [self.full.n_calls], np.int64)
        self.member_instance = np.asarray(job.collectives.obs_instance, np.int64)
        self.n_steps = self.full.n_steps

    def heap_bytes(self) -> int:
        """Bytes the summaries hold (what a reduce keeps of the ranks)."""
        return sum(v.nbytes for p in self.parts for v in p.base.values() if isinstance(v, np.ndarray))

    def _by_rank(self, change: dict) -> dict[int, dict]:
        """The change as each touched rank's own (its rows, segments too; transfers as they are)."""
        out: dict[int, dict] = {}
        if change.get("zero_all_slack"):
            out = {r: {"zero_all_slack": True} for r in range(len(self.parts))}
        bounds = {"op": self.op_bounds, "call": self.call_bounds, "segment": self.call_bounds}  # a segment id is a call row
        for key, value in _ROW_KEYS:
            if key not in change:
                continue
            rows, values = np.asarray(change[key], np.int64), np.asarray(change[value], np.int64)
            rank = np.searchsorted(bounds[key], rows, side="right") - 1
            for r in np.unique(rank).tolist():
                mine = rank == r
                local = rows[mine] - (self.parts[r].op_offset if key == "op" else self.parts[r].call_offset)
                out.setdefault(r, {}).update({key: local, value: values[mine]})
        if "zero_slack" in change and len(change["zero_slack"]):
            kinds, rows = self.full.describe(np.asarray(change["zero_slack"], np.int64))
            names = self.full.NODE_KINDS
            for kind in np.unique(kinds).tolist():
                name = names[kind]
                if name in ("origin", "transfer"):
                    continue  # no slack of their own: a transfer starts at its last arrival
                of_kind = rows[kinds == kind]
                table = self.op_bounds if name.startswith("op") else self.call_bounds
                rank = np.searchsorted(table, of_kind, side="right") - 1
                for r in np.unique(rank).tolist():
                    part = self.parts[r]
                    base = part.op_offset if name.startswith("op") else part.call_offset
                    nodes = part.graph.nodes(name, of_kind[rank == r] - base)
                    mine = out.setdefault(r, {})
                    mine["zero_slack"] = np.concatenate([mine.get("zero_slack", np.zeros(0, np.int64)), nodes])
        return out

    def replay_many(self, changes: list[dict], threads: int | None = None) -> list[dict]:
        """One outcome per change, as ReplayGraph.replay_many's (without chains). `threads` is
        accepted for the same call; the summaries of one rank are computed in parallel."""
        split = [self._by_rank(c) for c in changes]
        wanted: dict[int, list[int]] = {}
        for k, per_rank in enumerate(split):
            for r in per_rank:
                wanted.setdefault(r, []).append(k)
        swapped: dict[tuple[int, int], dict] = {}
        for r, ks in wanted.items():
            for k, summary in zip(ks, _native.rank_summaries(self.parts[r].graph, [split[k][r] for k in ks])):
                swapped[(r, k)] = summary
        out = []
        for k, change in enumerate(changes):
            summaries = [swapped.get((r, k), p.base) for r, p in enumerate(self.parts)]
            transfers = {key: change[key] for key in ("member", "member_ns") if key in change}
            out.append(_native.replay_collectives(summaries, [p.member_rows for p in self.parts], self.member_instance,
                                                  self.n_steps, transfers or None))
        return out

    def replay(self, change: dict | None = None) -> dict:
        return self.replay_many([change or {}])[0]
