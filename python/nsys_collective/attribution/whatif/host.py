"""Host candidates: host time inside an NVTX range or CPU operator (its gaps between CUDA calls,
each gap in the innermost range around its middle), longer than the same range's occurrence
elsewhere, or work the peers do not do.

* `host`: longer on a rank than on the other ranks of its program. Fixed: as long as on the peers.
  Or (reference `none`) a range the peers do not run: fixed, not run.
* `host_group`: the same late range on every rank of one host. Fixed on all of them, against the
  ranks of the other hosts.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass

import numpy as np

from nsys_collective import _native
from nsys_collective.attribution.whatif.candidate import MIN_SLOWDOWN, Candidate, Context
from nsys_collective.attribution.whatif.graph import steps_of
from nsys_collective.causes import nvtx_family
from nsys_collective.model import grouping
from nsys_collective.model.ranks import hosts_of

# A host cause is systematic when its range took this much longer than its reference, summed.
CONFIDENT_HOST_EXCESS = 0.5


@dataclass
class HostTime:
    """Host time inside every range occurrence of the job, one row per occurrence: the gaps between
    CUDA calls whose middle fell in it (the innermost range: a parent range gets only the gaps no
    child covers). A call's own time is not host-range time: it belongs to its API (`_api_candidates`),
    so no two causes remove the same nanosecond. `pieces` lists the gaps of some occurrences, each
    occurrence's in time order, for `change`. `range_time` is the same with the calls inside each
    range (not waiting for the GPU) added to it: a range late on every rank of a host is the range
    as a whole (a bootstrap's cudaFree calls and the gaps between them), a union of parts of both
    kinds."""

    rank: np.ndarray
    program: np.ndarray
    step: np.ndarray
    family: np.ndarray  # id into `families`
    occurrence: np.ndarray
    total: np.ndarray
    end: np.ndarray  # when the range ended, on the aligned clock
    range_row: np.ndarray  # the occurrence's row in its rank's HostRanges (-1: unknown)
    gap_start: np.ndarray  # where its first gap began (own clock): ranges nested inside that gap are one stall
    families: list[str]
    # Per rank: its calls (model.trace.HostCalls), its range count and its first graph call row.
    calls: dict[int, tuple] | None = None
    with_calls: bool = False
    items: tuple | None = None  # (row, call, is_call, ns) of every occurrence: a host time built by hand

    def pieces(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """The pieces of host time of `rows`: (occurrence row, graph call row, is_call, ns) each,
        rows ascending, each row's in time order; a gap is the segment of its call row. Made on
        demand (the core, per rank), for the few occurrences a candidate changes: most are none's."""
        rows = np.unique(rows)
        if self.items is not None:
            keep = np.isin(self.items[0], rows)
            return tuple(c[keep] for c in self.items)
        out = [(np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, bool), np.zeros(0, np.int64))]
        rank = self.rank[rows]
        start = np.flatnonzero(np.r_[True, rank[1:] != rank[:-1]]) if len(rows) else np.zeros(0, np.int64)
        for b, e in zip(start.tolist(), np.r_[start[1:], len(rows)].tolist()):
            mine = rows[b:e]
            calls, n_ranges, call_offset = self.calls[int(rank[b])]
            row_of = np.full(n_ranges, -1, np.int64)
            row_of[self.range_row[mine]] = mine
            row, call, is_call, ns = _native.range_host_pieces(_core_columns(calls), row_of, self.with_calls)
            out.append((row, call_offset + call, is_call, ns))
        return tuple(np.concatenate(c) for c in zip(*out))

    def excess(self, reference_total: np.ndarray, reference_end: np.ndarray) -> np.ndarray:
        """How much of each occurrence's host time is late: what it took beyond its reference, at
        most how much later than the reference it ended (a rank that entered the range late for
        another reason, or waited in it for the others (a bootstrap), is not made early by it)."""
        over = np.maximum(0, self.total - reference_total)
        late = np.maximum(0, self.end - reference_end)
        return np.where(np.isnan(reference_end), over, np.minimum(over, late))

    def change(self, rows: np.ndarray, cut: np.ndarray) -> dict:
        """The ReplayGraph change that takes `cut[row]` from each of `rows`, latest gaps first (the
        host time that makes a range end late is the time just before its end; a cut from an early
        gap is often absorbed by a later wait in the range and moves nothing)."""
        want = np.zeros(len(self.total))
        want[rows] = cut[rows]
        item_row, item_call, item_is_call, item_ns = self.pieces(np.flatnonzero(want > 0))
        items = np.arange(len(item_row))[::-1]  # latest first within each row
        row, ns = item_row[items], item_ns[items]
        start = np.flatnonzero(np.r_[True, row[1:] != row[:-1]])
        before = np.cumsum(ns) - ns  # taken by the later gaps of the same row ...
        before -= np.repeat(before[start], np.diff(np.r_[start, len(row)]))
        take = np.clip(want[row] - before, 0, ns).round().astype(np.int64)
        items, left = items[take > 0], (ns - take)[take > 0]
        gap = ~item_is_call[items]
        out = {"segment": item_call[items[gap]], "segment_ns": left[gap]}
        if (~gap).any():
            out.update(call=item_call[items[~gap]], call_ns=left[~gap])
        return out

    def context(self, job, row: int, step_pattern: str) -> list[str] | None:
        """The ranges around an occurrence that lie in its gap (nested ranges over one stall),
        outermost first, steps left out: the enclosing names shown with the innermost one that
        names the cause."""
        if self.range_row[row] < 0:  # host time built without its ranges (a test's)
            return None
        trace = job.traces[int(self.rank[row])]
        r, i = trace.ranges, int(self.range_row[row])
        around = np.flatnonzero((r.tid == r.tid[i]) & (r.start <= r.start[i]) & (r.end >= r.end[i])
                                & (r.start >= self.gap_start[row]))
        around = around[around != i]
        around = around[np.lexsort((-r.end[around], r.start[around]))]
        names = [n for n in trace.names(r.name[around]).tolist() if n and not fnmatch.fnmatchcase(n, step_pattern)]
        return names or None


