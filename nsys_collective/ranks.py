"""Ranks: one (report, host, pid, device) each, with their GPU work counted.

A report holds one rank per process and GPU that ran GPU work; a report without any GPU work is
still a rank (with zero kernels), so a rank that did nothing is seen, not silently dropped.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from nsys_collective.intervals import covered_ns, overlap_ns
from nsys_collective.reader import Export

GPU_ACTIVITY_TABLES = ("kernels", "memcpy", "memset")


@dataclass
class Rank:
    rank: int
    report: str
    host: str | None
    pid: int | None
    device: int | None
    rank_source: str
    kernels: int
    nccl_kernels: int
    nccl_time_ns: int
    overlap_share: float | None
    first_ns: int | None
    last_ns: int | None


def nccl_mask(export: Export) -> np.ndarray:
    """Which kernels are NCCL's: every NCCL naming era starts with `nccl`."""
    names = export.kernels["short_name"]
    is_nccl_name = np.array([s.startswith("nccl") for s in export.strings] + [False], dtype=bool)
    return is_nccl_name[np.where(names >= 0, names, len(export.strings))]


def _on(table: dict[str, np.ndarray], pid: int | None, device: int | None) -> np.ndarray:
    return (table["pid"] == pid) & (table["device"] == device)


def _gpu_work(export: Export, pid: int | None, device: int | None, is_nccl: np.ndarray) -> dict:
    k = export.kernels
    mine = _on(k, pid, device)
    nccl, compute = mine & is_nccl, mine & ~is_nccl
    nccl_intervals = (k["start"][nccl], k["end"][nccl])
    nccl_time = covered_ns(*nccl_intervals)
    tables = [getattr(export, t) for t in GPU_ACTIVITY_TABLES]
    starts = np.concatenate([t["start"][_on(t, pid, device)] for t in tables])
    ends = np.concatenate([t["end"][_on(t, pid, device)] for t in tables])
    overlap = overlap_ns(nccl_intervals, (k["start"][compute], k["end"][compute]))
    return {
        "kernels": int(mine.sum()),
        "nccl_kernels": int(nccl.sum()),
        "nccl_time_ns": nccl_time,
        # HTA's and NVIDIA's headline figure: the share of NCCL time with compute running beside it.
        "overlap_share": overlap / nccl_time if nccl_time else None,
        "first_ns": int(starts.min()) if len(starts) else None,
        "last_ns": int(ends.max()) if len(ends) else None,
    }


def find_ranks(exports: list[Export], reports: list[str]) -> tuple[list[Rank], list[str]]:
    """The ranks of all exports, numbered in a stable order (host, pid, device, report).

    `reports` names each export as the user gave it. Returns the ranks and warnings.
    """
    found, warnings = [], []
    for export, report in zip(exports, reports):
        is_nccl = nccl_mask(export)
        tables = [getattr(export, t) for t in GPU_ACTIVITY_TABLES]
        keys = sorted({(int(p), int(d)) for t in tables for p, d in zip(t["pid"], t["device"])})
        if not keys:
            warnings.append(f"{report}: no CUDA kernels or copies captured; counted as a rank with zero kernels")
            keys = [(None, None)]
        for pid, device in keys:
            found.append((export, report, pid, device, is_nccl))
    found.sort(key=lambda f: (f[0].session.hostname or "", f[2] if f[2] is not None else -1, f[3] if f[3] is not None else -1, f[1]))
    ranks = [
        Rank(rank=i, report=report, host=export.session.hostname, pid=pid, device=device, rank_source="order",
             **_gpu_work(export, pid, device, is_nccl))
        for i, (export, report, pid, device, is_nccl) in enumerate(found)
    ]
    return ranks, warnings
