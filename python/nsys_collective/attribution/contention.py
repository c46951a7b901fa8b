"""Contention attribution (method.md section 5): why the transfer was slow.

Once the last rank has arrived, each rank's NCCL kernel transfers while compute kernels on the
same GPU compete for SMs and memory bandwidth. For every (collective, rank): the compute kernels
overlapping its transfer phase [last arrival, its end], with overlap ns and SM footprint (thread
blocks over the GPU's SMs, at most 1). A baseline transfer time per kind of collective (the same
communicator, operation and rank count, and size, or position within the training step when
sizes are unknown) comes from the instances nothing overlapped; what a collective took beyond it
on each rank is its excess, shared among the kernels that overlapped it on any of its ranks
(contention on one rank slows the whole ring) in proportion to overlap x footprint.

The other direction too: compute kernels that ran beside NCCL against the same kernels alone.
With GPU metrics captured, SM activity and NVLink/PCIe throughput during the transfers.
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass, field

import numpy as np

from nsys_collective import _native
from nsys_collective.attribution import gpu_metrics, overlap_fit
from nsys_collective.model.job import Job
from nsys_collective.units import count

# A class's baseline: this percentile of its transfers less what the fit says the kernels added.
BASELINE_PERCENTILE = 10

STEP_RANGE = re.compile(r"^ProfilerStep#\d+$")


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
    fit_summary: dict | None = None  # classes, collectives, kernels, trimmed, residual_share


def _positions_in_step(job: Job) -> np.ndarray | None:
    """Each instance's position among its communicator's instances in the same ProfilerStep,
    from the steps marked on the communicator's first rank; None when no steps are marked."""
    c = job.collectives
    out = np.zeros(len(c), dtype=np.int64)
    found = False
    for comm, members in c.communicators.items():
        rank = members[0]
        trace = job.traces.get(rank)
        if trace is None or trace.ranges is None:
            continue
        names = trace.names(trace.ranges.name)
        steps = np.flatnonzero([bool(n and STEP_RANGE.match(n)) for n in names])
        if len(steps) == 0:
            continue
        found = True
        step_starts = np.sort(job.alignment.correct_rank(rank, trace.ranges.start[steps]))
        mine = np.flatnonzero((c.obs_rank == rank) & np.isin(c.obs_instance, [i for i, cm in enumerate(c.comm) if cm == comm]))
        inst = c.obs_instance[mine]
        step = np.searchsorted(step_starts, job.aligned_start[mine], side="right")
        order = np.lexsort((inst, step))
        position = np.zeros(len(order), dtype=np.int64)
        for k in range(1, len(order)):
            position[k] = position[k - 1] + 1 if step[order[k]] == step[order[k - 1]] else 0
        out[inst[order]] = position
    return out if found else None


