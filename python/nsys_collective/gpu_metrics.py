"""GPU metrics during each transfer (nsys `--gpu-metrics-devices`): SM activity and NVLink/PCIe
throughput, averaged over each rank's transfer phase and then over the collective's ranks.

Metric names carry units and vary by GPU ("SMs Active [Throughput %]", "NVLink RX Bandwidth
[Throughput %]"), so they are matched by pattern. Samples are taken per export; an export holding
several GPUs is skipped, since which sampled GPU is which device is not recorded reliably.
"""

from __future__ import annotations

import re

import numpy as np

FIELDS = {
    "sm_active": re.compile(r"SMs? Active", re.I),
    "nvlink": re.compile(r"NVLink", re.I),
    "pcie": re.compile(r"PCIe", re.I),
}


def during_transfers(analysis) -> tuple[dict[str, np.ndarray], list[str]]:
    """Per field, the mean sampled value over each instance's transfer phases (NaN: no samples)."""
    c, t = analysis.collectives, analysis.timing
    n = len(c)
    sums = {f: np.zeros(n) for f in FIELDS}
    counts = {f: np.zeros(n) for f in FIELDS}
    warnings = []
    last = t.last_arrival[c.obs_instance] if n else np.zeros(0, np.int64)
    for r in analysis.ranks:
        if not analysis.facts[r.export_index].has_gpu_metrics or r.rank not in analysis.ops:
            continue  # without reading the export again
        export = analysis.exports[r.export_index]
        m = export.gpu_metrics
        devices = {x.device for x in analysis.ranks if x.export_index == r.export_index}
        if len(devices) > 1:
            warnings.append(f"{r.report}: GPU metrics of an export with several GPUs are not attributed to collectives")
            continue
        names = export.gpu_metric_names
        label = {(int(ty), int(me)): export.name(int(na)) or "" for ty, me, na in zip(names["type"], names["metric"], names["name"])}
        rows = np.flatnonzero((c.obs_rank == r.rank) & (analysis.aligned_end > last))
        for field, pattern in FIELDS.items():
            wanted = [k for k, v in label.items() if pattern.search(v)]
            pick = np.zeros(len(m["start"]), bool)
            for ty, me in wanted:
                pick |= (m["type"] == ty) & (m["metric"] == me)
            if not pick.any():
                continue
            when = analysis.alignment.correct_rank(r.rank, m["start"][pick])
            order = np.argsort(when, kind="stable")
            when, value = when[order], m["value"][pick][order].astype(np.float64)
            cumulative = np.r_[0.0, np.cumsum(value)]
            lo = np.searchsorted(when, last[rows], side="left")
            hi = np.searchsorted(when, analysis.aligned_end[rows], side="right")
            have = hi > lo
            inst = c.obs_instance[rows][have]
            np.add.at(sums[field], inst, (cumulative[hi] - cumulative[lo])[have] / (hi - lo)[have])
            np.add.at(counts[field], inst, 1)
    means = {f: np.divide(sums[f], counts[f], out=np.full(n, np.nan), where=counts[f] > 0) for f in FIELDS}
    return means, warnings
