"""Kernel candidates.

* `kernel`: a compute kernel that ran longer on a rank than the same kernel (same step, same
  occurrence) on the ranks running the same program (`peers`), or, where no other rank runs it
  (pipeline stages), than on the same rank in other steps (`self`). Fixed: it runs as long as its
  reference.
* `extra_kernel`: kernels a rank ran more often in a step than its peers. Fixed: not run.

A collective's own kernel is never a cause: wait that travels through an earlier collective is
charged to what made that one late.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from nsys_collective.attribution.whatif.candidate import MIN_SLOWDOWN, Candidate, Context
from nsys_collective.model import grouping
from nsys_collective.model.job import Job

# A kernel cause is systematic when its runs took this much longer than their reference, summed.
CONFIDENT_SLOWDOWN = 0.10


@dataclass
class KernelRuns:
    """Every compute kernel run of the job (or every op run), one row each: the op runs' kernels
    rank by rank in the graph's rank order, then their other ops likewise (`op_runs`)."""

    rank: np.ndarray
    program: np.ndarray
    step: np.ndarray
    name: np.ndarray
    duration: np.ndarray
    op: np.ndarray  # op row in the graph
    occurrence: np.ndarray  # among the same kernel's runs in the same step on the same rank
    is_kernel: np.ndarray | None = None  # a compute kernel (not a memcpy or memset)
    # A kernel run's row in the op runs (their first rows: a slice), where their groups are the same.
    of_ops: np.ndarray | slice | None = None

    def by_rank(self) -> dict[int, np.ndarray]:
        """Each rank's rows, in op order (its timeline's)."""
        at = np.full(int(self.op.max()) + 1 if len(self.op) else 0, -1, np.int64)
        at[self.op] = np.arange(len(self.op))
        rows = at[at >= 0]
        rank = self.rank[rows]
        start = np.flatnonzero(np.r_[True, rank[1:] != rank[:-1]]) if len(rows) else np.zeros(0, np.int64)
        end = np.r_[start[1:], len(rows)]
        return {int(rank[b]): rows[b:e] for b, e in zip(start.tolist(), end.tolist())}


def op_runs(ctx: Context) -> KernelRuns:
    """Every GPU op run of the job but the collectives' (kernels, memcpys, memsets), with its
    step and its occurrence (in its rank's timeline order): the kernels first, rank by rank, so
    that the kernel runs are a slice of them (`kernel_runs`), then the other ops."""
    job, g, program = ctx.job, ctx.graph, ctx.program
    rows_of = {rank: np.flatnonzero(~job.timeline[rank].is_nccl) for rank in g.ranks}
    kernel_of = {rank: job.timeline[rank].is_kernel[rows] for rank, rows in rows_of.items()}
    n, n_kernels = sum(len(r) for r in rows_of.values()), sum(int(k.sum()) for k in kernel_of.values())
    # Each column filled rank by rank in place: no per-rank parts alive beside the whole.
    rank_c, program_c, step, name, duration, op, occurrence = (np.empty(n, np.int64) for _ in range(7))
    is_kernel = np.arange(n) < n_kernels
    at = {True: 0, False: n_kernels}
    for rank in g.ranks:
        w, all_rows, kernel = job.timeline[rank], rows_of.pop(rank), kernel_of.pop(rank)
        all_op = g.op_offset[rank] + all_rows
        all_step, all_name = g.op_step[all_op], w.name[all_rows]
        all_occurrence = grouping.occurrence(all_step, all_name)  # the rank's, in its timeline order
        for part in (True, False):
            pick = kernel if part else ~kernel
            rows = all_rows[pick]
            mine = slice(at[part], at[part] + len(rows))
            at[part] += len(rows)
            rank_c[mine], program_c[mine], op[mine] = rank, program[rank], all_op[pick]
            step[mine], name[mine], occurrence[mine] = all_step[pick], all_name[pick], all_occurrence[pick]
            duration[mine] = w.end[rows] - w.start[rows]
    return KernelRuns(rank_c, program_c, step, name, duration, op, occurrence=occurrence, is_kernel=is_kernel)


