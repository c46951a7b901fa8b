"""The clock fit on hand-made instances where the right answer is known exactly."""

from __future__ import annotations

import numpy as np
import pytest

from nsys_collective.model.alignment import _apply, align, count_violations

T0 = 1_750_000_000_000_000_000


def observations(starts, ends):
    """Instances × ranks arrays to the sorted observation layout of `align`."""
    starts, ends = np.asarray(starts, np.int64), np.asarray(ends, np.int64)
    n_inst, n_rank = starts.shape
    inst = np.repeat(np.arange(n_inst), n_rank)
    rank = np.tile(np.arange(n_rank), n_inst)
    return inst, rank, starts.ravel(), ends.ravel()


def test_causality_is_enforced_where_least_squares_alone_violates_it():
    # Rank 1 (host b) arrives last and its transfer is 5 ns; rank 0 (host a) ends ±20 ns around
    # it. Least squares on ends leaves rank 0 ending before rank 1 starts in half the instances;
    # the smallest shift that removes every violation is +15 ns on host b... seen from host a.
    jitter = np.tile([-20, 20], 10)
    step = T0 + np.arange(20, dtype=np.int64)[:, None] * 10_000
    starts = step + np.array([0, 100])
    ends = step + 105 + np.stack([jitter, np.zeros(20, np.int64)], axis=1)
    inst, rank, s, e = observations(starts, ends)
    a = align(inst, rank, s, e, np.ones(20, bool), {0: "a", 1: "b"})
    assert a.violations_before == 10 and a.violations_after == 0
    assert -16 <= a.offset_ns[1] <= -14, a.offset_ns  # host b moves 15 ns earlier: rank 1 starts at 85


def test_a_rank_with_its_own_clock_is_split_from_its_host():
    rng = np.random.default_rng(1)
    n = 40
    arrival = T0 + np.arange(n)[:, None] * 5_000_000 + rng.integers(0, 200_000, (n, 4))
    end = arrival.max(axis=1, keepdims=True) + 300_000 + rng.integers(-1_000, 1_000, (n, 4))
    offsets = np.array([0, 0, 2_000_000, 2_080_000])  # host b; rank 3's clock is 80 us off its host's
    inst, rank, s, e = observations(arrival + offsets, end + offsets)
    a = align(inst, rank, s, e, np.ones(n, bool), {0: "a", 1: "a", 2: "b", 3: "b"})
    assert any("disagree with their host's clock" in w for w in a.warnings)
    assert a.clock_names[:2] == ["a", "b"] and a.clock_names[2] in ("b/rank 2", "b/rank 3")
    for r in range(4):
        assert abs(a.rank_offset_ns(r) + offsets[r]) <= 2_000, (r, a.rank_offset_ns(r))


def test_violations_are_counted_per_pair():
    inst = np.array([0, 0, 0, 1, 1])
    start = np.array([0, 50, 60, 0, 10])
    end = np.array([40, 100, 100, 20, 30])
    # Instance 0: rank 0 ended (40) before ranks 1 and 2 started; instance 1: none.
    assert count_violations(inst, start, end) == 2


def applied_before(t, offset, drift, t_ref):
    """The correction as _apply computed it before it worked in place."""
    correction = offset + drift * 1e-6 * (t - t_ref).astype(np.float64)
    return t + np.rint(correction).astype(np.int64)


@pytest.mark.parametrize("seed", range(20))
def test_the_correction_in_place_is_the_one_before(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(0, 500))
    t = np.sort(T0 + rng.integers(-10**12, 10**12, n)).astype(np.int64)
    t_ref = T0 + int(rng.integers(-10**9, 10**9))
    for offset, drift in ((np.float64(rng.normal(0, 1e7)), np.float64(rng.normal(0, 40))), (0.0, 0.0),
                          (rng.normal(0, 1e7, n), rng.normal(0, 40, n))):  # one clock, none, one per time
        before = t.copy()
        assert _apply(t, offset, drift, t_ref).tolist() == applied_before(t, offset, drift, t_ref).tolist()
        assert (t == before).all()  # the times themselves are left alone
