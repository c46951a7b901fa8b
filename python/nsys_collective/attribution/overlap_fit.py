"""How much overlapping work slowed other work, from the data's own variation (docs/json-fields.md, the contention fit).

One bounded (non-negative) least-squares fit over every observation: time = baseline of its class + sum over
the overlapping kernels of coefficient x overlap. The baseline is fitted per class (transfers of one
communicator, operation, rank count and size; or one compute kernel), so it is known even where
nothing ran alone; a coefficient is shared by every class (a kernel that overlaps a transfer for
t ns costs it coefficient x t whatever its size) and is near 0 for a kernel that overlaps without
slowing. Kernels whose overlap columns the data cannot tell apart (nearly collinear once each
class's mean is taken out) are fitted as one group and named together, never split by a rule. The
uncertainty is a bootstrap over observations within each class; one trimming pass leaves out
observations the fit misses by far (a slow link, a one-off stall), counted.

Non-negative least squares over many kernels gives each one that overlaps without slowing a
small positive share of the noise (a coefficient can only move up from 0), and together they take
a visible part of the excess. So every kernel must earn its coefficient: backward elimination by
partial F tests (the rise in the residual sum of squares when the kernel is left out, against the
residual variance), at a 5% family-wise level over the kernels tested (Bonferroni). A kernel that
fails is not distinguishable from no effect: its figure is 0, its range runs to what the fit with
it allowed, and the rest are refitted without it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.optimize import lsq_linear, nnls
# The F distribution's survival function itself (what scipy.stats.f.sf calls, the same numbers):
# scipy.stats would add 0.6 s of imports to every analysis for this one function.
from scipy.special import fdtrc

COLLINEAR = 0.995  # cosine between class-centred overlap columns above which two kernels are one group
FLAT = 0.02  # a column whose class-centred norm is under this share of its norm does not vary in its class
BOOTSTRAP = 100
INTERVAL = (5, 95)  # percentiles of the bootstrap: a 90% interval
TRIM_SIGMAS = 6.0
MAX_COLUMNS = 48  # kernels beyond these (by overlap) share one column
# A coefficient's ceiling: 1 - 1/f for a kernel that makes the work it overlaps at most f = 5x
# slower. Without it, a kernel that spans every transfer (overlap = the transfer itself, which
# grows with whatever slowed it) explains any transfer exactly with coefficient 1 and no baseline.
MAX_COEFFICIENT = 0.8
# A kernel that runs through this share of the transfer, in nearly every transfer of the classes it
# overlaps, spans them: its overlap is the transfer time itself (it grows with whatever slowed the
# transfer), so what it costs cannot be told from the baseline; it is not fitted.
SPAN = 0.95
SPANS_NEARLY_EVERY = 0.9
# The family-wise level of the tests that keep a kernel in the fit: the chance that any kernel which
# does not slow the work keeps a figure.
ALPHA = 0.05


@dataclass
class Fit:
    baseline: np.ndarray  # per class, ns
    coefficient: np.ndarray  # per group: extra time per ns of overlap
    groups: list[list[int]]  # per group: the kernel columns (input indices) it holds
    flat: np.ndarray  # per group: its overlap does not vary within its classes (cannot be told from the baseline)
    indistinct: np.ndarray  # per group: not distinguishable from no effect (partial F test); figure 0
    contribution: np.ndarray  # per group: sum over observations of coefficient x overlap x weight
    low: np.ndarray  # per group: 90% interval of the contribution
    high: np.ndarray
    fitted_excess: np.ndarray  # per observation: sum over groups of coefficient x overlap
    excess_by_group: np.ndarray  # (observations, groups): coefficient x overlap
    trimmed: int  # observations left out as outliers
    residual_share: float  # RMS residual over mean time


def _class_means(x: np.ndarray, cls: np.ndarray, ncls: int) -> np.ndarray:
    """(classes, columns): each column's mean over each class's observations (0 for an empty class)."""
    k = x.shape[1]
    counts = np.maximum(np.bincount(cls, minlength=ncls), 1).astype(np.float64)
    # One bincount over (class, column) keys: each sum adds its class's values in their order, as a
    # bincount per column does (the same numbers in one call).
    sums = np.bincount((cls[:, None] * k + np.arange(k)).ravel(), weights=x.ravel(), minlength=ncls * k)
    return sums.reshape(ncls, k) / counts[:, None]


def _centred(x: np.ndarray, cls: np.ndarray, ncls: int) -> np.ndarray:
    return x - _class_means(x, cls, ncls)[cls]


def _spanning(y: np.ndarray, x: np.ndarray, cls: np.ndarray) -> np.ndarray:
    """Per column: it spans nearly every transfer of the classes it overlaps (see SPAN)."""
    out = np.zeros(x.shape[1], bool)
    for j in range(x.shape[1]):
        present = x[:, j] > 0
        rows = np.isin(cls, np.unique(cls[present]))
        out[j] = present.any() and float(np.mean(x[rows, j] >= SPAN * y[rows])) >= SPANS_NEARLY_EVERY
    return out


def _groups(x: np.ndarray, cls: np.ndarray, ncls: int, spans: np.ndarray) -> tuple[list[list[int]], np.ndarray]:
    """Columns the data cannot tell apart, joined (union of pairs with cosine above COLLINEAR)."""
    k = x.shape[1]
    c = _centred(x, cls, ncls)
    norm = np.linalg.norm(c, axis=0)
    raw = np.linalg.norm(x, axis=0)
    flat = (norm <= FLAT * np.maximum(raw, 1e-9)) | spans
    unit = c / np.where(norm > 0, norm, 1.0)
    cos = unit.T @ unit
    parent = list(range(k))

    def find(a):
        while parent[a] != a:
            parent[a] = parent[parent[a]]
            a = parent[a]
        return a
    for a, b in zip(*np.nonzero(np.triu(cos > COLLINEAR, 1))):
        if not flat[a] and not flat[b]:
            parent[find(int(a))] = find(int(b))
    roots: dict[int, list[int]] = {}
    for j in range(k):
        roots.setdefault(find(j), []).append(j)
    groups = sorted(roots.values())
    return groups, np.array([bool(flat[g].all()) for g in groups])


def _solve(y: np.ndarray, cls: np.ndarray, ncls: int, xg: np.ndarray) -> np.ndarray:
    """Bounded least squares of y on [class indicators, group columns] (baselines >= 0,
    coefficients in [0, MAX_COEFFICIENT]). The baselines are the class means once the kernels' part
    is known, so the coefficients come first from non-negative least squares on the class-centred
    columns (Lawson-Hanson, compiled); that is the bounded answer whenever no coefficient passes
    the ceiling and no baseline falls below 0, and bvls on the whole problem is needed only then
    (it took 0.6 s a solve on 2,000 collectives x 48 kernels, the centred solve 10 ms)."""
    return next(_solve_rows(y, cls, ncls, xg, np.arange(len(y))[None]))


def _solve_rows(y: np.ndarray, cls: np.ndarray, ncls: int, xg: np.ndarray, picks: np.ndarray):
    """_solve(y[p], cls, ncls, xg[p]) for each row p of picks (cls: the picked observations'
    classes, the same in every row), with the same numbers as one at a time: the class means of
    a chunk of rows come from one bincount, which adds each (row, class, column)'s values in their
    order as a bincount per row and column does; the per-row work is what only a row can do."""
    k = xg.shape[1]
    width = k + 1
    table = np.concatenate([y[:, None], xg], axis=1)
    counts = np.maximum(np.bincount(cls, minlength=ncls), 1).astype(np.float64)
    chunk = max(1, min(len(picks), RESAMPLED_VALUES // (picks.shape[1] * width)))
    keys = (np.arange(chunk)[:, None, None] * (ncls * width) + (cls[:, None] * width + np.arange(width))).ravel()
    of_row = np.arange(chunk)[:, None] * ncls + cls  # each observation's (row, class)
    for lo in range(0, len(picks), chunk):
        rows = len(picks[lo:lo + chunk])
        # (rows, observations, [y, columns]): one gather. np.take, not table[picks]: that one lays
        # its result out observation-major, and every array computed from it then runs across the grain.
        values = np.take(table, picks[lo:lo + chunk], axis=0)
        sums = np.bincount(keys[:values.size], weights=values.ravel(), minlength=rows * ncls * width)
        means = sums.reshape(rows, ncls, width) / counts[:, None]
        # The residuals and centred columns, in place: the same differences. The class means taken
        # row-major (means[:, cls] would be laid out observation-major, as table[picks] above).
        values -= np.take(means.reshape(rows * ncls, width), of_row[:rows], axis=0)
        residual, centred = values[..., 0], values[..., 1:]
        scales = np.linalg.norm(centred, axis=1)  # every row's column norms in one call (the same sums)
        scales[scales == 0] = 1.0
        unit = centred / scales[:, None, :]  # every row's division at once (the same quotients)
        for b in range(rows):
            coefficient = nnls(unit[b], residual[b], maxiter=50 * k)[0] / scales[b] if k else np.zeros(0)
            baseline = means[b, :, 0] - means[b, :, 1:].copy() @ coefficient
            if (coefficient <= MAX_COEFFICIENT).all() and (baseline >= 0).all():
                yield np.concatenate([baseline, coefficient])
            else:
                yield _bounded(y[picks[lo + b]], cls, ncls, xg[picks[lo + b]])


# Values of the resampled observations held at once, per array: 256 KiB stays in cache and is reused by
# malloc; arrays of 4 MiB were mapped afresh, their pages faulted in, at every chunk (the fit 1.5x slower).
RESAMPLED_VALUES = 1 << 15


def _bounded(y: np.ndarray, cls: np.ndarray, ncls: int, xg: np.ndarray) -> np.ndarray:
    """The bounded least squares on the whole problem (bvls)."""
    a = np.zeros((len(y), ncls + xg.shape[1]))
    a[np.arange(len(y)), cls] = 1.0
    a[:, ncls:] = xg
    scale = np.linalg.norm(a, axis=0)
    scale[scale == 0] = 1.0
    upper = np.r_[np.full(ncls, np.inf), np.full(xg.shape[1], MAX_COEFFICIENT)] * scale
    # The ridge (see RIDGE) as rows under the problem: |a x - y|^2 + RIDGE^2 |x|^2.
    a = np.r_[a / scale, RIDGE * np.eye(a.shape[1])]
    # bvls stops after max_iter (by default the number of unknowns) with whatever it holds then;
    # a solve that converges within the default ends the same with a higher cap, one that would
    # not now gets to its answer (an unconverged one moved a range 3% before the ridge).
    solved = lsq_linear(a, np.r_[y, np.zeros(len(scale))], bounds=(np.zeros(len(scale)), upper), method="bvls",
                        max_iter=BVLS_ITERATIONS_PER_UNKNOWN * len(scale))
    return solved.x / scale


BVLS_ITERATIONS_PER_UNKNOWN = 20


# A resample that repeats observations (the bootstrap's) can hold fewer distinct ones than the fit
# has unknowns: then the bounded problem has many solutions, and lsq_linear starts bvls from
# lstsq(rcond=-1), which inverts singular values that are 0 up to rounding, so the start (and the
# answer, bvls running out of iterations from there) was set by the BLAS kernels' summation order,
# not by the data (a contention range moved 3% between CPUs). A ridge this small against the unit
# columns makes the problem strictly convex, its one answer the least-norm one of those that fit
# best (up to RIDGE^2 relative, 1e-12, where the data determine the answer).
RIDGE = 1e-6


def _rss(y: np.ndarray, cls: np.ndarray, ncls: int, xg: np.ndarray, sol: np.ndarray) -> float:
    r = y - sol[cls] - xg @ sol[ncls:]
    return float(r @ r)


def _select(y: np.ndarray, cls: np.ndarray, ncls: int, xg: np.ndarray, sol: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Backward elimination: while the kernel least worth its place fails its partial F test at
    ALPHA / (kernels tested), leave it out and refit. The test of each kernel with a coefficient
    inside its bounds is the F = t^2 of the least-squares fit on those kernels (the bounded
    solution is that fit; class means taken out, as the baselines do); a kernel at 0 changes
    nothing when left out. Returns the solution and, per group, whether it was left out."""
    tested = xg.any(axis=0)
    out = np.zeros(xg.shape[1], bool)
    level = ALPHA / max(1, int(tested.sum()))
    centred = _centred(xg, cls, ncls)
    while True:
        out |= tested & (sol[ncls:] <= 0)
        active = np.flatnonzero(tested & ~out)
        dof = len(y) - ncls - len(active)
        if not len(active) or dof <= 0:
            return sol, out  # nothing left to test, or no degree of freedom to test it with
        variance = _rss(y, cls, ncls, xg * ~out, sol) / dof
        xa = centred[:, active]
        spread = np.diag(np.linalg.pinv(xa.T @ xa))  # the variance of each coefficient, per unit of residual variance
        f = sol[ncls + active] ** 2 / np.maximum(variance * spread, 1e-300)
        p = fdtrc(1, dof, f)
        worst = int(np.argmax(p))
        if p[worst] <= level:
            return sol, out
        out[active[worst]] = True
        sol = _solve(y, cls, ncls, xg * ~out)


