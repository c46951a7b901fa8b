"""Each rank's GPU work as one timeline on the aligned clock: kernels, copies and memsets, sorted
by start, with names in one table shared by all ranks. It holds nothing twice: the trace's own
columns where they need no change (the times of a rank on the reference clock, the names of a
trace whose string table the shared one begins with); and only what the analysis reads aligned
(the launches stay on the trace, on the rank's own clock, where their readers compare them)."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from nsys_collective.model.alignment import Alignment
from nsys_collective.model.per_name import PerName
from nsys_collective.model.trace import GpuNames, RankTrace


class Names:
    """One string table for all ranks, so a kernel has one id on every rank."""

    def __init__(self) -> None:
        self.values: list[str] = []
        self._ids: dict[str, int] = {}
        # By the key of a trace's (shared) string table: its ids' global ids (-1 last), or None
        # where they are the same ids.
        self._by_table: dict[int, np.ndarray | None] = {}

    def intern(self, value: str) -> int:
        if value not in self._ids:
            self._ids[value] = len(self.values)
            self.values.append(value)
        return self._ids[value]

    def of(self, trace: RankTrace, string_ids: np.ndarray) -> np.ndarray:
        """Global ids (int32) of a trace's string ids (-1 stays -1): `string_ids` itself where they
        are the same."""
        if trace.key not in self._by_table:
            table = np.array([self.intern(s) for s in trace.strings] + [-1], dtype=np.int32)
            same = np.array_equal(table[:-1], np.arange(len(table) - 1))
            self._by_table[trace.key] = None if same else table
        table = self._by_table[trace.key]
        return string_ids if table is None else table[string_ids]  # -1 takes the last slot


@dataclass(frozen=True)
class GpuWork(GpuNames):
    start: np.ndarray
    end: np.ndarray
    name: np.ndarray  # global id (int32) of the full (demangled) name: what pairs kernels across ranks
    ctas: np.ndarray  # thread blocks (grid x*y*z) of kernels, 0 for copies
    stream: np.ndarray
    # short_name (the global id of the short name, for people) held per name, the trace's own
    # table where its names' ids are the global ones; is_nccl, is_kernel and is_compute read off
    # kind, the trace's own (GpuNames).
    short_name_by_name: PerName
    kind: np.ndarray

    def __len__(self) -> int:
        return len(self.start)

    @cached_property
    def short_of(self) -> dict[int, int]:
        """Short name id of each full name id (its first item's), in full name order."""
        n = len(self.name)
        # Each name's first item, the least row under it (ids from -1): one pass, no sort of the rows.
        first = np.full(int(self.name.max(initial=-1)) + 2, n)
        np.minimum.at(first, self.name + 1, np.arange(n))
        full = np.flatnonzero(first < n)
        return dict(zip((full - 1).tolist(), self.short_name[first[full]].tolist()))

    def index_of(self, start: np.ndarray, end: np.ndarray) -> np.ndarray:
        """Index of the items with these aligned (start, end); -1 where none."""
        at = np.searchsorted(self.start, start)
        out = np.full(len(start), -1)
        for shift in range(4):  # items may share a start (other streams): look at the few ties
            i = np.minimum(at + shift, len(self.start) - 1)
            hit = (out < 0) & (self.start[i] == start) & (self.end[i] == end)
            out[hit] = i[hit]
        return out


_EMPTY = np.zeros(0, dtype=np.int64)


class Timeline:
    """Every rank's GPU work on the aligned clock, built on first use per rank, and each rank's
    per-name summary."""

    def __init__(self, traces: dict[int, RankTrace], alignment: Alignment) -> None:
        self.traces = traces  # by rank number
        self.alignment = alignment
        self.names = Names()
        self._work: dict[int, GpuWork] = {}
        self._name_stats: dict[int, dict[int, tuple[int, int]]] = {}

    def __getitem__(self, rank: int) -> GpuWork:
        if rank not in self._work:
            self._work[rank] = self._build(rank)
        return self._work[rank]

    def _build(self, rank: int) -> GpuWork:
        trace = self.traces[rank]
        g = trace.gpu
        if g is None:
            return GpuWork.of_columns(start=_EMPTY, end=_EMPTY, name=_EMPTY, short_name=_EMPTY, is_nccl=_EMPTY.astype(bool),
                                      is_kernel=_EMPTY.astype(bool), ctas=_EMPTY, stream=_EMPTY)
        correct = self.alignment.correct_rank  # the trace's own column where the rank's clock is the reference's
        name = self.names.of(trace, g.name)
        # The same ids: the trace's own table of short names.
        short = g.short_name_by_name if name is g.name else PerName.of(name, self.names.of(trace, g.short_name))
        return GpuWork(start=correct(rank, g.start), end=correct(rank, g.end), name=name, ctas=g.ctas, stream=g.stream,
                       short_name_by_name=short, kind=g.kind)

    def release(self) -> None:
        """Let go of the ranks' GPU work built so far (each is built again on its next use): their
        aligned copies are not held where nothing reads them (the what-if's replays)."""
        self._work.clear()

    def name_stats(self, rank: int) -> dict[int, tuple[int, int]]:
        """Per name id: (total duration ns, runs) on the rank."""
        if rank not in self._name_stats:
            work = self[rank]
            names, at = np.unique(work.name, return_inverse=True)
            total = np.bincount(at, weights=(work.end - work.start).astype(np.float64))
            self._name_stats[rank] = {int(n): (int(t), int(c)) for n, t, c in zip(names, total, np.bincount(at))}
        return self._name_stats[rank]
