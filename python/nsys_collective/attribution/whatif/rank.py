"""Rank-level causes (method.md section 4): a rank's GPU, its CUDA API calls or its whole host at
its peers' pace, replayed like the fine causes, and shown above their largest parts.

* `slow_device`: every kernel, copy and memset of the rank at its peers' pace: as much faster as
  the rank's ops, summed, ran longer than their references (the same op, step and occurrence on
  the other ranks of its program). A throttled or faulty GPU makes every op a few percent slower,
  which no single kernel shows with confidence.
* `api_stall`: the rank's CUDA API calls that do not wait for the GPU, where one took far longer
  than that API takes on the peers (the runtime or the OS stalled inside it), at the peers' median.
* `host_bound`: every host range occurrence of the rank at the peers' pace, and the work the peers
  do not do (one-off ranges) not done: the host as a whole was what the GPU waited for.

Each is made of the same parts of the rank's timeline as the fine causes (the host's gaps, its
calls, its GPU's ops: docs/whatif-replay.md), so a rank-level cause and its parts remove the same
time; `nest` keeps the rank-level cause only where it saves clearly more than its largest part, and
names its parts.
"""

from __future__ import annotations

import numpy as np

from nsys_collective.attribution.whatif import host, kernels
from nsys_collective.attribution.whatif.candidate import MIN_SLOWDOWN, Candidate, Context
from nsys_collective.model import grouping

# A device is slow when its ops took at least this much longer than their references, summed
# (a 5-10% throttle; jitter of a few percent per kernel averages out over thousands of them) ...
MIN_DEVICE_SLOWDOWN = 0.03
# ... and with confidence from this on, with most of its ops slower than their reference.
CONFIDENT_DEVICE_SLOWDOWN = 0.04
CONFIDENT_SLOWER_SHARE = 0.7
# A call is stalled when it took this many times the peers' 90th percentile of its API, and this
# much longer at least (API calls take a few us; their own jitter is about as much).
API_STALL_FACTOR = 2.0
API_STALL_MIN_NS = 20_000
# A rank-level cause whose largest part saves at least this share of what it saves is that part.
NESTED_SHARE = 0.8
# Parts named under a rank-level cause.
MAX_PARTS = 3
RANK_LEVEL = ("slow_device", "api_stall", "host_bound")
# The fine causes a rank-level cause is made of.
PART_KINDS = {"slow_device": ("kernel",), "host_bound": ("host",), "api_stall": ()}


def device_candidates(ctx: Context) -> list[Candidate]:
    """`slow_device` per rank, from every op run but the collectives' (kernels, copies, memsets)."""
    job, g, runs, min_excess = ctx.job, ctx.graph, ctx.shared(kernels.op_runs), ctx.min_excess
    out = []
    for rank in g.ranks:
        # Per op run, the median of the same run (program, step, name, occurrence) on the other
        # ranks (NaN where none ran it). Not the median of all of them: a slow device must not
        # pull its own reference up (with four ranks the median of all four is half its own).
        ref = runs[rank].other_ranks
        rows = np.flatnonzero(~np.isnan(ref))
        if not len(rows):
            continue
        w = job.timeline[rank]
        duration, ref = w.end[rows] - w.start[rows], ref[rows]
        total, total_ref = float(duration.sum()), float(ref.sum())
        slowdown = total / max(total_ref, 1.0) - 1
        if slowdown < MIN_DEVICE_SLOWDOWN:
            continue
        # At the peers' pace: every op as much faster as the device was slower overall. Each op
        # keeps its own jitter; setting each to its reference would also take that away (and
        # credit the device with the luck of the draw).
        fixed = np.round(duration / (1 + slowdown)).astype(np.int64)
        excess = int((duration - fixed).sum())
        if excess < min_excess:
            continue
        slower = int((duration > ref).sum())
        systematic = slowdown >= CONFIDENT_DEVICE_SLOWDOWN and slower >= CONFIDENT_SLOWER_SHARE * len(rows)
        out.append(Candidate(
            cause="slow_device", rank=int(rank), host=job.by_number[rank].host, name=None, name_full=None,
            reference="peers", excess_ns=excess, systematic=bool(systematic), slowdown=float(slowdown),
            runs=len(rows), reference_runs=len(rows), change={"op": g.op_offset[rank] + rows, "op_ns": fixed}))
    return out


