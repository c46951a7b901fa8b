"""Each candidate family of the what-if (attribution/whatif/) on small hand-built traces of a few
ops: what it proposes, against which reference, and the change that fixes it. The end-to-end
figures (what the replays save) are test_whatif.py's; a failure here names the family that broke."""

from __future__ import annotations

from concurrent.futures import Future
from dataclasses import dataclass
from types import SimpleNamespace

import numpy as np
import pytest

from nsys_collective import _native
from nsys_collective.attribution.whatif import host, idle, kernels, transfers
from nsys_collective.attribution.whatif import rank as rank_level
from nsys_collective.attribution.whatif.candidate import MIN_SLOWDOWN, Candidate, Context
from nsys_collective.attribution.whatif.graph import JobGraph
from nsys_collective.model import grouping
from test_grouping import ref_median_of_other_ranks_by_keys

NAMES = ["?", "gemm", "stage_fwd", "dataloader_ops", "extra_norm", "memcpy"]


def a(*values) -> np.ndarray:
    return np.array(values, dtype=np.int64)


class Timeline(SimpleNamespace):
    def __getitem__(self, rank):
        return self.per_rank[rank]


class Work(SimpleNamespace):
    """A rank's GPU work (model.timeline.GpuWork): its ops in timeline order."""

    def __len__(self):
        return len(self.start)

    @property
    def is_compute(self):
        return self.is_kernel & ~self.is_nccl


def job(ranks: dict[int, str]) -> SimpleNamespace:
    """The parts of a job the pickers read: ranks with hosts, kernel names, GPU work per rank."""
    by_number = {r: SimpleNamespace(rank=r, host=h) for r, h in ranks.items()}
    timeline = Timeline(names=SimpleNamespace(values=NAMES),
                        per_rank={r: Work(short_of={i: i for i in range(len(NAMES))}) for r in ranks})
    return SimpleNamespace(by_number=by_number, ranks=list(by_number.values()), timeline=timeline, alignment=None,
                           traces={r: SimpleNamespace(gpu=object()) for r in ranks})


def context(j, min_excess=10, **shared) -> Context:
    ctx = Context(job=j, graph=None, program={r: 0 for r in j.by_number}, kind=a(), tolerance_ns=5,
                  min_excess=min_excess, step_pattern="ProfilerStep#*")
    for build, value in shared.items():  # what the pickers share, hand-built instead of read from a trace
        # A hand-built host time serves as the ranges' time with their calls too (host_group reads that).
        for f in {"host_time": (host.host_time, host.range_time)}[build]:
            ctx._shared[f] = value
    return ctx


def with_ops(ctx: Context, rank, step, name, duration, is_kernel=None, is_nccl=None, program=None) -> Context:
    """The ranks' GPU work from one row per op, the rows rank by rank (ranks ascending), each
    rank's in its timeline order, its ops back to back; op rows are the rows' numbers."""
    rank, step, name, duration = a(*rank), a(*step), a(*name), a(*duration)
    is_kernel = np.ones(len(rank), bool) if is_kernel is None else np.array(is_kernel)
    is_nccl = np.zeros(len(rank), bool) if is_nccl is None else np.array(is_nccl)
    ranks = list(dict.fromkeys(rank.tolist()))
    for r in ranks:
        rows = np.flatnonzero(rank == r)
        w = ctx.job.timeline.per_rank[r]
        w.end = np.cumsum(duration[rows])
        w.start = w.end - duration[rows]
        w.name, w.is_kernel, w.is_nccl = name[rows], is_kernel[rows], is_nccl[rows]
    ctx.graph = SimpleNamespace(ranks=ranks, op_offset={r: int(np.flatnonzero(rank == r)[0]) for r in ranks}, op_step=step)
    if program is not None:
        ctx.program = dict(zip(ranks, program))
    return ctx


def test_a_kernel_slower_on_one_rank_than_on_its_peers_is_proposed_at_their_pace():
    # gemm twice a step on three ranks of one program: rank 2's runs take 150 against 100.
    ctx = with_ops(context(job({0: "n0", 1: "n0", 2: "n1"})), rank=(0, 0, 1, 1, 2, 2), step=(0,) * 6, name=(1,) * 6,
                   duration=(100, 100, 100, 100, 150, 150))
    (c,) = kernels.kernel_candidates(ctx)
    assert (c.cause, c.rank, c.host, c.name, c.reference) == ("kernel", 2, "n1", "gemm", "peers")
    assert c.excess_ns == 100 and c.slowdown == 0.5 and c.systematic and c.runs == 2
    assert c.change["op"].tolist() == [4, 5] and c.change["op_ns"].tolist() == [100, 100]


