"""A candidate cause, what every candidate picker reads, and the thresholds they share."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, TypeVar

import numpy as np

from nsys_collective.attribution.whatif.graph import JobGraph
from nsys_collective.model.job import Job

# A kernel or a host range is a candidate when it ran at least this much longer than its
# reference, summed over its runs (run-to-run jitter averages out in the sum: a real slowdown does not).
MIN_SLOWDOWN = 0.05
# ... and when its excess is at least this many tolerances (a few us of jitter is no cause).
MIN_EXCESS_TOLERANCES = 4
# Ranks run the same program when their compute kernel names overlap this much (Jaccard).
SAME_PROGRAM = 0.5


@dataclass
class Candidate:
    cause: str  # a kind of attribution.causes
    rank: int | None  # rank number; None for host_group and transfer
    host: str | None
    name: str | None  # kernel short name, host range family, API, or what transferred
    name_full: str | None
    reference: str | None  # peers | self | baseline | none (work the peers do not do: not doing it)
    excess_ns: int  # the cause's own extra time, what fixing it removes
    systematic: bool
    change: dict  # a ReplayGraph change
    slowdown: float | None = None
    runs: int | None = None
    reference_runs: int | None = None
    ranks: list[int] | None = None  # the ranks it acts on (a host-wide cause: every rank of the host)
    context: list[str] | None = None  # ranges around the one that names it, in the same host gap
    parts: list[dict] | None = None  # a rank-level cause's largest parts (rank.nest)


T = TypeVar("T")


@dataclass
class Context:
    """What every candidate picker reads: one signature for all of them, so that the replay calls
    each cause's picker the same way."""

    job: Job
    graph: JobGraph
    program: dict[int, int]  # rank number -> its program (`programs`)
    kind: np.ndarray  # each collective's kind (contention.Contention.kind): transfers compare within it
    tolerance_ns: int
    min_excess: int  # the least excess of one cause worth replaying
    step_pattern: str
    contention: Any = None  # contention.Contention: the fitted baselines and what each kernel added
    _shared: dict = field(default_factory=dict)

    def shared(self, build: Callable[[Context], T]) -> T:
        """`build(self)`, computed once for all the pickers that read it (the kernel runs, the
        host time)."""
        if build not in self._shared:
            self._shared[build] = build(self)
        return self._shared[build]

    def forget(self) -> None:
        """Drops what the pickers shared so far: the next ones read other data (replay.SHARING)."""
        self._shared.clear()


def programs(job: Job, ranks: list[int]) -> dict[int, int]:
    """Ranks that run the same program (their compute kernel names overlap) share a number."""
    names = {}
    for rank in ranks:
        w = job.timeline[rank]
        # The names its compute kernels use, marked in a table of the job's name ids (from -1):
        # one pass over a quarter million runs, no hashing of them.
        used = np.zeros(len(job.timeline.names.values) + 1, bool)
        used[w.name[w.is_compute] + 1] = True
        names[rank] = set((np.flatnonzero(used) - 1).tolist())
    program, representatives = {}, []
    for rank in ranks:
        for k, rep in enumerate(representatives):
            union = len(names[rank] | names[rep])
            if union == 0 or len(names[rank] & names[rep]) / union >= SAME_PROGRAM:
                program[rank] = k
                break
        else:
            program[rank] = len(representatives)
            representatives.append(rank)
    return program
