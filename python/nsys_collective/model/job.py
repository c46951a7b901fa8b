"""The cross-rank model of one job (docs/method.md sections 1-3): ranks, their NCCL operations matched
into collective instances, clocks aligned from those instances, per-instance timing on the aligned
clocks, the training step of each instance, and every rank's GPU work on the aligned clock.

`build_job(traces, filters)` is the per-job reduce of the pipeline, up to the attribution.
"""

from __future__ import annotations

import fnmatch
import math
from dataclasses import dataclass, field, replace
from functools import cached_property

import numpy as np

from nsys_collective.errors import InputError
from nsys_collective.model.alignment import Alignment, align
from nsys_collective.model.alignment_quality import Quality, assess
from nsys_collective.model.matching import Collectives, match
from nsys_collective.model.nccl import OPS, SYNC_OPS, NcclOps
from nsys_collective.model.activity import analyzed_ops, overlap_figures
from nsys_collective.model.ranks import Rank, number_ranks
from nsys_collective.model.steps import StepSelection, instance_steps, select_steps
from nsys_collective.model.timeline import Timeline
from nsys_collective.model.timing import Timing, instance_timing
from nsys_collective.model.trace import RankTrace


@dataclass(frozen=True)
class Job:
    ranks: list[Rank]
    traces: dict[int, RankTrace]  # by rank number
    ops: dict[int, NcclOps]
    collectives: Collectives
    alignment: Alignment
    alignment_quality: Quality
    timing: Timing
    aligned_start: np.ndarray  # per observation of `collectives`
    aligned_end: np.ndarray
    step: np.ndarray  # per instance: the training step (NVTX range name) it was launched in; else None
    timeline: Timeline  # each rank's GPU work on the aligned clock, built on first use
    warnings: list[str]
    steps: StepSelection | None = None  # the job's steps and the analyzed ones; None where no rank marks one
    collectives_outside_steps: int = 0  # instances the step selection left out
    ranks_left_out: int = 0  # ranks --ranks/--hosts left out (their collectives' members may be missing)
    # Per rank number, which of its GPU ops (its trace's gpu rows) the analysis covers
    # (activity.analyzed_ops): found once, for the model's figures and the attribution's.
    analyzed: dict[int, np.ndarray] = field(default_factory=dict)

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


@dataclass(frozen=True)
class RankRanges:
    """Rank numbers as inclusive intervals: '0-99999999999' costs two numbers, not a set."""

    intervals: tuple[tuple[int, int], ...]

    def __contains__(self, rank: int) -> bool:
        return any(lo <= rank <= hi for lo, hi in self.intervals)

    @classmethod
    def parse(cls, text: str) -> RankRanges:
        """'0-3,7' -> [0, 3], [7, 7]. Raises ValueError saying what is wrong."""
        intervals = []
        for part in text.split(","):
            lo, dash, hi = part.strip().partition("-")
            if not lo.isdigit() or (dash and not hi.isdigit()):
                raise ValueError(f"--ranks {text!r} is not a list of ranks such as 0-3,7")
            lo, hi = int(lo), int(hi) if dash else int(lo)
            if lo > hi:
                raise ValueError(f"--ranks {text!r}: {part.strip()} is a reversed range")
            intervals.append((lo, hi))
        return cls(tuple(intervals))


# A window bound beyond this many seconds is no time in a capture (and no int64 ns).
MAX_WINDOW_S = 1e9


def check_window(window_s: tuple[float, float]) -> None:
    """A time window must be finite, ordered seconds (the end may be math.inf: no end)."""
    lo, hi = window_s
    if not (math.isfinite(lo) and abs(lo) <= MAX_WINDOW_S and (hi == math.inf or (math.isfinite(hi) and abs(hi) <= MAX_WINDOW_S))):
        raise ValueError(f"--window {lo}:{hi}: START and END must be seconds between {-MAX_WINDOW_S:g} and {MAX_WINDOW_S:g}")
    if lo > hi:
        raise ValueError(f"--window {lo:g}:{hi:g}: START is after END")


