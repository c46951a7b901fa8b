"""The cross-rank model of one job: ranks, their NCCL operations matched into collective
instances, clocks aligned from those instances, per-instance timing on the aligned clocks, and
what blocked (blocking.py) and slowed (contention.py) each collective."""

from __future__ import annotations

import fnmatch
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from nsys_collective import blocking, contention
from nsys_collective.alignment import Alignment, align
from nsys_collective.gpu_work import WorkCache
from nsys_collective.inputs import ExportSource
from nsys_collective.matching import Collectives, match
from nsys_collective.nccl import OPS, SYNC_OPS, NcclOps, nccl_ops
from nsys_collective.ranks import Rank, number_ranks, ranks_of
from nsys_collective.errors import InputError
from nsys_collective.reader import NVTX_PUSH_POP_RANGE, NVTX_START_END_RANGE, Export, Session
from nsys_collective.timing import Timing, instance_timing


@dataclass
class Analysis:
    exports: Sequence[Export]  # a list, or an inputs.ExportSource that reads on demand
    reports: list[str]
    ranks: list[Rank]
    ops: dict[int, NcclOps]
    collectives: Collectives
    alignment: Alignment
    timing: Timing
    aligned_start: np.ndarray  # per observation of `collectives`
    aligned_end: np.ndarray
    warnings: list[str] = field(default_factory=list)
    blocking: blocking.Blocking | None = None
    contention: contention.Contention | None = None
    work: WorkCache | None = None  # each rank's GPU work on the aligned clock, built on first use
    step: np.ndarray | None = None  # per instance: the training step (NVTX range name) it ran in, with --steps
    facts: list[ExportFacts] = field(default_factory=list)  # per export

    def op_name(self, instance: int) -> str:
        return OPS[int(self.collectives.op[instance])]

    @cached_property
    def by_number(self) -> dict[int, Rank]:
        """Each rank by its number."""
        return {r.rank: r for r in self.ranks}

    def clock_fitted(self, rank: int) -> bool:
        """Whether the rank's clock took part in the fit (it shares a clock with a rank that has
        matched collectives)."""
        return self.alignment.clock_of_rank[rank] in self._fitted_clocks

    @cached_property
    def _fitted_clocks(self) -> set[int]:
        return {self.alignment.clock_of_rank[int(r)] for r in np.unique(self.collectives.obs_rank)}


@dataclass
class Filters:
    """What part of a job to analyze. Ranks and hosts select whole ranks, as if only their reports
    had been given; the time window (seconds from the start of the capture) and the training steps
    (an NVTX range name pattern, fnmatch style) select collectives, after the clocks were fitted
    on all of them."""

    ranks: set[int] | None = None
    hosts: list[str] | None = None
    window_s: tuple[float, float] | None = None
    steps: str | None = None

    @classmethod
    def parse(cls, ranks: str | None = None, hosts: str | None = None, window: str | None = None, steps: str | None = None) -> Filters:
        """Filters from their command-line forms: ranks '0-3,7', hosts 'node1,gpu*', window '1.5:3'
        (seconds; either end may be left out). Raises ValueError saying what is wrong."""
        rank_set = None
        if ranks is not None:
            rank_set = set()
            try:
                for part in ranks.split(","):
                    lo, _, hi = part.strip().partition("-")
                    rank_set.update(range(int(lo), int(hi or lo) + 1))
            except ValueError:
                raise ValueError(f"{ranks!r} is not a list of ranks such as 0-3,7") from None
        window_s = None
        if window is not None:
            lo, sep, hi = window.partition(":")
            try:
                window_s = (float(lo) if lo else 0.0, float(hi) if hi else math.inf)
            except ValueError:
                window_s = None
            if not sep or window_s is None or window_s[0] > window_s[1]:
                raise ValueError(f"{window!r} is not a window START:END in seconds from the start of the capture")
        return cls(ranks=rank_set, hosts=[h.strip() for h in hosts.split(",")] if hosts else None, window_s=window_s, steps=steps)

    def keeps_rank(self, rank: Rank) -> bool:
        in_ranks = self.ranks is None or rank.rank in self.ranks
        in_hosts = self.hosts is None or any(fnmatch.fnmatchcase(rank.host or "", h) for h in self.hosts)
        return in_ranks and in_hosts


def step_ranges(export: Export, pid: int, pattern: str) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """The NVTX ranges of process pid whose names match pattern (fnmatch): start, end, names."""
    nvtx = export.nvtx
    rows = np.flatnonzero(np.isin(nvtx["type"], [NVTX_PUSH_POP_RANGE, NVTX_START_END_RANGE]) & (nvtx["pid"] == pid))
    names = export.names(nvtx["name"][rows])
    hit = np.array([bool(n) and fnmatch.fnmatchcase(n, pattern) for n in names], dtype=bool)
    rows = rows[hit] if len(rows) else rows
    return nvtx["start"][rows], nvtx["end"][rows], list(names[hit]) if len(names) else []


@dataclass
class ExportFacts:
    """What the analysis keeps of an export once it has passed over it."""

    session: Session
    has_gpu_metrics: bool
    sm_count: dict[int, int | None]  # per device


