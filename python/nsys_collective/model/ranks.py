"""Ranks: one (report, host, pid, device) each, with their GPU work counted and their number.

A report holds one rank per process and GPU that ran GPU work; a report without any GPU work is
still a rank (with zero kernels), so a rank that did nothing is seen, not silently dropped.
Numbers come from the most trusted source every rank has (see ingest.identity).
"""

from __future__ import annotations

from dataclasses import dataclass

from nsys_collective.model.alignment import Alignment
from nsys_collective.model.trace import RankTrace


@dataclass(frozen=True)
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
    compute_overlap_ns: int
    overlap_share: float | None
    first_ns: int | None
    last_ns: int | None
    export_index: int  # which of the job's inputs holds this rank


def number_ranks(traces: list[RankTrace]) -> tuple[list[tuple[Rank, RankTrace]], list[str]]:
    """Numbers the ranks of all inputs; (rank, its trace) sorted by number."""
    warnings = []
    traces = sorted(traces, key=lambda f: (f.host or "", -1 if f.pid is None else f.pid,
                                           -1 if f.device is None else f.device, f.report))
    numbers = None
    for source in ("env_rank", "file_rank"):
        candidates = [getattr(f, source) for f in traces]
        if all(candidates) and len({c[0] for c in candidates}) == len(candidates):
            numbers = candidates
            break
        if any(candidates):
            warnings.append(f"rank numbers from the {'environment' if source == 'env_rank' else 'file names'} "
                            "are missing or repeat; not used")
    if numbers is None:
        numbers = [(i, "order (host, pid, device)") for i in range(len(traces))]
    ranks = [(Rank(rank=number, report=f.report, host=f.host, pid=f.pid, device=f.device, rank_source=source,
                   export_index=f.index, **f.counts), f) for f, (number, source) in zip(traces, numbers)]
    ranks.sort(key=lambda pair: pair[0].rank)
    return ranks, warnings


# Ranks whose fitted clock offsets agree within this share one clock: where the capture does not
# name hosts (PyTorch profiler traces), that is the best sign that they run on one host.
SAME_CLOCK_NS = 20_000


def hosts_of(ranks: list[Rank], alignment: Alignment) -> dict[int, str]:
    """Each rank's host: its hostname, else (a capture that names none) the ranks sharing its
    fitted clock, named after them."""
    named = {r.rank: r.host for r in ranks}
    unnamed = sorted(r for r, h in named.items() if h is None)
    if not unnamed:
        return named
    a = alignment
    offset = {r: float(a.offset_ns[a.clock_of_rank[r]]) if r in a.clock_of_rank else None for r in unnamed}
    groups: list[list[int]] = []
    for r in unnamed:
        for g in groups:
            if offset[r] is not None and offset[g[0]] is not None and abs(offset[r] - offset[g[0]]) <= SAME_CLOCK_NS:
                g.append(r)
                break
        else:
            groups.append([r])
    for g in groups:
        label = f"the host of ranks {', '.join(map(str, g))}" if len(g) > 1 else f"the host of rank {g[0]}"
        named.update({r: label for r in g})
    return named
