"""Blocking attribution (docs/method.md section 4): what made each collective wait, from the what-if
replays (attribution.whatif).

Each cause the replays found is charged, in every collective, the wait its fix saved there; what
the ideal replay (the causes found fixed together) still leaves is `unexplained`. The same causes,
summed, are the blocking kernels (a kernel longer than its reference, or extra kernels) and the
blocking launches (host time inside an NVTX range or CPU operator, on one rank or a whole host).
Where the straggler's rank runs a program no other rank runs and no cause explains its lateness,
the kernels that ran on it while the others waited ([reference arrival, last arrival]) are shown
instead (`cause: window`), and its blame says so (`blame_method: window`).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

import numpy as np

from nsys_collective import _native
from nsys_collective.attribution.whatif import WhatIf
from nsys_collective.attribution.whatif.candidate import programs
from nsys_collective.causes import HOST, IDLE, KERNEL, UNEXPLAINED, naming_fields, of
from nsys_collective.model.job import Job

MIN_TOLERANCE_NS = 10_000
# A cause is one of a collective's causes only where it saves at least this share of its wait.
MIN_COLLECTIVE_SHARE = 0.01


@dataclass
class Blocking:
    blame: list[list[dict]]  # per instance, largest saving first
    method: list[str]  # per instance: "whatif", "window" or "none"
    kernels: list[dict] = field(default_factory=list)
    launches: list[dict] = field(default_factory=list)
    idle: dict[int, int] = field(default_factory=dict)
    explained_wait_share: float | None = None
    top_blocking_kernel: str | None = None
    tolerance_ns: int = MIN_TOLERANCE_NS
    whatif: WhatIf | None = None


def tolerance(job: Job) -> int:
    """How close two times must be to count as equal: the alignment's median end spread, at least
    10 us."""
    spread = job.alignment.spread_after
    return max(MIN_TOLERANCE_NS, spread.p50 if spread else 0)


def attribute(job: Job, w: WhatIf | None, tolerance_ns: int) -> Blocking:
    c, t = job.collectives, job.timing
    n = len(c)
    result = Blocking(blame=[[] for _ in range(n)], method=["none"] * n, tolerance_ns=int(tolerance_ns), whatif=w)
    if n == 0:
        return result
    total_wait = int(t.wait_cost.sum())
    if w is not None:
        for k, cause in enumerate(w.causes):
            named = {"cause": cause["cause"], **naming_fields(cause), "rank": cause["rank"], "host": cause["host"]}
            where = np.flatnonzero((w.saved[k] > 0) & (w.saved[k] >= MIN_COLLECTIVE_SHARE * t.wait_cost))
            for i, saved in zip(where.tolist(), w.saved[k][where].tolist()):
                result.blame[i].append({**named, "ns": saved, "wait_saved_ns": saved,
                                        "step_time_saved_ns": cause["step_time_saved_ns"]})
        # Per collective, its figures as Python numbers once (numpy's per element are slow).
        ideal_saved, straggler = np.maximum(w.ideal_saved, 0).tolist(), t.straggler.tolist()
        for i, wait in enumerate(t.wait_cost.tolist()):
            if wait > 0:
                result.method[i] = "whatif"
                result.blame[i].sort(key=lambda b: -b["ns"])
                unexplained = wait - ideal_saved[i]
                if unexplained > 0:
                    result.blame[i].append({"cause": "unexplained", "rank": straggler[i], "ns": unexplained,
                                            "wait_saved_ns": None, "step_time_saved_ns": None})
        _aggregate(result, w, job)
        result.explained_wait_share = (min(1.0, max(0.0, w.ideal["wait_saved_ns"] / total_wait)) if total_wait else None)
    _window(job, result, tolerance_ns)
    return result


def _aggregate(result: Blocking, w: WhatIf, job: Job) -> None:
    """The causes as the contract's blocking_kernels and blocking_launches, and idle per rank."""
    for cause in w.causes:
        family = of(cause["cause"]).family
        common = {"wait_saved_ns": cause["wait_saved_ns"], "step_time_saved_ns": cause["step_time_saved_ns"],
                  "collectives": cause["collectives"], "confidence": cause["confidence"]}
        if family is KERNEL:
            result.kernels.append({
                "kernel": cause["name"], "kernel_full": cause["name_full"], "rank": cause["rank"], "cause": cause["cause"],
                "reference": cause["reference"], "blame_ns": cause["excess_ns"],
                "inflicted_wait_ns": max(0, cause["wait_saved_ns"]), **common, "slowdown": cause["slowdown"],
                "runs": cause["runs"], "reference_runs": cause["reference_runs"]})
        elif family is HOST:
            result.launches.append({
                "nvtx": cause["name"], "rank": cause["rank"], "host": cause["host"], "cause": cause["cause"],
                "blame_ns": cause["excess_ns"], "inflicted_wait_ns": max(0, cause["wait_saved_ns"]), **common})
        elif family is IDLE:
            result.idle[cause["rank"]] = result.idle.get(cause["rank"], 0) + cause["wait_saved_ns"]
    top = next((k for k in result.kernels if k["confidence"] == "high"), None)
    result.top_blocking_kernel = top["kernel"] if top else None


def _window(job: Job, result: Blocking, tolerance_ns: int) -> None:
    """Collectives whose wait no cause explains, where the straggler's rank runs a program no
    other rank runs: the kernels on the straggler inside [reference arrival, last arrival]."""
    c, t = job.collectives, job.timing
    work = job.timeline
    alone = None  # the ranks without peers: their programs compared only where a collective asks
    straggler, nranks = t.straggler.tolist(), c.nranks.tolist()
    for i, (lo, hi) in enumerate(zip(t.reference_arrival.tolist(), t.last_arrival.tolist())):
        s = straggler[i]
        explained = sum(b["ns"] for b in result.blame[i] if of(b["cause"]).family is not UNEXPLAINED)
        if nranks[i] < 2 or explained > 0 or hi - lo <= tolerance_ns:
            continue
        if alone is None:
            alone = _ranks_without_peers(job)
        if s not in alone:
            continue
        w = work[s]
        _, items, ns = _native.overlaps(np.array([lo]), np.array([hi]), w.start, w.end)
        scale = min(1.0, (hi - lo) / ns.sum()) if ns.sum() else 0.0
        per_name = defaultdict(int)
        for name, nccl, overlap in zip(w.name[items].tolist(), w.is_nccl[items].tolist(), ns.tolist()):
            if not nccl:  # a collective's own kernel is never a cause
                per_name[name] += round(overlap * scale)
        result.method[i] = "window"
        result.blame[i] = [{"cause": "window", "kernel": work.names.values[w.short_of[key]],
                            "kernel_full": work.names.values[key], "rank": s, "host": job.by_number[s].host, "ns": part,
                            "wait_saved_ns": None, "step_time_saved_ns": None}
                           for key, part in sorted(per_name.items(), key=lambda kv: -kv[1]) if part > 0]
        result.blame[i].append({"cause": "unexplained", "rank": s, "ns": int(t.wait_cost[i]),
                                "wait_saved_ns": None, "step_time_saved_ns": None})


def _ranks_without_peers(job: Job) -> set[int]:
    """Ranks whose compute kernels (by name) no other rank mostly shares: another program."""
    ranks = [r.rank for r in job.ranks if job.traces[r.rank].gpu is not None]
    program = programs(job, ranks)
    sizes = defaultdict(int)
    for p in program.values():
        sizes[p] += 1
    return {r for r, p in program.items() if sizes[p] == 1}
