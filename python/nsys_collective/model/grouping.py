"""Grouping of rows by integer keys (no Python per row): sorted groups, their medians, each row's
reference among its peers, and each row's occurrence among the rows with the same keys.

The core does the work (crates/core/src/grouping.rs): each row's keys packed into one integer and
hashed, the distinct keys sorted, values sorted within each group; no sort of all rows, which the
numpy version spent most of the what-if's candidate picking on. tests/unit/test_grouping.py keeps
that numpy version as the definition these must equal.
Where a figure depends on a group's values only, each rank's rows go in condensed to a histogram
(`value_counts`), and numpy takes the figure from the histograms (`counted_quantiles_of_other_ranks`)."""

from __future__ import annotations

import numpy as np

from nsys_collective import _native


def _ints(column: np.ndarray) -> np.ndarray:
    """A key or value column as the core takes it: int64, contiguous. Floats are refused, not
    truncated (two durations 0.4 ns apart must not become one)."""
    column = np.asarray(column)
    if column.dtype.kind not in "biu":
        raise TypeError(f"grouping takes integer columns, not {column.dtype}")
    return np.ascontiguousarray(column, dtype=np.int64)


def ids(column: np.ndarray) -> np.ndarray:
    """An id column as the core reads it without a wider copy (its Ids): int32 kept as it is (the
    trace's ids where they fit, the graph's steps), any other integers as int64."""
    column = np.asarray(column)
    return np.ascontiguousarray(column) if column.dtype == np.int32 else _ints(column)


def group_ids(*keys: np.ndarray, sorted: bool = False) -> tuple[np.ndarray, int]:
    """Each row's group number (rows whose keys are all equal share one), numbered in the order
    the rows first have them, or in the keys' order (`sorted`); and how many groups there are."""
    ids, count = _native.group_ids([_ints(k) for k in keys], sorted=sorted)
    return ids, count


def unique(column: np.ndarray, first_appearance: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """`np.unique(column, return_inverse=True)` of an integer column, by hashing (no sort of the
    rows): its distinct values, ascending or in the order the rows first have them, and each row's
    index into them (string ids: millions of calls, a few hundred names)."""
    column = _ints(column)
    at, count = _native.group_ids([column], sorted=not first_appearance)
    values = np.empty(count, np.int64)
    values[at] = column
    return values, at


def sorted_rows(keys: tuple[np.ndarray, ...], then: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Rows in the order of the keys (the first key first), rows with equal keys by `then`, else
    in row order; and where each group of equal keys starts, as a bool per sorted row."""
    order, first = _native.group_sorted_rows([_ints(k) for k in keys], None if then is None else _ints(then))
    new = np.zeros(len(order), bool)
    new[first] = True
    return order, new


def _numbers(first: np.ndarray, n: int) -> np.ndarray:
    """Each sorted row's group number, from where the groups start."""
    return np.repeat(np.arange(len(first), dtype=np.int64), np.diff(np.r_[first, n]))


def groups(*keys: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Rows sorted by the keys (the first key first), each row's group number in that order, and
    each group's first position."""
    order, first = _native.group_sorted_rows([_ints(k) for k in keys], None)
    return order, _numbers(first, len(order)), first


def group_medians(value: np.ndarray, *keys: np.ndarray):
    """`groups` of the keys (rows sorted by the keys, then by value), and the median value of
    each group."""
    order, first = _native.group_sorted_rows([_ints(k) for k in keys], _ints(value))
    if not len(order):
        return order, order, order, np.zeros(0)
    counts = np.diff(np.r_[first, len(order)])
    v_sorted = value[order].astype(np.float64)
    median = (v_sorted[first + (counts - 1) // 2] + v_sorted[first + counts // 2]) / 2
    return order, _numbers(first, len(order)), first, median


def median_of_others(value: np.ndarray, *keys: np.ndarray) -> np.ndarray:
    """Per row, the median of the other rows with the same keys (ranks running the same thing);
    NaN where no other row has them. With three or more rows the median of all of them serves
    (a single outlier never is the median)."""
    return _native.median_of_others(_ints(value), [_ints(k) for k in keys])


def run_references(ranks: list[tuple[int, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]]
                   ) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Per rank, given as (program, step, name, start, end, keep) (its rows, the runs those `keep`
    marks): each row's occurrence among the rank's runs of its step and name, and, among the runs
    of the same program, step, name and occurrence, the `median_of_others` of its duration
    (end - start) and the median of the other ranks' durations (-1, NaN: the row is no run). Each rank's own
    arrays: no job-wide column is made."""
    return _native.run_references([(int(program), ids(step), ids(name), _ints(start), _ints(end),
                                    np.ascontiguousarray(keep, bool)) for program, step, name, start, end, keep in ranks])


def occurrence(*keys: np.ndarray) -> np.ndarray:
    """Each row's position among the rows with the same keys, in row order."""
    return _native.group_occurrence([_ints(k) for k in keys])


def value_counts(value: np.ndarray, *keys: np.ndarray) -> tuple[list[np.ndarray], np.ndarray, np.ndarray]:
    """The distinct rows of (keys, value), in the order of the keys then the value: their keys,
    their values, and how many rows each stands for. A group's values as a histogram (an API's
    call durations on a rank: a quarter of a million calls, a few thousand distinct durations)."""
    columns = [_ints(k) for k in keys] + [_ints(value)]
    ids, count = _native.group_ids(columns, sorted=True)
    one = np.empty(count, np.int64)
    one[ids] = np.arange(len(ids))  # a row of each
    *distinct_keys, distinct_value = (c[one] for c in columns)
    return distinct_keys, distinct_value, np.bincount(ids, minlength=count)


def counted_quantiles_of_other_ranks(value: np.ndarray, count: np.ndarray, rank: np.ndarray, *keys: np.ndarray,
                                     quantiles: tuple[float, ...]) -> list[np.ndarray]:
    """Per quantile q, per row: the value at position floor((n - 1) q) among the n rows with the
    same keys on the other ranks, in value order (a value that occurred, not interpolated; NaN
    where no other rank has them), where each row stands for `count` rows of its value (the ranks'
    `value_counts`): the figures every row would give, from each rank's histograms."""
    value, count, rank = _ints(value), _ints(count), _ints(rank)
    out = [np.full(len(value), np.nan) for _ in quantiles]
    if not len(value):
        return out
    order, new = sorted_rows(keys, then=value)  # each group's rows together, by value
    first = np.flatnonzero(new)
    group = np.cumsum(new) - 1
    v, c, r = value[order], count[order], rank[order]
    for one in np.unique(r).tolist():
        others = np.where(r != one, c, 0)
        seen = np.cumsum(others)  # the other ranks' rows up to each sorted row, over all groups
        n = np.add.reduceat(others, first)
        mine = np.flatnonzero(r == one)
        g = group[mine]
        have = n[g] > 0
        mine, g = mine[have], g[have]
        before = (seen - others)[first][g]
        for o, q in zip(out, quantiles):
            k = ((n[g] - 1).astype(np.float64) * q).astype(np.int64)  # the core's index: the same float product
            o[order[mine]] = v[np.searchsorted(seen, before + k, side="right")]
    return out