def attribute(job: Job) -> Contention:
    c, t, work = job.collectives, job.timing, job.timeline
    n, warnings = len(c), []
    inst, rank, end = c.obs_instance, c.obs_rank, job.aligned_end
    last = t.last_arrival[inst] if n else np.zeros(0, np.int64)
    pair_obs, pair_item, pair_ns, pair_fp = [], [], [], []
    unknown_sms = []
    for r in np.unique(rank).tolist():
        rows = np.flatnonzero((rank == r) & (end > last))
        w = work[r]
        compute = np.flatnonzero(w.is_kernel & ~w.is_nccl)
        q, i, ns = _native.overlaps(last[rows], end[rows], w.start[compute], w.end[compute])
        sms = job.traces[r].sm_count
        if sms is None:
            unknown_sms.append(r)
        items = compute[i]
        pair_obs.append(rows[q])
        pair_item.append(np.stack([np.full(len(items), r), items]))
        pair_ns.append(ns)
        pair_fp.append(np.minimum(1.0, w.ctas[items] / sms) if sms else np.ones(len(items)))
    if unknown_sms:
        warnings.append(f"ranks {', '.join(map(str, unknown_sms))}: GPU SM count unknown; overlapping kernels weighted as whole-GPU")
    obs = np.concatenate(pair_obs) if pair_obs else np.zeros(0, np.int64)
    items = np.concatenate(pair_item, axis=1) if pair_item else np.zeros((2, 0), np.int64)
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
    full = np.zeros(len(obs), np.int64)
    short = np.zeros(len(obs), np.int64)
    for r in np.unique(items[0]).tolist():
        at = np.flatnonzero(items[0] == r)
        full[at], short[at] = work[r].name[items[1, at]], work[r].short_name[items[1, at]]
    (names, group) = np.unique(np.stack([full, short]), axis=1, return_inverse=True) if len(obs) else (np.zeros((2, 0), np.int64), np.zeros(0, np.int64))
    group = group.ravel()
    g = names.shape[1]
    overlap_ns = np.bincount(group, weights=ns, minlength=g)
    column = np.zeros(g, np.int64)  # kernel -> fit column: the MAX_COLUMNS most overlapping, the rest share one
    by_overlap = np.argsort(-overlap_ns, kind="stable")
    column[by_overlap] = np.minimum(np.arange(g), overlap_fit.MAX_COLUMNS - 1)
    ncol = int(min(g, overlap_fit.MAX_COLUMNS))
    x = np.zeros((n, ncol))
    if len(obs):
        code, at = np.unique(obs * ncol + column[group], return_inverse=True)
        summed = np.bincount(at.ravel(), weights=ns)
        np.maximum.at(x, (inst[code // ncol], code % ncol), summed)
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
        in_group = np.isin(group, kernels)
        known = k is not None and not fitted.flat[k]
        est = float(fitted.contribution[k]) if known else None
        low = float(fitted.low[k]) if known else None
        high = float(fitted.high[k]) if known else None
        listed.append({
            "kernel": " + ".join(shorts), "kernel_full": " + ".join(fulls), "rank": None,
            "overlap_ns": int(overlap_ns[kernels].sum()), "contention_ns": round(est) if known else None,
            "sm_footprint": round(float(sm_footprint[kernels].max()), 3),
            "collectives": int(len(np.unique(inst[obs[in_group]]))),
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
    metrics, metric_warnings = gpu_metrics.during_transfers(job)
    phases = np.bincount(inst, weights=transfer_on_rank, minlength=n)
    sm_pressure = np.divide(weight_sum, phases, out=np.zeros(n), where=phases > 0)
    return Contention(entries=listed, baseline=baseline, overlap=overlap, sm_pressure=sm_pressure, excess=excess,
                      kind=kind, compute_slowdown=_compute_slowdown(job), metrics=metrics,
                      warnings=warnings + metric_warnings, fitted_excess=excess_fitted, points=points,
                      check=clean_check, by_group=by_group,
                      fit_summary=None if fitted is None else {
                          "classes": int(len(fitted.baseline)), "collectives": int(len(rows_fit)), "kernels": int(g),
                          "trimmed": fitted.trimmed, "residual_share": round(fitted.residual_share, 4)})


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


def _compute_slowdown(job: Job, min_runs: int = 3) -> list[dict]:
    """Per compute kernel: mean duration when it overlapped an NCCL kernel and when it ran alone."""
    work = job.timeline
    sums: dict = defaultdict(lambda: np.zeros(4))  # overlapped total, count, alone total, count
    for r in sorted(job.ops):
        w = work[r]
        compute = np.flatnonzero(w.is_kernel & ~w.is_nccl)
        nccl = np.flatnonzero(w.is_nccl)
        q, _, _ = _native.overlaps(w.start[compute], w.end[compute], w.start[nccl], w.end[nccl])
        beside = np.zeros(len(compute), bool)
        beside[q] = True
        duration = (w.end - w.start)[compute]
        for flag, col in ((True, 0), (False, 2)):
            sel = beside == flag
            for name, total, runs in zip(*_group_sum(w.name[compute][sel], duration[sel])):
                s = sums[(int(name), w.short_of[int(name)])]
                s[col] += total
                s[col + 1] += runs
    out = []
    for (full, short), (o_tot, o_n, a_tot, a_n) in sums.items():
        if o_n >= min_runs and a_n >= min_runs:
            out.append({"kernel": work.names.values[short], "kernel_full": work.names.values[full],
                        "overlapped_mean_ns": round(o_tot / o_n), "alone_mean_ns": round(a_tot / a_n),
                        "slowdown": o_tot / o_n / (a_tot / a_n) - 1, "overlapped_runs": int(o_n), "alone_runs": int(a_n)})
    return sorted(out, key=lambda e: -e["slowdown"])


def _group_sum(keys: np.ndarray, values: np.ndarray):
    uniq, at = np.unique(keys, return_inverse=True)
    return uniq, np.bincount(at, weights=values), np.bincount(at)
