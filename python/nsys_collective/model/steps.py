"""Training steps: which step each collective ran in, and which steps were captured whole.

A step is a host range whose name matches a pattern: PyTorch's `ProfilerStep#N` by default, or
`--steps PATTERN`. The profiler starts and stops somewhere in a step: the work before the first
step range and after the last one is part of a step that was not captured whole, and the last
range itself can lose GPU work when the capture stops while it is queued. By default the analysis
keeps only the steps captured whole on every rank that marks steps (HTA likewise drops the last
`ProfilerStep`, by convention; here by evidence). A step is left out when, on some rank that marks
steps:

* `not_closed`: its range has no end (the capture stopped inside it);
* `lost_gpu_work`: a kernel launch call inside it has no kernel in the capture (the capture
  stopped before the kernel ran or was flushed);
* `missing`: the rank did not record it at all.

Everything outside the kept ranges (before the first, after the last, between ranks' steps) is
left out with them. `--all` keeps everything.

A collective belongs to the step in which its NCCL kernel was launched (its launch call's start,
on the launching rank's own clock, against that rank's ranges; the kernel start where the launch
is unknown), taken on the lowest-numbered member rank that marks steps. GPU work belongs to the
step it was launched in: GPU work runs behind the host, often into the next step's range.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass, field

import numpy as np

from nsys_collective import _native
from nsys_collective.model import cuda_api
from nsys_collective.model.trace import RankTrace

STEP_PATTERN = "ProfilerStep#*"


@dataclass(frozen=True)
class RankSteps:
    """One rank's step ranges in start order, on its own clock, each with its step's label."""

    start: np.ndarray
    end: np.ndarray
    label: list[str]  # a step's name, with its occurrence where a name repeats on the rank

    def index_of(self, times: np.ndarray) -> np.ndarray:
        """The range (index, -1 none) each time falls in, the innermost where ranges nest."""
        if not len(self.start) or not len(times):
            return np.full(len(times), -1, dtype=np.int64)
        return _native.innermost_covering(self.start, self.end, times)


@dataclass(frozen=True)
class LeftOut:
    step: str
    reason: str  # "not_closed", "lost_gpu_work" or "missing"
    ranks: tuple[int, ...]


@dataclass(frozen=True)
class StepSelection:
    """The steps of a job and which of them are analyzed."""

    pattern: str
    complete_only: bool  # False with --all: every step (and, without --steps, everything outside steps)
    restricts: bool  # only collectives (and per-rank figures) inside the kept ranges count
    steps: tuple[str, ...]  # every step any rank marks, in time order
    kept: tuple[str, ...]  # the analyzed ones, in time order
    left_out: tuple[LeftOut, ...]
    ranks: dict[int, RankSteps] = field(default_factory=dict)  # ranks that mark steps

    def kept_ranges(self, rank: int) -> tuple[np.ndarray, np.ndarray] | None:
        """The kept step ranges of a rank (own clock), None where the rank marks no step."""
        rs = self.ranks.get(rank)
        if rs is None:
            return None
        kept = set(self.kept)
        keep = np.array([label in kept for label in rs.label], dtype=bool)
        return rs.start[keep], rs.end[keep]

    def analyzed(self, rank: int, times: np.ndarray) -> np.ndarray:
        """Which of a rank's times (own clock; -1 unknown) fall in the analyzed part of the capture:
        everything without a restriction or where the rank marks no step."""
        ranges = self.kept_ranges(rank) if self.restricts else None
        if ranges is None:
            return np.ones(len(times), dtype=bool)
        start, end = ranges
        if not len(start):
            return np.zeros(len(times), dtype=bool)
        order = np.argsort(start, kind="stable")
        # The end of the last range starting at or before each time; -1 before the first range.
        last_end = np.r_[-1, end[order]]
        return (times >= 0) & (times <= last_end[np.searchsorted(start[order], times, side="right")])


def step_rows(trace: RankTrace, pattern: str) -> np.ndarray:
    """The rows of the rank's host ranges whose names match `pattern` (fnmatch), in range order;
    each distinct name matched once (millions of ranges hold a few thousand names)."""
    ranges = trace.ranges
    if ranges is None or not len(ranges.start):
        return np.zeros(0, np.int64)
    is_step = cuda_api.by_name(lambda n: bool(n) and fnmatch.fnmatchcase(n, pattern), ranges.name, trace.strings)
    return np.flatnonzero(is_step)


def rank_steps(trace: RankTrace, pattern: str) -> RankSteps | None:
    """The rank's ranges whose names match `pattern` (fnmatch), None when none does."""
    rows = step_rows(trace, pattern)
    if not len(rows):
        return None
    ranges = trace.ranges
    rows = rows[np.lexsort((-ranges.end[rows], ranges.start[rows]))]
    names = trace.names(ranges.name[rows]).tolist()
    seen: dict[str, int] = {}
    label = []
    for name in names:  # one per step range: a handful per rank
        seen[name] = seen.get(name, 0) + 1
        label.append(name)
    repeated = {n for n, k in seen.items() if k > 1}
    if repeated:
        count: dict[str, int] = {}
        for i, name in enumerate(names):
            if name in repeated:
                count[name] = count.get(name, 0) + 1
                label[i] = f"{name} [{count[name]}]"
    return RankSteps(start=ranges.start[rows], end=ranges.end[rows], label=label)


