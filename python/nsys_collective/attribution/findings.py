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
# The verdict names the fewest ranks, each causing at least LARGE_SHARE of the wait and half again
# its fair share (two ranks taking turns by jitter cause about half each), that together cause
# MOST_SHARE of it; "no dominant straggler" only where there are none.
LARGE_SHARE = 0.2
FAIR_SHARE_FACTOR = 1.5
MOST_SHARE = 0.5
# Below this coverage the verdict says how much of the wait the causes found leave unexplained, and where.
EXPLAINED_SHARE = 0.5
# A cause names a rank's kind of lateness in the verdict when it saves at least this share of the
# wait that rank caused.
KIND_SHARE = 0.25


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


def _per_step(ns: int, steps: bool = True) -> str:
    """What fixing it saves of the step time; of the capture's time where the capture marks no steps."""
    return f" and {_ms(ns)} {'per step' if steps else 'of the capture'}" if ns > 0 else ""


def _cause_sentence(cause: dict, total_wait: int, steps: bool = True) -> str:
    """What a cause is and what fixing it would save, in one sentence."""
    saved = cause["wait_saved_ns"]
    share = f" ({saved / total_wait:.0%} of all collective wait)" if total_wait and saved > 0 else ""
    gain = f"would save {_ms(max(saved, 0))} of wait{share}{_per_step(cause['step_time_saved_ns'], steps)}"
    return cause_kinds.of(cause["cause"]).finding(cause, cause_kinds.where(cause), gain)


def _kind_words(cause: dict) -> str:
    """The kind of a rank's lateness, as the verdict names it: a kernel (by name), host time in a
    range, a slow GPU, stalled API calls, a host-bound rank."""
    k = cause_kinds.of(cause["cause"])
    if k.family is cause_kinds.KERNEL:
        return f"{k.label} {cause['name']}"
    if k.family is cause_kinds.HOST:
        return cause_kinds.table_label(cause) + (" on every rank of its host" if k.acts_on == "host" else "")
    return k.label + (f" ({cause['name']})" if cause["name"] else "")


def _ranks_words(ranks: list[int]) -> str:
    if len(ranks) == 1:
        return f"rank {ranks[0]}"
    return f"ranks {', '.join(map(str, ranks[:-1]))} and {ranks[-1]}"


def verdict(job, w, ranks: dict | None = None) -> str | None:
    """The first finding, from the numbers: the ranks that cause most of the wait and the kind of
    their lateness (their top cause), or that no rank does; then the coverage (the share of the wait
    fixing the causes found together removes) and, below EXPLAINED_SHARE, how much is unexplained
    and where it sits (the rank it arrived last on, and how that rank's GPU sat idle)."""
    t, c = job.timing, job.collectives
    total = int(t.wait_cost.sum())
    if not total:
        return None
    stragglers, at = np.unique(t.straggler, return_inverse=True)
    caused = np.bincount(at, weights=t.wait_cost)
    named, acc = [], 0.0
    share_of = {}
    large = max(LARGE_SHARE, FAIR_SHARE_FACTOR / max(len(job.ranks), 1)) * total
    for k in np.argsort(-caused, kind="stable").tolist():
        if caused[k] < large or acc >= MOST_SHARE * total:
            break
        named.append(int(stragglers[k]))
        share_of[named[-1]] = float(caused[k])
        acc += float(caused[k])
    if acc < MOST_SHARE * total:
        named = []
    causes = w.causes if w is not None else []
    if named:
        kinds = []
        for r in named:
            top = next((e for e in causes if e["wait_saved_ns"] >= KIND_SHARE * share_of[r]
                        and (e["rank"] == r or r in (e["ranks"] or []))), None)
            if top is not None:
                kinds.append(f"rank {r}: {_kind_words(top)}")
        kinds = [k.replace(": ", " ", 1) if len(named) > 1 else k for k in kinds]
        who = _ranks_words(sorted(named))
        if len(named) == 1 and kinds:
            kinds = [kinds[0].split(": ", 1)[1]]
        head = (f"{who[0].upper()}{who[1:]} {'causes' if len(named) == 1 else 'cause'} {acc / total:.0%} of the wait "
                f"({_ms(int(acc))} of {_ms(total)})" + (f": {', '.join(kinds)}" if kinds else ""))
    else:
        counts = Counter(t.straggler.tolist())
        head = (f"No dominant straggler: no rank causes more than {caused.max() / total:.0%} of the {_ms(total)} of wait "
                f"(the last arrival moves between ranks: {', '.join(f'rank {r}: {k}' for r, k in counts.most_common(3))} "
                f"of {len(c)})")
    coverage = w.coverage if w is not None else None
    if coverage is None:
        return head + "."
    if coverage >= EXPLAINED_SHARE:
        return head + f"; fixing the causes found together removes {coverage:.0%} of it ({_ms(w.ideal['wait_saved_ns'])})."
    rest = np.maximum(0, t.wait_cost - np.maximum(0, w.ideal_saved))
    by_rank = np.bincount(at, weights=rest)
    k = int(np.argmax(by_rank))
    r = int(stragglers[k])
    idle = (ranks or {}).get(r) or {}
    gap = ""
    if idle.get("idle_ns"):
        gap = (f"; its GPU sat idle {_ms(idle['idle_host_wait_ns'])} waiting for its host, "
               f"{_ms(idle['idle_sync_wait_ns'])} for other streams or events and {_ms(idle['idle_other_ns'])} otherwise")
    late = _late_start(job, r)
    if late > 0 and late * (len(job.ranks) - 1) >= 0.5 * by_rank[k]:
        gap += (f"; rank {r} began the capture {_ms(late)} after the other ranks (their median): that lateness came from "
                "before the capture")
    return (head + f"; the causes found explain only {coverage:.0%} of it: {_ms(int(rest.sum()))} of the wait is unexplained, "
            f"{_ms(int(by_rank[k]))} of it in collectives rank {r} arrived last in{gap}.")


