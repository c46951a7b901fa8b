"""The cross-rank model of one job: ranks, their NCCL operations matched into collective
instances, clocks aligned from those instances, per-instance timing on the aligned clocks, and
what blocked (blocking.py) and slowed (contention.py) each collective."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from nsys_collective import blocking, contention
from nsys_collective.alignment import Alignment, align
from nsys_collective.gpu_work import WorkCache
from nsys_collective.matching import Collectives, match
from nsys_collective.nccl import OPS, SYNC_OPS, NcclOps, nccl_ops
from nsys_collective.ranks import Rank, find_ranks
from nsys_collective.reader import Export
from nsys_collective.timing import Timing, instance_timing


@dataclass
class Analysis:
    exports: list[Export]
    reports: list[str]
    ranks: list[Rank]
    ops: dict[int, NcclOps]
    collectives: Collectives
    alignment: Alignment
    timing: Timing
    aligned_start: np.ndarray  # per observation of `collectives`
    aligned_end: np.ndarray
    warnings: list[str] = field(default_factory=list)
    blocking: blocking.Blocking | None = None
    contention: contention.Contention | None = None
    work: WorkCache | None = None  # each rank's GPU work on the aligned clock, built on first use

    def op_name(self, instance: int) -> str:
        return OPS[int(self.collectives.op[instance])]

    def clock_fitted(self, rank: int) -> bool:
        """Whether the rank's clock took part in the fit (it shares a clock with a rank that has
        matched collectives)."""
        clock = self.alignment.clock_of_rank[rank]
        return any(self.alignment.clock_of_rank[int(r)] == clock for r in np.unique(self.collectives.obs_rank))


def analyze_exports(exports: list[Export], reports: list[str]) -> Analysis:
    ranks, warnings = find_ranks(exports, reports)
    warnings = [f"{report}: {w}" for export, report in zip(exports, reports) for w in export.warnings] + warnings
    ops = {}
    for r in ranks:
        found = nccl_ops(exports[r.export_index], r.pid, r.device) if r.pid is not None else None
        if found is not None and len(found):
            ops[r.rank] = found
        elif len(ranks) > 1:
            warnings.append(f"rank {r.rank} ({r.report}): no NCCL work; it takes part in no collective")
    if not ops:
        warnings.append("no NCCL work found in any rank: there are no collectives to analyze")
    elif len(ops) == 1:
        warnings.append(f"only rank {next(iter(ops))} has NCCL work: nothing to match across ranks")
    collectives = match(ops)
    warnings += collectives.warnings
    sync = np.array([OPS[o] in SYNC_OPS for o in collectives.op], dtype=bool)
    alignment = align(collectives.obs_instance, collectives.obs_rank, collectives.obs_start, collectives.obs_end,
                      sync, {r.rank: r.host for r in ranks})
    warnings += alignment.warnings
    aligned_start = alignment.correct(collectives.obs_rank, collectives.obs_start)
    aligned_end = alignment.correct(collectives.obs_rank, collectives.obs_end)
    timing = instance_timing(collectives.obs_instance, collectives.obs_rank, aligned_start, aligned_end)
    analysis = Analysis(exports=exports, reports=reports, ranks=ranks, ops=ops, collectives=collectives, alignment=alignment,
                        timing=timing, aligned_start=aligned_start, aligned_end=aligned_end, warnings=warnings)
    work = analysis.work = WorkCache(analysis)
    analysis.blocking = blocking.attribute(analysis, work)
    analysis.contention = contention.attribute(analysis, work)
    analysis.warnings += analysis.contention.warnings
    return analysis
