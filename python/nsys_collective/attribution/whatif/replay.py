"""The replays: each candidate alone, and the causes found fixed together (the ideal), in parallel; what each
saves of the wait and of the step time, and how sure the figure is.

A cause's `wait_saved_ns` is the drop of the summed wait of all ranks over all collectives (GPU
time), `step_time_saved_ns` the mean over steps of how much shorter each step gets (a step ends at
the latest end of its ops on any rank), and per collective the wait it saved.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from nsys_collective import memory
from nsys_collective.attribution.whatif import rank
from nsys_collective.attribution.whatif.candidate import MIN_EXCESS_TOLERANCES, Candidate, Context, programs
from nsys_collective.attribution.whatif.graph import JobGraph
from nsys_collective.attribution.whatif.nccl_slowed import compute_changes
from nsys_collective.causes import CAUSES, candidate_function
from nsys_collective.model.job import Job
from nsys_collective.model.steps import STEP_PATTERN

# A cause is named with confidence when it is systematic (a kernel 10%+ slower or run more often,
# a host range 50%+ longer, on every or most occurrences) and saves at least this share of the wait.
CONFIDENT_SHARE = 0.10
# A cause must save at least its excess threshold of wait, or this share of a step (a transfer
# slowed between queued buckets can cost step time while the ranks wait no more).
MIN_STEP_SHARE = 0.002
# Candidates replayed at most (the largest excess first): each replay is one pass over the job.
MAX_CANDIDATES = 24
# A cause whose fix moves more than this share of the wait to other ranks stays out of the ideal.
MOVED_SHARE = 0.10
# Work the peers do not do is named with confidence when at least this share of it came back as
# step time (the rest was hidden behind queued GPU work, or off the path to the collectives).
ON_PATH_SHARE = 0.25
# The replays run on one thread, reusing one time buffer: another thread's (8 bytes a node, 64 MB
# at 1.9M kernels) would sit on the graph at the command's peak, for a few passes of ~40 ms.
REPLAY_THREADS = 1
# The pickers that read the same shared data (Context.shared) run one after the other, and that
# data goes before the next group: the op runs (kernels.op_runs, 44 MB at 1.9M kernels) and the host
# time (host._host_times) are never held together. The host pickers come first: the last readers of
# the ranks' host calls (with BESIDE_BUILD's and the graph's build), which go after them, before
# the kernel pickers and the replays (HostCalls.release).
HOST_PICKERS = ("host", "host_group", "host_bound")
SHARING = (HOST_PICKERS, ("kernel", "extra_kernel", "slow_device"))
# Light pickers that need no replay graph: picked while the graph is still being built, on the core
# its build leaves idle (their few MB given back before the build's last step, the peak).
BESIDE_BUILD = ("transfer", "api_stall")
_I64_MIN = np.iinfo(np.int64).min


@dataclass
class WhatIf:
    fidelity: dict
    ideal: dict  # wait_saved_ns, step_time_saved_ns
    causes: list[dict]  # the contract's whatif.causes entries, by wait_saved_ns
    saved: list[np.ndarray]  # per cause (in `causes` order): wait saved per collective
    ideal_saved: np.ndarray  # per collective: wait the ideal replay saves
    steps: int
    coverage: float | None  # share of the wait the ideal replay removes
    step_times: list[dict]  # per step: step, duration_ns, wait_share, idle_share
    warnings: list[str] = field(default_factory=list)
    compute: dict[int, tuple[int, int]] = field(default_factory=dict)  # compute_slowdown entry -> (wait, step time) saved



def _merged(changes: list[dict]) -> dict:
    """Every change at once: the shortest duration, gap total and transfer any of them gives."""
    out: dict = {}
    for key, value in (("op", "op_ns"), ("call", "call_ns"), ("segment", "segment_ns"), ("member", "member_ns")):
        ids = [np.asarray(c[key], np.int64) for c in changes if key in c]
        if not ids:
            continue
        ids_all = np.concatenate(ids)
        values = np.concatenate([np.asarray(c[value], np.int64) for c in changes if key in c])
        order = np.lexsort((values, ids_all))
        first = np.r_[True, ids_all[order][1:] != ids_all[order][:-1]]
        out[key], out[value] = ids_all[order][first], values[order][first]
    slack = [np.asarray(c["zero_slack"], np.int64) for c in changes if "zero_slack" in c]
    if slack:
        out["zero_slack"] = np.unique(np.concatenate(slack))
    return out


def _step_time_saved(base: dict, out: dict, job_start: int) -> int:
    """Mean over steps of how much shorter each step got (a step's time: its end minus the
    previous step's end; the first step's: minus the job's start)."""
    ends_base, ends_out = base["step_end"], out["step_end"]
    have = ends_base != _I64_MIN
    if not have.any():
        return 0
    b, o = ends_base[have], ends_out[have]
    saved = np.diff(np.r_[job_start, b]) - np.diff(np.r_[job_start, o])
    return int(round(float(saved.mean())))


def _confidence(c: Candidate, wait_saved: int, step_saved: int, steps: int, total_wait: int) -> str:
    """High for a systematic cause that saves CONFIDENT_SHARE of the wait; work the peers do not do
    must also have lain on the path: a quarter of it back as step time."""
    if not (c.systematic and total_wait > 0 and wait_saved >= CONFIDENT_SHARE * total_wait):
        return "low"
    if c.reference == "none" and step_saved * steps < ON_PATH_SHARE * c.excess_ns:
        return "low"
    return "high"


def _step_times(job: Job, g: JobGraph, base: dict, job_start: int) -> list[dict]:
    """Each step's duration (its end minus the previous step's; the first: minus the job's start),
    and the shares of it (GPU time over all ranks) spent waiting in collectives and idle."""
    ends = base["step_end"]
    have = np.flatnonzero(ends != _I64_MIN)
    if not len(have) or not g.has_steps:
        return []
    starts = np.r_[job_start, ends[have][:-1]]
    durations = ends[have] - starts
    col = job.collectives
    inst_step = np.full(len(base["wait"]), -1, np.int64)
    inst_step[col.obs_instance] = g.op_step[g.member_rows]
    known = inst_step >= 0
    wait = np.bincount(inst_step[known], weights=base["wait"][known], minlength=len(ends))[have]
    busy = np.zeros(len(have))
    for r in g.ranks:
        w = job.timeline[r]
        if not len(w):
            continue
        reach = np.maximum.accumulate(w.end)  # the work is in start order: the GPU is busy until reach
        new = np.flatnonzero(np.r_[True, w.start[1:] > reach[:-1]])  # the GPU's busy blocks: a union of its ops
        block_start, block_end = w.start[new], np.r_[reach[new[1:] - 1], reach[-1]]
        # The blocks are disjoint and sorted: busy time in [a, b] is busy-before(b) - busy-before(a).
        busy += np.maximum(_busy_before(block_start, block_end, ends[have]) - _busy_before(block_start, block_end, starts), 0)
    gpu_time = np.maximum(durations, 1) * len(g.ranks)
    return [{"step": g.step_names[int(i)], "duration_ns": int(d), "wait_share": float(min(1.0, wt / t)),
             "idle_share": float(min(1.0, max(0.0, 1 - b_ / t)))}
            for i, d, wt, b_, t in zip(have.tolist(), durations.tolist(), wait.tolist(), busy.tolist(), gpu_time.tolist())]


def _busy_before(block_start: np.ndarray, block_end: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Per instant of t, the GPU's busy time before it: the lengths of the sorted, disjoint busy
    blocks before it, and the part of the one it falls in."""
    length = block_end - block_start
    done = np.r_[0, np.cumsum(length)]
    k = np.searchsorted(block_start, t, side="right") - 1  # the last block that starts at or before t
    inside = np.clip(t - block_start[np.maximum(k, 0)], 0, length[np.maximum(k, 0)])
    return np.where(k >= 0, done[np.maximum(k, 0)] + inside, 0)


def _ideal(g, base: dict, fixed: list[Candidate], rows: list, replayed: dict[int, dict], job_start: int) -> tuple[dict, int]:
    """The ideal: the replay of the causes fixed together whose wait saved is its wait figure, and
    its step time saved. Wait is not monotone in the fixes (a rank made faster that was not the
    late one waits longer; a faster transfer moves where ranks meet), so every cause at once can
    save less than one cause alone. Each figure of the ideal is therefore the best of a few
    combinations: every cause at once, the causes that save wait at once, and the cause that saves
    the most of either alone (the step time figure may come from another of these replays than
    the wait figure), so the ideal never saves less than a cause the table lists beside it. Each
    distinct set is replayed once; a set of one cause is that cause's own replay (`replayed`: each
    candidate's outcome, by id)."""
    if not fixed:
        return base, 0
    wait = {id(c): w for c, w, *_ in rows}
    step = {id(c): s for c, _, s, *_ in rows}
    saving = [c for c in fixed if wait.get(id(c), 0) > 0]
    listed = [c for c, *_ in rows]
    sets = [fixed, saving, [max(listed, key=lambda c: wait[id(c)])], [max(listed, key=lambda c: step[id(c)])]]
    sets = list({tuple(map(id, s)): s for s in sets if s}.values())  # each distinct set replayed once
    together = [s for s in sets if len(s) > 1]
    replays = iter(g.graph.replay_many([_merged([c.change for c in s]) for s in together], threads=REPLAY_THREADS)
                   if together else [])
    outs = [replayed[id(s[0])] if len(s) == 1 else next(replays) for s in sets]
    waits = [int(base["total_wait"] - out["total_wait"]) for out in outs]
    by_wait = outs[waits.index(max(waits))]  # the first, the larger set, on a tie
    return by_wait, max(_step_time_saved(base, out, job_start) for out in outs)


def analyze(job: Job, g: JobGraph | None, kind: np.ndarray, tolerance_ns: int, step_pattern: str | None = None,
            contention=None, consume: bool = False) -> WhatIf | None:
    """The what-if of every candidate cause of the job (None when there is nothing to replay).
    `g`: the job's graph (build_graph(job, tolerance_ns, step_pattern), started by the caller so
    that it is built while other work runs); `kind`: each collective's kind
    (contention.Contention.kind): transfers compare within it; `contention`
    (contention.Contention): the fitted baselines and what each kernel added; `consume`: nothing
    reads the job's host calls after it, so they go after the host pickers (HostCalls.release)."""
    if g is None:
        return None
    pattern = step_pattern or STEP_PATTERN
    total_wait = int(job.timing.wait_cost.sum())
    # A cause's own excess is time on one rank: it must be worth a few tolerances and a small share
    # of a rank's wait (the wait summed over the ranks grows with the job, one rank's excess does not).
    min_excess = max(MIN_EXCESS_TOLERANCES * tolerance_ns, int(0.002 * total_wait / len(g.ranks)))
    # What fixing it saves is summed over the ranks, as the wait is.
    min_saved = max(MIN_EXCESS_TOLERANCES * tolerance_ns, int(0.002 * total_wait))
    ctx = Context(job=job, graph=g, program=programs(job, g.ranks), kind=kind, tolerance_ns=tolerance_ns,
                  min_excess=min_excess, step_pattern=pattern, contention=contention)
    # The ranks' aligned GPU work (the timeline's copies, 15 MB at 1.9M kernels) is not held beside
    # the graph's last build step (the graph takes the traces' own times) nor under the host
    # pickers: built again by the kernel pickers, their first reader after these. Given back with
    # the contention fit's and the explanations' temporaries.
    job.timeline.release()
    memory.release()
    # Every replayed kind's candidates, in registry order (ties in excess keep it), picked a group
    # of pickers that share data at a time (SHARING), the light ones while the graph is built.
    replayed = [k.kind for k in CAUSES.values() if k.replayed]
    found: dict[str, list[Candidate]] = {}

    def pick(group: tuple[str, ...]) -> None:
        for kind in group:
            found[kind] = candidate_function(CAUSES[kind])(ctx)
        ctx.forget()
        if consume and group is HOST_PICKERS:  # the host calls' last readers
            for trace in job.traces.values():
                if trace.calls is not None:
                    trace.calls.release()
        memory.release()  # the group's data given back, not kept under the next group's

    pick(BESIDE_BUILD)
    g.graph  # built: the other pickers' data is never held beside the build's last step (the peak)
    grouped = (*SHARING, BESIDE_BUILD)
    for group in (*SHARING, *((k,) for k in replayed if not any(k in shared for shared in grouped))):
        pick(group)
    candidates = [c for kind in replayed for c in found[kind]]
    candidates.sort(key=lambda c: -c.excess_ns)
    warnings = []
    if len(candidates) > MAX_CANDIDATES:
        warnings.append(f"what-if: {len(candidates)} candidate causes; the {MAX_CANDIDATES} with the most excess were replayed")
        candidates = candidates[:MAX_CANDIDATES]
    compute = compute_changes(g, contention, min_excess)
    changes = [c.change for c in candidates] + [ch for _, ch in compute]
    # The ranks' aligned GPU work (the timeline's copies, 15 MB at 1.9M kernels) is not held beside
    # the replays' time buffer: built again for the step times, after the replays.
    job.timeline.release()
    memory.release()  # what picking the candidates freed, before the replays
    base = g.graph.replay()  # its time buffer serves the replays after it (REPLAY_THREADS)
    outcomes = g.graph.replay_many(changes, threads=REPLAY_THREADS)
    compute_out = outcomes[len(candidates):]
    outcomes = outcomes[:len(candidates)]
    job_start = int(min(job.alignment.correct_rank(r, np.array([job.traces[r].calls.first_start]))[0]
                        for r in g.ranks if job.traces[r].calls.first_start is not None))
    rows = []
    have = base["step_end"] != _I64_MIN
    mean_step = float(np.diff(np.r_[job_start, base["step_end"][have]]).mean()) if have.any() else 0.0
    min_step_saved = max(tolerance_ns, MIN_STEP_SHARE * mean_step)
    for c, out in zip(candidates, outcomes):
        saved_wait = base["wait"] - out["wait"]
        wait_saved = int(base["total_wait"] - out["total_wait"])
        step_saved = _step_time_saved(base, out, job_start)
        # A candidate whose fix changes nothing worth a word is no cause.
        if wait_saved >= min_saved or step_saved >= min_step_saved:
            rows.append((c, wait_saved, step_saved, saved_wait))
    rows.sort(key=lambda r: (-r[1], -r[2]))
    rows, parent, fixed = rank.nest(rows)
    # The ideal: the causes found, fixed together (`_ideal`). Candidates that changed nothing worth a
    # word stay out, and so do causes kept for the step time they save while moving much wait to other ranks
    # (NCCL's bootstrap on one rank): fixing a rank that was not the late one only makes it wait longer.
    moves = {id(c) for c, wait, *_ in rows if wait < -MOVED_SHARE * total_wait}
    fixed = [c for c in fixed if id(c) not in moves]
    ideal_out, ideal_step = _ideal(g, base, fixed, rows, {id(c): out for c, out in zip(candidates, outcomes)}, job_start)
    g.graph.release_buffers()  # the replays are done
    causes, saved = [], []
    n_steps = len(g.step_names)
    for (c, wait_saved, step_saved, saved_wait), up in zip(rows, parent):
        causes.append({
            "cause": c.cause, "rank": c.rank, "host": c.host, "name": c.name, "reference": c.reference,
            "excess_ns": c.excess_ns, "wait_saved_ns": wait_saved, "step_time_saved_ns": step_saved,
            "collectives": int((saved_wait > 0).sum()),
            "confidence": _confidence(c, wait_saved, step_saved, n_steps, total_wait),
            "name_full": c.name_full, "slowdown": c.slowdown, "runs": c.runs, "reference_runs": c.reference_runs,
            "ranks": c.ranks if c.ranks is not None else ([c.rank] if c.rank is not None else None),
            "context": c.context, "parts": c.parts, "parent": up})
        saved.append(saved_wait)

    fidelity = g.graph.fidelity()
    ideal_wait = int(base["total_wait"] - ideal_out["total_wait"])
    return WhatIf(
        fidelity={k: fidelity[k] for k in ("ops", "explained_start_share", "start_error_ns", "slack_ns",
                                           "inferred_dependencies", "recorded_dependencies")},
        ideal={"wait_saved_ns": ideal_wait, "step_time_saved_ns": ideal_step},
        causes=causes, saved=saved, ideal_saved=base["wait"] - ideal_out["wait"], steps=n_steps,
        coverage=min(1.0, max(0.0, ideal_wait / base["total_wait"])) if base["total_wait"] > 0 else None,
        step_times=_step_times(job, g, base, job_start), warnings=warnings,
        compute={j: (int(base["total_wait"] - out["total_wait"]), _step_time_saved(base, out, job_start))
                 for (j, _), out in zip(compute, compute_out)})
