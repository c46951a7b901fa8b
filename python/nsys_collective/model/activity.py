"""A rank's GPU activity over the analyzed part of the capture (model.steps): its NCCL time and the
share of it with compute beside it, as model.trace counts them over the whole capture.

Only kernels count (HTA's and NVIDIA's overlap figure; copies are neither communication nor
computation there). With a step selection a kernel counts when it was launched inside an analyzed
step; a kernel whose launch is not in the capture belongs to no step and does not count (HTA drops
such kernels too).
"""

from __future__ import annotations

import numpy as np

from nsys_collective import _native
from nsys_collective.model.steps import StepSelection
from nsys_collective.model.trace import RankTrace


def analyzed_ops(trace: RankTrace, selection: StepSelection | None, rank: int) -> np.ndarray:
    """Which of the rank's GPU ops (trace.gpu rows) the analysis covers: launched in an analyzed
    step, or all of them without a restriction."""
    g = trace.gpu
    if g is None:
        return np.zeros(0, dtype=bool)
    if selection is None:
        return np.ones(len(g.start), dtype=bool)
    return selection.analyzed(rank, g.launch)


def overlap_figures(trace: RankTrace, analyzed: np.ndarray) -> dict:
    """nccl_time_ns, compute_overlap_ns and overlap_share of the rank over its `analyzed` ops
    (analyzed_ops)."""
    g = trace.gpu
    if g is None:
        return {"nccl_time_ns": 0, "compute_overlap_ns": 0, "overlap_share": None}
    kernels = analyzed & g.is_kernel
    # One pass in the core over the rank's kernels in start order, as the map counted them all.
    nccl_time, overlap = _native.nccl_overlap(g.start, g.end, g.is_nccl, kernels)
    return {"nccl_time_ns": nccl_time, "compute_overlap_ns": overlap,
            "overlap_share": overlap / nccl_time if nccl_time else None}
