"""The core's host time per range (crates/core/src/host_time.rs, read by attribution/whatif/host.py)
equals the numpy assembly it replaced, on random calls: overlapping calls, calls outside every
range, blocking calls, ranges without a row, several ranks' rows in one order."""

from __future__ import annotations

import numpy as np
import pytest

from nsys_collective import _native


def numpy_version(calls, n_ranges: int, row_of: np.ndarray, call_offset: int, with_calls: bool):
    """attribution/whatif/host.py's per-rank numpy before the core did it, verbatim but for names."""
    inside = np.flatnonzero(calls["gap_range"] >= 0)
    gaps = np.maximum(0, calls["start"] - calls["gap_start"])[inside]
    own = np.where(calls["blocking"][inside] | (not with_calls), 0, calls["end"][inside] - calls["start"][inside])
    total = np.bincount(calls["gap_range"][inside], weights=gaps + own, minlength=n_ranges).astype(np.int64)
    first_gap = np.full(n_ranges, np.iinfo(np.int64).max, np.int64)
    np.minimum.at(first_gap, calls["gap_range"][inside], calls["gap_start"][inside])
    mine = row_of[calls["gap_range"][inside]] >= 0
    call_row = call_offset + inside[mine]
    items = (np.repeat(row_of[calls["gap_range"][inside[mine]]], 2), np.repeat(call_row, 2),
             np.tile([False, True], int(mine.sum())), np.column_stack([gaps[mine], own[mine]]).ravel())
    return total, first_gap, items


def random_calls(rng, n: int, n_ranges: int) -> dict:
    start = np.sort(rng.integers(0, 10_000, n))
    return {"start": start, "end": start + rng.integers(-5, 50, n), "gap_start": start - rng.integers(-20, 100, n),
            "gap_range": rng.integers(-1, n_ranges, n) if n_ranges else np.full(n, -1), "blocking": rng.random(n) < 0.3}


def columns(c):
    return (c["start"], c["end"], c["gap_start"], c["gap_range"], c["blocking"])


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("with_calls", [False, True])
def test_the_core_equals_the_numpy_version(seed, with_calls):
    rng = np.random.default_rng(seed)
    pieces, want = [], []
    n_rows = 0
    for rank in range(3):  # three ranks' rows in one order, as host.py concatenates them
        n, n_ranges = int(rng.integers(0, 300)), int(rng.integers(0, 12))
        calls = random_calls(rng, n, n_ranges)
        gaps, own, first_gap = _native.range_host_time(columns(calls), n_ranges)
        total = gaps + own if with_calls else gaps
        used = np.flatnonzero((total > 0) & (rng.random(n_ranges) < 0.7))
        row_of = np.full(n_ranges, -1, np.int64)
        row_of[used] = n_rows + np.arange(len(used))
        n_rows += len(used)
        ref_total, ref_first, ref_items = numpy_version(calls, n_ranges, row_of, 1000 * rank, with_calls)
        assert np.array_equal(total, ref_total) and np.array_equal(first_gap, ref_first)
        row, call, is_call, ns = _native.range_host_pieces(columns(calls), row_of, with_calls)
        pieces.append((row, 1000 * rank + call, is_call, ns))
        want.append(ref_items)
    mine = [np.concatenate(c) for c in zip(*pieces)]
    theirs = [np.concatenate(c) for c in zip(*want)]
    # The core leaves out empty pieces (a cut takes nothing from them, host.HostTime.change).
    order = np.argsort(theirs[0], kind="stable")
    order = order[theirs[3][order] != 0]
    for a, b, dtype in zip(mine, theirs, (np.int64, np.int64, bool, np.int64)):
        assert a.dtype == dtype and np.array_equal(a, b[order].astype(dtype))


def test_a_range_past_the_ranges_is_refused():
    calls = {**random_calls(np.random.default_rng(0), 5, 3), "gap_range": np.full(5, 2)}
    with pytest.raises(ValueError, match="past the 2 ranges"):
        _native.range_host_time(columns(calls), 2)