def test_a_kernel_no_peer_runs_is_held_to_its_own_other_steps():
    # A pipeline stage: only rank 3 runs stage_fwd; its third step's run is 60 longer.
    ctx = with_ops(context(job({3: "n1"})), rank=(3, 3, 3), step=(0, 1, 2), name=(2, 2, 2), duration=(100, 100, 160),
                   program=(1,))
    (c,) = kernels.kernel_candidates(ctx)
    assert (c.cause, c.rank, c.reference, c.excess_ns) == ("kernel", 3, "self", 60)
    assert c.change["op"].tolist() == [2] and c.change["op_ns"].tolist() == [100]


def test_jitter_below_the_slowdown_threshold_is_no_kernel_cause():
    ctx = with_ops(context(job({0: "n0", 1: "n0", 2: "n0"})), rank=(0, 1, 2), step=(0,) * 3, name=(1,) * 3,
                   duration=(1000, 1000, 1020))
    assert kernels.kernel_candidates(ctx) == []


def test_runs_beyond_the_peers_count_are_extra_kernels_removed():
    # extra_norm: once a step on ranks 0 and 1, three times on rank 2.
    ctx = with_ops(context(job({0: "n0", 1: "n0", 2: "n0"})), rank=(0, 1, 2, 2, 2), step=(0,) * 5, name=(4,) * 5,
                   duration=(40,) * 5)
    (c,) = kernels.extra_candidates(ctx)
    assert (c.cause, c.rank, c.name, c.reference) == ("extra_kernel", 2, "extra_norm", "peers")
    assert (c.runs, c.reference_runs, c.excess_ns, c.systematic) == (3, 1, 80, True)
    assert c.change["op"].tolist() == [3, 4] and c.change["op_ns"].tolist() == [0, 0]  # the second and third runs


def test_the_kernel_runs_are_the_op_runs_kernels_counted_among_kernels():
    """The kernels reuse the op runs' occurrence and references, unless a copy is named as a
    kernel: then the copy must not count as one of the kernel's runs."""
    for copy_name, shared in ((5, False), (1, True)):
        # gemm twice a step on ranks 0 and 1, a copy between rank 0's two; rank 1's take 150.
        ctx = with_ops(context(job({0: "n0", 1: "n0", 2: "n0"})), rank=(0, 0, 0, 1, 1, 2, 2), step=(0,) * 7,
                       name=(1, copy_name, 1, 1, 1, 1, 1), duration=(100, 5, 100, 150, 150, 100, 100),
                       is_kernel=(True, False, True, True, True, True, True))
        ops, k = ctx.shared(kernels.op_runs), ctx.shared(kernels.kernel_runs)
        assert ops[0].occurrence.tolist() == [0, 0 if copy_name == 5 else 1, 1 if copy_name == 5 else 2]
        kernel_rows = {r: np.flatnonzero(ctx.job.timeline[r].is_kernel) for r in (0, 1, 2)}
        assert (k is ops) != shared and [k[r].occurrence[kernel_rows[r]].tolist() for r in (0, 1, 2)] == [[0, 1]] * 3
        (c,) = kernels.kernel_candidates(ctx)
        assert (c.rank, c.excess_ns, c.change["op"].tolist(), c.change["op_ns"].tolist()) == (1, 100, [3, 4], [100, 100])


def host_time(rank, total, end, family=(0,), families=("DataLoader",), program=None) -> host.HostTime:
    """One occurrence per rank of each range, all host time one gap (segment = 10 x row)."""
    from nsys_collective.model import grouping

    n = len(rank)
    rank, step, fam = a(*rank), np.zeros(n, np.int64), a(*(family * n if len(family) == 1 else family))
    return host.HostTime(rank=rank, program=a(*(program or (0,) * n)), step=step, family=fam,
                         occurrence=grouping.occurrence(rank, step, fam), total=a(*total), end=a(*end),
                         range_row=np.full(n, -1), gap_start=np.zeros(n, np.int64),
                         families=list(families), items=(np.arange(n), 10 * np.arange(n), np.zeros(n, bool), a(*total)))


def test_host_time_longer_on_one_rank_is_cut_to_its_peers_from_its_latest_gap():
    # The data loader takes 500 on rank 2 against 100, and it ends 400 later.
    h = host_time(rank=(0, 1, 2), total=(100, 100, 500), end=(1000, 1000, 1400))
    (c,) = host.host_candidates(context(job({0: "n0", 1: "n0", 2: "n1"}), host_time=h))
    assert (c.cause, c.rank, c.host, c.name, c.reference) == ("host", 2, "n1", "DataLoader", "peers")
    assert c.excess_ns == 400 and c.slowdown == 4.0 and c.systematic
    assert c.change["segment"].tolist() == [20] and c.change["segment_ns"].tolist() == [100]


