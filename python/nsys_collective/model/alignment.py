"""Clock alignment from the collectives themselves (docs/method.md section 2).

Each report's clock is the host's NTP-disciplined clock: ranks on one host share it, hosts
disagree by up to milliseconds and drift apart by parts per million. Every synchronizing
collective (AllReduce, AllGather, ReduceScatter, AllToAll) ends on all ranks at nearly the same
moment, and no rank can end it before the last rank has started it. So:

1. Fit one offset (and, when the capture is long enough to show one, a linear drift) per clock —
   per host, or per rank where a host's ranks disagree — that makes the end times of every
   instance agree: weighted least squares over all (instance, rank) ends with the per-instance
   common end eliminated, reweighted (Huber) so that a few odd ends do not pull the fit.
2. Enforce causality: while some instance still has a rank ending before another starts, add the
   most violated pair as a constraint and solve the constrained least squares again (an active-set
   method on the same normal equations).

The host of rank 0 is the reference (offset 0, drift 0). Aligned time:
`utc + offset + drift_ppm * 1e-6 * (utc - t_ref_ns)`, as in docs/output-contract.md.
Everything is vectorized numpy: cost grows with the number of (instance, rank) pairs, plus a
dense solve in the number of clocks.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

HUBER_K = 1.5
IRLS_ROUNDS = 4
# A drift is kept only when the capture spans this much, enough instances pin it down, and the fit
# gets clearly better with it (per degree of freedom: two points always fit a line).
MIN_DRIFT_SPAN_NS = 1_000_000_000
MIN_DRIFT_INSTANCES = 10
MIN_DRIFT_GAIN = 0.2
# A rank leaves its host's clock when its ends sit consistently apart from its host's fit.
SPLIT_MIN_NS = 10_000
SPLIT_SIGMAS = 4.0
MAX_CONSTRAINTS = 200


@dataclass
class Spread:
    p50: int
    p95: int
    max: int

    def as_dict(self) -> dict:
        return {"p50": self.p50, "p95": self.p95, "max": self.max}


@dataclass
class Alignment:
    method: str
    t_ref_ns: int
    clock_names: list[str]
    clock_of_rank: dict[int, int]
    offset_ns: np.ndarray  # per clock
    drift_ppm: np.ndarray  # per clock
    spread_before: Spread | None
    spread_after: Spread | None
    violations_before: int
    violations_after: int
    drift_fitted: bool
    instances_used: int
    warnings: list[str] = field(default_factory=list)

    def rank_offset_ns(self, rank: int) -> int:
        return int(round(self.offset_ns[self.clock_of_rank[rank]]))

    def rank_drift_ppm(self, rank: int) -> float:
        return float(self.drift_ppm[self.clock_of_rank[rank]])

    def correct(self, ranks: np.ndarray, utc: np.ndarray) -> np.ndarray:
        """Aligned times of UTC times, each of the given rank (integer ns)."""
        clock = _lookup(self.clock_of_rank, ranks)
        return _apply(utc, self.offset_ns[clock], self.drift_ppm[clock], self.t_ref_ns)

    def rank_shift_ns(self, rank: int) -> int | None:
        """The rank's correction where it is a constant shift (its clock does not drift): _apply's
        numbers for every time; None where it is not."""
        clock = self.clock_of_rank[rank]
        offset, drift = self.offset_ns[clock], self.drift_ppm[clock]
        return int(np.rint(offset)) if drift == 0 and np.isfinite(offset) else None

    def correct_rank(self, rank: int, utc: np.ndarray) -> np.ndarray:
        """Aligned times of UTC times of one rank: `utc` itself where its clock is the reference's
        (never write into the result)."""
        shift = self.rank_shift_ns(rank)
        if shift is not None:  # without _apply's float temporaries
            return utc if shift == 0 else utc + shift
        clock = self.clock_of_rank[rank]  # its two numbers, not an array of them per time: the same products
        return _apply(utc, self.offset_ns[clock], self.drift_ppm[clock], self.t_ref_ns)


def _lookup(mapping: dict[int, int], keys: np.ndarray) -> np.ndarray:
    """mapping[k] for every k of keys, vectorized."""
    known = np.array(sorted(mapping), dtype=np.int64)
    values = np.array([mapping[k] for k in known.tolist()], dtype=np.int64)
    return values[np.searchsorted(known, keys)] if len(keys) else np.zeros(0, np.int64)


def _apply(t: np.ndarray, offset, drift, t_ref: int) -> np.ndarray:
    """Aligned times of times t, each with its clock's offset (ns) and drift (ppm): per time, or one of each."""
    # The correction is small: compute it in float, add it to the exact integer times. In place in
    # two buffers (a column is a rank's every op or call): offset + drift * 1e-6 * (t - t_ref),
    # rounded, the same products and sums in the same order.
    aligned = t - t_ref
    correction = aligned.astype(np.float64)
    correction *= drift * 1e-6
    correction += offset
    aligned[...] = np.rint(correction, out=correction)
    aligned += t
    return aligned


