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
from typing import Callable

import numpy as np

from nsys_collective import memory
from nsys_collective.attribution.whatif.candidate import MIN_SLOWDOWN, Candidate, Context
from nsys_collective.model import grouping
from nsys_collective.model.job import Job
from nsys_collective.model.timeline import GpuWork

# A kernel cause is systematic when its runs took this much longer than their reference, summed.
CONFIDENT_SLOWDOWN = 0.10


@dataclass
class RunReferences:
    """One rank's runs (its GPU ops but the collectives', `op_runs`; or its compute kernels,
    `kernel_runs`), per row of its timeline (-1 and NaN on the rows that are no run): each run's
    occurrence (among the rank's runs of the same step and name) and its references, the same run
    (program, step, name, occurrence) on the other ranks of its program."""

    occurrence: np.ndarray
    peers: np.ndarray  # the median of the others (of all of them, from three on): a kernel's
    other_ranks: np.ndarray  # the median of the other ranks': a device's (rank.device_candidates)


def _runs(ctx: Context, runs: Callable[[GpuWork], np.ndarray]) -> dict[int, RunReferences]:
    """Each rank's `RunReferences` of the timeline rows `runs` picks, grouped across ranks in the core
    (model/grouping.py): only the peers' values cross ranks."""
    job, g = ctx.job, ctx.graph
    parts = []
    for rank in g.ranks:
        w = job.timeline[rank]
        at = g.op_offset[rank]
        parts.append((ctx.program[rank], g.op_step[at:at + len(w)], w.name, w.start, w.end, runs(w)))
    references = grouping.run_references(parts)
    # Its transients, freed in the core's worker threads, stay in their heaps otherwise (~30 MB
    # at 1.9M kernels, under the pickers that read these references).
    memory.release()
    return {rank: RunReferences(*refs) for rank, refs in zip(g.ranks, references)}


def op_runs(ctx: Context) -> dict[int, RunReferences]:
    """Every GPU op run of the job but the collectives' (kernels, memcpys, memsets)."""
    return _runs(ctx, lambda w: ~w.is_nccl)


def kernel_runs(ctx: Context) -> dict[int, RunReferences]:
    """Every compute kernel run of the job, counted among the kernels: the op runs, unless a copy
    is named as a kernel (the ops' occurrence counts it, their groups mix)."""
    other = np.zeros(len(ctx.job.timeline.names.values), bool)
    for rank in ctx.graph.ranks:
        w = ctx.job.timeline[rank]
        other[w.name[~w.is_kernel & ~w.is_nccl]] = True
    if not (other & (ctx.shared(kernel_names) >= 0)).any():
        return ctx.shared(op_runs)
    return _runs(ctx, lambda w: w.is_compute)


def kernel_names(ctx: Context) -> np.ndarray:
    """Per name id of the job, its number among the compute kernels' names (in id order; -1: no
    kernel's): a few dozen names that a table of a kernel's steps and names can be indexed by."""
    kernel = np.zeros(len(ctx.job.timeline.names.values), bool)
    for rank in ctx.graph.ranks:
        w = ctx.job.timeline[rank]
        kernel[w.name[w.is_compute]] = True
    return np.where(kernel, np.cumsum(kernel) - 1, -1)


def _kernel_rows(w: GpuWork) -> np.ndarray:
    """A rank's compute kernels (kernels not NCCL's): their timeline rows."""
    return np.flatnonzero(w.is_compute)


def kernel_candidates(ctx: Context) -> list[Candidate]:
    """Kernels that ran longer than their reference: the same run on the peers, else on the same
    rank in other steps. Fixed: each run as long as its reference. Rank by rank: only the peers'
    reference crosses ranks."""
    runs = ctx.shared(kernel_runs)
    found = {"peers": [], "self": []}
    for rank in sorted(ctx.graph.ranks):
        for reference, got in _rank_kernel_candidates(ctx, rank, runs[rank]).items():
            found[reference] += got
    return found["peers"] + found["self"]