def test_host_time_that_ends_on_time_is_not_late():
    # Longer on rank 2 but it started early: it ends with the others, fixing it moves nothing.
    h = host_time(rank=(0, 1, 2), total=(100, 100, 500), end=(1000, 1000, 1000))
    assert host.host_candidates(context(job({0: "n0", 1: "n0", 2: "n1"}), host_time=h)) == []


def test_a_range_late_on_every_rank_of_a_host_is_a_host_group_cause():
    # A checkpoint: node1's two ranks take 400 against node0's 100 and end 300 later.
    h = host_time(rank=(0, 1, 2, 3), total=(100, 100, 400, 400), end=(1000, 1000, 1300, 1300), families=("checkpoint",))
    j = job({0: "node0", 1: "node0", 2: "node1", 3: "node1"})
    (c,) = host.host_group_candidates(context(j, host_time=h))
    assert (c.cause, c.rank, c.host, c.ranks, c.name) == ("host_group", None, "node1", [2, 3], "checkpoint")
    assert c.excess_ns == 600 and c.slowdown == 3.0 and c.systematic
    assert sorted(zip(c.change["segment"].tolist(), c.change["segment_ns"].tolist())) == [(20, 100), (30, 100)]


def test_one_late_rank_is_not_a_whole_host():
    h = host_time(rank=(0, 1, 2, 3), total=(100, 100, 400, 100), end=(1000, 1000, 1300, 1000))
    assert host.host_group_candidates(context(job({0: "node0", 1: "node0", 2: "node1", 3: "node1"}), host_time=h)) == []


def test_transfers_slower_than_their_kinds_baseline_are_set_back_to_it():
    # Five AllReduces on two ranks: every transfer takes 100 after the last arrival, the last one 300.
    inst = np.repeat(np.arange(5), 2)
    j = job({0: "n0", 1: "n0"})
    j.collectives = SimpleNamespace(obs_instance=inst)
    j.timing = SimpleNamespace(last_arrival=np.zeros(5, np.int64))
    j.aligned_end = np.where(inst == 4, 300, 100)
    j.op_name = lambda i: "AllReduce"
    ctx = context(j)
    ctx.kind = np.zeros(5, np.int64)
    (c,) = transfers.transfer_candidates(ctx)
    assert (c.cause, c.rank, c.name, c.reference, c.excess_ns) == ("transfer", None, "AllReduce transfers", "baseline", 400)
    assert c.change["member"].tolist() == [8, 9] and c.change["member_ns"].tolist() == [100, 100]


def test_gpu_idle_nothing_explains_is_the_graphs_slack():
    # Rank 0: an op launched at 12 that waits for nothing recorded starts at 80, 50 after its
    # stream went idle; the collective's member runs on a stream of its own.
    calls = {"rank": a(0, 0), "thread": a(1, 1), "start": a(0, 12), "end": a(10, 14), "correlation": a(1, 2)}
    ops = {"rank": a(0, 0, 0), "stream": a(7, 7, 9), "start": a(20, 80, 90), "end": a(30, 100, 95), "launch": a(0, 1, -1)}
    native = _native.ReplayGraph(calls, ops, {"instance": a(0), "op": a(2)}, tolerance_ns=5)
    built = Future()
    built.set_result(native)
    graph = JobGraph(building=built, ranks=[0], op_offset={0: 0}, call_offset={0: 0}, op_step=a(0, 0, 0),
                     member_rows=a(2), step_names=["(the whole capture)"], has_steps=False)
    j = job({0: "n0"})
    j.timeline.per_rank[0] = np.zeros(3)  # its three ops
    ctx = context(j)
    ctx.graph = graph
    (c,) = idle.idle_candidates(ctx)
    late = native.slack(native.nodes("op_start", a(0, 1, 2)))
    assert late.tolist()[0] == 0 and late[1] > 40
    assert (c.cause, c.rank, c.host, c.excess_ns) == ("idle", 0, "n0", int(late[1]))
    assert c.change["zero_slack"].tolist() == native.nodes("op_start", a(1)).tolist()