def select_steps(traces: dict[int, RankTrace], pattern: str | None, keep_all: bool) -> StepSelection | None:
    """The steps of the job (`pattern`, default ProfilerStep#*) and the ones analyzed: the complete
    ones, or with `keep_all` every one (and then, without a pattern, the whole capture). None where
    no rank marks a step."""
    chosen = pattern or STEP_PATTERN
    ranks = {r: s for r, s in ((r, rank_steps(t, chosen)) for r, t in sorted(traces.items())) if s is not None}
    if not ranks:
        return None
    first: dict[str, int] = {}
    for s in ranks.values():
        for label, start in zip(s.label, s.start.tolist()):
            first[label] = min(first.get(label, start), start)
    steps = tuple(sorted(first, key=first.get))
    problems: dict[tuple[str, str], list[int]] = {}
    for r, s in ranks.items():
        lost = traces[r].lost_launches
        hit = np.zeros(len(s.start), np.int64)
        if len(lost):
            inside = s.index_of(lost)
            hit = np.bincount(inside[inside >= 0], minlength=len(s.start))
        for i, label in enumerate(s.label):
            if s.end[i] <= s.start[i]:
                problems.setdefault((label, "not_closed"), []).append(r)
            elif hit[i]:
                problems.setdefault((label, "lost_gpu_work"), []).append(r)
        for label in set(steps) - set(s.label):
            problems.setdefault((label, "missing"), []).append(r)
    position = {label: i for i, label in enumerate(steps)}  # steps.index() per problem was quadratic
    left_out = tuple(LeftOut(step, reason, tuple(sorted(rs))) for (step, reason), rs in
                     sorted(problems.items(), key=lambda kv: (position[kv[0][0]], kv[0][1])))
    incomplete = {lo.step for lo in left_out}
    kept = steps if keep_all else tuple(s for s in steps if s not in incomplete)
    return StepSelection(pattern=chosen, complete_only=not keep_all, restricts=not keep_all or pattern is not None,
                         steps=steps, kept=kept, left_out=left_out if not keep_all else (), ranks=ranks)


def instance_steps(selection: StepSelection, obs_instance: np.ndarray, obs_rank: np.ndarray, obs_launch: np.ndarray,
                   obs_start: np.ndarray, n_instances: int) -> np.ndarray:
    """Per instance, the index into `selection.steps` of the step it was launched in (-1 none), on
    its lowest-numbered member rank that marks steps."""
    step_of_obs = np.full(len(obs_instance), -1, dtype=np.int64)
    marks = np.zeros(len(obs_instance), dtype=bool)
    index = {label: i for i, label in enumerate(selection.steps)}
    for r, s in selection.ranks.items():
        rows = np.flatnonzero(obs_rank == r)
        if not len(rows):
            continue
        marks[rows] = True
        when = np.where(obs_launch[rows] >= 0, obs_launch[rows], obs_start[rows])
        at = s.index_of(when)
        codes = np.array([index[label] for label in s.label] + [-1], dtype=np.int64)
        step_of_obs[rows] = codes[np.where(at >= 0, at, len(s.label))]
    out = np.full(n_instances, -1, dtype=np.int64)
    # Observations are sorted by instance, then rank: the first marking one of each instance decides.
    rows = np.flatnonzero(marks)
    if len(rows):
        inst = obs_instance[rows]
        first = np.flatnonzero(np.r_[True, inst[1:] != inst[:-1]])
        out[inst[first]] = step_of_obs[rows[first]]
    return out
