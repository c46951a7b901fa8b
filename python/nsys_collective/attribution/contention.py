"""Contention attribution (docs/method.md section 5): why the transfer was slow.

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

import fnmatch
from collections import defaultdict
from dataclasses import dataclass, field

import numpy as np

from nsys_collective import _native
from nsys_collective.attribution import gpu_metrics
from nsys_collective.model.job import Job
from nsys_collective.units import count

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
        if trace is None or trace.ranges is None:
            continue
        names = trace.names(trace.ranges.name)
        steps = np.flatnonzero([bool(n and fnmatch.fnmatchcase(n, job.steps.pattern)) for n in names])
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

    # Baselines from the instances of each kind that nothing overlapped.
    position = _positions_in_step(job)
    sizes = np.where(c.bytes >= 0, np.log2(np.maximum(c.bytes, 1)).astype(np.int64), -1)
    kinds = [(c.comm[i], int(c.op[i]), int(c.nranks[i]), int(sizes[i]) if sizes[i] >= 0 else int(position[i]) if position is not None else 0)
             for i in range(n)]
    by_kind = defaultdict(list)
    for i, kind in enumerate(kinds):
        by_kind[kind].append(i)
    baseline = np.full(n, -1, dtype=np.int64)
    for members in by_kind.values():
        clean = [i for i in members if overlap[i] == 0]
        if clean:
            baseline[members] = int(np.percentile(t.transfer[clean], BASELINE_PERCENTILE))
    transfer_on_rank = np.maximum(0, end - last)
    excess_obs = np.where(baseline[inst] >= 0, np.maximum(0, transfer_on_rank - baseline[inst]), 0)
    excess = np.where(baseline >= 0, np.bincount(inst, weights=excess_obs, minlength=n), -1).astype(np.int64)
    slowed = overlap > 0
    no_baseline = int((slowed & (baseline < 0)).sum())
    if no_baseline:
        warnings.append(f"{count(no_baseline, 'collective')} overlapped compute but no collective of their kind ran alone: "
                        "overlap reported without a contention figure")

    # Share each instance's excess among the kernels that overlapped it, by overlap x footprint.
    weight = ns * footprint
    weight_sum = np.bincount(inst[obs], weights=weight, minlength=n)
    share = np.where(weight_sum[inst[obs]] > 0, weight / np.maximum(weight_sum[inst[obs]], 1e-9), 0.0)
    pair_excess = np.where(excess[inst[obs]] >= 0, share * excess[inst[obs]], np.nan)
    # Per kernel (full and short name), summed over the pairs: one group per name, in numpy.
    full = np.zeros(len(obs), np.int64)
    short = np.zeros(len(obs), np.int64)
    for r in np.unique(items[0]).tolist():
        at = np.flatnonzero(items[0] == r)
        full[at], short[at] = work[r].name[items[1, at]], work[r].short_name[items[1, at]]
    (names, group) = np.unique(np.stack([full, short]), axis=1, return_inverse=True) if len(obs) else (np.zeros((2, 0), np.int64), np.zeros(0, np.int64))
    group = group.ravel()
    g = names.shape[1]
    known = ~np.isnan(pair_excess)
    overlap_ns = np.bincount(group, weights=ns, minlength=g)
    contention_ns = np.bincount(group[known], weights=pair_excess[known], minlength=g)
    any_known = np.bincount(group[known], minlength=g) > 0
    sm_footprint = np.zeros(g)
    np.maximum.at(sm_footprint, group, footprint)
    first_seen = np.full(g, len(obs))
    np.minimum.at(first_seen, group, np.arange(len(obs)))
    collectives = np.bincount(np.unique(np.stack([group, inst[obs]]), axis=1)[0], minlength=g) if len(obs) else np.zeros(0, np.int64)
    listed = sorted(
        ({"kernel": work.names.values[int(names[1, k])], "kernel_full": work.names.values[int(names[0, k])], "rank": None,
          "overlap_ns": int(overlap_ns[k]), "contention_ns": round(float(contention_ns[k])) if any_known[k] else None,
          "sm_footprint": round(float(sm_footprint[k]), 3), "collectives": int(collectives[k])}
         for k in np.argsort(first_seen, kind="stable").tolist()),  # ties keep the order the pairs came in
        key=lambda e: (-(e["contention_ns"] or 0), -e["overlap_ns"]))
    metrics, metric_warnings = gpu_metrics.during_transfers(job)
    phases = np.bincount(inst, weights=transfer_on_rank, minlength=n)
    sm_pressure = np.divide(weight_sum, phases, out=np.zeros(n), where=phases > 0)
    kind_of = {kind: k for k, kind in enumerate(by_kind)}
    return Contention(entries=listed, baseline=baseline, overlap=overlap, sm_pressure=sm_pressure, excess=excess,
                      kind=np.array([kind_of[kind] for kind in kinds], dtype=np.int64),
                      compute_slowdown=_compute_slowdown(job), metrics=metrics, warnings=warnings + metric_warnings)


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