def test_a_device_slower_on_all_its_ops_is_set_to_its_peers_pace():
    # Three ranks: a gemm, an AllReduce (never a cause, no reference), a copy; rank 2's gemm and
    # copy take 25% longer. Its ops' rows skip the collective's.
    ctx = with_ops(context(job({0: "n0", 1: "n0", 2: "n1"})), rank=(0, 0, 0, 1, 1, 1, 2, 2, 2), step=(0,) * 9,
                   name=(1, 3, 5) * 3, duration=(800, 50, 200, 800, 50, 200, 1000, 90, 250),
                   is_kernel=(True, True, False) * 3, is_nccl=(False, True, False) * 3)
    runs = ctx.shared(kernels.op_runs)
    assert np.isnan(runs[2].other_ranks[1]) and runs[2].occurrence[1] == -1
    (c,) = rank_level.device_candidates(ctx)
    assert (c.cause, c.rank, c.slowdown, c.runs, c.excess_ns) == ("slow_device", 2, 0.25, 2, 250)
    assert c.change["op"].tolist() == [6, 8] and c.change["op_ns"].tolist() == [800, 200]


# ---- The kernel, extra_kernel and slow_device pickers against the job-wide version they replaced ----
# (attribution/whatif/kernels.py and rank.py before each rank's runs were read from its own
# timeline: every op run of the job in one set of columns; verbatim but for its names, ref_*, and
# for the two medians, which came from one core call that equalled these two.)


@dataclass
class RefRuns:
    rank: np.ndarray
    program: np.ndarray
    step: np.ndarray
    name: np.ndarray
    duration: np.ndarray
    op: np.ndarray
    occurrence: np.ndarray
    is_kernel: np.ndarray | None = None
    of_ops: np.ndarray | slice | None = None

    def by_rank(self) -> dict[int, np.ndarray]:
        at = np.full(int(self.op.max()) + 1 if len(self.op) else 0, -1, np.int64)
        at[self.op] = np.arange(len(self.op))
        rows = at[at >= 0]
        rank = self.rank[rows]
        start = np.flatnonzero(np.r_[True, rank[1:] != rank[:-1]]) if len(rows) else np.zeros(0, np.int64)
        end = np.r_[start[1:], len(rows)]
        return {int(rank[b]): rows[b:e] for b, e in zip(start.tolist(), end.tolist())}


def ref_op_runs(ctx):
    job, g, program = ctx.job, ctx.graph, ctx.program
    rows_of = {rank: np.flatnonzero(~job.timeline[rank].is_nccl) for rank in g.ranks}
    kernel_of = {rank: job.timeline[rank].is_kernel[rows] for rank, rows in rows_of.items()}
    n, n_kernels = sum(len(r) for r in rows_of.values()), sum(int(k.sum()) for k in kernel_of.values())
    rank_c, program_c, step, name, duration, op, occurrence = (np.empty(n, np.int64) for _ in range(7))
    is_kernel = np.arange(n) < n_kernels
    at = {True: 0, False: n_kernels}
    for rank in g.ranks:
        w, all_rows, kernel = job.timeline[rank], rows_of.pop(rank), kernel_of.pop(rank)
        all_op = g.op_offset[rank] + all_rows
        all_step, all_name = g.op_step[all_op], w.name[all_rows]
        all_occurrence = grouping.occurrence(all_step, all_name)
        for part in (True, False):
            pick = kernel if part else ~kernel
            rows = all_rows[pick]
            mine = slice(at[part], at[part] + len(rows))
            at[part] += len(rows)
            rank_c[mine], program_c[mine], op[mine] = rank, program[rank], all_op[pick]
            step[mine], name[mine], occurrence[mine] = all_step[pick], all_name[pick], all_occurrence[pick]
            duration[mine] = w.end[rows] - w.start[rows]
    return RefRuns(rank_c, program_c, step, name, duration, op, occurrence=occurrence, is_kernel=is_kernel)


def ref_kernel_runs(ctx):
    ops = ctx.shared(ref_op_runs)
    n = int(ops.is_kernel.sum())
    columns = (ops.rank, ops.program, ops.step, ops.name, ops.duration, ops.op, ops.occurrence)
    rows = slice(0, n) if ops.is_kernel[:n].all() else np.flatnonzero(ops.is_kernel)
    rank, program, step, name, duration, op, occurrence = (c[rows] for c in columns)
    other_names, _ = grouping.unique(ops.name[~ops.is_kernel])
    shared = bool(np.isin(ops.name[ops.is_kernel], other_names).any())
    if shared:
        occurrence = grouping.occurrence(rank, step, name)
    return RefRuns(rank, program, step, name, duration, op, occurrence=occurrence, is_kernel=np.ones(n, bool),
                   of_ops=None if shared else rows)