def host_time(ctx: Context) -> HostTime:
    """Host time inside every range occurrence of the job (steps themselves left out): its gaps."""
    return ctx.shared(_host_times)[0]


def range_time(ctx: Context) -> HostTime:
    """The same, with the calls inside each range that do not wait for the GPU."""
    return ctx.shared(_host_times)[1]


def _host_times(ctx: Context) -> tuple[HostTime, HostTime]:
    """`host_time` and `range_time`, from one pass of the core over each rank's calls."""
    job, g, program, step_pattern = ctx.job, ctx.graph, ctx.program, ctx.step_pattern
    family_of: dict[str | None, str | None] = {}  # each distinct name's family, once (None: a step, no family)
    built: list[tuple[list, dict[str, int]]] = [([], {}), ([], {})]  # per kind: its parts and family ids
    calls_of = {}
    step_index = {n: i for i, n in enumerate(g.step_names)}
    for rank in g.ranks:
        trace = job.traces[rank]
        ranges, calls = trace.ranges, trace.calls
        # The core sums each range's pieces (crates/core/src/host_time.rs).
        gaps, own, first_gap = _native.range_host_time(_core_columns(calls), len(ranges.start))
        step = steps_of(job, rank, ranges.start, step_index) if g.has_steps else np.zeros(len(ranges.start), np.int64)
        end = job.alignment.correct_rank(rank, ranges.end)
        for (parts, family_id), total in zip(built, (gaps, gaps + own)):
            used = np.flatnonzero(total > 0)
            # Each distinct name, in the order the rows first name it, given its family's id
            # (family ids follow first appearance); steps themselves are no family (-1).
            ids, at = grouping.unique(ranges.name[used], first_appearance=True)
            fam_of = np.full(len(ids), -1, np.int64)
            for k, name_id in enumerate(ids.tolist()):
                n = trace.name(name_id)
                if n not in family_of:
                    family_of[n] = (nvtx_family(n) or "") if n and not fnmatch.fnmatchcase(n, step_pattern) else None
                if family_of[n] is not None:
                    fam_of[k] = family_id.setdefault(family_of[n], len(family_id))
            fam = fam_of[at]
            used, fam = used[fam >= 0], fam[fam >= 0]
            parts.append((np.full(len(used), rank), np.full(len(used), program[rank]), step[used], fam, total[used],
                          end[used], used, first_gap[used]))
        calls_of[rank] = (calls, len(ranges.start), int(g.call_offset[rank]))
    out = []
    for with_calls, (parts, family_id) in enumerate(built):
        rank, prog, step, fam, total, end, range_row, gap_start = (np.concatenate(c).astype(np.int64, copy=False) for c in zip(*parts))
        out.append(HostTime(rank, prog, step, fam, grouping.occurrence(rank, step, fam), total, end, range_row, gap_start,
                            families=sorted(family_id, key=family_id.get), calls=calls_of, with_calls=bool(with_calls)))
    return out[0], out[1]


