"""Matching collectives across ranks without NCCL payloads: by stream, kind sequence and timing."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from nsys_collective.model.matching import match
from nsys_collective.model.nccl import OPS, NcclOps

rng = np.random.default_rng(3)


def ops(ends, kinds, stream=13) -> NcclOps:
    ends = np.asarray(ends, dtype=np.int64)
    return NcclOps(start=ends - 50_000, end=ends, stream=np.full(len(ends), stream),
                   op=np.array([OPS.index(k) for k in kinds]), bytes=np.full(len(ends), -1))


def test_two_groups_running_the_same_program_are_told_apart_by_their_timing():
    """Tensor-parallel groups {0, 1} and {2, 3}: the same kinds on the same stream. Within a group
    the ends agree to a few us at every instance; the two groups wander apart by tens of us."""
    n = 24
    t = np.arange(n) * 1_000_000
    group_a = t + np.cumsum(rng.normal(0, 20_000, n)).astype(np.int64)
    group_b = t + 3_000_000 + np.cumsum(rng.normal(0, 20_000, n)).astype(np.int64)  # another host's clock
    jitter = lambda: rng.integers(-2_000, 2_000, n)  # noqa: E731
    kinds = ["AllReduce"] * n
    found = match({0: ops(group_a + jitter(), kinds), 1: ops(group_a + jitter(), kinds),
                   2: ops(group_b + jitter(), kinds), 3: ops(group_b + jitter(), kinds)})
    assert sorted(found.communicators.values()) == [[0, 1], [2, 3]]
    assert set(found.nranks.tolist()) == {2}


def test_a_lone_collective_still_matches_without_timing_evidence():
    found = match({0: ops([1_000_000], ["AllReduce"]), 1: ops([1_003_000], ["AllReduce"])})
    assert list(found.communicators.values()) == [[0, 1]]


def test_pipeline_neighbours_pair_a_send_with_its_receive():
    """Four stages: each talks to its neighbours on one stream per neighbour (17 forward, 13 back);
    a stage's sends are its neighbour's receives. Same-kind streams never pair."""
    n = 12
    t = np.arange(n) * 500_000
    fwd, bwd = ["Send", "Send", "Recv", "Recv"] * 3, ["Recv", "Recv", "Send", "Send"] * 3
    streams = {}
    for r in range(4):
        parts = []
        if r < 3:  # to the next stage
            parts.append(ops(t + 10_000 * r + rng.integers(-1_000, 1_000, n), fwd, stream=17))
        if r > 0:  # to the previous stage
            parts.append(ops(t + 10_000 * (r - 1) + rng.integers(-1_000, 1_000, n), bwd, stream=13))
        streams[r] = NcclOps(*(np.concatenate([getattr(p, f) for p in parts]) for f in ("start", "end", "stream", "op", "bytes")))
    found = match(streams)
    assert sorted(found.communicators.values()) == [[0, 1], [1, 2], [2, 3]]
    assert {OPS[o] for o in found.op} == {"SendRecv"} and set(found.nranks.tolist()) == {2}


def test_ranks_that_stopped_earlier_are_named_per_communicator():
    """A hang or a mismatch: rank 2 stopped after 3 of the communicator's 5 operations; rank 3's
    stream matches nobody. Which ranks stopped where is said, not only counted (issue 21)."""
    t = np.arange(1, 6) * 1_000_000
    kinds = ["AllReduce", "AllGather", "AllReduce", "ReduceScatter", "AllReduce"]
    found = match({0: ops(t, kinds), 1: ops(t + 1_000, kinds), 2: ops(t[:3] + 2_000, kinds[:3]),
                   3: ops([9_000_000, 9_500_000], ["Broadcast", "Broadcast"], stream=77)})
    stopped = {s.communicator: s for s in found.stopped}
    comm = next(c for c in stopped if c is not None)
    assert stopped[comm].reached == ((0, 5, "AllReduce"), (1, 5, "AllReduce"), (2, 3, "AllReduce"))
    assert stopped[comm].early == (2,)
    assert stopped[None].reached == ((3, 2, "Broadcast"),) and stopped[None].streams == (77,)
    assert len(found.seq) == 3, "only what every rank reached is analyzed"


def test_where_ranks_stopped_reads_in_the_terminal_and_the_report():
    from nsys_collective.render.terminal import stopped_lines
    from nsys_collective.result import RankReached, StoppedCommunicator

    stopped = (StoppedCommunicator("c0:stream13", (13,), (RankReached(0, 5, "AllReduce"), RankReached(1, 5, "AllReduce"),
                                                          RankReached(2, 3, "AllReduce")), (2,)),
               StoppedCommunicator(None, (77,), (RankReached(3, 2, "Broadcast"),), ()))
    document = SimpleNamespace(stopped=stopped)
    assert stopped_lines(document) == [
        "c0:stream13: 2 ranks (0, 1) reached operation 5 (AllReduce), 1 rank (2) reached operation 3 (AllReduce); "
        "rank 2 stopped earlier.",
        "stream 77: 1 rank (3) reached operation 2 (Broadcast), matching no other rank's operations."]
