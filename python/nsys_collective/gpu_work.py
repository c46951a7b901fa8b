"""Each rank's GPU work as one timeline on the aligned clock: kernels, copies and memsets, sorted
by start, with names in one table shared by all exports and the host call that launched each."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from nsys_collective.nccl import launches, nccl_kernel_mask
from nsys_collective.reader import Export


class Names:
    """One string table for all exports, so a kernel has one id on every rank."""

    def __init__(self) -> None:
        self.values: list[str] = []
        self._ids: dict[str, int] = {}
        self._by_export: dict[object, np.ndarray] = {}  # by path: an export may be read again

    def intern(self, value: str) -> int:
        if value not in self._ids:
            self._ids[value] = len(self.values)
            self.values.append(value)
        return self._ids[value]

    def of(self, export: Export, string_ids: np.ndarray) -> np.ndarray:
        """Global ids of an export's string ids (-1 stays -1)."""
        table = self._by_export.get(export.path)
        if table is None:
            table = np.array([self.intern(s) for s in export.strings] + [-1], dtype=np.int64)
            self._by_export[export.path] = table
        return table[np.where(string_ids >= 0, string_ids, len(table) - 1)]


@dataclass
class GpuWork:
    start: np.ndarray
    end: np.ndarray
    name: np.ndarray  # global id of the full (demangled) name: what pairs kernels across ranks
    short_name: np.ndarray  # global id of the short name, for people
    launch: np.ndarray  # aligned start of the launching runtime call, -1 when unknown
    launch_tid: np.ndarray
    is_nccl: np.ndarray
    is_kernel: np.ndarray
    ctas: np.ndarray  # thread blocks (grid x*y*z) of kernels, 0 for copies
    stream: np.ndarray

    def __len__(self) -> int:
        return len(self.start)

    @cached_property
    def short_of(self) -> dict[int, int]:
        """Short name id of each full name id."""
        full, first = np.unique(self.name, return_index=True)
        return dict(zip(full.tolist(), self.short_name[first].tolist()))

    def index_of(self, start: np.ndarray, end: np.ndarray) -> np.ndarray:
        """Index of the items with these aligned (start, end); -1 where none."""
        at = np.searchsorted(self.start, start)
        out = np.full(len(start), -1)
        for shift in range(4):  # items may share a start (other streams): look at the few ties
            i = np.minimum(at + shift, len(self.start) - 1)
            hit = (out < 0) & (self.start[i] == start) & (self.end[i] == end)
            out[hit] = i[hit]
        return out


def build(export: Export, pid: int, device: int, correct, names: Names) -> GpuWork:
    """The GPU work of the rank (export, pid, device); `correct(times)` aligns its times."""
    k = export.kernels
    kernels = np.flatnonzero((k["pid"] == pid) & (k["device"] == device))
    parts = [(k, kernels, names.of(export, k["name"][kernels]), names.of(export, k["short_name"][kernels]),
              nccl_kernel_mask(export)[kernels], k["grid_x"][kernels] * np.maximum(k["grid_y"][kernels], 1) * np.maximum(k["grid_z"][kernels], 1))]
    for table, label in ((export.memcpy, "[CUDA memcpy]"), (export.memset, "[CUDA memset]")):
        rows = np.flatnonzero((table["pid"] == pid) & (table["device"] == device))
        label_id = np.full(len(rows), names.intern(label))
        parts.append((table, rows, label_id, label_id, np.zeros(len(rows), bool), np.zeros(len(rows), np.int64)))
    start = np.concatenate([t["start"][r] for t, r, *_ in parts])
    end = np.concatenate([t["end"][r] for t, r, *_ in parts])
    tid, launch = launches(export, pid, np.concatenate([t["correlation"][r] for t, r, *_ in parts]))
    is_kernel = np.concatenate([np.full(len(r), i == 0) for i, (_, r, *_) in enumerate(parts)])
    order = np.argsort(start, kind="stable")
    aligned_launch = np.where(launch >= 0, correct(launch), -1)
    return GpuWork(
        start=correct(start)[order], end=correct(end)[order],
        name=np.concatenate([p[2] for p in parts])[order], short_name=np.concatenate([p[3] for p in parts])[order],
        launch=aligned_launch[order], launch_tid=tid[order],
        is_nccl=np.concatenate([p[4] for p in parts])[order], is_kernel=is_kernel[order],
        ctas=np.concatenate([p[5] for p in parts]).astype(np.int64)[order],
        stream=np.concatenate([t["stream"][r] for t, r, *_ in parts])[order],
    )


class WorkCache:
    """GPU work built on first use per rank: blame needs the stragglers and their references.

    With `keep`, at most that many ranks' work is held (least recently used goes first) and the
    rest is rebuilt when asked for again; what outlives it is each rank's small per-name summary.
    """

    def __init__(self, analysis, keep: int | None = None) -> None:
        self.analysis = analysis
        self.names = Names()
        self.keep = keep
        self._work: dict[int, GpuWork] = {}
        self._name_stats: dict[int, dict[int, tuple[int, int]]] = {}

    def __getitem__(self, rank: int) -> GpuWork:
        if rank in self._work:
            self._work[rank] = self._work.pop(rank)  # most recently used last
            return self._work[rank]
        r = self.analysis.by_number[rank]
        export = self.analysis.exports[r.export_index]
        correct = lambda t: self.analysis.alignment.correct_rank(rank, t)  # noqa: E731
        work = self._work[rank] = build(export, r.pid, r.device, correct, self.names)
        if rank not in self._name_stats:
            names, at = np.unique(work.name, return_inverse=True)
            total = np.bincount(at, weights=(work.end - work.start).astype(np.float64))
            self._name_stats[rank] = {int(n): (int(t), int(c)) for n, t, c in zip(names, total, np.bincount(at))}
        while self.keep is not None and len(self._work) > self.keep:
            self._work.pop(next(iter(self._work)))
        return work

    def name_stats(self, rank: int) -> dict[int, tuple[int, int]]:
        """Per name id: (total duration ns, runs) on the rank."""
        if rank not in self._name_stats:
            self[rank]
        return self._name_stats[rank]

    def export(self, rank: int) -> Export:
        return self.analysis.exports[self.analysis.by_number[rank].export_index]
