"""Per-step results: the collectives of each training step (`--steps`), their wait and transfer,
the step's straggler and what blocked it."""

from __future__ import annotations

from collections import defaultdict

import numpy as np

from nsys_collective.causes import UNEXPLAINED, in_few_words, of


def per_step(job, b) -> list[dict]:
    """Per training step (job.step): its collectives' wait and transfer, its straggler and what
    blocked it (b: the blocking attribution)."""
    if job.step is None or not any(s is not None for s in job.step):
        return []
    t, c = job.timing, job.collectives
    members: dict[str, list[int]] = defaultdict(list)
    for i, step in enumerate(job.step):
        if step is not None:
            members[step].append(i)
    times = {s["step"]: s for s in (b.whatif.step_times if b.whatif is not None else [])}
    straggler, wait_cost = t.straggler.tolist(), t.wait_cost.tolist()  # as Python numbers, once
    out = []
    for step, ids in members.items():
        caused = defaultdict(int)
        for i in ids:
            caused[straggler[i]] += wait_cost[i]
        blocking = defaultdict(float)
        for i in ids:
            for e in b.blame[i]:
                if of(e["cause"]).family is not UNEXPLAINED:
                    blocking[(in_few_words(e), e["rank"])] += e["ns"]
        top = max(blocking, key=blocking.get) if blocking else None
        ids = np.array(ids)
        out.append({
            "step": step,
            "collectives": len(ids),
            "first_ns": int(t.first_arrival[ids].min()),
            "wait_ns": int(t.wait_cost[ids].sum()),
            "transfer_ns": int((t.transfer[ids] * c.nranks[ids]).sum()),
            "top_straggler_rank": max(caused, key=caused.get) if caused and max(caused.values()) > 0 else None,
            "top_blocker": top[0] if top else None,
            "top_blocker_rank": top[1] if top else None,
            "top_blocker_wait_ns": round(blocking[top]) if top else None,
            "duration_ns": times[step]["duration_ns"] if step in times else None,
            "wait_share": times[step]["wait_share"] if step in times else None,
            "idle_share": times[step]["idle_share"] if step in times else None,
        })
    return sorted(out, key=lambda s: s["first_ns"])