@dataclass
class Filters:
    """What part of a job to analyze. Ranks and hosts select whole ranks, as if only their reports
    had been given; the time window (seconds from the start of the capture) and the training steps
    (an NVTX range name pattern, fnmatch style) select collectives, after the clocks were fitted
    on all of them."""

    ranks: set[int] | RankRanges | None = None
    hosts: list[str] | None = None
    window_s: tuple[float, float] | None = None
    steps: str | None = None
    keep_all: bool = False  # --all: every step, complete or not, and (without --steps) what lies outside steps

    def __post_init__(self):
        if self.window_s is not None:
            check_window(self.window_s)

    @classmethod
    def parse(cls, ranks: str | None = None, hosts: str | None = None, window: str | None = None, steps: str | None = None,
              keep_all: bool = False) -> Filters:
        """Filters from their command-line forms: ranks '0-3,7', hosts 'node1,gpu*', window '1.5:3'
        (seconds; either end may be left out). Raises ValueError saying what is wrong."""
        window_s = None
        if window is not None:
            lo, sep, hi = window.partition(":")
            try:
                window_s = (float(lo) if lo else 0.0, float(hi) if hi else math.inf)
            except ValueError:
                window_s = None
            if not sep or window_s is None:
                raise ValueError(f"--window {window!r} is not a window START:END in seconds from the start of the capture")
            if (lo and not math.isfinite(window_s[0])) or (hi and not math.isfinite(window_s[1])):
                raise ValueError(f"--window {window!r}: START and END must be finite seconds (leave END out for no end)")
        return cls(ranks=RankRanges.parse(ranks) if ranks is not None else None,
                   hosts=[h.strip() for h in hosts.split(",")] if hosts else None, window_s=window_s, steps=steps,
                   keep_all=keep_all)

    def keeps_rank(self, rank: Rank) -> bool:
        in_ranks = self.ranks is None or rank.rank in self.ranks
        in_hosts = self.hosts is None or any(fnmatch.fnmatchcase(rank.host or "", h) for h in self.hosts)
        return in_ranks and in_hosts


def build_job(traces: list[RankTrace], warnings: list[str], filters: Filters | None = None) -> Job:
    """The model of one job from its ranks' traces (every input's, in input order); `warnings`
    holds the inputs' own and gets the model's."""
    filters = filters or Filters()
    numbered, said = number_ranks(traces)
    warnings += said
    selected = [(r, t) for r, t in numbered if filters.keeps_rank(r)]
    if not selected:
        raise InputError("no rank matches --ranks/--hosts: " + ", ".join(f"{r.rank} ({r.host})" for r, _ in numbered))
    ranks = [r for r, _ in selected]
    traces_of = {r.rank: t for r, t in selected}
    ops = {}
    for r in ranks:
        found_ops = traces_of[r.rank].ops
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
    host_of_rank = {r.rank: r.host for r in ranks}
    quality = assess(alignment, collectives.obs_instance, collectives.obs_rank, collectives.obs_end, sync, host_of_rank)
    warnings += quality.warnings
    aligned_start = alignment.correct(collectives.obs_rank, collectives.obs_start)
    selection = select_steps(traces_of, filters.steps, filters.keep_all)
    keep, step_of, outside = _select(collectives, aligned_start, ranks, selection, filters, warnings)
    if not keep.all():
        collectives, step_of = collectives.subset(keep), step_of[keep]
        aligned_start = alignment.correct(collectives.obs_rank, collectives.obs_start)
    analyzed = {r.rank: analyzed_ops(traces_of[r.rank], selection, r.rank) for r in ranks}
    if selection is not None and selection.restricts:
        # Per-rank figures (NCCL time, overlap) over the analyzed steps only, as the collectives.
        ranks = [replace(r, **overlap_figures(traces_of[r.rank], analyzed[r.rank])) for r in ranks]
    aligned_end = alignment.correct(collectives.obs_rank, collectives.obs_end)
    warnings += unsized_warnings(collectives)
    timing = instance_timing(collectives.obs_instance, collectives.obs_rank, aligned_start, aligned_end)
    return Job(ranks=ranks, traces=traces_of, ops=ops, collectives=collectives, alignment=alignment,
               alignment_quality=quality, timing=timing,
               aligned_start=aligned_start, aligned_end=aligned_end, step=step_of,
               timeline=Timeline(traces_of, alignment), warnings=warnings, steps=selection,
               collectives_outside_steps=outside, ranks_left_out=len(numbered) - len(selected), analyzed=analyzed)