def _spread(inst: np.ndarray, end: np.ndarray) -> Spread | None:
    if len(inst) == 0:
        return None
    n = inst.max() + 1
    hi = np.full(n, np.iinfo(np.int64).min)
    lo = np.full(n, np.iinfo(np.int64).max)
    np.maximum.at(hi, inst, end)
    np.minimum.at(lo, inst, end)
    present = hi >= lo
    return spread_of((hi - lo)[present])


def spread_of(spreads: np.ndarray) -> Spread | None:
    """Median, 95th percentile and maximum of some spreads (None for none)."""
    if len(spreads) == 0:
        return None
    return Spread(int(np.percentile(spreads, 50)), int(np.percentile(spreads, 95)), int(spreads.max()))


def count_violations(inst: np.ndarray, start: np.ndarray, end: np.ndarray) -> int:
    """Pairs (r, s) of one instance where r ended before s started: impossible for a
    synchronizing collective on correct clocks."""
    if len(inst) == 0:
        return 0
    # Times as dense ranks (order kept, ties kept), so that instance * span + time cannot
    # overflow int64 whatever the durations.
    _, ranked = np.unique(np.concatenate([start, end]), return_inverse=True)
    rank_start, rank_end = ranked[:len(start)], ranked[len(start):]
    span = int(ranked.max()) + 1
    start_keys = np.sort(inst * span + rank_start)
    end_keys = inst * span + rank_end
    later_starts = np.searchsorted(start_keys, (inst + 1) * span, side="left") - np.searchsorted(start_keys, end_keys, side="right")
    return int(later_starts.sum())


