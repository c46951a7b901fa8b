"""Interval arithmetic on whole numpy columns (start, end in ns; each end at or after its start)."""

from __future__ import annotations

import numpy as np


def covered_ns(starts: np.ndarray, ends: np.ndarray) -> int:
    """Total time covered by at least one interval. Columns sorted by start (a rank's GPU work
    and its subsets) are taken as they are; others are sorted first."""
    if len(starts) == 0:
        return 0
    if (starts[1:] < starts[:-1]).any():
        order = np.argsort(starts, kind="stable")
        starts, ends = starts[order], ends[order]
    reach = np.maximum.accumulate(ends)  # how far the intervals so far reach
    last = int(reach[-1])
    # The span from the first start to the furthest end, less the gaps: where an interval starts
    # after every earlier one has ended. In place: the column is large (a rank's GPU work).
    gaps = np.subtract(starts[1:], reach[:-1], out=reach[:-1])
    return last - int(starts[0]) - int(np.maximum(gaps, 0, out=gaps).sum())


def overlap_ns(a: tuple[np.ndarray, np.ndarray], b: tuple[np.ndarray, np.ndarray]) -> int:
    """Time covered by both interval sets: |A| + |B| - |A ∪ B|."""
    union = covered_ns(np.concatenate([a[0], b[0]]), np.concatenate([a[1], b[1]]))
    return covered_ns(*a) + covered_ns(*b) - union
