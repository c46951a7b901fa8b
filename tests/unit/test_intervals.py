"""Covered time (model.intervals.covered_ns) from a running maximum of ends, held to its earlier
definition: the intervals merged into disjoint blocks (sorted, touching ones joined), their lengths
summed; the core's NCCL time and overlap in one pass to the covered times; and a step selection's
analyzed times (StepSelection.analyzed) to the search it replaced."""

from __future__ import annotations

import numpy as np
import pytest

from nsys_collective import _native
from nsys_collective.model.intervals import covered_ns, overlap_ns
from nsys_collective.model.steps import RankSteps, StepSelection


def merged_length(starts: np.ndarray, ends: np.ndarray) -> int:
    """The definition: sort, merge into blocks, sum the blocks' lengths."""
    if len(starts) == 0:
        return 0
    order = np.argsort(starts, kind="stable")
    s, e = starts[order], ends[order]
    reach = np.maximum.accumulate(e)
    new = np.r_[True, s[1:] > reach[:-1]]
    return int((np.maximum.reduceat(e, np.flatnonzero(new)) - s[new]).sum())


def random_intervals(rng, n: int, sort: bool) -> tuple[np.ndarray, np.ndarray]:
    starts = rng.integers(0, 200, n).astype(np.int64)  # ties, nesting, touching and empty intervals
    ends = starts + rng.integers(0, 40, n)
    if sort:
        order = np.argsort(starts, kind="stable")
        starts, ends = starts[order], ends[order]
    return starts, ends


@pytest.mark.parametrize("seed", range(40))
def test_covered_time_is_the_merged_blocks_length(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(0, 60))
    starts, ends = random_intervals(rng, n, sort=seed % 2 == 0)
    kept = starts.copy(), ends.copy()
    assert covered_ns(starts, ends) == merged_length(starts, ends)
    assert (starts == kept[0]).all() and (ends == kept[1]).all()  # the caller's columns are left alone
    b = random_intervals(rng, int(rng.integers(0, 30)), sort=False)
    union = merged_length(np.r_[starts, b[0]], np.r_[ends, b[1]])
    assert overlap_ns((starts, ends), b) == merged_length(starts, ends) + merged_length(*b) - union


def test_covered_time_of_nothing_one_and_touching_intervals():
    none = np.zeros(0, np.int64)
    assert covered_ns(none, none) == 0
    assert covered_ns(np.array([5]), np.array([9])) == 4
    assert covered_ns(np.array([0, 10, 10]), np.array([10, 10, 15])) == 15  # touching and empty ones
    assert covered_ns(np.array([0, 2, 3]), np.array([100, 5, 4])) == 100  # nested in the first


def searched(start: np.ndarray, end: np.ndarray, times: np.ndarray) -> np.ndarray:
    """The earlier StepSelection.analyzed: the last range starting at or before each time."""
    order = np.argsort(start, kind="stable")
    start, end = start[order], end[order]
    at = np.searchsorted(start, times, side="right") - 1
    return (times >= 0) & (at >= 0) & (times <= end[np.maximum(at, 0)])


@pytest.mark.parametrize("seed", range(20))
def test_analyzed_times_are_those_in_the_last_kept_range_starting_before_them(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 12))
    start = rng.integers(0, 500, n).astype(np.int64)  # unsorted, overlapping, tied, unclosed (end before start)
    end = start + rng.integers(-20, 80, n)
    labels = [f"ProfilerStep#{i}" for i in range(n)]
    kept = tuple(label for label in labels if rng.random() < 0.7) or labels[:1]
    selection = StepSelection(pattern="ProfilerStep#*", complete_only=True, restricts=True, steps=tuple(labels),
                              kept=kept, left_out=(), ranks={3: RankSteps(start=start, end=end, label=labels)})
    times = np.r_[-1, rng.integers(-5, 600, 200)]  # -1: unknown
    keep = np.array([label in kept for label in labels])
    assert selection.analyzed(3, times).tolist() == searched(start[keep], end[keep], times).tolist()
    assert selection.analyzed(4, times).all()  # a rank that marks no step


@pytest.mark.parametrize("seed", range(40))
def test_nccl_time_and_overlap_in_one_pass_are_the_covered_times(seed):
    """The core's one pass (_native.nccl_overlap, model.activity's overlap figures) against the
    covered times it replaced: NCCL's, and |NCCL| + |compute| - |both| for the overlap."""
    rng = np.random.default_rng(seed)
    starts, ends = random_intervals(rng, int(rng.integers(0, 80)), sort=True)
    is_nccl, keep = rng.random(len(starts)) < 0.3, rng.random(len(starts)) < 0.8
    nccl, compute = keep & is_nccl, keep & ~is_nccl
    nccl_time = merged_length(starts[nccl], ends[nccl])
    overlap = nccl_time + merged_length(starts[compute], ends[compute]) - merged_length(starts[keep], ends[keep])
    assert _native.nccl_overlap(starts, ends, is_nccl, keep) == (nccl_time, overlap)


def test_nccl_overlap_refuses_columns_out_of_start_order():
    with pytest.raises(ValueError, match="sorted by start"):
        _native.nccl_overlap(np.array([5, 1]), np.array([6, 2]), np.array([True, False]), np.array([True, True]))
