"""Matching each collective across ranks (method.md section 1).

NCCL makes every rank of a communicator issue its operations in the same order, so the k-th
operation of a communicator on each rank is one collective instance. Without NCCL payloads (not
in a default export) a communicator is found as a stream per rank whose sequences of operation
kinds agree: PyTorch uses one NCCL stream per process group and device. Where several candidate
streams agree, the one whose operations end nearest in time wins (ends of one instance are
near-simultaneous). What cannot be matched is reported with counts, never dropped silently.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from nsys_collective.model.nccl import OPS, NcclOps

# Kinds taken from a kernel name alone say little: `SendRecv` and `Generic` kernels carry many
# collectives. They match any kind; a named kind in another rank's sequence decides.
WEAK = np.array([op in ("SendRecv", "Generic") for op in OPS])


@dataclass
class _Stream:
    rank: int
    stream: int
    rows: np.ndarray  # indices into the rank's NcclOps
    op: np.ndarray
    end: np.ndarray


@dataclass
class _Group:
    members: list[_Stream]
    op: np.ndarray  # the strongest kind seen at each position
    end: np.ndarray  # the first member's end times, for nearness

    def accepts(self, s: _Stream) -> bool:
        if any(m.rank == s.rank for m in self.members):
            return False
        n = min(len(s.op), len(self.op))
        a, b = s.op[:n], self.op[:n]
        return bool(np.all((a == b) | WEAK[a] | WEAK[b]))

    def distance(self, s: _Stream) -> float:
        n = min(len(s.end), len(self.end))
        return float(np.median(np.abs(s.end[:n] - self.end[:n]))) if n else 0.0

    def add(self, s: _Stream) -> None:
        self.members.append(s)
        n = min(len(s.op), len(self.op))
        stronger = WEAK[self.op[:n]] & ~WEAK[s.op[:n]]
        self.op[:n][stronger] = s.op[:n][stronger]


@dataclass
class Collectives:
    """Matched collective instances, and per instance the participating ranks' operations.

    Instance arrays are indexed by instance id (sorted by first start); observation arrays hold
    one row per (instance, rank), sorted by instance then rank. Times are UTC ns.
    """

    comm: list[str]
    seq: np.ndarray
    op: np.ndarray
    bytes: np.ndarray
    nranks: np.ndarray
    obs_instance: np.ndarray
    obs_rank: np.ndarray
    obs_start: np.ndarray
    obs_end: np.ndarray
    communicators: dict[str, list[int]] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.seq)

    def subset(self, keep: np.ndarray) -> Collectives:
        """The instances where `keep` is true, renumbered in the same order."""
        new_id = np.cumsum(keep) - 1
        rows = keep[self.obs_instance] if len(self.obs_instance) else np.zeros(0, bool)
        kept = np.flatnonzero(keep)
        return Collectives(
            comm=[self.comm[i] for i in kept], seq=self.seq[kept], op=self.op[kept], bytes=self.bytes[kept],
            nranks=self.nranks[kept], obs_instance=new_id[self.obs_instance[rows]], obs_rank=self.obs_rank[rows],
            obs_start=self.obs_start[rows], obs_end=self.obs_end[rows], communicators=self.communicators,
            warnings=self.warnings)


def _streams(rank: int, ops: NcclOps) -> list[_Stream]:
    out = []
    for stream in np.unique(ops.stream):
        rows = np.flatnonzero(ops.stream == stream)
        out.append(_Stream(rank, int(stream), rows, ops.op[rows], ops.end[rows]))
    return out


def match(ops_by_rank: dict[int, NcclOps]) -> Collectives:
    """Groups every rank's NCCL streams into communicators and numbers their instances."""
    warnings: list[str] = []
    streams = [s for rank, ops in sorted(ops_by_rank.items()) for s in _streams(rank, ops)]
    # Longest first: a truncated capture is a prefix of a whole one.
    streams.sort(key=lambda s: (-len(s.op), s.rank, s.stream))
    groups: list[_Group] = []
    for s in streams:
        candidates = [g for g in groups if g.accepts(s)]
        if candidates:
            min(candidates, key=lambda g: g.distance(s)).add(s)
        else:
            groups.append(_Group([s], s.op.copy(), s.end))

    ranks_with_work = len(ops_by_rank)
    comm, seq, op, nranks, nbytes = [], [], [], [], []
    obs_inst, obs_rank, obs_start, obs_end = [], [], [], []
    communicators: dict[str, list[int]] = {}
    groups.sort(key=lambda g: min(ops_by_rank[m.rank].start[m.rows[0]] for m in g.members))
    for g in groups:
        members = sorted(g.members, key=lambda m: m.rank)
        if len(members) == 1 and ranks_with_work > 1:
            m = members[0]
            warnings.append(f"rank {m.rank}: {len(m.rows)} NCCL operations on stream {m.stream} match no other rank's; not analyzed")
            continue
        count = min(len(m.rows) for m in members)
        for m in members:
            if len(m.rows) > count:
                warnings.append(f"rank {m.rank}: {len(m.rows) - count} NCCL operations on stream {m.stream} beyond the "
                                f"{count} its peers captured (a capture cut short?); not analyzed")
        streams_used = sorted({m.stream for m in members})
        name = f"c{len(communicators)}:stream{'/'.join(map(str, streams_used))}"
        communicators[name] = [m.rank for m in members]
        base = len(seq)
        comm += [name] * count
        seq += range(count)
        op += g.op[:count].tolist()
        nranks += [len(members)] * count
        # A size any member knows (the ranks of one call pass the same size).
        nbytes += np.max([ops_by_rank[m.rank].bytes[m.rows[:count]] for m in members], axis=0).tolist()
        for m in members:
            rows = m.rows[:count]
            obs_inst.append(base + np.arange(count))
            obs_rank.append(np.full(count, m.rank))
            obs_start.append(ops_by_rank[m.rank].start[rows])
            obs_end.append(ops_by_rank[m.rank].end[rows])

    def joined(parts):
        return np.concatenate(parts).astype(np.int64) if parts else np.zeros(0, dtype=np.int64)

    obs_inst, obs_rank, obs_start, obs_end = map(joined, (obs_inst, obs_rank, obs_start, obs_end))
    # Number instances by when they began, so ids read in time order across communicators.
    first = np.full(len(seq), np.iinfo(np.int64).max)
    np.minimum.at(first, obs_inst, obs_start)
    order = np.argsort(first, kind="stable")
    new_id = np.empty_like(order)
    new_id[order] = np.arange(len(order))
    obs_inst = new_id[obs_inst] if len(obs_inst) else obs_inst
    obs_sort = np.lexsort((obs_rank, obs_inst))
    return Collectives(
        comm=[comm[i] for i in order],
        seq=np.array(seq, dtype=np.int64)[order],
        op=np.array(op, dtype=np.int64)[order],
        bytes=np.array(nbytes, dtype=np.int64)[order],
        nranks=np.array(nranks, dtype=np.int64)[order],
        obs_instance=obs_inst[obs_sort],
        obs_rank=obs_rank[obs_sort],
        obs_start=obs_start[obs_sort],
        obs_end=obs_end[obs_sort],
        communicators=communicators,
        warnings=warnings,
    )
