"""The contention fit's statistics on drawn data whose truth is known (attribution/overlap_fit.py)."""

from __future__ import annotations

import numpy as np
from scipy.optimize import lsq_linear

from nsys_collective.attribution import overlap_fit


def drawn(seed: int, n: int = 60, kernels: int = 12, classes: int = 3, noise: float = 2_000.0):
    """Transfers of `classes` sizes with `kernels` overlapping each a drawn amount; only kernel 0
    slows them (coefficient 0.375: 1.6x while it runs); noise on every transfer."""
    rng = np.random.default_rng(seed)
    cls = rng.integers(0, classes, n)
    x = rng.uniform(50_000, 400_000, (n, kernels)) * (rng.random((n, kernels)) < 0.8)
    y = 1_000_000 + 200_000 * cls + 0.375 * x[:, 0] + rng.normal(0, noise, n)
    return y, cls, x


def test_kernels_that_slow_nothing_keep_no_figure():
    """Non-negative least squares alone gives each bystander the positive half of its chance
    correlation with the noise; with the partial F tests at a 5% family-wise level, across 40
    drawn jobs at most a few bystanders keep a figure, and the slowing kernel always does."""
    kept_bystanders = 0
    for seed in range(40):
        y, cls, x = drawn(seed)
        fit = overlap_fit.fit(y, cls, x, np.ones(len(y)))
        assert not fit.indistinct[0] and abs(fit.coefficient[0] - 0.375) < 0.02
        kept_bystanders += int((~fit.indistinct[1:] & ~fit.flat[1:]).sum())
        assert np.all(fit.contribution[fit.indistinct] == 0) and np.all(fit.low[fit.indistinct] == 0)
        assert np.all(fit.high[1:] >= 0)
    assert kept_bystanders <= 4, f"{kept_bystanders} bystander figures in 40 jobs"


def test_before_the_tests_the_bystanders_took_a_share():
    """The bias the tests remove is there: the plain bounded fit gives the bystanders a positive
    share of the excess in most drawn jobs."""
    shares = []
    for seed in range(10):
        y, cls, x = drawn(seed)
        sol = overlap_fit._solve(y, cls, 3, x)[3:]
        shares.append((x[:, 1:] * sol[1:]).sum() / (x * sol).sum())
    assert np.median(shares) > 0.005


def test_the_centred_solve_is_the_bounded_solve():
    """The fast path (non-negative least squares on class-centred columns) returns what bvls on
    the whole bounded problem does, and bvls is used where the ceiling binds."""
    for seed in range(5):
        y, cls, x = drawn(seed)
        for xs in (x, np.c_[x, y * 0.9]):  # the second: a column that would pass the ceiling
            a = np.zeros((len(y), 3 + xs.shape[1]))
            a[np.arange(len(y)), cls] = 1.0
            a[:, 3:] = xs
            scale = np.linalg.norm(a, axis=0)
            upper = np.r_[np.full(3, np.inf), np.full(xs.shape[1], overlap_fit.MAX_COEFFICIENT)] * scale
            want = lsq_linear(a / scale, y, bounds=(np.zeros(a.shape[1]), upper), method="bvls").x / scale
            got = overlap_fit._solve(y, cls, 3, xs)
            assert np.allclose(a @ got, a @ want, rtol=1e-7)
            assert np.all(got[3:] <= overlap_fit.MAX_COEFFICIENT + 1e-9)


def _one_solve(y, cls, ncls, xg):
    """The bounded solve as first written, one problem at a time: the reference for the batched one."""
    counts = np.maximum(np.bincount(cls, minlength=ncls), 1).astype(np.float64)
    y_mean = np.bincount(cls, weights=y, minlength=ncls) / counts
    x_mean = (np.stack([np.bincount(cls, weights=xg[:, j], minlength=ncls) for j in range(xg.shape[1])], axis=1)
              if xg.shape[1] else np.zeros((ncls, 0))) / counts[:, None]
    centred = xg - x_mean[cls]
    scale = np.linalg.norm(centred, axis=0)
    scale[scale == 0] = 1.0
    coefficient = (overlap_fit.nnls(centred / scale, y - y_mean[cls], maxiter=50 * xg.shape[1])[0] / scale
                   if xg.shape[1] else np.zeros(0))
    baseline = y_mean - x_mean @ coefficient
    if np.all(coefficient <= overlap_fit.MAX_COEFFICIENT) and np.all(baseline >= 0):
        return np.r_[baseline, coefficient]
    return overlap_fit._bounded(y, cls, ncls, xg)


