"""The evidence the charts show beside the document: each rank's GPU work around the worst
collectives (by wait cost), with the runs of the kernel blamed for the straggler's lateness.

Computed once from the model, kept as JSON data in the result (and the store), so that a stored
run draws exactly like a fresh one.
"""

from __future__ import annotations

import numpy as np

from nsys_collective.causes import UNEXPLAINED, of
from nsys_collective.model.job import Job

WORST_TIMELINES = 3
MAX_TIMELINE_RANKS = 12


def _top_blame(blame: list[dict]) -> dict | None:
    return next((b for b in blame if of(b["cause"]).family is not UNEXPLAINED and b["ns"] > 0), None)


def _named_runs(job: Job, w, blame: dict, where: np.ndarray) -> np.ndarray:
    """Indices of the items of w named like the blamed kernel, among `where`."""
    names = job.timeline.names.values
    wanted = {blame.get("kernel_full"), blame.get("kernel")} - {None}
    ids = [full for full, short in w.short_of.items() if names[full] in wanted or names[short] in wanted]
    return np.flatnonzero(where & np.isin(w.name, ids))


def _intervals(w, items: np.ndarray) -> list[list[int]]:
    return [w.start[items].tolist(), w.end[items].tolist()]


def evidence_panels(job: Job, blocking) -> list[dict]:
    """One panel per worst collective: its window [lo, hi] on the aligned clock and, per shown
    rank, its own NCCL kernel (a, e) and the GPU work inside the window by kind."""
    c, t = job.collectives, job.timing
    if not len(c):
        return []
    candidates = np.flatnonzero(c.nranks >= 2)
    worst = candidates[np.argsort(-t.wait_cost[candidates], kind="stable")][:WORST_TIMELINES]
    return [_panel(job, blocking, int(i)) for i in worst]


def _panel(job: Job, blocking, i: int) -> dict:
    c, t = job.collectives, job.timing
    inst = c.obs_instance
    rows = np.arange(np.searchsorted(inst, i, "left"), np.searchsorted(inst, i, "right"))
    ranks = c.obs_rank[rows]
    s = int(t.straggler[i])
    first, last = int(t.first_arrival[i]), int(t.last_arrival[i])
    end = int(job.aligned_end[rows].max())
    if len(ranks) > MAX_TIMELINE_RANKS:  # keep the straggler, then those that waited longest
        keep = np.argsort(-(last - job.aligned_start[rows]), kind="stable")[:MAX_TIMELINE_RANKS - 1]
        rows = rows[np.union1d(keep, np.flatnonzero(ranks == s))]
        ranks = c.obs_rank[rows]
    order = np.argsort(ranks, kind="stable")
    rows, ranks = rows[order], ranks[order]
    span = max(end - first, 1)
    lo, hi = first - max(span // 6, 5_000), end + max(span // 25, 2_000)
    blame = _top_blame(blocking.blame[i])
    ago = None
    # A kernel blamed for the lateness often ran a little before the first arrival: widen the
    # window to its last run on the straggler when that is not far off, else say how far.
    if blame and of(blame["cause"]).family.draws_runs:
        w = job.timeline[s]
        runs = _named_runs(job, w, blame, w.start < last)
        if len(runs) and w.start[runs[-1]] < lo:
            if w.end[runs[-1]] > first - span:
                lo = int(w.start[runs[-1]]) - max(span // 20, 2_000)
            elif w.end[runs[-1]] <= lo:
                ago = first - int(w.end[runs[-1]])
    shown = []
    for obs, rank in zip(rows.tolist(), ranks.tolist()):
        w = job.timeline[rank]
        inside = np.flatnonzero((w.start < hi) & (w.end > lo))
        a, e = int(job.aligned_start[obs]), int(job.aligned_end[obs])
        nccl, kernel = w.is_nccl[inside], w.is_kernel[inside]
        this = (w.start[inside] == a) & (w.end[inside] == e) & nccl
        row = {"rank": rank, "a": a, "e": e,
               "compute": _intervals(w, inside[kernel & ~nccl]),
               "copy": _intervals(w, inside[~kernel & ~nccl]),
               "other_nccl": _intervals(w, inside[nccl & ~this]),
               "blamed": [[], []]}
        if rank == s and blame and of(blame["cause"]).family.draws_runs:
            row["blamed"] = _intervals(w, _named_runs(job, w, blame, (w.start < hi) & (w.end > lo)))
        shown.append(row)
    return {"i": i, "op": job.op_name(i), "seq": int(c.seq[i]), "wait_cost": int(t.wait_cost[i]), "skew": int(t.skew[i]),
            "transfer": int(t.transfer[i]), "straggler": s, "first": first, "last": last, "end": end, "lo": lo, "hi": hi,
            "blame": blame, "ago": ago, "total_ranks": int(c.nranks[i]), "wait": int(t.wait_cost[i]), "rows": shown}
