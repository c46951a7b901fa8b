"""Transfer candidates (`transfer`): transfers slower than the clean baseline of their kind
(contention, network). Fixed: at the baseline."""

from __future__ import annotations

import numpy as np

from nsys_collective.attribution.whatif.candidate import Candidate, Context

# The baseline of a kind of collective is this percentile of its transfers, from this many of them
# on; a transfer this many times its baseline is slow.
TRANSFER_BASELINE_PERCENTILE = 10
MIN_TRANSFER_SAMPLES = 4
SLOW_TRANSFER = 1.2


def transfer_candidates(ctx: Context) -> list[Candidate]:
    """Transfers clearly slower than the fast ones of their kind (contention, a slow link): one
    candidate, every slow transfer of the job at its baseline (a slow link or a contending kernel
    slows the collectives of every communicator that crosses it). The baseline is a low percentile
    of each kind's transfers on every rank, whether compute overlapped them or not (in DDP every bucket but the last overlaps the
    backward pass: there is no clean one); a transfer is slow beyond jitter only when it took
    SLOW_TRANSFER times its baseline. Fixed: at the baseline."""
    job, kind, min_excess = ctx.job, ctx.kind, ctx.min_excess
    col, t = job.collectives, job.timing
    inst = col.obs_instance
    x = np.maximum(0, job.aligned_end - t.last_arrival[inst])
    base = np.full(len(x), -1, dtype=np.int64)
    for k in np.unique(kind).tolist():
        rows = np.flatnonzero(kind[inst] == k)
        if len(rows) >= MIN_TRANSFER_SAMPLES:
            base[rows] = int(np.percentile(x[rows], TRANSFER_BASELINE_PERCENTILE))
    slow = (base >= 0) & (x > SLOW_TRANSFER * base)
    rows = np.flatnonzero(slow)
    excess = int((x[rows] - base[rows]).sum())
    if not len(rows) or excess < min_excess:
        return []
    ops = sorted({job.op_name(int(i)) for i in inst[rows].tolist()})
    name = f"{'/'.join(ops)} transfers"
    return [Candidate(cause="transfer", rank=None, host=None, name=name, name_full=name, reference="baseline",
                      excess_ns=excess, systematic=excess >= 0.1 * max(1, int(x[np.isin(inst, inst[rows])].sum())),
                      change={"member": rows, "member_ns": base[rows]})]