def api_candidates(ctx: Context) -> list[Candidate]:
    """`api_stall` per rank: its non-blocking calls that took API_STALL_FACTOR times the peers' p90
    of their API, at the peers' median. The parts are the APIs (by name, most excess first)."""
    job, g, program, min_excess = ctx.job, ctx.graph, ctx.program, ctx.min_excess
    # Per rank, the histogram of each API's durations (a quarter of a million calls, a few
    # thousand distinct durations): what the other ranks' quantiles are taken from, and all that
    # is kept of its calls until it proves to have stalled.
    api_id: dict[str, int] = {}
    hist = []
    ranks = list(g.ranks)
    for rank in ranks:
        c = job.traces[rank].calls
        (blocking, name), value, count = grouping.value_counts(c.end - c.start, c.blocking, c.name)
        keep = blocking == 0
        api_h = _api_ids(job.traces[rank], name[keep], api_id)
        hist.append((np.full(len(api_h), rank), np.full(len(api_h), program[rank]), api_h, value[keep], count[keep]))
    names = sorted(api_id, key=api_id.get)
    # Per (rank, API), the p90 and the median of that API's calls on the other ranks of its program
    # (model/grouping.py), from the histograms: each (rank, API) has one of each.
    owner, of_program, api_h, value, count = (np.concatenate([h[k] for h in hist] + [np.zeros(0, np.int64)]) for k in range(5))
    p90_h, median_h = grouping.counted_quantiles_of_other_ranks(value, count, owner, of_program, api_h, quantiles=(0.9, 0.5))
    limit_h = np.where(p90_h >= 0, np.maximum(API_STALL_FACTOR * p90_h, p90_h + API_STALL_MIN_NS), np.inf)
    stalled_h = value > limit_h  # an API no peer called: never stalled
    out = []
    for rank in ranks:
        # The rank's stalled calls, by (API, duration): their excess over the peers' median.
        mine = np.flatnonzero((owner == rank) & stalled_h)
        if not len(mine):
            continue
        extra = (value[mine] - median_h[mine].astype(np.int64)) * count[mine]
        excess = int(extra.sum())
        if excess < min_excess:
            continue
        by_api = np.bincount(api_h[mine], weights=extra, minlength=len(names))
        parts = [{"name": names[k], "excess_ns": int(by_api[k]), "wait_saved_ns": None}
                 for k in np.argsort(-by_api)[:MAX_PARTS].tolist() if by_api[k] > 0]
        worst = int(np.argmax(by_api))
        # Its calls again, each stalled one set to the peers' median of its API.
        rows, api, duration = _api_calls(job, rank, api_id)
        limit, median_of = np.full(len(names), np.inf), np.full(len(names), np.nan)
        limit[api_h[mine]], median_of[api_h[mine]] = limit_h[mine], median_h[mine]
        stalled = duration > limit[api]
        out.append(Candidate(
            cause="api_stall", rank=int(rank), host=job.by_number[rank].host, name=names[worst], name_full=names[worst],
            reference="peers", excess_ns=excess, systematic=True, runs=int(stalled.sum()), reference_runs=None,
            parts=parts,
            change={"call": g.call_offset[rank] + rows[stalled], "call_ns": median_of[api[stalled]].astype(np.int64)}))
    return out