def ref_op_references(ctx):
    ops = ctx.shared(ref_op_runs)
    keys = (ops.program, ops.step, ops.name, ops.occurrence)
    return grouping.median_of_others(ops.duration, *keys), ref_median_of_other_ranks_by_keys(ops.duration, ops.rank, *keys)


def ref_kernel_candidates(ctx):
    k = ctx.shared(ref_kernel_runs)
    if k.of_ops is not None:
        peers = ctx.shared(ref_op_references)[0][k.of_ops]
    else:
        peers = grouping.median_of_others(k.duration, k.program, k.step, k.name, k.occurrence)
    order, _, first = grouping.groups(k.rank)
    found = {"peers": [], "self": []}
    for at, end in zip(first.tolist(), np.r_[first[1:], len(order)].tolist()):
        for reference, got in ref_rank_kernel_candidates(ctx, k, order[at:end], peers).items():
            found[reference] += got
    return found["peers"] + found["self"]


def ref_rank_kernel_candidates(ctx, k, mine, peers):
    job, min_excess = ctx.job, ctx.min_excess
    ref = peers[mine]
    use_peers = ~np.isnan(ref)
    alone = np.flatnonzero(~use_peers)
    if len(alone):
        ref[alone] = grouping.median_of_others(k.duration[mine[alone]], k.name[mine[alone]], k.occurrence[mine[alone]])
    known = ~np.isnan(ref)
    out = {}
    for reference, pick in (("peers", known & use_peers), ("self", known & ~use_peers)):
        out[reference] = []
        at = np.flatnonzero(pick)
        if not len(at):
            continue
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
        order, _, first = grouping.groups(group)
        at = at[order]
        for g_, b, e in zip(found.tolist(), first.tolist(), np.r_[first[1:], len(at)].tolist()):
            members = at[b:e]
            rows = mine[members]
            slow = members[k.duration[rows] > ref[members]]
            rank, name = int(k.rank[rows[0]]), int(k.name[rows[0]])
            out[reference].append(Candidate(
                cause="kernel", rank=rank, host=job.by_number[rank].host, name=kernels._short(job, name),
                name_full=job.timeline.names.values[name], reference=reference, excess_ns=int(excess[g_]),
                systematic=bool(slowdown[g_] >= kernels.CONFIDENT_SLOWDOWN), slowdown=float(slowdown[g_]),
                runs=len(members), reference_runs=len(members),
                change={"op": k.op[mine[slow]], "op_ns": np.round(ref[slow]).astype(np.int64)}))
    return out


def ref_extra_candidates(ctx):
    job, k, program, min_excess = ctx.job, ctx.shared(ref_kernel_runs), ctx.program, ctx.min_excess
    out = []
    ranks_of = {}
    for rank, p in program.items():
        ranks_of.setdefault(p, []).append(rank)
    for p, members in ranks_of.items():
        if len(members) < 2:
            continue
        mine = np.flatnonzero(k.program == p)
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
                    cause="extra_kernel", rank=rank, host=job.by_number[rank].host, name=kernels._short(job, name),
                    name_full=job.timeline.names.values[name], reference="peers", excess_ns=excess,
                    systematic=runs > reference_runs, runs=runs, reference_runs=reference_runs,
                    change={"op": k.op[removed], "op_ns": np.zeros(len(removed), np.int64)}))
    return out


def ref_device_candidates(ctx):
    job, g, ops, min_excess = ctx.job, ctx.graph, ctx.shared(ref_op_runs), ctx.min_excess
    ref = ctx.shared(ref_op_references)[1]
    known = ~np.isnan(ref)
    by_rank = ops.by_rank()
    out = []
    for rank in g.ranks:
        if rank not in by_rank:
            continue
        mine = by_rank[rank]
        rows = mine[known[mine]]
        if not len(rows):
            continue
        total, total_ref = float(ops.duration[rows].sum()), float(ref[rows].sum())
        slowdown = total / max(total_ref, 1.0) - 1
        if slowdown < rank_level.MIN_DEVICE_SLOWDOWN:
            continue
        fixed = np.round(ops.duration[rows] / (1 + slowdown)).astype(np.int64)
        excess = int((ops.duration[rows] - fixed).sum())
        if excess < min_excess:
            continue
        slower = int((ops.duration[rows] > ref[rows]).sum())
        systematic = slowdown >= rank_level.CONFIDENT_DEVICE_SLOWDOWN and slower >= rank_level.CONFIDENT_SLOWER_SHARE * len(rows)
        out.append(Candidate(
            cause="slow_device", rank=int(rank), host=job.by_number[rank].host, name=None, name_full=None,
            reference="peers", excess_ns=excess, systematic=bool(systematic), slowdown=float(slowdown),
            runs=len(rows), reference_runs=len(rows), change={"op": ops.op[rows], "op_ns": fixed}))
    return out