def kernel_runs(ctx: Context) -> KernelRuns:
    """Every compute kernel run of the job (the op runs' kernels), with its step and its
    occurrence among the kernels: the op runs' first rows, not a copy, unless a copy is named as
    a kernel (the ops' occurrence counts it, their groups mix)."""
    ops = ctx.shared(op_runs)
    n = int(ops.is_kernel.sum())
    columns = (ops.rank, ops.program, ops.step, ops.name, ops.duration, ops.op, ops.occurrence)
    if ops.is_kernel[:n].all():
        rows = slice(0, n)
    else:  # op runs built by hand, in another order
        rows = np.flatnonzero(ops.is_kernel)
    rank, program, step, name, duration, op, occurrence = (c[rows] for c in columns)
    shared = _names_shared(ops)
    if shared:
        occurrence = grouping.occurrence(rank, step, name)
    return KernelRuns(rank, program, step, name, duration, op, occurrence=occurrence, is_kernel=np.ones(n, bool),
                      of_ops=None if shared else rows)


def op_references(ctx: Context) -> tuple[np.ndarray, np.ndarray]:
    """Per op run, the median duration of the same run (program, step, name, occurrence) on the
    other rows (a kernel's peers: `kernel_candidates`) and on the other ranks (a device's:
    rank.device_candidates), from one grouping."""
    ops = ctx.shared(op_runs)
    return grouping.medians_of_others_and_other_ranks(ops.duration, ops.rank, ops.program, ops.step, ops.name, ops.occurrence)


def _names_shared(ops: KernelRuns) -> bool:
    """Whether a kernel and another op (a memcpy, a memset) have the same name."""
    other_names, _ = grouping.unique(ops.name[~ops.is_kernel])  # a few names: isin compares with each
    return bool(np.isin(ops.name[ops.is_kernel], other_names).any())


def kernel_candidates(ctx: Context) -> list[Candidate]:
    """Kernels that ran longer than their reference: the same run on the peers, else on the same
    rank in other steps. Fixed: each run as long as its reference. Rank by rank (each one's
    temporaries freed before the next's): only the peers' reference crosses ranks."""
    k = ctx.shared(kernel_runs)
    if k.of_ops is not None:
        peers = ctx.shared(op_references)[0][k.of_ops]  # read only: the rank's part is gathered
    else:
        peers = grouping.median_of_others(k.duration, k.program, k.step, k.name, k.occurrence)
    order, _, first = grouping.groups(k.rank)  # each rank's runs, ranks ascending, each in row order
    found = {"peers": [], "self": []}
    for at, end in zip(first.tolist(), np.r_[first[1:], len(order)].tolist()):
        for reference, got in _rank_kernel_candidates(ctx, k, order[at:end], peers).items():
            found[reference] += got
    return found["peers"] + found["self"]


