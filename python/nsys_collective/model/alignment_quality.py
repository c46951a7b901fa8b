"""How far to trust the clock fit (model.alignment): what it rests on and whether its assumptions held.

The fit makes every synchronizing collective end at the same moment on all its ranks, with one
offset (and drift) per clock, a clock being a host's. Three things undermine it, each a warning
and an entry of `Quality.issues`:

* `few_collectives`: fewer than MIN_FIT_COLLECTIVES instances carry the fit, so each offset rests
  on one or two end times (jitter, a late kernel end, goes straight into it);
* `spread_not_shrunk`: the end-time spread did not get smaller (neither its median nor its
  maximum) although the clocks disagreed by more than the tolerance: offsets per clock cannot
  explain the disagreement;
* `same_clock_ranks_disagree`: ranks that share a clock (one host) end a collective further apart
  than SAME_CLOCK_TOLERANCE_NS: "ends coincide" does not hold for them, so no offset can align
  them (per-report clocks, mismatched collectives, or ranks not in the same collective at all).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from nsys_collective.units import duration

from nsys_collective.model.alignment import Alignment, Spread, spread_of

# Ranks of one host read one clock: they end one collective within tens of us (25 to 76 us on the
# cleanest real 9-rank set); much further apart, a shared offset cannot align them.
SAME_CLOCK_TOLERANCE_NS = 100_000
# Below this many collectives an offset rests on one or two end times: a guess, not a fit.
MIN_FIT_COLLECTIVES = 3


@dataclass(frozen=True)
class Quality:
    collectives: int  # synchronizing instances the fit used
    fitted: bool  # offsets were fitted (more than one clock and an instance to fit them on)
    spread_shrunk: bool | None  # None where nothing was fitted
    # Per (instance, clock) with two or more ranks: the spread of their aligned ends.
    same_clock_end_spread: Spread | None
    tolerance_ns: int
    issues: tuple[str, ...]
    warnings: tuple[str, ...]


def _us(ns: int) -> str:
    """A duration as every output writes one (units.duration: '7.44 ms', not '7,442 us')."""
    return duration(ns)


def _same_clock_spreads(inst: np.ndarray, clock: np.ndarray, end: np.ndarray, n_clocks: int):
    """Per (instance, clock) group of two or more observations: its clock and its end spread."""
    if not len(inst):
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    keys, at = np.unique(inst.astype(np.int64) * n_clocks + clock, return_inverse=True)
    hi = np.full(len(keys), np.iinfo(np.int64).min)
    lo = np.full(len(keys), np.iinfo(np.int64).max)
    np.maximum.at(hi, at, end)
    np.minimum.at(lo, at, end)
    shared = np.bincount(at, minlength=len(keys)) >= 2
    return (keys % n_clocks)[shared], (hi - lo)[shared]


def assess(alignment: Alignment, obs_instance: np.ndarray, obs_rank: np.ndarray, obs_end: np.ndarray,
           sync: np.ndarray, host_of_rank: dict[int, str | None]) -> Quality:
    """The quality of `alignment`, fitted on these observations (sync[i]: instance i synchronizes)."""
    a = alignment
    use = sync[obs_instance] if len(obs_instance) else np.zeros(0, bool)
    if not use.any():  # the fit used point-to-point instances then (model.alignment.align)
        use = np.ones(len(obs_instance), bool)
    inst, rank = obs_instance[use], obs_rank[use]
    aligned_end = a.correct(rank, obs_end[use])
    clock = np.array([a.clock_of_rank[int(r)] for r in rank.tolist()], dtype=np.int64)
    fitted = len(a.clock_names) > 1 and a.instances_used > 0
    issues, warnings = [], []
    if fitted and a.instances_used < MIN_FIT_COLLECTIVES:
        issues.append("few_collectives")
        warnings.append(f"clock alignment rests on {a.instances_used} collective{'s' * (a.instances_used != 1)} "
                        f"(fewer than {MIN_FIT_COLLECTIVES}): each clock offset comes from one or two end times, "
                        "so the cross-host timing (waits, stragglers) is uncertain; capture more collectives")
    before, after = a.spread_before, a.spread_after
    shrunk = None
    if fitted and before and after:
        shrunk = after.p50 < before.p50 or after.max < before.max
        if not shrunk and before.max > SAME_CLOCK_TOLERANCE_NS:
            issues.append("spread_not_shrunk")
            warnings.append(f"clock alignment did not shrink the end-time spread ({_us(before.max)} before, "
                            f"{_us(after.max)} after): one offset per host cannot make these collectives end "
                            "together, so cross-host waits may be off by that much")
    groups_clock, groups_spread = _same_clock_spreads(inst, clock, aligned_end, len(a.clock_names))
    for c in np.unique(groups_clock).tolist():
        typical = int(np.median(groups_spread[groups_clock == c]))
        if typical > SAME_CLOCK_TOLERANCE_NS:
            members = sorted(r for r, k in a.clock_of_rank.items() if k == c)
            host = host_of_rank.get(members[0]) or a.clock_names[c]
            if "same_clock_ranks_disagree" not in issues:
                issues.append("same_clock_ranks_disagree")
            warnings.append(f"ranks {', '.join(map(str, members))} share the clock of {host} but end the same collective "
                            f"{_us(typical)} apart (median; tolerance {_us(SAME_CLOCK_TOLERANCE_NS)}): the alignment "
                            "assumes the ranks of a collective end together, which does not hold for them, so their "
                            "waits and arrival order are uncertain by as much")
    return Quality(collectives=a.instances_used, fitted=fitted, spread_shrunk=shrunk,
                   same_clock_end_spread=spread_of(groups_spread), tolerance_ns=SAME_CLOCK_TOLERANCE_NS,
                   issues=tuple(issues), warnings=tuple(warnings))
