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
