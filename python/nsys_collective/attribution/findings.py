"""The analysis in plain words: what a person should read first."""

from __future__ import annotations

from collections import Counter

import numpy as np

from nsys_collective import causes as cause_kinds
from nsys_collective.units import count
from nsys_collective.units import duration as _ms

MAX_FINDINGS = 5
# Contention is worth a sentence when it cost at least this share of all transfer time.
CONTENTION_SHARE = 0.02
# A straggler is dominant when it caused at least this share of all wait (two ranks taking turns
# by jitter alone hover around half each).
DOMINANT_SHARE = 0.6
# A cause that is not systematic is still named, as likely, when fixing it saves this share of all wait.
LIKELY_SHARE = 0.5


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
    lines = [f"{count(len(job.ranks), 'rank')} on {count(hosts, 'host')}, {count(len(c), 'collective')} matched "
             f"in {count(len(c.communicators), 'communicator')}."]
    total_wait = int(t.wait_cost.sum())
    if len(c):
        lines.append(f"Ranks spent {_ms(total_wait)} of GPU time waiting for the last rank to arrive.")
    dominant = dominant_straggler(job)
    if dominant:
        rank, last, caused = dominant
        lines.append(f"Rank {rank} arrived last in {last} of {count(len(c), 'collective')} and cost the others "
                     f"{_ms(caused)} ({caused / total_wait:.0%} of all wait).")
    return lines


def _op_noun(job) -> str:
    """What the collectives are called in a sentence: their operation when they share one."""
    ops = Counter(job.op_name(i) for i in range(len(job.collectives)))
    return ops.most_common(1)[0][0] if len(ops) == 1 else "collective"


def _per_step(ns: int) -> str:
    return f" and {_ms(ns)} per step" if ns > 0 else ""


def _cause_sentence(cause: dict, total_wait: int) -> str:
    """What a cause is and what fixing it would save, in one sentence."""
    saved = cause["wait_saved_ns"]
    share = f" ({saved / total_wait:.0%} of all collective wait)" if total_wait and saved > 0 else ""
    gain = f"would save {_ms(max(saved, 0))} of wait{share}{_per_step(cause['step_time_saved_ns'])}"
    return cause_kinds.of(cause["cause"]).finding(cause, cause_kinds.where(cause), gain)


def findings(job, b, ct) -> list[str]:
    """Sentences, most important first, from the model (job), its blocking (b) and contention (ct)."""
    t, c = job.timing, job.collectives
    if not len(c):
        return ["No collective was matched across ranks: nothing blocked anything."]
    total_wait = int(t.wait_cost.sum())
    op = _op_noun(job)
    w = b.whatif
    causes = [e for e in (w.causes if w else []) if e["confidence"] == "high"][:MAX_FINDINGS]
    out = [_cause_sentence(e, total_wait) for e in causes]
    dominant = dominant_straggler(job)
    likely = w.causes[0] if w and w.causes and not causes else None
    if likely and total_wait and likely["wait_saved_ns"] >= LIKELY_SHARE * total_wait:
        # Not systematic (seen once, or by little each time), but it accounts for most of the wait.
        out.append(f"Likely (seen too few times to be sure): {_cause_sentence(likely, total_wait)}")
    elif not causes and dominant:
        rank, _, caused = dominant
        if (b.explained_wait_share or 0) < 0.5:
            out.append(f"rank {rank}: its lateness ({_ms(caused)} of wait inflicted) is mostly not explained by the captured "
                       f"work ({b.explained_wait_share or 0:.0%} of the wait would go with every cause found fixed): look at "
                       "its host side or outside the capture.")
        else:
            out.append(f"rank {rank}: no single cause of its lateness stands out; its {_ms(caused)} of inflicted wait is "
                       f"spread over many kernels, host ranges and gaps (see the table below).")
    elif not causes:
        stragglers = Counter(t.straggler.tolist())
        out.append(f"No dominant straggler or cause: the last arrival moves between ranks "
                   f"({', '.join(f'rank {r}: {k}' for r, k in stragglers.most_common(3))} of {len(c)}) "
                   f"and the {_ms(total_wait)} of wait is spread over many kernels.")
    if w is not None and len(w.causes) > 1 and w.ideal["wait_saved_ns"] > 0 and causes:
        out.append(f"Fixing every cause found at once would save {_ms(w.ideal['wait_saved_ns'])} of the {_ms(total_wait)} of wait"
                   f"{_per_step(w.ideal['step_time_saved_ns'])}; the causes overlap, so their savings do not add up.")
    total_transfer = float((t.transfer * c.nranks).sum())
    for e in ct.entries[:2]:
        if e["contention_ns"] and total_transfer and e["contention_ns"] >= CONTENTION_SHARE * total_transfer:
            out.append(f"{e['kernel']} overlapped the transfers of {count(e['collectives'], op)} and slowed them by "
                       f"{_ms(e['contention_ns'])} of GPU time ({e['contention_ns'] / total_transfer:.0%} of all transfer time).")
    return out