def _core_columns(calls) -> tuple:
    """A rank's calls (model.trace.HostCalls) as the core reads them: made when read, not held (an
    int64 copy of the gap ranges and the gap starts: 16 bytes a call, 32 MB at 1.9M kernels, held
    through the pickers otherwise)."""
    return (_ints(calls.start), _ints(calls.end), calls.gap_start(), _ints(calls.gap_range),
            np.ascontiguousarray(calls.blocking, bool))


def _ints(column: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(column, dtype=np.int64)


def host_candidates(ctx: Context) -> list[Candidate]:
    """Host ranges that took longer on a rank than on the other ranks of its program (fixed: as
    long as on the peers), and work the peers do not do (`one_off_candidates`)."""
    job, h, min_excess = ctx.job, ctx.shared(host_time), ctx.min_excess
    out = []
    ref, cut = ctx.shared(host_reference)
    rows = np.flatnonzero(~np.isnan(ref))
    if len(rows):
        order, group, first = grouping.groups(h.rank[rows], h.family[rows])
        rows = rows[order]
        total = np.add.reduceat(h.total[rows].astype(np.float64), first)
        excess = np.add.reduceat(cut[rows], first)
        reference = np.add.reduceat(ref[rows], first)
        longer = total / np.maximum(reference, 1) - 1
        # As for kernels: jitter averages out over the occurrences, a real stall does not.
        for g_ in np.flatnonzero((excess >= min_excess) & (excess >= MIN_SLOWDOWN * reference)).tolist():
            members = rows[first[g_]:first[g_ + 1] if g_ + 1 < len(first) else len(rows)]
            late = members[cut[members] > 0]
            rank, family = int(h.rank[members[0]]), int(h.family[members[0]])
            out.append(Candidate(
                cause="host", rank=rank, host=job.by_number[rank].host, name=h.families[family] or None,
                name_full=h.families[family] or None, reference="peers", excess_ns=int(excess[g_]),
                systematic=bool(longer[g_] >= CONFIDENT_HOST_EXCESS), slowdown=float(longer[g_]),
                context=h.context(job, int(late[np.argmax(cut[late])]), ctx.step_pattern) if len(late) else None,
                change=h.change(late, cut)))
    return out + one_off_candidates(ctx)


def host_reference(ctx: Context) -> tuple[np.ndarray, np.ndarray]:
    """Per occurrence, the peers' host time in it (NaN: no peer ran it) and its late excess."""
    h = ctx.shared(host_time)
    ref = grouping.median_of_others(h.total, h.program, h.step, h.family, h.occurrence)
    ref_end = grouping.median_of_others(h.end, h.program, h.step, h.family, h.occurrence)
    return ref, h.excess(ref, ref_end)


def peerless(h: HostTime, ref: np.ndarray) -> np.ndarray:
    """Occurrences of work the peers do not do: a range no other rank of the program ran in that
    step, or, on a rank without peers, a range it ran in fewer than half of the steps (once-only
    work: a checkpoint, an evaluation). Ranges merely run a different number of times are not."""
    none = np.isnan(ref)
    if not none.any():
        return none
    _, group = np.unique(np.stack([h.program, h.step, h.family]), axis=1, return_inverse=True)
    group = group.ravel()
    pairs = np.unique(np.stack([group, h.rank]), axis=1)
    running = np.bincount(pairs[0], minlength=group.max() + 1)[group]  # ranks that ran it in that step
    ranks_of_program = np.unique(np.stack([h.program, h.rank]), axis=1)
    size = np.bincount(ranks_of_program[0], minlength=h.program.max() + 1)[h.program]
    _, rank_family = np.unique(np.stack([h.rank, h.family]), axis=1, return_inverse=True)
    rank_family = rank_family.ravel()
    steps_with = np.bincount(np.unique(np.stack([rank_family, h.step]), axis=1)[0], minlength=rank_family.max() + 1)
    n_steps = int(h.step.max()) + 1 if len(h.step) else 1
    once = (n_steps >= 2) & (steps_with[rank_family] < 0.5 * n_steps)
    return none & np.where(size >= 2, running == 1, once)


def one_off_candidates(ctx: Context) -> list[Candidate]:
    """Work the peers do not do (gc, a checkpoint, rank-0 logging), per rank and range: the
    reference is not doing it. Fixed: not done."""
    job, h, min_excess = ctx.job, ctx.shared(host_time), ctx.min_excess
    ref, _ = ctx.shared(host_reference)
    rows = np.flatnonzero(peerless(h, ref))
    out = []
    if not len(rows):
        return out
    order, _, first = grouping.groups(h.rank[rows], h.family[rows])
    rows = rows[order]
    excess = np.add.reduceat(h.total[rows], first)
    for g_ in np.flatnonzero(excess >= min_excess).tolist():
        members = rows[first[g_]:first[g_ + 1] if g_ + 1 < len(first) else len(rows)]
        rank, family = int(h.rank[members[0]]), int(h.family[members[0]])
        out.append(Candidate(
            cause="host", rank=rank, host=job.by_number[rank].host, name=h.families[family] or None,
            name_full=h.families[family] or None, reference="none", excess_ns=int(excess[g_]), systematic=True,
            runs=len(members), context=h.context(job, int(members[np.argmax(h.total[members])]), ctx.step_pattern),
            change=h.change(members, h.total.astype(np.float64))))
    return out




def host_group_candidates(ctx: Context) -> list[Candidate]:
    """Host-wide causes: a range that ended late on every rank of a host (a bootstrap, a shared
    file system, a slow node), against the hosts that were on time in it; each late host alone, and
    all of them together when several were late (fixing one of two late hosts only makes it wait
    for the other). Fixed on all of its ranks, against the ranks of the other hosts: the range as a
    whole, its calls included (`range_time`)."""
    job, h, min_excess = ctx.job, ctx.shared(range_time), ctx.min_excess
    host_of = hosts_of(job.ranks, job.alignment)
    hosts: dict[str, list[int]] = {}
    for r in sorted(r for r in job.traces if job.traces[r].gpu is not None):
        hosts.setdefault(host_of[r], []).append(r)
    if len(hosts) < 2 or not len(h.rank):
        return []
    names = list(hosts)
    host_of_rank = np.full(max(job.traces) + 1, -1, np.int64)  # each rank's host, by its number in `names`
    for i, name in enumerate(names):
        host_of_rank[hosts[name]] = i
    host = host_of_rank[h.rank]
    # How late each host ended each occurrence: its earliest rank's end (every rank of it late)
    # after the typical (median) end on the earliest host. Groups come sorted by family, program,
    # step, occurrence, then host.
    order, _, first, median = grouping.group_medians(h.end, h.family, h.program, h.step, h.occurrence, host)
    earliest_rank = np.minimum.reduceat(h.end[order], first) if len(order) else median
    lead = order[first]
    keys = np.column_stack([h.family[lead], h.program[lead], h.step[lead], h.occurrence[lead]])
    new = np.r_[True, (keys[1:] != keys[:-1]).any(axis=1)]
    occ_first = np.flatnonzero(new)
    occ = np.cumsum(new) - 1
    compared = np.diff(np.r_[occ_first, len(lead)])[occ] >= 2  # two hosts ran that occurrence
    late_by = np.where(compared, np.maximum(0, earliest_rank - np.minimum.reduceat(median, occ_first)[occ]), 0)
    size = np.array([len(hosts[n]) for n in names])
    late_ns = np.zeros((len(h.families), len(names)))
    np.add.at(late_ns, (h.family[lead], host[lead]), late_by * size[host[lead]])
    out = []
    for family in np.flatnonzero((late_ns >= min_excess).any(axis=1)).tolist():
        rows = np.flatnonzero(h.family == family)
        ran = set(host[rows].tolist())
        late = [names[k] for k in sorted(ran) if late_ns[family, k] >= min_excess]
        on_time = [names[k] for k in sorted(ran) if late_ns[family, k] < min_excess]
        if not on_time:
            continue
        source = np.isin(h.rank, [r for name in on_time for r in hosts[name]])
        ref_total = _reference_from(h, source, family, h.total)
        ref_end = _reference_from(h, source, family, h.end)
        cut = h.excess(ref_total, ref_end)
        groups = [[name] for name in late if len(hosts[name]) > 1] + ([late] if len(late) > 1 else [])
        for group in groups:
            ranks = sorted(r for name in group for r in hosts[name])
            mine = rows[np.isin(h.rank[rows], ranks) & ~np.isnan(ref_total[rows])]
            fixed = mine[cut[mine] > 0]
            excess = int(cut[fixed].sum())
            per_rank = np.bincount(np.searchsorted(ranks, h.rank[fixed]), weights=cut[fixed], minlength=len(ranks))
            if excess < min_excess or per_rank.min() < 0.5 * excess / len(ranks):
                continue  # every rank of the host(s) late in it, not one rank that held the others up
            # Systematic: late in (nearly) every occurrence, each time by more than jitter.
            systematic = len(fixed) >= 0.8 * len(mine) and excess >= min_excess * len(fixed)
            total, reference = float(h.total[mine].sum()), float(ref_total[mine].sum())
            out.append(Candidate(
                cause="host_group", rank=None, host=", ".join(group), name=h.families[family] or None,
                name_full=h.families[family] or None, reference="peers", excess_ns=excess, systematic=systematic,
                slowdown=total / max(reference, 1) - 1, ranks=ranks, change=h.change(fixed, cut)))
    return out


def _reference_from(h: HostTime, source: np.ndarray, family: int, value: np.ndarray) -> np.ndarray:
    """Per row of `family`, the median value of the same (program, step, occurrence) over the
    `source` rows (NaN where none)."""
    out = np.full(len(h.total), np.nan)
    rows = np.flatnonzero(h.family == family)
    src = np.flatnonzero(source[rows])
    if not len(src):
        return out
    code, count = grouping.group_ids(h.program[rows], h.step[rows], h.occurrence[rows])
    order, _, first, median = grouping.group_medians(value[rows[src]], code[src])
    by_code = np.full(count, np.nan)
    by_code[code[src][order[first]]] = median
    out[rows] = by_code[code]
    return out