def _api_calls(job, rank: int, api_id: dict[str, int]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A rank's calls that do not wait for the GPU: their rows, APIs and durations."""
    c = job.traces[rank].calls
    rows = np.flatnonzero(~c.blocking)
    return rows, _api_ids(job.traces[rank], c.name[rows], api_id), c.end[rows] - c.start[rows]


def _api_ids(trace, name: np.ndarray, api_id: dict[str, int]) -> np.ndarray:
    """The APIs of a rank's calls (their name ids) as dense ids over the job (`api_id`; new names
    numbered in name order)."""
    ids, at = grouping.unique(name)  # each distinct name id once
    text = [str(n) for n in trace.names(ids).tolist()]
    for n in sorted(set(text)):
        api_id.setdefault(n, len(api_id))
    return np.array([api_id[n] for n in text], dtype=np.int64)[at] if len(name) else np.zeros(0, np.int64)


def host_bound_candidates(ctx: Context) -> list[Candidate]:
    """`host_bound` per rank: every range occurrence with a peer reference cut by its excess, and
    the work the peers do not do not done."""
    job, g, h, min_excess = ctx.job, ctx.graph, ctx.shared(host.host_time), ctx.min_excess
    ref, cut = ctx.shared(host.host_reference)
    known, peerless = ~np.isnan(ref), host.peerless(h, ref)
    out = []
    for rank in g.ranks:
        rows = np.flatnonzero((h.rank == rank) & ((known & (cut > 0)) | peerless))
        if not len(rows):
            continue
        take = np.where(known[rows], cut[rows], h.total[rows])
        excess = int(take.sum())
        total = float(h.total[h.rank == rank].sum())
        # As for a range: the host's own jitter averages out over its ranges, a slow host does not.
        if excess < min_excess or excess < MIN_SLOWDOWN * (total - excess):
            continue
        full = np.zeros(len(h.total))
        full[rows] = take
        out.append(Candidate(
            cause="host_bound", rank=int(rank), host=job.by_number[rank].host, name=None, name_full=None,
            reference="peers", excess_ns=excess, systematic=excess >= 0.1 * max(total, 1.0),
            slowdown=excess / max(total - excess, 1.0), change=h.change(rows, full)))
    return out


def nest(rows: list) -> tuple[list, list, list]:
    """(candidate, wait saved, step time saved, saved per collective) rows, by wait saved: the same
    rows with each rank-level cause followed by its largest parts, each row's parent (its position
    in that order, None for a cause of its own), and the candidates the ideal fixes at once. A
    rank-level cause whose largest part saves NESTED_SHARE of what it saves is left out: the part
    says it all. The ideal takes a kept rank-level cause instead of its parts (a slow device's
    kernels at their references and the device at the peers' pace would take the same time twice)."""
    children: dict[int, list[int]] = {}
    placed, dropped = set(), set()
    for k, (c, wait, step, _) in enumerate(rows):
        if c.cause not in RANK_LEVEL:
            continue
        parts = [j for j, (p, *_) in enumerate(rows)
                 if p.cause in PART_KINDS[c.cause] and p.rank == c.rank and j not in placed]
        if parts and wait > 0 and rows[parts[0]][1] >= NESTED_SHARE * wait and (
                step <= 0 or rows[parts[0]][2] >= NESTED_SHARE * step):
            dropped.add(k)
            continue
        children[k] = parts[:MAX_PARTS]
        placed.update(children[k])
        if children[k]:
            c.parts = [{"name": rows[j][0].name, "excess_ns": rows[j][0].excess_ns, "wait_saved_ns": int(rows[j][1])}
                       for j in children[k]]
    covered = {j for k in children for j, (p, *_) in enumerate(rows)
               if p.cause in PART_KINDS[rows[k][0].cause] and p.rank == rows[k][0].rank}
    ideal = [c for k, (c, *_) in enumerate(rows) if k not in dropped and k not in covered]
    order, parent = [], []
    for k in range(len(rows)):
        if k in dropped or k in placed:
            continue
        order.append(k)
        parent.append(None)
        at = len(order) - 1
        for j in children.get(k, []):
            order.append(j)
            parent.append(at)
    return [rows[k] for k in order], parent, ideal