def unsized_warnings(collectives: Collectives) -> list[str]:
    """Why `bytes` (and so `busbw_gbps`) is null where it is."""
    unsized = collectives.bytes < 0
    sent = unsized & (collectives.wire_bytes >= 0)  # network sends recorded, but not by a ring
    out = []
    n = len(collectives)
    if sent.any():
        out.append(f"message size unknown for {int(sent.sum())} of {n} collectives whose network sends NCCL's NVTX "
                   "recorded: they did not run as a ring (the kernel names another algorithm, e.g. TREE), and only a "
                   "ring's sends give the size by the bus factor; bytes and busbw_gbps are null there")
    rest = int((unsized & ~sent).sum())
    if rest:
        out.append(f"message size unknown for {rest} of {n} collective{'s' * (n != 1)}, so bytes and busbw_gbps are "
                   "null: nothing in the capture records it (PyTorch profiler traces carry it in record_param_comms' "
                   "element counts or Input Dims, NCCL's network NVTX in Data_Size marks; NCCL's NVTX payloads hold it "
                   "only in exports made with --include-blobs, which the tool asks for where its nsys offers it)")
    return out


def _select(collectives: Collectives, aligned_start: np.ndarray, ranks: list[Rank], selection: StepSelection | None,
            filters: Filters, warnings: list[str]) -> tuple[np.ndarray, np.ndarray, int]:
    """Which instances the time window and the steps keep, each instance's step name, and how many
    the steps left out."""
    n = len(collectives)
    keep = np.ones(n, dtype=bool)
    step_of = np.full(n, None, dtype=object)
    if filters.window_s is not None and n:
        first = np.full(n, np.iinfo(np.int64).max)
        np.minimum.at(first, collectives.obs_instance, aligned_start)
        origin = min(r.first_ns for r in ranks if r.first_ns is not None)
        lo, hi = (origin + round(s * 1e9) if math.isfinite(s) else None for s in filters.window_s)
        keep &= first >= lo
        if hi is not None:  # an open end keeps everything after START
            keep &= first <= hi
    if selection is None:
        if filters.steps is not None:
            warnings.append(f"no NVTX range matches --steps {filters.steps!r}: no collective selected")
            keep[:] = False
        return keep, step_of, 0
    code = instance_steps(selection, collectives.obs_instance, collectives.obs_rank, collectives.obs_launch,
                          collectives.obs_start, n)
    names = np.array(list(selection.steps) + [None], dtype=object)
    step_of = names[np.where(code >= 0, code, len(selection.steps))]
    outside = 0
    if selection.restricts:
        position = {label: i for i, label in enumerate(selection.steps)}
        kept = np.isin(code, [position[k] for k in selection.kept])
        outside = int(np.count_nonzero(keep & ~kept))
        keep &= kept
    said = steps_warning(selection, outside, n)
    if said:
        warnings.append(said)
    return keep, step_of, outside


# A warning lists at most this many steps, and ranks of each; the rest are counted (the --json
# document has them all).
WARNING_ITEMS = 3
WARNING_RANKS = 8


def few(items, limit: int = WARNING_RANKS) -> str:
    """'0, 1, 2' or '0, 1, ..., 7 and 5 more': a list in a warning, never a wall of numbers."""
    items = list(items)
    shown = ", ".join(map(str, items[:limit]))
    return shown + (f" and {len(items) - limit} more" if len(items) > limit else "")


def steps_warning(selection: StepSelection, outside: int, total: int) -> str | None:
    """What the step selection left out, in words (None when nothing)."""
    if not selection.restricts or (not selection.left_out and not outside):
        return None
    reasons = {"not_closed": "its range has no end", "lost_gpu_work": "kernels it launched are missing from the capture",
               "missing": "not recorded"}
    left_out = selection.left_out
    parts = [f"{lo.step} ({reasons[lo.reason]} on rank{'s' * (len(lo.ranks) != 1)} {few(lo.ranks)})"
             for lo in left_out[:WARNING_ITEMS]]
    if len(left_out) > WARNING_ITEMS:
        parts.append(f"and {len(left_out) - WARNING_ITEMS} more (all in --json, steps.left_out)")
    what = f"left out the incomplete step{'s' * (len(left_out) != 1)} " + "; ".join(parts) if parts else ""
    kept = len(selection.kept)
    said = (f"analyzed the {kept} complete step{'s' * (kept != 1)} matching {selection.pattern!r}"
            if selection.complete_only else f"analyzed the {kept} step{'s' * (kept != 1)} matching {selection.pattern!r}")
    tail = (f"{outside} of {total} collective{'s' * (total != 1)} lay outside them and are not analyzed"
            if outside else "no collective lay outside them")
    return f"{said}: {what + '; ' if what else ''}{tail} (--all keeps everything)"
