"""Contention attribution (docs/method.md section 5): why the transfer was slow.

Once the last rank has arrived, each rank's NCCL kernel transfers while compute kernels on the
same GPU compete for SMs and memory bandwidth. For every (collective, rank): the compute kernels
overlapping its transfer phase [last arrival, its end], with overlap ns and SM footprint (thread
blocks over the GPU's SMs, at most 1). Per class of collectives (the same communicator, operation
and rank count, and size, or position within the training step when sizes are unknown) the
transfer time is fitted as a baseline + each kernel's coefficient x its overlap (overlap_fit), so
a kernel's contention_ns is what it added, measured from the job's own variation: no transfer has
to have run alone, and a kernel that overlaps without slowing gets about 0. A kernel's overlap
with a collective is the most it overlapped any member (a ring runs at its slowest member's pace);
its contention_ns is GPU time over the members, as the transfers' excess is.

The other direction too, with the same fit: a compute kernel's duration against its overlap with
NCCL kernels, and what that costs in step time (replayed by the what-if).
With GPU metrics captured, SM activity and NVLink/PCIe throughput during the transfers.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from nsys_collective import _native
from nsys_collective.attribution import gpu_metrics, overlap_fit
from nsys_collective.model import grouping
from nsys_collective.model.job import Job
from nsys_collective.model.steps import rank_steps
from nsys_collective.units import count

# A class's baseline: this percentile of its transfers less what the fit says the kernels added.
BASELINE_PERCENTILE = 10


@dataclass
class Contention:
    entries: list[dict]
    baseline: np.ndarray  # per instance, -1 when it has none
    overlap: np.ndarray  # per instance: compute overlapping its transfers, summed over ranks
    sm_pressure: np.ndarray  # per instance: sum(overlap x SM footprint) / sum of transfer phases
    excess: np.ndarray  # per instance: transfer beyond baseline, summed over ranks; -1 unknown
    kind: np.ndarray  # per instance: which kind of collective it is (same communicator, operation, ranks, size or place in the step)
    compute_slowdown: list[dict]
    metrics: dict[str, np.ndarray] = field(default_factory=dict)  # per field, per instance (NaN: none)
    warnings: list[str] = field(default_factory=list)
    fitted_excess: np.ndarray | None = None  # per instance: what the fitted kernels added to its transfer (ns)
    points: list[dict] = field(default_factory=list)  # per shown kernel: its overlap and partial transfer per instance
    check: dict | None = None  # the fitted baselines against the clean instances, where some ran alone
    by_group: list[tuple[int, np.ndarray]] = field(default_factory=list)  # (entry, per instance excess it caused)
    fit_summary: dict | None = None  # classes, collectives, kernels, trimmed, residual_share, not_distinguishable
    compute_changes: list[dict] = field(default_factory=list)  # per compute_slowdown entry: rank, row, ns without NCCL's share


def _positions_in_step(job: Job) -> np.ndarray | None:
    """Each instance's position among its communicator's instances in the same training step (the
    job's steps: ProfilerStep#N, or --steps), from the steps marked on the communicator's first
    rank; None when no steps are marked."""
    if job.steps is None:
        return None
    c = job.collectives
    out = np.zeros(len(c), dtype=np.int64)
    found = False
    for comm, members in c.communicators.items():
        rank = members[0]
        trace = job.traces.get(rank)
        steps = rank_steps(trace, job.steps.pattern) if trace is not None else None
        if steps is None:
            continue
        found = True
        step_starts = np.sort(job.alignment.correct_rank(rank, steps.start))
        mine = np.flatnonzero((c.obs_rank == rank) & np.isin(c.obs_instance, [i for i, cm in enumerate(c.comm) if cm == comm]))
        inst = c.obs_instance[mine]
        step = np.searchsorted(step_starts, job.aligned_start[mine], side="right")
        order = np.lexsort((inst, step))
        out[inst[order]] = grouping.occurrence(step[order])  # its place in its step: the steps are sorted
    return out if found else None


def attribute(job: Job) -> Contention:
    c, t, work = job.collectives, job.timing, job.timeline
    n, warnings = len(c), []
    inst, rank, end = c.obs_instance, c.obs_rank, job.aligned_end
    last = t.last_arrival[inst] if n else np.zeros(0, np.int64)
    pair_obs, pair_ns, pair_fp, pair_span, pair_full, pair_short = [], [], [], [], [], []
    unknown_sms = []
    for r in np.unique(rank).tolist():
        rows = np.flatnonzero((rank == r) & (end > last))
        w = work[r]
        q, items, ns = _compute_overlaps(w, last[rows], end[rows])
        sms = job.traces[r].sm_count
        if sms is None:
            unknown_sms.append(r)
        o = rows[q]
        pair_span.append(np.stack([np.maximum(last[o], w.start[items]) - last[o], np.minimum(end[o], w.end[items]) - last[o]]))
        pair_obs.append(o)
        pair_ns.append(ns)
        pair_fp.append(np.minimum(1.0, w.ctas[items] / sms) if sms else np.ones(len(items)))
        pair_full.append(w.name[items])
        pair_short.append(w.short_name[items])
    if unknown_sms:
        warnings.append(f"ranks {', '.join(map(str, unknown_sms))}: GPU SM count unknown; overlapping kernels weighted as whole-GPU")
    obs = np.concatenate(pair_obs) if pair_obs else np.zeros(0, np.int64)
    ns = np.concatenate(pair_ns) if pair_ns else np.zeros(0, np.int64)
    footprint = np.concatenate(pair_fp) if pair_fp else np.zeros(0)
    overlap = np.bincount(inst[obs], weights=ns, minlength=n).astype(np.int64)

    # Classes of transfers: the same communicator, operation, rank count and size (or position in
    # the step when sizes are unknown).
    position = _positions_in_step(job)
    sizes = np.where(c.bytes >= 0, np.log2(np.maximum(c.bytes, 1)).astype(np.int64), -1)
    kinds = [(c.comm[i], int(c.op[i]), int(c.nranks[i]), int(sizes[i]) if sizes[i] >= 0 else int(position[i]) if position is not None else 0)
             for i in range(n)]
    kind_of: dict = {}
    kind = np.array([kind_of.setdefault(k, len(kind_of)) for k in kinds], dtype=np.int64)

    # Per kernel (full and short name): one column of the fit. Its overlap with an instance is the
    # most it overlapped any member's transfer (a ring runs at its slowest member's pace).
    full = np.concatenate(pair_full) if pair_full else np.zeros(0, np.int64)
    short = np.concatenate(pair_short) if pair_short else np.zeros(0, np.int64)
    names, group = _distinct_pairs(full, short)
    g = names.shape[1]
    overlap_ns = np.bincount(group, weights=ns, minlength=g)
    column = np.zeros(g, np.int64)  # kernel -> fit column: the MAX_COLUMNS most overlapping, the rest share one
    by_overlap = np.argsort(-overlap_ns, kind="stable")
    column[by_overlap] = np.minimum(np.arange(g), overlap_fit.MAX_COLUMNS - 1)
    ncol = int(min(g, overlap_fit.MAX_COLUMNS))
    x = np.zeros((n, ncol))
    if len(obs):
        span = np.concatenate(pair_span, axis=1)
        code, covered = _union_lengths(obs * ncol + column[group], span[0], span[1])
        np.maximum.at(x, (inst[code // ncol], code % ncol), covered)
    members = np.bincount(inst, minlength=n).astype(np.float64)
    fitted = inst_fit = None
    rows_fit = np.flatnonzero((t.transfer > 0) & (c.nranks >= 2)) if n else np.zeros(0, np.int64)
    if len(rows_fit):
        inst_fit = rows_fit
        fitted = overlap_fit.fit(t.transfer[rows_fit], kind[rows_fit], x[rows_fit], members[rows_fit])
    baseline = np.full(n, -1, dtype=np.int64)  # the fast transfer of its class without the fitted contention
    intercept = np.full(n, -1, dtype=np.int64)  # the fit's own baseline (a mean: noise only slows a transfer)
    excess_fitted = np.zeros(n)
    if fitted is not None:
        _, dense = np.unique(kind[rows_fit], return_inverse=True)
        dense = dense.ravel()
        intercept[rows_fit] = np.rint(fitted.baseline[dense]).astype(np.int64)
        excess_fitted[rows_fit] = fitted.fitted_excess
        uncontended = t.transfer[rows_fit] - fitted.fitted_excess
        for k in range(len(fitted.baseline)):
            at = dense == k
            baseline[rows_fit[at]] = int(round(float(np.percentile(uncontended[at], BASELINE_PERCENTILE))))
        if fitted.trimmed:
            warnings.append(f"contention fit: {count(fitted.trimmed, 'collective')} left out, their transfers far from "
                            "what the overlapping kernels explain (a slow link, a one-off stall)")
    transfer_on_rank = np.maximum(0, end - last)
    excess_obs = np.where(baseline[inst] >= 0, np.maximum(0, transfer_on_rank - baseline[inst]), 0)
    excess = np.where(baseline >= 0, np.bincount(inst, weights=excess_obs, minlength=n), -1).astype(np.int64)
    clean_check = _clean_check(t.transfer, kind, overlap, intercept)

    weight = ns * footprint
    weight_sum = np.bincount(inst[obs], weights=weight, minlength=n)
    sm_footprint = np.zeros(g)
    np.maximum.at(sm_footprint, group, footprint)
    first_seen = np.full(g, len(obs))
    np.minimum.at(first_seen, group, np.arange(len(obs)))
    listed = []
    for cols in (fitted.groups if fitted is not None else [[j] for j in range(ncol)]):
        kernels = np.flatnonzero(np.isin(column, cols))
        kernels = kernels[np.argsort(-overlap_ns[kernels], kind="stable")]
        k = fitted.groups.index(cols) if fitted is not None else None
        shorts = [work.names.values[int(names[1, j])] for j in kernels.tolist()]
        fulls = [work.names.values[int(names[0, j])] for j in kernels.tolist()]
        known = k is not None and not fitted.flat[k]
        est = float(fitted.contribution[k]) if known else None
        low = float(fitted.low[k]) if known else None
        high = float(fitted.high[k]) if known else None
        listed.append({
            "kernel": " + ".join(shorts), "kernel_full": " + ".join(fulls), "rank": None,
            "overlap_ns": int(overlap_ns[kernels].sum()), "contention_ns": round(est) if known else None,
            "sm_footprint": round(float(sm_footprint[kernels].max()), 3),
            "collectives": int((x[:, cols] > 0).any(axis=1).sum()),  # overlapped by one of its kernels
            "kernels": tuple(shorts),
            "contention_low_ns": round(low) if known else None, "contention_high_ns": round(high) if known else None,
            "slowdown_per_overlap": round(float(fitted.coefficient[k]), 4) if known else None,
            "confidence": ("high" if known and est > 0 and low >= 0.5 * est else "low") if known else None,
            "_first": int(first_seen[kernels].min()), "_column": k})
    if job.ranks_left_out and any(e["confidence"] == "high" for e in listed):
        # A member left out may have been the last to arrive: its wait then reads as transfer time.
        warnings.append(f"contention: {count(job.ranks_left_out, 'rank')} left out by --ranks/--hosts; a collective missing "
                        "members counts their wait as transfer, so no slowdown is given high confidence")
        for e in listed:
            e["confidence"] = e["confidence"] and "low"
    listed.sort(key=lambda e: e.pop("_first"))
    listed.sort(key=lambda e: (-(e["contention_ns"] or 0), -e["overlap_ns"]))
    points = _points(listed, fitted, inst_fit, x, t.transfer, intercept) if fitted is not None else []
    by_group = _by_group(listed, fitted, inst_fit, n)
    for e in listed:
        e.pop("_column")
    slowed_compute, compute_changes = _compute_slowdown(job)
    metrics, metric_warnings = gpu_metrics.during_transfers(job)
    phases = np.bincount(inst, weights=transfer_on_rank, minlength=n)
    sm_pressure = np.divide(weight_sum, phases, out=np.zeros(n), where=phases > 0)
    return Contention(entries=listed, baseline=baseline, overlap=overlap, sm_pressure=sm_pressure, excess=excess,
                      kind=kind, compute_slowdown=slowed_compute, compute_changes=compute_changes, metrics=metrics,
                      warnings=warnings + metric_warnings, fitted_excess=excess_fitted, points=points,
                      check=clean_check, by_group=by_group,
                      fit_summary=None if fitted is None else {
                          "classes": int(len(fitted.baseline)), "collectives": int(len(rows_fit)), "kernels": int(g),
                          "trimmed": fitted.trimmed, "residual_share": round(fitted.residual_share, 4),
                          "not_distinguishable": int(fitted.indistinct.sum())})


def _compute_overlaps(w, start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The compute kernels (not NCCL's, not copies) of a rank's GPU work that each interval
    [start, end) overlaps: (interval, row, overlap ns), by interval then row. All the rank's work
    is searched and the rest dropped from the (few) overlaps found, rather than a copy of the
    compute kernels' times made per rank."""
    q, row, ns = _native.overlaps(start, end, w.start, w.end)
    compute = w.is_compute[row]
    return q[compute], row[compute], ns[compute]


def _distinct_pairs(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """np.unique(np.stack([a, b]), axis=1, return_inverse=True) of name id pairs (-1 and up): the
    pair packed in one integer, which sorts in the same order and many times faster."""
    span = int(b.max(initial=-1)) + 2
    # In int64: the timeline's name ids are int32, and a few ten thousand names squared are not.
    packed, at = np.unique((a.astype(np.int64) + 1) * span + (b + 1), return_inverse=True)
    return np.stack([packed // span - 1, packed % span - 1]), at.ravel()


def _union_lengths(key: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per distinct key (>= 0), in order: the length of the union of its intervals [lo, hi) (times
    relative to their transfer, so small, lo >= 0): how long at least one run of a kernel
    overlapped a transfer, not the sum over runs that overlapped each other. Returns (keys, lengths)."""
    width = int(hi.max(initial=0)) + 1
    # One stable sort by key then start, the two packed in one integer (key x width fits as the
    # running max's offsets below do); most keys' intervals come in start order already.
    order = np.argsort(key * width + lo, kind="stable")
    key, lo, hi = key[order], lo[order], hi[order]
    first = np.ones(len(key), bool)
    first[1:] = key[1:] != key[:-1]
    g = np.cumsum(first) - 1
    # Running max of the ends within each key: offsetting each by its index x width keeps keys
    # from mixing in one accumulate.
    reach = np.maximum.accumulate(hi + g * width) - g * width
    before = np.r_[np.iinfo(np.int64).min, reach[:-1]]
    before[first] = np.iinfo(np.int64).min
    added = np.maximum(0, hi - np.maximum(lo, before))
    return key[first], np.bincount(g, weights=added, minlength=int(first.sum()))


def _clean_check(transfer: np.ndarray, kind: np.ndarray, overlap: np.ndarray, baseline: np.ndarray) -> dict | None:
    """The cross-check of the fit where transfers ran alone: per class with clean and overlapped
    instances, the fitted baseline against the clean ones' median transfer."""
    both = np.intersect1d(kind[(overlap == 0) & (baseline >= 0)], kind[(overlap > 0) & (baseline >= 0)])
    clean = np.flatnonzero((overlap == 0) & (baseline >= 0) & (transfer > 0) & np.isin(kind, both))
    if not len(clean):
        return None
    errors = []
    for k in np.unique(kind[clean]).tolist():
        at = clean[kind[clean] == k]
        measured = float(np.median(transfer[at]))
        errors.append(abs(float(baseline[at[0]]) - measured) / max(measured, 1.0))
    return {"classes": len(errors), "instances": int(len(clean)), "median_error": round(float(np.median(errors)), 4),
            "max_error": round(float(max(errors)), 4)}


MAX_POINTS = 2_000
SHOWN_KERNELS = 4


def _points(listed: list[dict], fitted, rows: np.ndarray, x: np.ndarray, transfer: np.ndarray,
            baseline: np.ndarray) -> list[dict]:
    """For the chart: per kernel (group) of the most contention, each overlapped instance's overlap
    with it and its transfer less its baseline and what the other kernels added (the partial
    residual, which the fitted line coefficient x overlap should follow)."""
    out = []
    fitted_entries = [e for e in listed if e["_column"] is not None and e["contention_ns"] is not None]
    shown = [e for e in fitted_entries[:SHOWN_KERNELS] if e["confidence"] == "high"] or fitted_entries[:1]
    for e in shown:
        k = e["_column"]
        xk = x[rows][:, fitted.groups[k]].sum(axis=1)
        partial = transfer[rows] - baseline[rows] - (fitted.fitted_excess - fitted.excess_by_group[:, k])
        at = np.flatnonzero(xk > 0)[:MAX_POINTS]
        out.append({"kernel": e["kernel"], "slowdown_per_overlap": float(fitted.coefficient[k]),
                    "overlap_ns": xk[at].astype(np.int64).tolist(), "partial_ns": np.rint(partial[at]).astype(np.int64).tolist()})
    return out


def _by_group(listed: list[dict], fitted, rows, n: int) -> list[tuple[int, np.ndarray]]:
    out = []
    for j, e in enumerate(listed):
        k = e["_column"]
        if k is None or not e["contention_ns"]:
            continue
        per = np.zeros(n)
        per[rows] = fitted.excess_by_group[:, k]
        out.append((j, per))
    return out


MAX_COMPUTE_KERNELS = 40  # compute kernels fitted against NCCL overlap, the most overlapped first
MAX_RUNS = 2_000  # runs of one kernel in its fit (evenly spaced when it ran more)


def _compute_slowdown(job: Job, min_runs: int = 3) -> tuple[list[dict], list[dict]]:
    """The other direction: per compute kernel, its duration = its own baseline + a coefficient x
    its overlap with NCCL kernels on its GPU, fitted as the transfers are (overlap_fit), so it
    needs no run alone if its overlap varies. Returns the entries and, per entry, the runs it
    lengthened and by how much (for the what-if).

    Rank by rank: per name, the runs, their time and their overlap, added up; then, per kernel
    fitted, only the runs its fit takes (at most MAX_RUNS) and those that overlapped. Sums of ns
    (integers below 2^53) are exact in any order, so they are those of the job's runs in one piece."""
    work = job.timeline
    ranks = sorted(job.ops)
    if not ranks:
        return [], []
    works = [work[r] for r in ranks]  # each built first: the names they hold are all in the table
    bins = len(work.names.values) + 1  # name ids from -1: each its own bin
    runs_of = np.zeros((len(ranks), bins), np.int64)  # per rank and name: compute kernel runs
    time_of = np.zeros(bins)  # per name: their total duration
    overlapped = np.zeros(bins, np.int64)  # per name: runs that overlapped NCCL kernels
    total_overlap = np.zeros(bins)
    compute = []  # per rank: which of its items are compute kernels
    beside = []  # per rank: its compute kernels that overlapped NCCL kernels (rows in order), their name bins, by how much
    for j, w in enumerate(works):
        nccl = np.flatnonzero(w.is_nccl)
        # The NCCL kernels as the queries: a few thousand searches, not one per compute kernel.
        _, row, ns = _compute_overlaps(w, w.start[nccl], w.end[nccl])
        rows, at = np.unique(row, return_inverse=True)
        overlap = np.bincount(at.ravel(), weights=ns, minlength=len(rows))
        name = w.name[rows] + 1
        beside.append((rows, name, overlap))
        overlapped += np.bincount(name, minlength=bins)
        total_overlap += np.bincount(name, weights=overlap, minlength=bins)
        compute.append(w.is_compute)
        name = w.name[compute[j]] + 1
        runs_of[j] = np.bincount(name, minlength=bins)
        time_of += np.bincount(name, weights=(w.end - w.start)[compute[j]], minlength=bins)
    runs = runs_of.sum(axis=0)
    alone = runs - overlapped
    wanted = [k for k in np.argsort(-total_overlap, kind="stable").tolist()
              if runs[k] and overlapped[k] >= min_runs and alone[k] >= min_runs][:MAX_COMPUTE_KERNELS]
    out, changes = [], []
    for k in wanted:
        n = int(runs[k])
        # The runs of its fit, in rank then row order: evenly spaced when it ran more than MAX_RUNS.
        picks = np.linspace(0, n - 1, MAX_RUNS).astype(np.int64) if n > MAX_RUNS else np.arange(n)
        bounds = np.r_[0, np.cumsum(runs_of[:, k])]
        duration, overlap, o_rank, o_row, o_duration, o_overlap = [], [], [], [], [], []
        for j, r in enumerate(ranks):
            if not runs_of[j, k]:
                continue
            w = works[j]
            rows, name, by = beside[j]
            mine = name == k  # its runs that overlapped NCCL kernels
            o_row.append(rows[mine])
            o_rank.append(np.full(len(o_row[-1]), r, np.int64))
            o_duration.append(w.end[o_row[-1]] - w.start[o_row[-1]])
            o_overlap.append(by[mine])
            of_kernel = np.flatnonzero((w.name == k - 1) & compute[j])  # its runs on the rank
            if not bounds[j]:
                short = w.short_name[of_kernel[0]]  # of its first run
            fit_rows = of_kernel[picks[(picks >= bounds[j]) & (picks < bounds[j + 1])] - bounds[j]]
            duration.append(w.end[fit_rows] - w.start[fit_rows])
            overlap.append(np.zeros(len(fit_rows)))
            _, at, of = np.intersect1d(fit_rows, o_row[-1], assume_unique=True, return_indices=True)
            overlap[-1][at] = o_overlap[-1][of]
        duration, overlap, o_rank, o_row, o_duration, o_overlap = map(
            np.concatenate, (duration, overlap, o_rank, o_row, o_duration, o_overlap))
        fitted = overlap_fit.fit(duration, np.zeros(len(duration), np.int64), overlap[:, None], np.ones(len(duration)))
        if fitted is None or fitted.flat[0]:
            continue
        coef = float(fitted.coefficient[0])
        scale = n / len(duration)  # the fit's totals over all the kernel's runs
        slowed, low, high = (float(v[0]) * scale for v in (fitted.contribution, fitted.low, fitted.high))
        own = float(o_duration.sum()) - slowed
        out.append({"kernel": work.names.values[int(short)], "kernel_full": work.names.values[k - 1],
                    "overlapped_mean_ns": round(float(o_duration.mean())),
                    "alone_mean_ns": round((float(time_of[k]) - float(o_duration.sum())) / int(alone[k])),
                    "slowdown": slowed / own if own > 0 else 0.0, "overlapped_runs": int(overlapped[k]), "alone_runs": int(alone[k]),
                    "slowed_ns": round(slowed), "slowed_low_ns": round(low), "slowed_high_ns": round(high),
                    "slowdown_per_overlap": round(coef, 4),
                    "confidence": "high" if slowed > 0 and low >= 0.5 * slowed else "low",
                    "wait_saved_ns": None, "step_time_saved_ns": None})
        extra = np.rint(coef * o_overlap).astype(np.int64)
        changes.append({"rank": o_rank, "row": o_row, "ns": np.maximum(0, o_duration - extra)})
    order = sorted(range(len(out)), key=lambda j: -out[j]["slowed_ns"])
    return [out[j] for j in order], [changes[j] for j in order]
