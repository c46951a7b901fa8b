"""The analysis in plain words: what a person should read first."""

from __future__ import annotations

from collections import Counter

import numpy as np

from nsys_collective.units import duration_text as _ms
from nsys_collective.units import ms_cell

MAX_FINDINGS = 5
# Contention is worth a sentence when it cost at least this share of all transfer time.
CONTENTION_SHARE = 0.02
# A straggler is dominant when it caused at least this share of all wait (two ranks taking turns
# by jitter alone hover around half each).
DOMINANT_SHARE = 0.6


def dominant_straggler(job) -> tuple[int, int, int] | None:
    """(rank, collectives it was last in, wait it caused) of the dominant straggler, if any."""
    t = job.timing
    total = int(t.wait_cost.sum())
    if not total:
        return None
    ranks, at = np.unique(t.straggler, return_inverse=True)
    caused = np.bincount(at, weights=t.wait_cost)
    top = int(np.argmax(caused))
    if caused[top] < DOMINANT_SHARE * total:
        return None
    return int(ranks[top]), int((at == top).sum()), int(caused[top])


def verdict_lines(job) -> list[str]:
    """What the verdict opens with, before the findings: the job, its total wait, its dominant
    straggler."""
    t, c = job.timing, job.collectives
    hosts = len({r.host for r in job.ranks})
    lines = [f"{len(job.ranks)} ranks on {hosts} host{'s' * (hosts != 1)}, {len(c)} collectives matched "
             f"in {len(c.communicators)} communicator{'s' * (len(c.communicators) != 1)}."]
    total_wait = int(t.wait_cost.sum())
    if len(c):
        lines.append(f"Ranks spent {ms_cell(total_wait)} ms of GPU time waiting for the last rank to arrive.")
    dominant = dominant_straggler(job)
    if dominant:
        rank, count, caused = dominant
        lines.append(f"Rank {rank} arrived last in {count} of {len(c)} collectives and cost the others "
                     f"{ms_cell(caused)} ms ({caused / total_wait:.0%} of all wait).")
    return lines


def _op_plural(job) -> str:
    ops = Counter(job.op_name(i) for i in range(len(job.collectives)))
    return f"{ops.most_common(1)[0][0]}s" if len(ops) == 1 else "collectives"


def findings(job, b, ct) -> list[str]:
    """Sentences, most important first, from the model (job), its blocking (b) and contention (ct)."""
    t, c = job.timing, job.collectives
    if not len(c):
        return ["No collective was matched across ranks: nothing blocked anything."]
    total_wait = int(t.wait_cost.sum())
    ops = _op_plural(job)
    others = "the other rank" if len(job.ops) == 2 else f"the other {len(job.ops) - 1} ranks"
    out = []
    causes = [(e["inflicted_wait_ns"], "kernel", e) for e in b.kernels if e["confidence"] == "high"]
    causes += [(e["inflicted_wait_ns"], "launch", e) for e in b.launches if e["confidence"] == "high"]
    for inflicted, kind, e in sorted(causes, key=lambda x: -x[0])[:MAX_FINDINGS]:
        share = f"{inflicted / total_wait:.0%} of all collective wait" if total_wait else "no wait"
        cost = f"{others} waited {_ms(inflicted)} in total ({share})"
        if kind == "launch":
            out.append(f"rank {e['rank']}: kernel launches came late while the host was in '{e['nvtx'] or 'no NVTX range'}' "
                       f"and made {e['collectives']} of {len(c)} {ops} late; {cost}.")
        elif e["cause"] == "window":
            out.append(f"rank {e['rank']}: {e['kernel']} was running while the others waited, in {e['collectives']} "
                       f"{ops} (its ranks run different programs); {cost}.")
        elif e["runs"] > e["reference_runs"]:
            out.append(f"rank {e['rank']}: {e['kernel']} ran {e['runs']} times against {e['reference_runs']} on the other ranks "
                       f"(more work on this rank) and made {e['collectives']} of {len(c)} {ops} late; {cost}.")
        else:
            out.append(f"rank {e['rank']}: {e['kernel']} ran {e['slowdown']:.0%} longer than on the other ranks and made "
                       f"{e['collectives']} of {len(c)} {ops} late; {cost}.")
    dominant = dominant_straggler(job)
    if not causes and dominant:
        rank, _, caused = dominant
        if (b.explained_wait_share or 0) < 0.5:
            out.append(f"rank {rank}: its lateness ({_ms(caused)} of wait inflicted) is mostly not explained by the captured "
                       f"GPU work ({b.explained_wait_share or 0:.0%} explained): look at its host side or outside the capture.")
        else:
            out.append(f"rank {rank}: no single cause of its lateness stands out; its {_ms(caused)} of inflicted wait is "
                       f"spread over many kernels, launches and gaps (see the table below).")
    elif not causes:
        stragglers = Counter(t.straggler.tolist())
        out.append(f"No dominant straggler or cause: the last arrival moves between ranks "
                   f"({', '.join(f'rank {r}: {k}' for r, k in stragglers.most_common(3))} of {len(c)}) "
                   f"and the {_ms(total_wait)} of wait is spread over many kernels.")
    total_transfer = float((t.transfer * c.nranks).sum())
    for e in ct.entries[:2]:
        if e["contention_ns"] and total_transfer and e["contention_ns"] >= CONTENTION_SHARE * total_transfer:
            out.append(f"{e['kernel']} overlapped the transfers of {e['collectives']} {ops} and slowed them by "
                       f"{_ms(e['contention_ns'])} of GPU time ({e['contention_ns'] / total_transfer:.0%} of all transfer time).")
    return out
