"""Blocking attribution (method.md section 4): why the straggler of each collective was late.

For each instance, the straggler s is compared with a reference rank q of the same communicator
that arrived nearest the median arrival. The native lateness accounting (native/src/lateness.rs)
pairs their GPU work by name, walks back to where s was last on time and gives every later
increase of the lateness a cause: a kernel (longer on s, or run only by s), a late host launch,
or idle. Windows to search start at the same communicator's 1, 2, 4, 8, 16 collectives earlier,
so a rank that fell behind early is charged to the root cause, not to innocent kernels near the
collective. Where s and q did not run the same program, the kernels running on s's GPU inside
[reference arrival, last arrival] are blamed for their overlap instead (`cause: window`).

Each part's share of the straggler's lateness is also its share of the instance's wait cost:
that is the wait it inflicted on the other ranks.
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass, field

import numpy as np

from nsys_collective import _native
from nsys_collective.attribution.causes import Cause, from_code
from nsys_collective.model.job import Job
from nsys_collective.model.timeline import Timeline

WINDOW_STEPS = (1, 2, 4, 8, 16)
MAX_WINDOW_ITEMS = 20_000
MIN_TOLERANCE_NS = 10_000
# A blocking entry is named with confidence when it caused at least this share of all wait and
# is more than jitter: a kernel that ran on the straggler more often than on its references, or
# at least this much longer there (durations vary by a few percent run to run); a late launch
# that cost this many times the alignment tolerance per collective.
CONFIDENT_SHARE = 0.1
CONFIDENT_SLOWDOWN = 0.10
CONFIDENT_LAUNCH_TOLERANCES = 5


@dataclass
class Blocking:
    blame: list[list[dict]]  # per instance
    reference: np.ndarray  # reference rank per instance, -1 when none
    lateness: np.ndarray  # per instance, what was explained (t_s - t_q, or L - reference)
    unexplained: np.ndarray
    method: list[str]  # per instance: "lateness", "window" or "none"
    kernels: list[dict] = field(default_factory=list)
    launches: list[dict] = field(default_factory=list)
    idle: dict[int, int] = field(default_factory=dict)
    explained_wait_share: float | None = None
    top_blocking_kernel: str | None = None
    tolerance_ns: int = MIN_TOLERANCE_NS


def _references(inst, rank, start, straggler, reference_arrival, n_inst) -> np.ndarray:
    """Per instance, the rank other than the straggler that arrived nearest the median arrival."""
    q = np.full(n_inst, -1)
    if len(inst) == 0:
        return q
    distance = np.abs(start - reference_arrival[inst]).astype(np.float64)
    distance[rank == straggler[inst]] = np.inf
    order = np.lexsort((rank, distance, inst))
    first = order[np.r_[True, inst[order][1:] != inst[order][:-1]]]
    ok = np.isfinite(distance[first])
    q[inst[first][ok]] = rank[first][ok]
    return q


def _nvtx_around(job: Job, rank: int, tid: int, gap_start: int, gap_end: int) -> str | None:
    """The innermost NVTX range on the launching thread covering most of the gap before the late
    launch call: what the host was doing while the GPU waited."""
    trace = job.traces[rank]
    ranges = trace.ranges
    rows = np.flatnonzero(ranges.tid == tid) if ranges is not None else []
    if len(rows) == 0:
        return None
    correct = job.alignment.correct_rank
    start, end = correct(rank, ranges.start[rows]), correct(rank, ranges.end[rows])
    overlap = np.minimum(end, gap_end) - np.maximum(start, gap_start)
    # Ranges covering most of the gap; of those the innermost (a step range covers it all, the
    # data loader inside it is what the host was doing).
    covering = np.flatnonzero(2 * overlap > max(gap_end - gap_start, 1))
    if len(covering) == 0:
        return None
    innermost = covering[np.argmin((end - start)[covering])]
    return nvtx_family(trace.name(int(ranges.name[rows[innermost]])))


_NVTX_COUNTERS = re.compile(r"(, (seq|op_id) = \d+)+$|(?<=#)\d+$")


def nvtx_family(name: str | None) -> str | None:
    """An NVTX name without its per-call counters (PyTorch's `, seq = N, op_id = N`, a step's
    `#N`), so that every call of one operation is counted together."""
    return _NVTX_COUNTERS.sub(lambda m: "N" if m.group(0).isdigit() else "", name) if name else name


def attribute(job: Job) -> Blocking:
    c, t, a, work = job.collectives, job.timing, job.alignment, job.timeline
    n = len(c)
    inst, rank, start, end = c.obs_instance, c.obs_rank, job.aligned_start, job.aligned_end
    tolerance = max(MIN_TOLERANCE_NS, a.spread_after.p50 if a.spread_after else 0)
    q_of = _references(inst, rank, start, t.straggler, t.reference_arrival, n)
    result = Blocking(blame=[[] for _ in range(n)], reference=q_of, lateness=np.zeros(n, np.int64),
                      unexplained=np.zeros(n, np.int64), method=["none"] * n, tolerance_ns=int(tolerance))
    if n == 0:
        return result

    # Index of every needed (instance, rank) NCCL operation in that rank's GPU work.
    needed = sorted(set(t.straggler.tolist()) | set(q_of[q_of >= 0].tolist()))
    index_of = {}
    for r in needed:
        rows = np.flatnonzero(rank == r)
        dense = np.full(n, -1)
        dense[inst[rows]] = work[r].index_of(start[rows], end[rows])
        index_of[r] = dense
    by_comm_seq = {(comm, int(seq)): i for i, (comm, seq) in enumerate(zip(c.comm, c.seq))}

    groups: dict[tuple[int, int], list[int]] = defaultdict(list)
    for i in range(n):
        s, q = int(t.straggler[i]), int(q_of[i])
        if q >= 0 and index_of[s][i] >= 0 and index_of[q][i] >= 0:
            groups[(s, q)].append(i)
    for (s, q), targets in groups.items():
        ws, wq = work[s], work[q]
        i_s = np.array([index_of[s][i] for i in targets])
        i_q = np.array([index_of[q][i] for i in targets])
        win_s = np.full((len(targets), len(WINDOW_STEPS)), -1)
        win_q = np.full_like(win_s, -1)
        for row, i in enumerate(targets):
            for col, k in enumerate(WINDOW_STEPS):
                earlier = by_comm_seq.get((c.comm[i], int(c.seq[i]) - k))
                fs = index_of[s][earlier] if earlier is not None else -1
                fq = index_of[q][earlier] if earlier is not None else -1
                if fs < 0 or fq < 0:  # before the capture's first collective: go back a bounded way
                    fs, fq = max(0, i_s[row] - MAX_WINDOW_ITEMS), max(0, i_q[row] - MAX_WINDOW_ITEMS)
                win_s[row, col] = max(fs, i_s[row] - MAX_WINDOW_ITEMS)
                win_q[row, col] = max(fq, i_q[row] - MAX_WINDOW_ITEMS)
                if earlier is None:
                    break
        explained, blames = _native.explain_lateness(
            (ws.start, ws.end, ws.name, ws.launch), (wq.start, wq.end, wq.name, wq.launch),
            i_s, i_q, win_s, win_q, int(tolerance))
        for row, i in enumerate(targets):
            if explained["matched"][row]:
                result.method[i] = "lateness"
                result.lateness[i] = explained["lateness"][row]
                result.unexplained[i] = explained["unexplained"][row]
        for row, cause, key, ns, ready in zip(*(blames[k].tolist() for k in ("target", "cause", "key", "ns", "ready"))):
            i = targets[row]
            cause = from_code(cause)
            if cause is Cause.KERNEL:
                entry = {"cause": cause.value, "kernel": work.names.values[ws.short_of[key]], "kernel_full": work.names.values[key]}
            elif cause is Cause.HOST_LAUNCH:
                entry = {"cause": cause.value, "nvtx": _nvtx_around(job, s, int(ws.launch_tid[key]), ready, int(ws.launch[key])),
                         "kernel": work.names.values[int(ws.short_name[key])]}
            else:
                entry = {"cause": cause.value}
            result.blame[i].append({**entry, "rank": s, "ns": ns})

    # Different programs (pipeline stages, experts): the window fallback.
    for i in range(n):
        if result.method[i] == "lateness" or c.nranks[i] < 2:
            continue
        s = int(t.straggler[i])
        window = (int(t.reference_arrival[i]), int(t.last_arrival[i]))
        result.lateness[i] = window[1] - window[0]
        result.method[i] = "window"
        if window[1] <= window[0]:
            continue
        w = work[s]
        _, items, ns = _native.overlaps(np.array([window[0]]), np.array([window[1]]), w.start, w.end)
        scale = min(1.0, result.lateness[i] / ns.sum()) if ns.sum() else 0.0
        per_name = defaultdict(int)
        for item, overlap in zip(items.tolist(), ns.tolist()):
            per_name[int(w.name[item])] += round(overlap * scale)
        for key, part in sorted(per_name.items(), key=lambda kv: -kv[1]):
            result.blame[i].append({"cause": "window", "kernel": work.names.values[w.short_of[key]],
                                    "kernel_full": work.names.values[key], "rank": s, "ns": part})
        result.unexplained[i] = result.lateness[i] - sum(per_name.values())

    for i in range(n):
        if result.lateness[i] > 0:
            result.blame[i].sort(key=lambda b: -b["ns"])
            result.blame[i].append({"cause": "unexplained", "rank": int(t.straggler[i]), "ns": int(result.unexplained[i])})
    _aggregate(result, t.wait_cost, work)
    return result


def kernel_contrast(work: Timeline, full_name: str, rank: int, references: set[int]) -> tuple[float | None, int, int]:
    """How a kernel ran on `rank` against its reference ranks: the ratio of mean durations minus
    one (None where the references never ran it), and the runs on each side (per reference)."""
    name = work.names.intern(full_name)
    own_total, own_runs = work.name_stats(rank).get(name, (0, 0))
    other = [work.name_stats(r).get(name, (0, 0)) for r in sorted(references)]
    other_total, other_runs = sum(t for t, _ in other), sum(n for _, n in other)
    slowdown = float(own_total / own_runs / (other_total / other_runs) - 1) if own_runs and other_runs else None
    return slowdown, own_runs, round(other_runs / max(len(references), 1))


def _aggregate(result: Blocking, wait_cost: np.ndarray, work: Timeline) -> None:
    """Per kernel (and rank), per NVTX range of late launches, per rank idle: the stragglers'
    lateness each caused and the wait it inflicted on the other ranks."""
    def blank():
        return {"blame_ns": 0, "inflicted_wait_ns": 0.0, "instances": set(), "references": set()}

    kernels: dict = defaultdict(blank)
    launches: dict = defaultdict(blank)
    explained_wait = 0.0
    for i, entries in enumerate(result.blame):
        lateness = result.lateness[i]
        if lateness <= 0:
            continue
        share = wait_cost[i] / lateness
        for b in entries:
            inflicted = b["ns"] * share
            if b["cause"] in ("kernel", "window"):
                agg = kernels[(b["kernel_full"], b["kernel"], b["rank"], b["cause"])]
            elif b["cause"] == "host_launch":
                agg = launches[(b["nvtx"], b["rank"])]
            else:
                if b["cause"] == "idle":
                    result.idle[b["rank"]] = result.idle.get(b["rank"], 0) + b["ns"]
                    explained_wait += inflicted
                continue
            agg["blame_ns"] += b["ns"]
            agg["inflicted_wait_ns"] += inflicted
            agg["instances"].add(i)
            if result.reference[i] >= 0:
                agg["references"].add(int(result.reference[i]))
            explained_wait += inflicted
    total_wait = float(wait_cost.sum())

    def large(v):
        return total_wait > 0 and v["inflicted_wait_ns"] >= CONFIDENT_SHARE * total_wait

    result.kernels = []
    for (full, short, rank, cause), v in kernels.items():
        slowdown, runs, reference_runs = kernel_contrast(work, full, rank, v["references"])
        systematic = cause == "window" or runs > reference_runs or (slowdown is not None and slowdown >= CONFIDENT_SLOWDOWN)
        result.kernels.append({
            "kernel": short, "kernel_full": full, "rank": rank, "cause": cause, "blame_ns": v["blame_ns"],
            "inflicted_wait_ns": round(v["inflicted_wait_ns"]), "collectives": len(v["instances"]),
            "slowdown": slowdown, "runs": runs, "reference_runs": reference_runs,
            "confidence": "high" if large(v) and systematic else "low"})
    result.kernels.sort(key=lambda e: -e["inflicted_wait_ns"])
    result.launches = sorted(
        ({"nvtx": nvtx, "rank": rank, "blame_ns": v["blame_ns"], "inflicted_wait_ns": round(v["inflicted_wait_ns"]),
          "collectives": len(v["instances"]),
          "confidence": "high" if large(v) and v["blame_ns"] >= CONFIDENT_LAUNCH_TOLERANCES * result.tolerance_ns * len(v["instances"]) else "low"}
         for (nvtx, rank), v in launches.items()),
        key=lambda e: -e["inflicted_wait_ns"])
    result.explained_wait_share = explained_wait / total_wait if total_wait else None
    top = next((k for k in result.kernels if k["confidence"] == "high"), None)
    result.top_blocking_kernel = top["kernel"] if top else None