def _late_start(job, rank: int) -> int:
    """How much later than the other ranks' median (aligned clock) a rank began the capture: its
    first step, else its first CUDA call."""
    def start(r):
        steps = job.steps.ranks.get(r) if job.steps is not None else None
        calls = job.traces[r].calls
        first_call = [calls.first_start] if calls is not None and calls.first_start is not None else []
        own = steps.start[:1] if steps is not None and len(steps.start) else first_call
        return int(job.alignment.correct_rank(r, np.asarray(own, np.int64))[0]) if len(own) else None
    mine = start(rank)
    others = [v for v in (start(r.rank) for r in job.ranks if r.rank != rank) if v is not None]
    return int(mine - np.median(others)) if mine is not None and others else 0


def findings(job, b, ct, ranks: dict | None = None) -> list[str]:
    """Sentences, most important first, from the model (job), its blocking (b), contention (ct)
    and the per-rank explanations (ranks: explain_ranks): the verdict, then the causes."""
    t, c = job.timing, job.collectives
    if not len(c):
        return ["No collective was matched across ranks: nothing blocked anything."]
    total_wait = int(t.wait_cost.sum())
    op = _op_noun(job)
    w = b.whatif
    first = verdict(job, w, ranks)
    out = [first] if first else []
    causes = [e for e in (w.causes if w else []) if e["confidence"] == "high"][:MAX_FINDINGS]
    steps = bool(w and w.step_times)
    out += [_cause_sentence(e, total_wait, steps) for e in causes]
    likely = w.causes[0] if w and w.causes and not causes else None
    if likely and total_wait and likely["wait_saved_ns"] >= LIKELY_SHARE * total_wait:
        # Not systematic (seen once, or by little each time), but it accounts for most of the wait.
        out.append(f"Likely (seen too few times to be sure): {_cause_sentence(likely, total_wait, steps)}")
    total_transfer = float((t.transfer * c.nranks).sum())
    for e in ct.entries[:2]:
        if e["contention_ns"] and total_transfer and e["contention_ns"] >= CONTENTION_SHARE * total_transfer:
            out.append(f"{e['kernel']} overlapped the transfers of {count(e['collectives'], op)} and slowed them by "
                       f"{_ms(e['contention_ns'])} of GPU time ({e['contention_ns'] / total_transfer:.0%} of all transfer time).")
    return out
