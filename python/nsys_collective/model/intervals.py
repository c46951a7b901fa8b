"""Interval arithmetic on whole numpy columns (start, end in ns)."""

from __future__ import annotations

import numpy as np


def merge(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The union of intervals as disjoint, sorted intervals (touching ones merged)."""
    if len(starts) == 0:
        return starts[:0], ends[:0]
    order = np.argsort(starts, kind="stable")
    s, e = starts[order], ends[order]
    reach = np.maximum.accumulate(e)
    # An interval opens a new group when it starts after everything before it has ended.
    new = np.empty(len(s), dtype=bool)
    new[0] = True
    new[1:] = s[1:] > reach[:-1]
    group = np.cumsum(new) - 1
    return s[new], np.maximum.reduceat(e, np.flatnonzero(new))[: group[-1] + 1]


def covered_ns(starts: np.ndarray, ends: np.ndarray) -> int:
    """Total time covered by at least one interval."""
    s, e = merge(starts, ends)
    return int((e - s).sum())


def overlap_ns(a: tuple[np.ndarray, np.ndarray], b: tuple[np.ndarray, np.ndarray]) -> int:
    """Time covered by both interval sets: |A| + |B| - |A ∪ B|."""
    union = covered_ns(np.concatenate([a[0], b[0]]), np.concatenate([a[1], b[1]]))
    return covered_ns(*a) + covered_ns(*b) - union
