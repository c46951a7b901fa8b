"""Transfer candidates (`transfer`): transfers slowed by a kernel overlapping them (the contention
fit's share, reference `fit`), and transfers slower than their kind's baseline beyond that (a slow
link, reference `baseline`). Fixed: without that share, at the baseline."""

from __future__ import annotations

import numpy as np

from nsys_collective.attribution.whatif.candidate import Candidate, Context

# The baseline of a kind of collective is this percentile of its transfers, from this many of them
# on; a transfer this many times its baseline is slow.
TRANSFER_BASELINE_PERCENTILE = 10
MIN_TRANSFER_SAMPLES = 4
SLOW_TRANSFER = 1.2


def transfer_candidates(ctx: Context) -> list[Candidate]:
    """Transfers slowed by a kernel overlapping them, and transfers slow beyond that.

    One candidate per kernel (group) the contention fit found costing time: every transfer it
    overlapped runs without the extra its coefficient x overlap gave it (the fitted baseline
    stands in for a clean run, so this needs no transfer that ran alone). Then one candidate for
    what the kernels do not explain (a slow link, a slow rank): every transfer of the job still
    SLOW_TRANSFER times its baseline back at it (a slow link slows the collectives of every
    communicator that crosses it). The baseline is a low percentile of each kind's transfers on
    every rank, less what the fit says the kernels added."""
    job, kind, min_excess, contention = ctx.job, ctx.kind, ctx.min_excess, ctx.contention
    col, t = job.collectives, job.timing
    inst = col.obs_instance
    x = np.maximum(0, job.aligned_end - t.last_arrival[inst])
    out = []
    explained = np.zeros(len(x))
    if contention is not None:
        for j, per_instance in contention.by_group:
            e = contention.entries[j]
            rows = np.flatnonzero(per_instance[inst] >= 1)
            explained += per_instance[inst]
            if e["contention_ns"] < min_excess or not len(rows):
                continue
            out.append(Candidate(cause="transfer", rank=None, host=None, name=e["kernel"], name_full=e["kernel_full"],
                                 reference="fit", excess_ns=int(e["contention_ns"]), systematic=e["confidence"] == "high",
                                 change={"member": rows, "member_ns": np.maximum(0, np.rint(x[rows] - per_instance[inst[rows]])).astype(np.int64)}))
    rest = x - explained
    base = np.full(len(x), -1, dtype=np.int64)
    for k in np.unique(kind).tolist():
        rows = np.flatnonzero(kind[inst] == k)
        if len(rows) >= MIN_TRANSFER_SAMPLES:
            base[rows] = int(np.percentile(rest[rows], TRANSFER_BASELINE_PERCENTILE))
    slow = (base >= 0) & (rest > SLOW_TRANSFER * base)
    rows = np.flatnonzero(slow)
    target = np.rint(base[rows] + explained[rows]).astype(np.int64)
    excess = int((x[rows] - target).sum())
    if not len(rows) or excess < min_excess:
        return out
    ops = sorted({job.op_name(i) for i in np.unique(inst[rows]).tolist()})  # per collective, not per member
    name = f"{'/'.join(ops)} transfers"
    return out + [Candidate(cause="transfer", rank=None, host=None, name=name, name_full=name, reference="baseline",
                            excess_ns=excess, systematic=excess >= 0.1 * max(1, int(x[np.isin(inst, inst[rows])].sum())),
                            change={"member": rows, "member_ns": target})]
