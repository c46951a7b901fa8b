"""Grouping of rows by keys, in numpy (no Python per row): sorted groups, their medians, each row's
reference among its peers, and each row's occurrence among the rows with the same keys."""

from __future__ import annotations

import numpy as np


def packed(keys: tuple[np.ndarray, ...]) -> np.ndarray | None:
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


def sorted_rows(keys: tuple[np.ndarray, ...], then: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Rows in the order of the keys (the first key first), rows with equal keys by `then`, else
    in row order; and where each group of equal keys starts, as a bool per sorted row.
    The keys are packed into one int64 where their ranges fit: a stable argsort of one column is
    several times faster than np.lexsort of many (a million kernel runs, every analysis)."""
    n = len(keys[0])
    code = packed(keys)
    if code is None:
        order = np.lexsort(((then,) if then is not None else ()) + keys[::-1])
        new = np.r_[True, np.any([k[order][1:] != k[order][:-1] for k in keys], axis=0)] if n else np.zeros(0, bool)
        return order, new
    with_then = packed((code, then)) if then is not None and then.dtype.kind in "iu" else None
    if with_then is not None:  # one sort of keys and value packed together, as two stable sorts would order them
        order = np.argsort(with_then, kind="stable")
    else:
        order = np.argsort(then, kind="stable") if then is not None else np.arange(n)
        order = order[np.argsort(code[order], kind="stable")]
    sorted_code = code[order]
    return order, np.r_[True, sorted_code[1:] != sorted_code[:-1]] if n else np.zeros(0, bool)


def groups(*keys: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Rows sorted by the keys (the first key first), each row's group number in that order, and
    each group's first position."""
    order, new = sorted_rows(keys)
    return order, np.cumsum(new) - 1, np.flatnonzero(new)


def group_medians(value: np.ndarray, *keys: np.ndarray):
    """`groups` of the keys (rows sorted by the keys, then by value), and the median value of
    each group."""
    order, new = sorted_rows(keys, then=value)
    if not len(order):
        return order, order, order, np.zeros(0)
    first = np.flatnonzero(new)
    counts = np.diff(np.r_[first, len(order)])
    v_sorted = value[order].astype(np.float64)
    return order, np.cumsum(new) - 1, first, (v_sorted[first + (counts - 1) // 2] + v_sorted[first + counts // 2]) / 2


def median_of_others(value: np.ndarray, *keys: np.ndarray) -> np.ndarray:
    """Per row, the median of the other rows with the same keys (ranks running the same thing);
    NaN where no other row has them. With three or more rows the median of all of them serves
    (a single outlier never is the median)."""
    out = np.full(len(value), np.nan)
    order, group, first, median = group_medians(value, *keys)
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


def median_of_other_ranks(value: np.ndarray, code: np.ndarray, rank: np.ndarray) -> np.ndarray:
    """Per row, the median value of the rows with the same code on the other ranks (NaN where no
    other rank has it). One sort of all rows by (code, value); each rank's others are then that
    order with its own rows taken out, still sorted, so each rank costs one pass, not a sort."""
    out = np.full(len(code), np.nan)
    if not len(code):
        return out
    order, new = sorted_rows((code,), then=value)
    group = np.cumsum(new) - 1
    v, r = value[order].astype(np.float64), rank[order]
    ranks = np.unique(r)
    if len(ranks) < 2:
        return out
    by_group = np.empty(int(group[-1]) + 1)
    for one in ranks.tolist():
        mine = r == one
        g, vv = group[~mine], v[~mine]
        first = np.flatnonzero(np.r_[True, g[1:] != g[:-1]])
        counts = np.diff(np.r_[first, len(g)])
        by_group.fill(np.nan)
        by_group[g[first]] = (vv[first + (counts - 1) // 2] + vv[first + counts // 2]) / 2
        out[order[mine]] = by_group[group[mine]]
    return out


def occurrence(*keys: np.ndarray) -> np.ndarray:
    """Each row's position among the rows with the same keys, in row order."""
    order, new = sorted_rows(keys)
    occ = np.empty(len(order), dtype=np.int64)
    starts = np.flatnonzero(new)
    occ[order] = np.arange(len(order)) - np.repeat(starts, np.diff(np.r_[starts, len(order)]))
    return occ