def same_candidates(mine: list[Candidate], theirs: list[Candidate]) -> bool:
    """Every field equal, the changes' arrays value for value and of one dtype."""
    def fields(c):
        d = dict(vars(c))
        change = d.pop("change")
        return d, {k: (np.asarray(v).dtype.str, np.asarray(v).tolist()) for k, v in change.items()}
    return [fields(c) for c in mine] == [fields(c) for c in theirs]


@pytest.mark.parametrize("seed", range(60))
def test_the_pickers_equal_the_job_wide_version(seed):
    """Random jobs: ranks of one or two programs, kernels run a varying number of times a step
    (extra runs), slow ranks and slow kernels, ties, runs outside the steps, collectives between
    the ops, a rank alone in its program (its own steps are its reference), sometimes a copy
    named as a kernel; every candidate of the three pickers, field by field."""
    rng = np.random.default_rng(seed)
    n_ranks = int(rng.integers(1, 6))
    ranks = sorted(rng.choice(8, n_ranks, replace=False).tolist())
    rows = []  # (rank, step, name, duration, is_kernel, is_nccl)
    for r in ranks:
        slow = rng.choice([1.0, 1.0, 1.3])
        for step in range(-1, int(rng.integers(1, 4))):
            for _ in range(int(rng.integers(0, 12))):
                name = int(rng.integers(1, 5))
                copy = rng.random() < 0.15
                nccl = not copy and rng.random() < 0.1
                if copy:
                    name = 5 if seed % 3 else name  # a copy named as a kernel, on every third job
                duration = int(rng.integers(1, 4) * 100 * (slow if name != 2 or rng.random() < 0.5 else 1.6))
                rows.append((r, step, name, duration, not copy, nccl))
    if not rows:
        return
    rank, step, name, duration, is_kernel, is_nccl = (list(c) for c in zip(*rows))
    j = job({r: f"n{r % 2}" for r in ranks})
    ctx = with_ops(context(j, min_excess=int(rng.integers(1, 300))), rank=rank, step=step, name=name,
                   duration=duration, is_kernel=is_kernel, is_nccl=is_nccl,
                   program=[int(rng.integers(0, 2)) if seed % 2 else 0 for _ in ranks])
    for r in ranks:
        if r not in ctx.graph.ranks:  # a rank without ops
            ctx.graph.ranks.append(r)
            ctx.graph.op_offset[r] = len(rows)
            w = j.timeline.per_rank[r]
            w.start = w.end = w.name = np.zeros(0, np.int64)
            w.is_kernel = w.is_nccl = np.zeros(0, bool)
            ctx.program.setdefault(r, 0)
    assert same_candidates(kernels.kernel_candidates(ctx), ref_kernel_candidates(ctx))
    assert same_candidates(kernels.extra_candidates(ctx), ref_extra_candidates(ctx))
    assert same_candidates(rank_level.device_candidates(ctx), ref_device_candidates(ctx))