def _rank_kernel_candidates(ctx: Context, k: KernelRuns, mine: np.ndarray, peers: np.ndarray) -> dict[str, list[Candidate]]:
    """One rank's kernel candidates (`mine`: its rows), by reference."""
    job, min_excess = ctx.job, ctx.min_excess
    ref = peers[mine]  # a gather of its own: filled in where no peer ran it
    use_peers = ~np.isnan(ref)
    alone = np.flatnonzero(~use_peers)  # only runs no other rank has need their own steps
    if len(alone):
        ref[alone] = grouping.median_of_others(k.duration[mine[alone]], k.name[mine[alone]], k.occurrence[mine[alone]])
    known = ~np.isnan(ref)
    out: dict[str, list[Candidate]] = {}
    for reference, pick in (("peers", known & use_peers), ("self", known & ~use_peers)):
        out[reference] = []
        at = np.flatnonzero(pick)  # positions in `mine`
        if not len(at):
            continue
        # Per kernel, in name order: its runs' time, their references' and their excess (sums of
        # whole and half nanoseconds: exact in any order). Only the kernels that qualify are
        # gathered, run by run.
        group, count = grouping.group_ids(k.name[mine[at]], sorted=True)
        duration, reference_ns = k.duration[mine[at]], ref[at]
        total = np.bincount(group, weights=duration, minlength=count)
        total_ref = np.bincount(group, weights=reference_ns, minlength=count)
        excess = np.bincount(group, weights=np.maximum(0, duration - reference_ns), minlength=count)
        slowdown = total / np.maximum(total_ref, 1) - 1
        found = np.flatnonzero((slowdown >= MIN_SLOWDOWN) & (excess >= min_excess))
        chosen = np.zeros(count, bool)
        chosen[found] = True
        keep = chosen[group]
        at, group = at[keep], group[keep]
        order, _, first = grouping.groups(group)  # the chosen kernels in name order, each in row order
        at = at[order]
        for g_, b, e in zip(found.tolist(), first.tolist(), np.r_[first[1:], len(at)].tolist()):
            members = at[b:e]
            rows = mine[members]
            slow = members[k.duration[rows] > ref[members]]
            rank, name = int(k.rank[rows[0]]), int(k.name[rows[0]])
            out[reference].append(Candidate(
                cause="kernel", rank=rank, host=job.by_number[rank].host, name=_short(job, name),
                name_full=job.timeline.names.values[name], reference=reference, excess_ns=int(excess[g_]),
                systematic=bool(slowdown[g_] >= CONFIDENT_SLOWDOWN), slowdown=float(slowdown[g_]),
                runs=len(members), reference_runs=len(members),
                change={"op": k.op[mine[slow]], "op_ns": np.round(ref[slow]).astype(np.int64)}))
    return out


def _short(job: Job, name: int) -> str:
    """The short name of a kernel's full name id."""
    for rank in job.traces:
        short = job.timeline[rank].short_of.get(name)
        if short is not None:
            return job.timeline.names.values[short]
    return job.timeline.names.values[name]


def extra_candidates(ctx: Context) -> list[Candidate]:
    """Kernels a rank ran more often in a step than the other ranks of its program did. Fixed:
    the runs beyond the peers' count are not run."""
    job, k, program, min_excess = ctx.job, ctx.shared(kernel_runs), ctx.program, ctx.min_excess
    out = []
    ranks_of = {}
    for rank, p in program.items():
        ranks_of.setdefault(p, []).append(rank)
    for p, members in ranks_of.items():
        if len(members) < 2:
            continue
        mine = np.flatnonzero(k.program == p)
        # Runs per (step, name, rank), zeros included, as a dense table.
        names = int(k.name[mine].max()) + 1 if len(mine) else 1
        key, key_of = grouping.unique(k.step[mine] * names + k.name[mine])
        keys = np.stack([key // names, key % names])
        col = np.full(max(members) + 1, -1, dtype=np.int64)
        col[members] = np.arange(len(members))
        counts = np.bincount(key_of * len(members) + col[k.rank[mine]],
                             minlength=len(key) * len(members)).reshape(len(key), len(members))
        peer = np.median(counts, axis=1)
        for j, rank in enumerate(members):
            extra_keys = np.flatnonzero(counts[:, j] > peer)
            if not len(extra_keys):
                continue
            rows = mine[(k.rank[mine] == rank) & np.isin(key_of.ravel(), extra_keys)]
            # The runs beyond the peers' count in each step are the extra ones.
            allowed = np.floor(peer[key_of.ravel()[np.searchsorted(mine, rows)]]).astype(np.int64)
            extra = rows[k.occurrence[rows] >= allowed]
            for name in np.unique(k.name[extra]).tolist():
                removed = extra[k.name[extra] == name]
                excess = int(k.duration[removed].sum())
                if excess < min_excess:
                    continue
                per_rank = counts[np.flatnonzero(keys[1] == name)].sum(axis=0)
                runs, reference_runs = int(per_rank[j]), int(round(np.median(np.delete(per_rank, j))))
                out.append(Candidate(
                    cause="extra_kernel", rank=rank, host=job.by_number[rank].host, name=_short(job, name),
                    name_full=job.timeline.names.values[name], reference="peers", excess_ns=excess,
                    systematic=runs > reference_runs, runs=runs, reference_runs=reference_runs,
                    change={"op": k.op[removed], "op_ns": np.zeros(len(removed), np.int64)}))
    return out