def test_the_bootstrap_is_one_refit_per_resample_bit_for_bit():
    """The bootstrap draws every resample in one call and takes the class means of all of them in
    one bincount; its interval must be, to the last bit, that of one rng.choice per class and one
    solve per resample (what the golden documents were made with). Classes of one observation, a
    class emptied by the trimming, a column at the ceiling (the bvls path) and an empty column."""
    for seed in range(12):
        y, cls, x = drawn(seed, n=40 + 7 * seed, kernels=4)
        cls[:2] = 3  # a class of two
        cls[2] = 4  # a class of one
        x[:, 3] = 0.0 if seed % 2 else y * 0.9  # no overlap, or overlap that passes the ceiling
        keep = np.random.default_rng(seed).random(len(y)) < 0.9
        keep[cls == 4] = seed % 3 != 0  # sometimes the trimming empties a class
        weight = np.random.default_rng(seed + 1).integers(1, 5, len(y)).astype(float)
        rng = np.random.default_rng(seed)
        kept = np.flatnonzero(keep)
        members = [kept[cls[kept] == c] for c in range(5)]
        draws = np.zeros((overlap_fit.BOOTSTRAP, x.shape[1]))
        for b in range(overlap_fit.BOOTSTRAP):
            pick = np.concatenate([rng.choice(m, len(m)) for m in members if len(m)])
            s = _one_solve(y[pick], cls[pick], 5, x[pick])[5:]
            draws[b] = (x[keep] * s * weight[keep, None]).sum(axis=0)
        want = np.percentile(draws, overlap_fit.INTERVAL, axis=0)
        got = overlap_fit._bootstrap(y, cls, 5, x, keep, weight, overlap_fit._resamples(cls, 5, keep, seed))
        assert np.asarray(got).tobytes() == want.tobytes(), seed
        assert overlap_fit._solve(y, cls, 5, x).tobytes() == _one_solve(y, cls, 5, x).tobytes()


def test_the_one_kernel_bootstrap_is_one_refit_per_resample_bit_for_bit():
    """The compute kernels' fits (_compute_slowdown): one class, one column, up to 2,000 runs."""
    for seed, n in enumerate((5, 64, 777, 2000)):
        y, _, x = drawn(seed, n=n, kernels=1)
        cls = np.zeros(n, np.int64)
        keep = np.random.default_rng(seed).random(n) < 0.95
        weight = np.ones(n)
        rng = np.random.default_rng(seed)
        kept = np.flatnonzero(keep)
        draws = np.zeros((overlap_fit.BOOTSTRAP, 1))
        for b in range(overlap_fit.BOOTSTRAP):
            pick = rng.choice(kept, len(kept))
            s = _one_solve(y[pick], cls[pick], 1, x[pick])[1:]
            draws[b] = (x[keep] * s * weight[keep, None]).sum(axis=0)
        want = np.percentile(draws, overlap_fit.INTERVAL, axis=0)
        got = overlap_fit._bootstrap(y, cls, 1, x, keep, weight, overlap_fit._resamples(cls, 1, keep, seed))
        assert np.asarray(got).tobytes() == want.tobytes(), seed


def test_one_class_is_drawn_under_one_bound_as_under_an_array_of_bounds():
    """_resamples draws a single class under its one bound: the same stream as the bound repeated
    per draw (classes of one draw nothing: the same there too)."""
    for seed, n in enumerate((1, 2, 3, 64, 2000, 100_000)):
        keep = np.ones(n, bool)
        keep[::7] = n < 7
        pool, picks = overlap_fit._resamples(np.zeros(n, np.int64), 1, keep, seed)
        bounds = np.full(overlap_fit.BOOTSTRAP * len(pool), len(pool))
        assert (picks.ravel() == pool[np.random.default_rng(seed).integers(0, bounds)]).all(), n