class _Problem:
    """Least squares over (instance, rank) ends for one assignment of clocks.

    Unknowns θ: the offset of every clock but the reference, then (with drift) their drifts.
    Observation i shifts by offset[clock_i] + drift[clock_i] * tau_i, tau_i = (t_i - t_ref) * 1e-6.
    """

    def __init__(self, inst, clock, start, end, n_clocks: int, t_ref: int, drift: bool):
        self.inst, self.clock, self.start, self.end = inst, clock, start, end
        self.n_inst = int(inst.max()) + 1
        self.n_clocks, self.t_ref, self.drift = n_clocks, t_ref, drift
        self.free = n_clocks - 1  # clock 0 is the reference
        self.n_params = self.free * (2 if drift else 1)
        self.tau = (end - t_ref).astype(np.float64) * 1e-6
        # Ends relative to their instance's earliest end: small numbers, exact in float.
        first = np.full(self.n_inst, np.iinfo(np.int64).max)
        np.minimum.at(first, inst, end)
        self.y = (end - first[inst]).astype(np.float64)

    def _row(self, i: int, t: np.ndarray) -> np.ndarray:
        """The design row of observation i at time t[i]."""
        row = np.zeros(self.n_params)
        if self.clock[i] > 0:
            row[self.clock[i] - 1] = 1.0
            if self.drift:
                row[self.free + self.clock[i] - 1] = (t[i] - self.t_ref) * 1e-6
        return row

    def normal_equations(self, w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """A, b of the problem with each instance's common end eliminated: min 1/2 θᵀAθ + bᵀθ."""
        f, n = self.clock > 0, self.free
        col, wf, tau, y, inst = self.clock[f] - 1, w[f], self.tau[f], self.y[f], self.inst[f]
        sums = lambda v: np.bincount(col, weights=v, minlength=n)  # noqa: E731 - per clock
        a = np.zeros((self.n_params, self.n_params))
        idx = np.arange(n)
        a[idx, idx] = sums(wf)
        b = [sums(wf * y)]
        s = np.zeros((self.n_inst, self.n_params))
        np.add.at(s, (inst, col), wf)
        if self.drift:
            a[idx, n + idx] = a[n + idx, idx] = sums(wf * tau)
            a[n + idx, n + idx] = sums(wf * tau * tau)
            b.append(sums(wf * tau * y))
            np.add.at(s, (inst, n + col), wf * tau)
        wc = np.bincount(self.inst, weights=w, minlength=self.n_inst)
        yc = np.bincount(self.inst, weights=w * self.y, minlength=self.n_inst)
        inv = np.divide(1.0, wc, out=np.zeros_like(wc), where=wc > 0)
        a -= (s * inv[:, None]).T @ s
        return a, np.concatenate(b) - s.T @ (yc * inv)

    def residuals(self, theta: np.ndarray, w: np.ndarray) -> np.ndarray:
        offset, drift = self.clocks(theta)
        z = self.y + offset[self.clock] + drift[self.clock] * self.tau
        wc = np.bincount(self.inst, weights=w, minlength=self.n_inst)
        zc = np.bincount(self.inst, weights=w * z, minlength=self.n_inst)
        return z - np.divide(zc, wc, out=np.zeros_like(zc), where=wc > 0)[self.inst]

    def fit(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Huber-reweighted least squares: θ, final weights, residuals."""
        w = np.ones(len(self.y))
        theta = np.zeros(self.n_params)
        for _ in range(IRLS_ROUNDS):
            a, b = self.normal_equations(w)
            theta = np.linalg.lstsq(a, -b, rcond=None)[0]
            r = self.residuals(theta, w)
            scale = 1.4826 * np.median(np.abs(r)) + 1.0  # +1 ns: exact fits have zero spread
            w = np.minimum(1.0, HUBER_K * scale / np.maximum(np.abs(r), 1e-9))
        return theta, w, self.residuals(theta, w)

    def clocks(self, theta: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        offset = np.concatenate([[0.0], theta[: self.free]])
        drift = np.concatenate([[0.0], theta[self.free :]]) if self.drift else np.zeros(self.n_clocks)
        return offset, drift

    def enforce_causality(self, theta: np.ndarray, w: np.ndarray) -> tuple[np.ndarray, int]:
        """Active-set solve: θ nearest the fit (in its own metric) with no instance in which a
        rank on one clock ends before a rank on another clock starts."""
        a, b = self.normal_equations(w)
        active: list[tuple[np.ndarray, float]] = []
        for _ in range(MAX_CONSTRAINTS):
            offset, drift = self.clocks(theta)
            s = _apply(self.start, offset[self.clock], drift[self.clock], self.t_ref)
            e = _apply(self.end, offset[self.clock], drift[self.clock], self.t_ref)
            last_start = np.full(self.n_inst, np.iinfo(np.int64).min)
            first_end = np.full(self.n_inst, np.iinfo(np.int64).max)
            np.maximum.at(last_start, self.inst, s)
            np.minimum.at(first_end, self.inst, e)
            gap = (last_start - first_end)[self.inst]
            # The worst pair of each instance: its last starter and its first finisher.
            starter = np.flatnonzero(s == last_start[self.inst])
            finisher = np.flatnonzero(e == first_end[self.inst])
            s_of = dict(zip(self.inst[starter].tolist(), starter.tolist()))
            f_of = dict(zip(self.inst[finisher].tolist(), finisher.tolist()))
            bad = [(int(gap[i]), c) for c, i in f_of.items() if gap[i] > 0 and self.clock[s_of[c]] != self.clock[i]]
            if not bad:
                break
            _, c = max(bad)
            si, fi = s_of[c], f_of[c]
            # Aligned end of fi >= aligned start of si, linear in θ.
            active.append((self._row(fi, self.end) - self._row(si, self.start), float(self.start[si] - self.end[fi])))
            theta = self._solve_active(a, b, active)
        return theta, len(active)

    def _solve_active(self, a, b, active) -> np.ndarray:
        while True:
            g = np.array([r for r, _ in active])
            h = np.array([v for _, v in active])
            k = len(active)
            kkt = np.block([[a, -g.T], [g, np.zeros((k, k))]])
            sol = np.linalg.lstsq(kkt, np.concatenate([-b, h]), rcond=None)[0]
            theta, lam = sol[: self.n_params], sol[self.n_params :]
            if np.all(lam >= -1e-9) or k == 1:
                return theta
            active.pop(int(np.argmin(lam)))  # not binding: let it go


def align(obs_instance, obs_rank, obs_start, obs_end, sync: np.ndarray, host_of_rank: dict[int, str | None]) -> Alignment:
    """Fits clocks from the synchronizing instances (`sync[i]` for instance i)."""
    warnings: list[str] = []
    use = sync[obs_instance] if len(obs_instance) else np.zeros(0, bool)
    method = "collectives"
    if not use.any():
        # Point-to-point only: a send and its receive still end together, and both wait for each other.
        use = np.ones(len(obs_instance), bool)
        method = "collectives (point-to-point)"
    inst_raw, rank, start, end = obs_instance[use], obs_rank[use], obs_start[use], obs_end[use]
    _, inst = np.unique(inst_raw, return_inverse=True)
    ranks = sorted(host_of_rank)
    t_ref = int(start.min()) if len(start) else 0

    # Clocks: one per host (rank 0's first), a host-less rank on its own.
    names: list[str] = []
    clock_of_rank: dict[int, int] = {}
    for r in ranks:
        name = host_of_rank[r] if host_of_rank[r] is not None else f"rank {r}"
        if name not in names:
            names.append(name)
        clock_of_rank[r] = names.index(name)

    def clock_array():
        return _lookup(clock_of_rank, rank)

    before = _spread(inst, end)
    violations_before = count_violations(inst, start, end)
    drift_fitted, theta = False, None
    if len(names) > 1 and len(inst):
        problem, theta, w, resid = _best_fit(inst, clock_array(), start, end, len(names), t_ref)
        # A rank whose ends sit consistently apart from its host's: its own clock after all.
        split = _disagreeing_ranks(rank, resid, w, clock_of_rank)
        if split:
            for r in split:
                names.append(f"{names[clock_of_rank[r]]}/rank {r}")
                clock_of_rank[r] = len(names) - 1
            warnings.append(f"ranks {', '.join(map(str, split))} disagree with their host's clock; each was given its own")
            problem, theta, w, resid = _best_fit(inst, clock_array(), start, end, len(names), t_ref)
        theta, constraints = problem.enforce_causality(theta, w)
        offset, drift = problem.clocks(theta)
        drift_fitted = problem.drift
    else:
        offset, drift = np.zeros(len(names)), np.zeros(len(names))
        method = "none (one clock)" if len(names) <= 1 else "none (no instance to fit)"
    clock = clock_array()
    a_start = _apply(start, offset[clock], drift[clock], t_ref)
    a_end = _apply(end, offset[clock], drift[clock], t_ref)
    violations_after = count_violations(inst, a_start, a_end)
    if violations_after:
        warnings.append(f"{violations_after} causality violations remain after alignment (mismatched collectives?)")
    return Alignment(method=method, t_ref_ns=t_ref, clock_names=names, clock_of_rank=clock_of_rank,
                     offset_ns=offset, drift_ppm=drift, spread_before=before, spread_after=_spread(inst, a_end),
                     violations_before=violations_before, violations_after=violations_after,
                     drift_fitted=drift_fitted, instances_used=int(inst.max()) + 1 if len(inst) else 0, warnings=warnings)


def _best_fit(inst, clock, start, end, n_clocks, t_ref):
    """Offsets only, or offsets and drifts when the capture is long and the drift clearly helps."""
    flat = _Problem(inst, clock, start, end, n_clocks, t_ref, drift=False)
    theta, w, resid = flat.fit()
    if end.max() - end.min() >= MIN_DRIFT_SPAN_NS and flat.n_inst >= MIN_DRIFT_INSTANCES:
        sloped = _Problem(inst, clock, start, end, n_clocks, t_ref, drift=True)
        theta_d, w_d, resid_d = sloped.fit()
        dof = len(end) - flat.n_inst
        per_dof = lambda p, w, r: np.sum(w * r**2) / max(dof - p.n_params, 1)  # noqa: E731
        if per_dof(sloped, w_d, resid_d) < (1 - MIN_DRIFT_GAIN) * per_dof(flat, w, resid):
            return sloped, theta_d, w_d, resid_d
    return flat, theta, w, resid


def _disagreeing_ranks(rank, resid, w, clock_of_rank) -> list[int]:
    """Ranks whose weighted mean residual is far (in ns and in standard errors) from their clock's."""
    ids, at = np.unique(rank, return_inverse=True)
    n = np.bincount(at)
    mean = np.bincount(at, weights=w * resid) / np.bincount(at, weights=w)
    std = np.sqrt(np.maximum(np.bincount(at, weights=resid**2) / n - (np.bincount(at, weights=resid) / n) ** 2, 0))
    far = (n >= 3) & (np.abs(mean) > np.maximum(SPLIT_MIN_NS, SPLIT_SIGMAS * std / np.sqrt(n)))
    clocks = _lookup(clock_of_rank, ids)
    far &= np.bincount(clocks)[clocks] > 1
    # Never split every rank of a clock: the one nearest its fit keeps the host's clock.
    for clock in np.unique(clocks[far]):
        members = np.flatnonzero(clocks == clock)
        if far[members].all():
            far[members[np.argmin(np.abs(mean[members]))]] = False
    return ids[far].tolist()
