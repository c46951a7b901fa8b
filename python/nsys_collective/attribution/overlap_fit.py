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
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.optimize import lsq_linear

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


@dataclass
class Fit:
    baseline: np.ndarray  # per class, ns
    coefficient: np.ndarray  # per group: extra time per ns of overlap
    groups: list[list[int]]  # per group: the kernel columns (input indices) it holds
    flat: np.ndarray  # per group: its overlap does not vary within its classes (cannot be told from the baseline)
    contribution: np.ndarray  # per group: sum over observations of coefficient x overlap x weight
    low: np.ndarray  # per group: 90% interval of the contribution
    high: np.ndarray
    fitted_excess: np.ndarray  # per observation: sum over groups of coefficient x overlap
    excess_by_group: np.ndarray  # (observations, groups): coefficient x overlap
    trimmed: int  # observations left out as outliers
    residual_share: float  # RMS residual over mean time


def _centred(x: np.ndarray, cls: np.ndarray, ncls: int) -> np.ndarray:
    counts = np.bincount(cls, minlength=ncls).astype(np.float64)
    means = np.stack([np.bincount(cls, weights=x[:, j], minlength=ncls) for j in range(x.shape[1])], axis=1)
    return x - (means / np.maximum(counts, 1)[:, None])[cls]


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
    coefficients in [0, MAX_COEFFICIENT]), columns scaled to unit norm."""
    a = np.zeros((len(y), ncls + xg.shape[1]))
    a[np.arange(len(y)), cls] = 1.0
    a[:, ncls:] = xg
    scale = np.linalg.norm(a, axis=0)
    scale[scale == 0] = 1.0
    upper = np.r_[np.full(ncls, np.inf), np.full(xg.shape[1], MAX_COEFFICIENT)] * scale
    return lsq_linear(a / scale, y, bounds=(np.zeros(a.shape[1]), upper), method="bvls").x / scale


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
    coef = sol[ncls:]
    by_group = xg * coef
    contribution = (by_group[keep] * weight[keep, None]).sum(axis=0)
    # Bootstrap: resample the kept observations within each class.
    rng = np.random.default_rng(seed)
    kept = np.flatnonzero(keep)
    members = [kept[cls[kept] == c] for c in range(ncls)]
    draws = np.zeros((BOOTSTRAP, len(groups)))
    for b in range(BOOTSTRAP):
        pick = np.concatenate([rng.choice(m, len(m)) for m in members if len(m)])
        s = _solve(y[pick], cls[pick], ncls, xg[pick])[ncls:]
        draws[b] = (xg[keep] * s * weight[keep, None]).sum(axis=0)
    low, high = np.percentile(draws, INTERVAL, axis=0)
    resid = (y - sol[cls] - xg @ coef)[keep]
    return Fit(baseline=sol[:ncls], coefficient=coef, groups=groups, flat=flat, contribution=contribution,
               low=low, high=high, fitted_excess=by_group.sum(axis=1), excess_by_group=by_group,
               trimmed=int(n - keep.sum()),
               residual_share=float(np.sqrt(np.mean(resid ** 2)) / max(float(np.mean(y[keep])), 1.0)))
