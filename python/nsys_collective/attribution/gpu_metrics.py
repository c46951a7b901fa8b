"""GPU metrics during each transfer (nsys `--gpu-metrics-devices`): SM activity and NVLink/PCIe
throughput, averaged over each rank's transfer phase and then over the collective's ranks.

Metric names carry units and vary by GPU ("SMs Active [Throughput %]", "NVLink RX Bandwidth
[Throughput %]"), so they are matched by pattern. Samples are taken per export; an export holding
several GPUs is skipped, since which sampled GPU is which device is not recorded reliably.
"""

from __future__ import annotations

import numpy as np

from nsys_collective.model.job import Job
from nsys_collective.model.trace import METRIC_FIELDS as FIELDS


def during_transfers(job: Job) -> tuple[dict[str, np.ndarray], list[str]]:
    """Per field, the mean sampled value over each instance's transfer phases (NaN: no samples)."""
    c, t = job.collectives, job.timing
    n = len(c)
    sums = {f: np.zeros(n) for f in FIELDS}
    counts = {f: np.zeros(n) for f in FIELDS}
    warnings = []
    last = t.last_arrival[c.obs_instance] if n else np.zeros(0, np.int64)
    for r in job.ranks:
        trace = job.traces[r.rank]
        if trace.metrics is None or r.rank not in job.ops:
            continue
        if trace.metrics_shared:
            warnings.append(f"{r.report}: GPU metrics of an export with several GPUs are not attributed to collectives")
            continue
        rows = np.flatnonzero((c.obs_rank == r.rank) & (job.aligned_end > last))
        for field, (sampled, values) in trace.metrics.items():
            when = job.alignment.correct_rank(r.rank, sampled)
            order = np.argsort(when, kind="stable")
            when, value = when[order], values[order].astype(np.float64)
            cumulative = np.r_[0.0, np.cumsum(value)]
            lo = np.searchsorted(when, last[rows], side="left")
            hi = np.searchsorted(when, job.aligned_end[rows], side="right")
            have = hi > lo
            inst = c.obs_instance[rows][have]
            np.add.at(sums[field], inst, (cumulative[hi] - cumulative[lo])[have] / (hi - lo)[have])
            np.add.at(counts[field], inst, 1)
    means = {f: np.divide(sums[f], counts[f], out=np.full(n, np.nan), where=counts[f] > 0) for f in FIELDS}
    return means, warnings