def ref_api_candidates(ctx):
    """api_stall before it kept only each rank's histograms (rank.py), verbatim but for its names."""
    job, g, program, min_excess = ctx.job, ctx.graph, ctx.program, ctx.min_excess
    api_id = {}
    calls, hist = {}, []
    ranks = list(g.ranks)
    for rank in ranks:
        c = job.traces[rank].calls
        rows = np.flatnonzero(~c.blocking)
        ids, at = grouping.unique(c.name[rows])
        text = [str(n) for n in job.traces[rank].names(ids).tolist()]
        for name in sorted(set(text)):
            api_id.setdefault(name, len(api_id))
        dense = np.array([api_id[n] for n in text], dtype=np.int64)
        api, duration = (dense[at] if len(rows) else np.zeros(0, np.int64)), (c.end - c.start)[rows]
        calls[rank] = (rows, api, duration)
        (api_h,), value, count = grouping.value_counts(duration, api)
        hist.append((np.full(len(value), rank), np.full(len(value), program[rank]), api_h, value, count))
    names = sorted(api_id, key=api_id.get)
    owner, of_program, api_h, value, count = (np.concatenate([h[k] for h in hist] + [np.zeros(0, np.int64)]) for k in range(5))
    p90_h, median_h = grouping.counted_quantiles_of_other_ranks(value, count, owner, of_program, api_h, quantiles=(0.9, 0.5))
    out = []
    for rank in ranks:
        rows, api, duration = calls[rank]
        mine = owner == rank
        p90_of, median_of = np.full(len(names), np.nan), np.full(len(names), np.nan)
        p90_of[api_h[mine]], median_of[api_h[mine]] = p90_h[mine], median_h[mine]
        limit = np.where(p90_of >= 0, np.maximum(rank_level.API_STALL_FACTOR * p90_of, p90_of + rank_level.API_STALL_MIN_NS), np.inf)
        stalled = duration > limit[api]
        if not stalled.any():
            continue
        reference = median_of[api[stalled]].astype(np.int64)
        extra = duration[stalled] - reference
        excess = int(extra.sum())
        if excess < min_excess:
            continue
        by_api = np.bincount(api[stalled], weights=extra, minlength=len(names))
        parts = [{"name": names[k], "excess_ns": int(by_api[k]), "wait_saved_ns": None}
                 for k in np.argsort(-by_api)[:rank_level.MAX_PARTS].tolist() if by_api[k] > 0]
        worst = int(np.argmax(by_api))
        out.append(Candidate(
            cause="api_stall", rank=int(rank), host=job.by_number[rank].host, name=names[worst], name_full=names[worst],
            reference="peers", excess_ns=excess, systematic=True, runs=int(stalled.sum()), reference_runs=None,
            parts=parts,
            change={"call": g.call_offset[rank] + rows[stalled], "call_ns": reference}))
    return out


class Trace(SimpleNamespace):
    def names(self, ids):
        return np.array(self.strings + [None], dtype=object)[np.where(ids >= 0, ids, len(self.strings))]


@pytest.mark.parametrize("seed", range(40))
def test_api_stalls_equal_the_version_that_kept_every_call(seed):
    """Random calls: a few APIs, each rank's own string ids for them (one API only some ranks
    call), blocking calls, durations with long tails and ties, a rank whose calls stall, ranks of
    one or two programs: every api_stall candidate, field by field."""
    rng = np.random.default_rng(seed)
    ranks = list(range(int(rng.integers(1, 6))))
    j = job({r: f"n{r}" for r in ranks})
    apis = ["cudaLaunchKernel", "cudaMemcpyAsync", "cudaEventRecord", "cudaFree"]
    offset = 0
    ctx = context(j, min_excess=int(rng.integers(1, 100_000)))
    ctx.graph = SimpleNamespace(ranks=ranks, call_offset={})
    ctx.program = {r: int(rng.integers(0, 2)) if seed % 2 else 0 for r in ranks}
    stalling = int(rng.integers(0, len(ranks)))
    for r in ranks:
        strings = [s for s in apis if s != "cudaFree" or r % 2] + ["other"]
        rng.shuffle(strings)
        n = int(rng.integers(0, 300))
        name = rng.integers(0, len(strings), n)
        base = (rng.pareto(2.0, n) * 1000).astype(np.int64) // 10 * 10
        stall = (r == stalling) & (rng.random(n) < 0.05)
        start = np.cumsum(rng.integers(1, 100_000, n))
        duration = np.where(stall, 600_000 + rng.integers(0, 3, n) * 1000, base)  # stalls of a few lengths: ties
        j.traces[r] = Trace(strings=strings, calls=SimpleNamespace(start=start, end=start + duration, name=name,
                                                                   blocking=rng.random(n) < 0.1))
        ctx.graph.call_offset[r] = offset
        offset += n
    got = rank_level.api_candidates(ctx)
    assert same_candidates(got, ref_api_candidates(ctx))


@pytest.mark.parametrize("seed", range(20))
def test_programs_are_those_of_the_hashed_names(seed):
    """programs marks each rank's compute kernel names in a table; the same numbers as the sets of
    distinct names grouping.unique gave (ranks sharing few, many or no names; copies, NCCL and
    unnamed kernels among them)."""
    from nsys_collective.attribution.whatif.candidate import SAME_PROGRAM, programs

    rng = np.random.default_rng(seed)
    names = [f"k{i}" for i in range(int(rng.integers(1, 40)))]
    per_rank = {}
    for r in range(int(rng.integers(1, 7))):
        n = int(rng.integers(0, 200))
        lo = int(rng.integers(-1, len(names)))
        per_rank[r] = Work(name=rng.integers(lo, len(names), n).astype(np.int32),
                          is_kernel=rng.random(n) < 0.8, is_nccl=rng.random(n) < 0.2)
    job = SimpleNamespace(timeline=Timeline(per_rank=per_rank, names=SimpleNamespace(values=names)))
    want, representatives = {}, []
    sets = {r: set(grouping.unique(w.name[w.is_kernel & ~w.is_nccl])[0].tolist()) for r, w in per_rank.items()}
    for r in per_rank:
        for k, rep in enumerate(representatives):
            union = len(sets[r] | sets[rep])
            if union == 0 or len(sets[r] & sets[rep]) / union >= SAME_PROGRAM:
                want[r] = k
                break
        else:
            want[r] = len(representatives)
            representatives.append(r)
    assert programs(job, list(per_rank)) == want