def _resamples(cls: np.ndarray, ncls: int, keep: np.ndarray, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """The bootstrap's resamples of the kept observations within each class: the pool (the kept
    observations, class by class: each resample's layout) and (BOOTSTRAP, len(pool)) picks."""
    kept = np.flatnonzero(keep)
    members = [m for m in (kept[cls[kept] == c] for c in range(ncls)) if len(m)]
    sizes = np.array([len(m) for m in members])
    pool = np.concatenate(members)
    first = np.repeat(np.cumsum(sizes) - sizes, sizes)
    # Every resample's draws in one call, the same stream as rng.choice(m, len(m)) per resample and
    # class (tests/unit/test_overlap_fit.py holds it to that loop). One class (a compute kernel's
    # fit) has one bound: drawn under it, the same draws 10x faster than under an array of bounds.
    bound = sizes[0] if len(sizes) == 1 else np.tile(np.repeat(sizes, sizes), BOOTSTRAP)
    at = np.random.default_rng(seed).integers(0, bound, size=BOOTSTRAP * len(pool))
    return pool, pool[np.tile(first, BOOTSTRAP) + at].reshape(BOOTSTRAP, len(pool))


def _bootstrap(y: np.ndarray, cls: np.ndarray, ncls: int, xg: np.ndarray, keep: np.ndarray, weight: np.ndarray,
               resamples: tuple[np.ndarray, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """The 90% interval of each group's contribution: refits on the resamples (_resamples)."""
    kept = np.flatnonzero(keep)
    xk, wk = xg[kept], weight[kept, None]
    if not xk.any():
        return np.zeros((len(INTERVAL), xg.shape[1]))  # nothing overlaps: every refit's contributions are 0
    pool, picks = resamples
    coefficients = np.array([s[ncls:] for s in _solve_rows(y, cls[pool], ncls, xg, picks)])
    draws = np.zeros((BOOTSTRAP, xg.shape[1]))
    chunk = max(1, RESAMPLED_VALUES // xk.size)
    for lo in range(0, BOOTSTRAP, chunk):
        # Each resample's contributions, a chunk at once: the same products and sums as one at a time.
        contributions = xk * coefficients[lo:lo + chunk, None, :]
        contributions *= wk
        draws[lo:lo + chunk] = contributions.sum(axis=1)
    return np.percentile(draws, INTERVAL, axis=0)


def fit(y: np.ndarray, cls: np.ndarray, x: np.ndarray, weight: np.ndarray, seed: int = 0) -> Fit | None:
    """y: per observation, its time (ns); cls: its class (0..C-1); x: (observations, kernels) overlap ns;
    weight: what one ns of an observation's excess counts for (e.g. its member ranks). With no
    kernel, the baselines alone. None when there is nothing to fit."""
    n, k = x.shape
    if n == 0:
        return None
    _, cls = np.unique(cls, return_inverse=True)
    cls = cls.ravel()
    ncls = int(cls.max()) + 1
    y = y.astype(np.float64)
    x = x.astype(np.float64)
    groups, flat = _groups(x, cls, ncls, _spanning(y, x, cls)) if k else ([], np.zeros(0, bool))
    # Columns that cannot be told from the baseline are left out of the solve (their figure is None).
    xg = np.stack([x[:, g].sum(axis=1) * (not f) for g, f in zip(groups, flat)], axis=1) if groups else np.zeros((n, 0))
    keep = np.ones(n, bool)
    sol = _solve(y, cls, ncls, xg)
    # A coefficient at the ceiling says the kernel's overlap grows with the transfer as fast as the
    # transfer does: it follows a slowdown (a slow link lengthens every transfer, and with it the
    # overlap of whatever runs beside) rather than explains it. Such kernels cannot be told from
    # the transfer's own time: left out, and the rest refitted.
    for _ in range(len(groups)):
        ceiling = (sol[ncls:] >= 0.99 * MAX_COEFFICIENT) & (xg.any(axis=0))
        if not ceiling.any():
            break
        flat = flat | ceiling
        xg = xg * ~ceiling
        sol = _solve(y, cls, ncls, xg)
    resid = y - sol[cls] - xg @ sol[ncls:]
    mad = float(np.median(np.abs(resid - np.median(resid)))) * 1.4826
    if mad > 0:
        keep = np.abs(resid) <= TRIM_SIGMAS * mad
        if keep.sum() < n and len(np.unique(cls[keep])) == ncls:
            sol = _solve(y[keep], cls[keep], ncls, xg[keep])
        else:
            keep[:] = True
    sol, indistinct = _select(y[keep], cls[keep], ncls, xg[keep], sol)
    resamples = _resamples(cls, ncls, keep, seed)  # the same resamples for both bootstraps
    low, high = _bootstrap(y, cls, ncls, xg * ~indistinct, keep, weight, resamples)
    if indistinct.any():  # their range: up to what the fit with them allowed
        high = np.where(indistinct, _bootstrap(y, cls, ncls, xg, keep, weight, resamples)[1], high)
        xg = xg * ~indistinct
    coef = sol[ncls:]
    by_group = xg * coef
    contribution = (by_group[keep] * weight[keep, None]).sum(axis=0)
    resid = (y - sol[cls] - xg @ coef)[keep]
    return Fit(baseline=sol[:ncls], coefficient=coef, groups=groups, flat=flat, indistinct=indistinct & ~flat,
               contribution=contribution, low=low, high=high, fitted_excess=by_group.sum(axis=1),
               excess_by_group=by_group, trimmed=int(n - keep.sum()),
               residual_share=float(np.sqrt(np.mean(resid ** 2)) / max(float(np.mean(y[keep])), 1.0)))