def _rank_kernel_candidates(ctx: Context, rank: int, runs: RunReferences) -> dict[str, list[Candidate]]:
    """One rank's kernel candidates, by reference."""
    job, min_excess, names = ctx.job, ctx.min_excess, len(ctx.job.timeline.names.values)
    w = job.timeline[rank]
    rows = _kernel_rows(w)
    duration, name = w.end[rows] - w.start[rows], w.name[rows]
    ref = runs.peers[rows]  # filled in where no peer ran it
    use_peers = ~np.isnan(ref)
    alone = np.flatnonzero(~use_peers)  # only runs no other rank has need their own steps
    if len(alone):
        ref[alone] = grouping.median_of_others(duration[alone], name[alone], runs.occurrence[rows[alone]])
    out: dict[str, list[Candidate]] = {}
    for reference, at in (("peers", np.flatnonzero(use_peers)), ("self", alone[~np.isnan(ref[alone])])):
        out[reference] = []
        if not len(at):
            continue
        # Per kernel (by name id): its runs' time, their references' and their excess (sums of
        # whole and half nanoseconds: exact in any order). Only the kernels that qualify are
        # gathered, run by run.
        kernel = name[at]
        total = np.bincount(kernel, weights=duration[at], minlength=names)
        total_ref = np.bincount(kernel, weights=ref[at], minlength=names)
        excess = np.bincount(kernel, weights=np.maximum(0, duration[at] - ref[at]), minlength=names)
        slowdown = total / np.maximum(total_ref, 1) - 1
        found = np.flatnonzero((slowdown >= MIN_SLOWDOWN) & (excess >= min_excess))
        if not len(found):
            continue
        chosen = np.zeros(names, bool)
        chosen[found] = True
        at = at[chosen[kernel]]
        order, _, first = grouping.groups(name[at])  # the chosen kernels in name order, each in row order
        at = at[order]
        for k, b, e in zip(found.tolist(), first.tolist(), np.r_[first[1:], len(at)].tolist()):
            members = at[b:e]
            slow = members[duration[members] > ref[members]]
            out[reference].append(Candidate(
                cause="kernel", rank=rank, host=job.by_number[rank].host, name=_short(job, k),
                name_full=job.timeline.names.values[k], reference=reference, excess_ns=int(excess[k]),
                systematic=bool(slowdown[k] >= CONFIDENT_SLOWDOWN), slowdown=float(slowdown[k]),
                runs=len(members), reference_runs=len(members),
                change={"op": ctx.graph.op_offset[rank] + rows[slow], "op_ns": np.round(ref[slow]).astype(np.int64)}))
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
    job, g, runs, program, min_excess = ctx.job, ctx.graph, ctx.shared(kernel_runs), ctx.program, ctx.min_excess
    kernel = ctx.shared(kernel_names)
    names = int(kernel.max()) + 1 if len(kernel) else 1
    out = []
    ranks_of = {}
    for rank, p in program.items():
        ranks_of.setdefault(p, []).append(rank)
    for p, members in ranks_of.items():
        if len(members) < 2:
            continue
        # Each member's kernel runs by (step, name), its keys counted; then the runs per (step,
        # name, member), zeros included, as a dense table of the members' keys.
        # Held for every member until the second pass: rows and key indices as int32 (16 bytes a
        # kernel run otherwise, 30 MB at 1.9M kernels, the pickers' largest transient).
        keyed = []
        for rank in members:
            rows = _kernel_rows(job.timeline[rank])
            step = g.op_step[g.op_offset[rank] + rows]  # -1: outside the steps
            key, key_of = grouping.unique((step + 1) * names + kernel[job.timeline[rank].name[rows]])
            keyed.append((rows.astype(np.int32), key, key_of.astype(np.int32)))
        keys, _ = grouping.unique(np.concatenate([key for _, key, _ in keyed] + [np.zeros(0, np.int64)]))
        counts = np.zeros((len(keys), len(members)), np.int64)
        for j, (_, key, key_of) in enumerate(keyed):
            counts[np.searchsorted(keys, key), j] = np.bincount(key_of, minlength=len(key))
        ordered = np.sort(counts, axis=1)
        peer = (ordered[:, (len(members) - 1) // 2] + ordered[:, len(members) // 2]) / 2  # each key's median
        key_name = keys % names
        for j, rank in enumerate(members):
            rows, key, key_of = keyed[j]
            w = job.timeline[rank]
            # The runs beyond the peers' count in each step are the extra ones.
            allowed = np.floor(peer[np.searchsorted(keys, key)]).astype(np.int64)
            extra = rows[runs[rank].occurrence[rows] >= allowed[key_of]].astype(np.int64)
            extra_name = w.name[extra]
            for name in np.unique(extra_name).tolist():
                removed = extra[extra_name == name]
                excess = int((w.end[removed] - w.start[removed]).sum())
                if excess < min_excess:
                    continue
                per_rank = counts[key_name == kernel[name]].sum(axis=0)
                n_runs, reference_runs = int(per_rank[j]), int(round(np.median(np.delete(per_rank, j))))
                out.append(Candidate(
                    cause="extra_kernel", rank=rank, host=job.by_number[rank].host, name=_short(job, name),
                    name_full=job.timeline.names.values[name], reference="peers", excess_ns=excess,
                    systematic=n_runs > reference_runs, runs=n_runs, reference_runs=reference_runs,
                    change={"op": g.op_offset[rank] + removed, "op_ns": np.zeros(len(removed), np.int64)}))
    return out
