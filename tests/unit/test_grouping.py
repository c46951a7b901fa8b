"""The core's grouping (crates/core/src/grouping.rs, bound in model/grouping.py) equals the numpy
version it replaced, on random rows: ties, single-row and empty groups, keys too wide to pack, no
rows at all. The numpy version below is that definition, verbatim but for its names (ref_*)."""

from __future__ import annotations

import numpy as np
import pytest

from nsys_collective.model import grouping

# ---- the numpy version (model/grouping.py before the core did the work) ----


def ref_packed(keys: tuple[np.ndarray, ...]) -> np.ndarray | None:
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


def ref_sorted_rows(keys: tuple[np.ndarray, ...], then: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Rows in the order of the keys (the first key first), rows with equal keys by `then`, else
    in row order; and where each group of equal keys starts, as a bool per sorted row.
    The keys are packed into one int64 where their ranges fit: a stable argsort of one column is
    several times faster than np.lexsort of many (a million kernel runs, every analysis)."""
    n = len(keys[0])
    code = ref_packed(keys)
    if code is None:
        order = np.lexsort(((then,) if then is not None else ()) + keys[::-1])
        new = np.r_[True, np.any([k[order][1:] != k[order][:-1] for k in keys], axis=0)] if n else np.zeros(0, bool)
        return order, new
    with_then = ref_packed((code, then)) if then is not None and then.dtype.kind in "iu" else None
    if with_then is not None:  # one sort of keys and value packed together, as two stable sorts would order them
        order = np.argsort(with_then, kind="stable")
    else:
        order = np.argsort(then, kind="stable") if then is not None else np.arange(n)
        order = order[np.argsort(code[order], kind="stable")]
    sorted_code = code[order]
    return order, np.r_[True, sorted_code[1:] != sorted_code[:-1]] if n else np.zeros(0, bool)


def ref_groups(*keys: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Rows sorted by the keys (the first key first), each row's group number in that order, and
    each group's first position."""
    order, new = ref_sorted_rows(keys)
    return order, np.cumsum(new) - 1, np.flatnonzero(new)


def ref_group_medians(value: np.ndarray, *keys: np.ndarray):
    """`groups` of the keys (rows sorted by the keys, then by value), and the median value of
    each group."""
    order, new = ref_sorted_rows(keys, then=value)
    if not len(order):
        return order, order, order, np.zeros(0)
    first = np.flatnonzero(new)
    counts = np.diff(np.r_[first, len(order)])
    v_sorted = value[order].astype(np.float64)
    return order, np.cumsum(new) - 1, first, (v_sorted[first + (counts - 1) // 2] + v_sorted[first + counts // 2]) / 2


def ref_median_of_others(value: np.ndarray, *keys: np.ndarray) -> np.ndarray:
    """Per row, the median of the other rows with the same keys (ranks running the same thing);
    NaN where no other row has them. With three or more rows the median of all of them serves
    (a single outlier never is the median)."""
    out = np.full(len(value), np.nan)
    order, group, first, median = ref_group_medians(value, *keys)
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


def ref_median_of_other_ranks(value: np.ndarray, code: np.ndarray, rank: np.ndarray) -> np.ndarray:
    """Per row, the median value of the rows with the same code on the other ranks (NaN where no
    other rank has it). One sort of all rows by (code, value); each rank's others are then that
    order with its own rows taken out, still sorted, so each rank costs one pass, not a sort."""
    out = np.full(len(code), np.nan)
    if not len(code):
        return out
    order, new = ref_sorted_rows((code,), then=value)
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


def ref_occurrence(*keys: np.ndarray) -> np.ndarray:
    """Each row's position among the rows with the same keys, in row order."""
    order, new = ref_sorted_rows(keys)
    occ = np.empty(len(order), dtype=np.int64)
    starts = np.flatnonzero(new)
    occ[order] = np.arange(len(order)) - np.repeat(starts, np.diff(np.r_[starts, len(order)]))
    return occ


def ref_median_of_other_ranks_by_keys(value, rank, *keys):
    """The numpy version's caller (slow_device's `_peers_median`): keys packed, else numbered."""
    code = ref_packed(keys)
    if code is None:
        code = np.unique(np.stack(keys), axis=1, return_inverse=True)[1].ravel()
    return ref_median_of_other_ranks(value, code, rank)


def ref_quantiles_of_other_ranks(value, rank, code, quantiles):
    """api_stall's numpy version (attribution/whatif/rank.py before the core did it), verbatim but
    for its names and NaN for its -1: the rows sorted once by (code, value); each rank's peers are
    that order without its own rows, still sorted; the q-th of n at first + int((n - 1) q)."""
    out = [np.full(len(value), np.nan) for _ in quantiles]
    order, _ = ref_sorted_rows((code,), then=value)
    sorted_code, sorted_value, owner = code[order], value[order], rank[order]
    groups = np.unique(code)
    for one in np.unique(rank).tolist():
        peer_code, peer_value = sorted_code[owner != one], sorted_value[owner != one]
        first = np.searchsorted(peer_code, groups)
        last = np.searchsorted(peer_code, groups, side="right")
        has = last > first
        n = np.maximum(last - first, 1)
        mine = np.flatnonzero(rank == one)
        at = np.searchsorted(groups, code[mine])
        for o, q in zip(out, quantiles):
            if not len(peer_value):
                continue
            pick = peer_value[np.minimum(first + ((n - 1) * q).astype(np.int64), len(peer_value) - 1)]
            o[mine] = np.where(has[at], pick[at], np.nan)
    return out


def ref_quantiles_by_keys(value, rank, *keys, quantiles):
    code = ref_packed(keys)
    if code is None:
        code = np.unique(np.stack(keys), axis=1, return_inverse=True)[1].ravel()
    return ref_quantiles_of_other_ranks(value, rank, code, quantiles)


QUANTILES = (0.0, 0.5, 0.9, 1.0)

# ---- the comparison ----

def random_rows(rng: np.random.Generator, n: int, columns: int, span: int):
    """Key columns, a value with ties and a rank per row; `span` sets how many distinct values a
    key has (few: large groups; 2**62: keys too wide to pack into one integer)."""
    keys = tuple(rng.integers(-span, span, n, endpoint=True, dtype=np.int64) for _ in range(columns))
    value = rng.integers(0, 6, n, dtype=np.int64) * 1000 + rng.integers(0, 2, n)
    rank = rng.integers(0, 4, n, dtype=np.int64)
    return keys, value, rank


CASES = [(n, columns, span) for n in (0, 1, 2, 7, 300) for columns in (1, 2, 4) for span in (0, 1, 5, 2**62)]


def same(a, b) -> bool:
    return a.dtype.kind == b.dtype.kind and np.array_equal(a, b, equal_nan=a.dtype.kind == "f")


@pytest.mark.parametrize(("n", "columns", "span"), CASES)
def test_the_core_equals_the_numpy_version(n, columns, span):
    rng = np.random.default_rng(n * 100 + columns * 10 + (span % 97))
    for _ in range(3):
        keys, value, rank = random_rows(rng, n, columns, span)
        assert same(grouping.occurrence(*keys), ref_occurrence(*keys))
        for mine, theirs in zip(grouping.unique(keys[0]), np.unique(keys[0], return_inverse=True)):
            assert same(mine, theirs)
        values, at = grouping.unique(keys[0], first_appearance=True)
        assert same(values, keys[0][np.sort(np.unique(keys[0], return_index=True)[1])]) and same(values[at], keys[0])
        for mine, theirs in zip(grouping.groups(*keys), ref_groups(*keys)):
            assert same(mine, theirs)
        for then in (None, value):
            for mine, theirs in zip(grouping.sorted_rows(keys, then=then), ref_sorted_rows(keys, then=then)):
                assert same(mine, theirs)
        for mine, theirs in zip(grouping.group_medians(value, *keys), ref_group_medians(value, *keys)):
            assert same(np.asarray(mine), np.asarray(theirs))
        assert same(grouping.median_of_others(value, *keys), ref_median_of_others(value, *keys))
        for mine, theirs in zip(counted_quantiles(value, rank, *keys), ref_quantiles_by_keys(value, rank, *keys, quantiles=QUANTILES)):
            assert same(mine, theirs)


def test_the_keys_of_a_job_with_its_real_shape():
    """Kernel runs of 8 ranks x 50 steps x 40 names, each run a few times a step, one rank missing
    some: the shape the candidates group (by program, step, name, occurrence)."""
    rng = np.random.default_rng(3)
    rank = np.repeat(np.arange(8), 6000)
    step = rng.integers(0, 50, len(rank))
    name = rng.integers(0, 40, len(rank)) * 7919
    keep = ~((rank == 5) & (name % 3 == 0))
    rank, step, name = rank[keep], step[keep], name[keep]
    duration = rng.integers(900, 1100, len(rank))
    program = (rank >= 4).astype(np.int64)
    occ = grouping.occurrence(rank, step, name)
    assert same(occ, ref_occurrence(rank, step, name))
    assert same(grouping.median_of_others(duration, program, step, name, occ),
                ref_median_of_others(duration, program, step, name, occ))


def ref_run_references(ranks):
    """The what-if's op runs before the core grouped them rank by rank (attribution/whatif/kernels.py's
    `op_runs` and `op_references`): the runs of every rank in one set of columns, each rank's
    occurrence counted, then both medians of the whole set."""
    kept = [np.flatnonzero(keep) for *_, keep in ranks]
    rank = np.concatenate([np.full(len(rows), k) for k, rows in enumerate(kept)] + [np.zeros(0, np.int64)])
    program, step, name, start, end = (np.concatenate([np.full(len(rows), part[0]) if c == 0 else part[c][rows]
                                                       for part, rows in zip(ranks, kept)] + [np.zeros(0, np.int64)])
                                       for c in range(5))
    value = end - start
    occurrence = ref_occurrence(rank, step, name)
    others = ref_median_of_others(value, program, step, name, occurrence)
    other_ranks = ref_median_of_other_ranks_by_keys(value, rank, program, step, name, occurrence)
    out, at = [], 0
    for (_, step_k, *_), rows in zip(ranks, kept):
        part = (np.full(len(step_k), -1), np.full(len(step_k), np.nan), np.full(len(step_k), np.nan))
        for column, whole in zip(part, (occurrence, others, other_ranks)):
            column[rows] = whole[at:at + len(rows)]
        out.append(part)
        at += len(rows)
    return out


@pytest.mark.parametrize("seed", range(40))
def test_run_references_equal_the_job_wide_grouping(seed):
    """Each rank's runs grouped across ranks equal the job-wide columns grouped at once: ties,
    groups of one run, ranks without runs, rows that are no runs, two programs, steps outside the
    steps (-1), names too wide for a table of slots; steps and names int32 (as the trace and the
    graph hold them) where they fit, on odd seeds."""
    rng = np.random.default_rng(seed)
    ranks = []
    for _ in range(int(rng.integers(0, 6))):
        n = int(rng.integers(0, [4, 40, 400][seed % 3]))
        span = [2, 9, 2**40][seed % 4 % 3]
        start = rng.integers(0, 10**6, n)
        step, name = rng.integers(-1, 4, n), rng.integers(0, span, n) * [1, 1, 7919][seed % 3]
        if seed % 2 and name.max(initial=0) < 2**31:
            step, name = step.astype(np.int32), name.astype(np.int32)
        ranks.append((int(rng.integers(0, 2)), step, name,
                      start, start + rng.integers(0, 5, n) * 100 + rng.integers(0, 2, n), rng.random(n) < 0.9))
    for got, expect in zip(grouping.run_references(ranks), ref_run_references(ranks), strict=True):
        for mine, theirs in zip(got, expect, strict=True):
            assert same(mine, theirs)


def test_quantiles_of_an_api_over_many_calls():
    """api_stall's shape: a few APIs, thousands of calls each on 8 ranks of two programs, long
    tails and ties, one rank alone in its program, one API only one rank calls."""
    rng = np.random.default_rng(5)
    rank = rng.integers(0, 8, 40_000)
    api = rng.integers(0, 6, len(rank))
    api[rank == 3] = np.where(api[rank == 3] == 5, 6, api[rank == 3])  # API 6: rank 3's own
    program = np.where(rank == 7, 1, 0)
    duration = (rng.pareto(2.0, len(rank)) * 1000).astype(np.int64) // 10 * 10
    for mine, theirs in zip(counted_quantiles(duration, rank, program, api),
                            ref_quantiles_by_keys(duration, rank, program, api, quantiles=QUANTILES)):
        assert same(mine, theirs)
        assert np.isnan(mine[rank == 7]).all() and np.isnan(mine[api == 6]).all()
        assert not np.isnan(mine[(rank != 7) & (api != 6)]).any()


def test_group_numbers_follow_first_appearance_or_the_keys():
    ids, count = grouping.group_ids(np.array([7, 3, 7, 9, 3]), np.array([1, 1, 1, 0, 1]))
    assert (ids.tolist(), count) == ([0, 1, 0, 2, 1], 3)
    ids, count = grouping.group_ids(np.array([7, 3, 7, 9, 3]), np.array([1, 1, 1, 0, 1]), sorted=True)
    assert (ids.tolist(), count) == ([1, 0, 1, 2, 0], 3)


def test_columns_that_do_not_fit_together_are_refused():
    with pytest.raises(ValueError, match="differ in length"):
        grouping.occurrence(np.arange(3), np.arange(2))
    with pytest.raises(ValueError, match="at least one key"):
        grouping.occurrence()
    with pytest.raises(TypeError, match="integer"):
        grouping.median_of_others(np.array([1.5, 2.0]), np.arange(2))


def counted_quantiles(value, rank, *keys, quantiles=QUANTILES):
    """counted_quantiles_of_other_ranks of the rows' histograms (`value_counts` by rank and keys), per
    row: its distinct row's figures, as api_stall reads them."""
    (r, *k), v, count = grouping.value_counts(value, rank, *keys)
    assert count.sum() == len(value)
    got = grouping.counted_quantiles_of_other_ranks(v, count, r, *k, quantiles=quantiles)
    at = {key: j for j, key in enumerate(zip(r.tolist(), *(c.tolist() for c in k), v.tolist()))}
    rows = np.array([at[key] for key in zip(rank.tolist(), *(c.tolist() for c in keys), value.tolist())], np.int64)
    return [g[rows] for g in got]


@pytest.mark.parametrize("seed", range(20))
def test_quantiles_from_histograms_equal_those_of_every_row(seed):
    """Each rank's rows condensed to (keys, value, count) give every row the quantiles of the
    other ranks that the rows themselves give: ties, a rank alone in a group, empty groups."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(0, 400))
    rank = rng.integers(0, 4, n)
    program = rng.integers(0, 2, n)
    api = rng.integers(0, 5, n)
    value = rng.integers(0, [3, 50, 10_000][seed % 3], n)
    for e, g in zip(ref_quantiles_by_keys(value, rank, program, api, quantiles=QUANTILES), counted_quantiles(value, rank, program, api)):
        np.testing.assert_array_equal(e, g)
