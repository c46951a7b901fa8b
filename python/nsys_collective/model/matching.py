"""Matching each collective across ranks (docs/method.md section 1).

NCCL makes every rank of a communicator issue its operations in the same order, so the k-th
operation of a communicator on each rank is one collective instance. Without NCCL payloads (not
in a default export) a communicator is found as a stream per rank whose sequences of operation
kinds agree: PyTorch uses one NCCL stream per process group and device. A point-to-point stream
pairs with the one peer stream whose sends are its receives and back (a pipeline stage talks to
each neighbour on its own stream). Ends of one instance are near-simultaneous on all its ranks,
up to each clock's offset and drift: a stream joins a group only where its end times follow the
group's that way (two groups running the same program, tensor-parallel groups on two hosts, are
told apart so), and of several such groups the nearest. What cannot be matched is reported with
counts, never dropped silently.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from nsys_collective.model.nccl import OPS, NcclOps
from nsys_collective.model.timing import message_sizes

# Kinds taken from a kernel name alone say little: `SendRecv` and `Generic` kernels carry many
# collectives. They match any kind; a named kind in another rank's sequence decides.
WEAK = np.array([op in ("SendRecv", "Generic") for op in OPS])
# A send pairs with a receive, never with another send.
P2P = np.array([op in ("Send", "Recv") for op in OPS])
PAIR = OPS.index("SendRecv")
# Two streams of one communicator end each instance together, up to their clocks' offsets, which
# change slowly: from one instance to the next, the difference of their end times changes by
# jitter only (a few us), while two groups running the same program wander apart by tens of us.
# The spread of those changes (median absolute deviation) decides, from this many common
# operations on: a stream joins a group of two or more where its spread against the group is at
# most RATIO times the group's own (or FLOOR), a lone stream where it is at most LOOSE.
MIN_TIMED = 4
SPREAD_FLOOR_NS = 8_000
SPREAD_RATIO = 4.0
SPREAD_LOOSE_NS = 50_000
# The spread is a median: it forgives a few odd instances, and two groups that run in lockstep
# (the data-parallel groups of a tensor-parallel job, held together by their TP groups) have a
# tiny one. They part where one group is held up, a one-off stall on one rank: for that instance
# the difference of end times jumps by the stall and back. Within one communicator it never jumps
# by more than jitter (27 us at most on the real sets), so a jump of this much parts two streams.
MAX_JUMP_NS = 1_000_000


def _compatible(a: np.ndarray, b: np.ndarray) -> bool:
    """Kind by kind: the same kind, a weak kind on either side, or a send against a receive."""
    pair = P2P[a] & P2P[b]
    return bool(np.all(np.where(pair, a != b, (a == b) | WEAK[a] | WEAK[b])))


def _steps(a: np.ndarray, b: np.ndarray) -> np.ndarray | None:
    """How much the difference of end times a and b (a common prefix) changes from one instance to
    the next, beyond a steady trend (None with too few instances to tell)."""
    n = min(len(a), len(b))
    if n < MIN_TIMED:
        return None
    step = np.diff((a[:n] - b[:n]).astype(np.float64))
    return np.abs(step - np.median(step))


def _spread(a: np.ndarray, b: np.ndarray) -> float | None:
    """The typical change of _steps (their median)."""
    steps = _steps(a, b)
    return None if steps is None else float(np.median(steps))


@dataclass(frozen=True)
class Stopped:
    """A communicator whose ranks did not all reach its last operation: per rank, how many of its
    operations it reached and the last one's kind; `early`, the ranks that stopped before the others.
    `communicator` is None for a rank's stream that matches no other rank's."""

    communicator: str | None
    streams: tuple[int, ...]
    reached: tuple[tuple[int, int, str], ...]  # (rank, operations reached, the last one's kind)
    early: tuple[int, ...]


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
    internal: float = 0.0  # the largest spread of a member against the first

    def accepts(self, s: _Stream) -> bool:
        if any(m.rank == s.rank for m in self.members) or (self.pairs and len(self.members) == 2):
            return False
        n = min(len(s.op), len(self.op))
        first = self.members[0].op[:n]  # a pair's aggregated kind is SendRecv: compare with a member
        if not _compatible(s.op[:n], first if self.pairs else self.op[:n]):
            return False
        steps = _steps(s.end, self.end)
        if steps is None:
            return True
        if steps.max() > MAX_JUMP_NS:
            return False
        spread = float(np.median(steps))
        limit = SPREAD_LOOSE_NS if len(self.members) == 1 else max(SPREAD_FLOOR_NS, SPREAD_RATIO * self.internal)
        return spread <= limit

    @property
    def pairs(self) -> bool:
        """A point-to-point pair: its kinds are sends and receives."""
        return bool(P2P[self.members[0].op].any())

    def distance(self, s: _Stream) -> tuple[float, float]:
        """How far the stream is from the group: the spread of their end times' differences, then
        the median distance of their ends."""
        n = min(len(s.end), len(self.end))
        return (_spread(s.end, self.end) or 0.0, float(np.median(np.abs(s.end[:n] - self.end[:n]))) if n else 0.0)

    def add(self, s: _Stream) -> None:
        if self.members:
            self.internal = max(self.internal, _spread(s.end, self.end) or 0.0)
        self.members.append(s)
        n = min(len(s.op), len(self.op))
        stronger = WEAK[self.op[:n]] & ~WEAK[s.op[:n]]
        self.op[:n][stronger] = s.op[:n][stronger]
        self.op[:n][P2P[self.op[:n]] & P2P[s.op[:n]]] = PAIR  # a send and its receive: one transfer


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
    # Per instance: where `bytes` came from (model.nccl.BYTES_SOURCES), None where unknown.
    bytes_source: np.ndarray | None = None
    obs_launch: np.ndarray | None = None  # per observation: its op's launch call start (own clock), -1 unknown
    # Per instance: the most bytes a member sent over the network (model.nccl_net), -1 where none.
    wire_bytes: np.ndarray | None = None
    # Communicators (or lone streams) whose ranks did not all reach the same operation: for a hang
    # or a mismatch, which ranks stopped where (Stopped, one per such communicator).
    stopped: list[Stopped] = field(default_factory=list)

    def __post_init__(self):
        if self.wire_bytes is None:
            self.wire_bytes = np.full(len(self.seq), -1, dtype=np.int64)
        if self.bytes_source is None:
            self.bytes_source = np.where(self.bytes >= 0, "record_param_comms", None).astype(object)
        if self.obs_launch is None:
            self.obs_launch = np.full(len(self.obs_instance), -1, dtype=np.int64)

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
            warnings=self.warnings, stopped=self.stopped, bytes_source=self.bytes_source[kept], obs_launch=self.obs_launch[rows],
            wire_bytes=self.wire_bytes[kept])


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
    comm, seq, op, nranks, nbytes, wire, algorithm, size_from = [], [], [], [], [], [], [], []
    obs_inst, obs_rank, obs_start, obs_end, obs_launch = [], [], [], [], []
    communicators: dict[str, list[int]] = {}
    stopped: list[Stopped] = []
    groups.sort(key=lambda g: min(ops_by_rank[m.rank].start[m.rows[0]] for m in g.members))
    for g in groups:
        members = sorted(g.members, key=lambda m: m.rank)
        if len(members) == 1 and ranks_with_work > 1:
            m = members[0]
            warnings.append(f"rank {m.rank}: {len(m.rows)} NCCL operations on stream {m.stream} match no other rank's; not analyzed")
            stopped.append(Stopped(None, (m.stream,), ((m.rank, len(m.rows), OPS[g.op[len(m.rows) - 1]]),), ()))
            continue
        count = min(len(m.rows) for m in members)
        for m in members:
            if len(m.rows) > count:
                warnings.append(f"rank {m.rank}: {len(m.rows) - count} NCCL operations on stream {m.stream} beyond the "
                                f"{count} its peers captured (a capture cut short?); not analyzed")
        streams_used = sorted({m.stream for m in members})
        name = f"c{len(communicators)}:stream{'/'.join(map(str, streams_used))}"
        reached = [len(m.rows) for m in members]
        if min(reached) < max(reached):
            stopped.append(Stopped(name, tuple(streams_used), tuple((m.rank, n, OPS[g.op[n - 1]]) for m, n in zip(members, reached)),
                                   tuple(m.rank for m, n in zip(members, reached) if n < max(reached))))
        communicators[name] = [m.rank for m in members]
        base = len(seq)
        comm += [name] * count
        seq += range(count)
        op += g.op[:count].tolist()
        nranks += [len(members)] * count
        # A size any member knows (the ranks of one call pass the same size).
        nbytes += np.max([ops_by_rank[m.rank].bytes[m.rows[:count]] for m in members], axis=0).tolist()
        size_from += np.max([ops_by_rank[m.rank].size_source[m.rows[:count]] for m in members], axis=0).tolist()
        # The rank that sent the most over the network saw the whole transfer (others may have sent
        # part of it between GPUs of their host, which the network NVTX does not record).
        wire += np.max([ops_by_rank[m.rank].wire_bytes[m.rows[:count]] for m in members], axis=0).tolist()
        algorithm += np.max([ops_by_rank[m.rank].algorithm[m.rows[:count]] for m in members], axis=0).tolist()
        for m in members:
            rows = m.rows[:count]
            obs_inst.append(base + np.arange(count))
            obs_rank.append(np.full(count, m.rank))
            obs_start.append(ops_by_rank[m.rank].start[rows])
            obs_end.append(ops_by_rank[m.rank].end[rows])
            obs_launch.append(ops_by_rank[m.rank].launch[rows])

    def joined(parts):
        return np.concatenate(parts).astype(np.int64) if parts else np.zeros(0, dtype=np.int64)

    obs_inst, obs_rank, obs_start, obs_end, obs_launch = map(joined, (obs_inst, obs_rank, obs_start, obs_end, obs_launch))
    nbytes, source = message_sizes(np.array(nbytes, dtype=np.int64), np.array(wire, dtype=np.int64),
                                   np.array(op, dtype=np.int64), np.array(nranks, dtype=np.int64),
                                   np.array(algorithm, dtype=np.int64), np.array(size_from, dtype=np.int64))
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
        bytes=nbytes[order],
        nranks=np.array(nranks, dtype=np.int64)[order],
        obs_instance=obs_inst[obs_sort],
        obs_rank=obs_rank[obs_sort],
        obs_start=obs_start[obs_sort],
        obs_end=obs_end[obs_sort],
        communicators=communicators,
        warnings=warnings,
        stopped=stopped,
        bytes_source=source[order],
        wire_bytes=np.array(wire, dtype=np.int64)[order],
        obs_launch=obs_launch[obs_sort],
    )
