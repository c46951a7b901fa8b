"""Compute kernels NCCL slowed (contention's other direction, attribution/contention.py): each
replayed with its runs beside NCCL at the duration the fit says they would take alone. Not a
cause of the wait table: its savings go to `compute_slowdown[]`."""

from __future__ import annotations

import numpy as np

from nsys_collective.attribution.whatif.graph import JobGraph

MAX_COMPUTE_REPLAYS = 8


def compute_changes(g: JobGraph, contention, min_excess: int) -> list[tuple[int, dict]]:
    """(entry, change) per compute kernel the fit says NCCL slowed by at least min_excess."""
    if contention is None:
        return []
    out = []
    first_op = np.full(max(g.op_offset, default=-1) + 1, -1, np.int64)  # each rank's first op row, by rank number
    first_op[list(g.op_offset)] = list(g.op_offset.values())
    for j, (e, ch) in enumerate(zip(contention.compute_slowdown, contention.compute_changes)):
        if e["slowed_ns"] < min_excess or len(out) >= MAX_COMPUTE_REPLAYS:
            continue
        known = np.isin(ch["rank"], list(g.op_offset))
        out.append((j, {"op": first_op[ch["rank"][known]] + ch["row"][known], "op_ns": ch["ns"][known].astype(np.int64)}))
    return out