def test_the_pickers_that_share_data_run_together_and_build_it_once(monkeypatch):
    """replay.SHARING groups the pickers by the data they share, dropped after each group: no data
    is built again for a later group (every picker's reads are inside its own group)."""
    from conftest import FIXTURES, analyzed

    from nsys_collective.attribution.whatif import replay
    from nsys_collective.causes import CAUSES

    grouped = [kind for group in replay.SHARING for kind in group]
    assert set(grouped) <= {k.kind for k in CAUSES.values() if k.replayed} and len(grouped) == len(set(grouped))
    built = []
    shared = Context.shared

    def counted(self, build):
        if build not in self._shared:
            built.append(build)
        return shared(self, build)

    monkeypatch.setattr(Context, "shared", counted)
    analyzed(sorted((FIXTURES / "demo-4rank-2host").glob("*.sqlite")))  # the pipeline, what-if included
    assert {kernels.op_runs, host._host_times} <= set(built) and len(built) == len(set(built))


def test_the_light_pickers_run_before_the_graph_is_awaited_and_never_read_it(monkeypatch):
    """replay.BESIDE_BUILD's pickers run while the graph is still being built: before anything
    waits for it, and without reading it themselves; every other picker runs after."""
    from conftest import FIXTURES, analyzed

    from nsys_collective.attribution.whatif import replay
    from nsys_collective.causes import CAUSES

    assert set(replay.BESIDE_BUILD) <= {k.kind for k in CAUSES.values() if k.replayed}
    events = []
    graph = JobGraph.graph
    monkeypatch.setattr(JobGraph, "graph", property(lambda self: events.append("graph") or graph.fget(self)))
    picker = replay.candidate_function

    def logged(kind):
        pick = picker(kind)
        return lambda ctx: events.append(kind.kind) or pick(ctx)

    monkeypatch.setattr(replay, "candidate_function", logged)
    analyzed(sorted((FIXTURES / "demo-4rank-2host").glob("*.sqlite")))  # the pipeline, what-if included
    first_wait = events.index("graph")
    assert events[:first_wait] == list(replay.BESIDE_BUILD)
    assert set(events[first_wait:]) - {"graph"} == {k.kind for k in CAUSES.values() if k.replayed} - set(replay.BESIDE_BUILD)


def test_a_consumed_job_lets_its_host_calls_go_after_the_host_pickers_and_says_the_same(monkeypatch):
    """pipeline.reduce consumes its job: the ranks' host calls go once the host pickers (their
    last readers, after the light pickers and the graph's build) are done, keeping where they
    begin; every picker after them runs without them, and the document is the one of a job kept
    whole (the demo)."""
    from conftest import FIXTURES

    from nsys_collective import pipeline
    from nsys_collective.attribution.whatif import replay

    paths = [str(p) for p in sorted((FIXTURES / "demo-4rank-2host").glob("*.sqlite"))]
    kept = pipeline.finish(pipeline.model(traced := pipeline.map_inputs(pipeline.prepare(paths))), traced)
    assert all(t.calls.start is not None for _, ts in traced for t in ts)  # not consumed: all there

    seen = []
    picker = replay.candidate_function

    def logged(kind):
        pick = picker(kind)
        return lambda ctx: seen.append((kind.kind, all(t.calls.start is None for t in ctx.job.traces.values()))) or pick(ctx)

    monkeypatch.setattr(replay, "candidate_function", logged)
    traced = pipeline.map_inputs(pipeline.prepare(paths))
    firsts = {id(t): int(t.calls.start[0]) for _, ts in traced for t in ts}
    consumed = pipeline.reduce(traced)
    host_done = max(i for i, (kind, _) in enumerate(seen) if kind in replay.HOST_PICKERS)
    assert [gone for _, gone in seen] == [False] * (host_done + 1) + [True] * (len(seen) - host_done - 1)
    assert len(seen) > host_done + 1  # some pickers ran without the calls
    assert {id(t): t.calls.first_start for _, ts in traced for t in ts} == firsts
    assert consumed.to_json() == kept.to_json()