def analyze_exports(exports: Sequence[Export], reports: list[str], filters: Filters | None = None) -> Analysis:
    """The whole analysis of one job. `exports` may be a list or an `inputs.ExportSource`, which
    reads on demand: every export is visited once here, and again later only where needed."""
    filters = filters or Filters()
    found, warnings, facts, ops_of = [], [], [], {}
    for index, report in enumerate(reports):
        export = exports[index]
        entries, said = ranks_of(export, index, report)
        warnings += [f"{report}: {w}" for w in export.warnings] + said
        facts.append(ExportFacts(session=export.session, has_gpu_metrics=len(export.gpu_metrics["start"]) > 0,
                                 sm_count={f["device"]: contention.sm_count(export, f["device"]) for f in entries}))
        for f in entries:
            if f["pid"] is not None:
                ops_of[(index, f["pid"], f["device"])] = nccl_ops(export, f["pid"], f["device"])
        found += entries
    export = None  # the last one would stay alive for the whole analysis otherwise
    ranks, said = number_ranks(found)
    warnings += said
    selected = [r for r in ranks if filters.keeps_rank(r)]
    if not selected:
        raise InputError("no rank matches --ranks/--hosts: " + ", ".join(f"{r.rank} ({r.host})" for r in ranks))
    ranks = selected
    ops = {}
    for r in ranks:
        found_ops = ops_of.get((r.export_index, r.pid, r.device))
        if found_ops is not None and len(found_ops):
            ops[r.rank] = found_ops
        elif len(ranks) > 1:
            warnings.append(f"rank {r.rank} ({r.report}): no NCCL work; it takes part in no collective")
    if not ops:
        warnings.append("no NCCL work found in any rank: there are no collectives to analyze")
    elif len(ops) == 1:
        warnings.append(f"only rank {next(iter(ops))} has NCCL work: nothing to match across ranks")
    collectives = match(ops)
    warnings += collectives.warnings
    sync = np.array([OPS[o] in SYNC_OPS for o in collectives.op], dtype=bool)
    alignment = align(collectives.obs_instance, collectives.obs_rank, collectives.obs_start, collectives.obs_end,
                      sync, {r.rank: r.host for r in ranks})
    warnings += alignment.warnings
    aligned_start = alignment.correct(collectives.obs_rank, collectives.obs_start)
    step_of = np.full(len(collectives), None, dtype=object)
    if filters.window_s is not None or filters.steps is not None:
        keep, step_of = _select(collectives, aligned_start, ranks, exports, alignment, filters, warnings)
        collectives, step_of = collectives.subset(keep), step_of[keep]
        aligned_start = alignment.correct(collectives.obs_rank, collectives.obs_start)
    aligned_end = alignment.correct(collectives.obs_rank, collectives.obs_end)
    timing = instance_timing(collectives.obs_instance, collectives.obs_rank, aligned_start, aligned_end)
    analysis = Analysis(exports=exports, reports=reports, ranks=ranks, ops=ops, collectives=collectives, alignment=alignment,
                        timing=timing, aligned_start=aligned_start, aligned_end=aligned_end, warnings=warnings,
                        step=step_of, facts=facts)
    # Exports read on demand: hold little GPU work too (blame groups its work by rank pair).
    work = analysis.work = WorkCache(analysis, keep=4 if isinstance(exports, ExportSource) else None)
    analysis.blocking = blocking.attribute(analysis, work)
    analysis.contention = contention.attribute(analysis, work)
    analysis.warnings += analysis.contention.warnings
    return analysis


def _select(collectives, aligned_start, ranks, exports, alignment, filters: Filters, warnings):
    """Which instances the time window and the steps keep, and each instance's step name."""
    n = len(collectives)
    inst, rank = collectives.obs_instance, collectives.obs_rank
    first = np.full(n, np.iinfo(np.int64).max)
    np.minimum.at(first, inst, aligned_start)
    keep = np.ones(n, dtype=bool)
    step_of = np.full(n, None, dtype=object)
    if filters.window_s is not None:
        origin = min(r.first_ns for r in ranks if r.first_ns is not None)
        lo, hi = (origin + round(s * 1e9) for s in filters.window_s)
        keep &= (first >= lo) & (first <= hi)
    if filters.steps is not None:
        # Each instance belongs to the step its lowest-numbered rank was in when it arrived.
        lowest = np.full(n, np.iinfo(np.int64).max)
        np.minimum.at(lowest, inst, rank)
        in_step = np.zeros(n, dtype=bool)
        by_number = {r.rank: r for r in ranks}
        for number in np.unique(lowest[lowest < np.iinfo(np.int64).max]).tolist():
            r = by_number[number]
            start, end, names = step_ranges(exports[r.export_index], r.pid, filters.steps)
            if not len(start):
                continue
            start, end = alignment.correct_rank(number, start), alignment.correct_rank(number, end)
            mine = np.flatnonzero(lowest == number)
            order = np.argsort(start, kind="stable")
            at = np.searchsorted(start[order], first[mine], side="right") - 1
            ok = (at >= 0) & (end[order][np.maximum(at, 0)] >= first[mine])
            in_step[mine[ok]] = True
            step_of[mine[ok]] = [names[order[k]] for k in at[ok]]
        if not in_step.any():
            warnings.append(f"no NVTX range matches --steps {filters.steps!r}: no collective selected")
        keep &= in_step
    return keep, step_of
