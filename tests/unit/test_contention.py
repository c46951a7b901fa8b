"""The contention fit's gathering (attribution/contention.py) against what it replaced, to the last
bit: the compute kernels' side gathered rank by rank against the job-wide gathering, on drawn jobs
(names shared across ranks or not, a name of -1, ranks without GPU work, kernels with fewer and
more runs than a fit takes, copies and NCCL kernels sharing starts); the union of each kernel's
overlaps with a transfer against the sort it replaced."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from nsys_collective import _native
from nsys_collective.attribution import contention, overlap_fit
from nsys_collective.model import grouping
from nsys_collective.model.timeline import GpuWork


def _job_wide(job, min_runs: int = 3):
    """_compute_slowdown as it was: every compute kernel of every rank in one set of columns."""
    work = job.timeline
    ranks = sorted(job.ops)
    parts = []
    for r in ranks:
        w = work[r]
        compute = np.flatnonzero(w.is_kernel & ~w.is_nccl)
        nccl = np.flatnonzero(w.is_nccl)
        start, end = w.start[compute], w.end[compute]
        _, i, ns = _native.overlaps(w.start[nccl], w.end[nccl], start, end)
        parts.append((compute, w.name[compute], end - start, np.bincount(i, weights=ns, minlength=len(compute))))
    if not parts:
        return [], []
    first_of_rank = np.cumsum([0] + [len(p[0]) for p in parts[:-1]])
    row, name, duration, overlap = (np.concatenate(c) for c in zip(*parts))
    beside = overlap > 0
    at = name + 1
    bins = int(at.max(initial=0)) + 1
    runs_of = np.bincount(at, minlength=bins)
    overlapped = np.bincount(at, weights=beside, minlength=bins)
    alone = runs_of - overlapped
    total_overlap = np.bincount(at, weights=overlap, minlength=bins)
    wanted = [k for k in np.argsort(-total_overlap, kind="stable").tolist()
              if runs_of[k] and overlapped[k] >= min_runs and alone[k] >= min_runs][:contention.MAX_COMPUTE_KERNELS]
    out, changes = [], []
    for k in wanted:
        runs = np.flatnonzero(at == k)
        many = len(runs) > contention.MAX_RUNS
        fit_runs = runs[np.linspace(0, len(runs) - 1, contention.MAX_RUNS).astype(np.int64)] if many else runs
        fitted = overlap_fit.fit(duration[fit_runs], np.zeros(len(fit_runs), np.int64), overlap[fit_runs, None],
                                 np.ones(len(fit_runs)))
        if fitted is None or fitted.flat[0]:
            continue
        coef = float(fitted.coefficient[0])
        scale = len(runs) / len(fit_runs)
        slowed, low, high = (float(v[0]) * scale for v in (fitted.contribution, fitted.low, fitted.high))
        o, a = runs[beside[runs]], runs[~beside[runs]]
        own = float(duration[o].sum()) - slowed
        first = int(np.searchsorted(first_of_rank, runs[0], side="right")) - 1
        short = work[ranks[first]].short_name[row[runs[0]]]
        out.append({"kernel": work.names.values[int(short)], "kernel_full": work.names.values[k - 1],
                    "overlapped_mean_ns": round(float(duration[o].mean())), "alone_mean_ns": round(float(duration[a].mean())),
                    "slowdown": slowed / own if own > 0 else 0.0, "overlapped_runs": int(len(o)), "alone_runs": int(len(a)),
                    "slowed_ns": round(slowed), "slowed_low_ns": round(low), "slowed_high_ns": round(high),
                    "slowdown_per_overlap": round(coef, 4),
                    "confidence": "high" if slowed > 0 and low >= 0.5 * slowed else "low",
                    "wait_saved_ns": None, "step_time_saved_ns": None})
        extra = np.rint(coef * overlap[o]).astype(np.int64)
        rank = np.asarray(ranks, np.int64)[np.searchsorted(first_of_rank, o, side="right") - 1]
        changes.append({"rank": rank, "row": row[o], "ns": np.maximum(0, duration[o] - extra)})
    order = sorted(range(len(out)), key=lambda j: -out[j]["slowed_ns"])
    return [out[j] for j in order], [changes[j] for j in order]


def _drawn_job(seed: int):
    """Ranks of compute kernels (a few names, -1 among them, later ranks with names of their own),
    NCCL kernels on their own stream (some slowing what they overlap), copies; starts sorted, some
    shared."""
    rng = np.random.default_rng(seed)
    works = {}
    for r in range(int(rng.integers(1, 5))):
        n = int(rng.integers(0, 900)) if r else int(rng.integers(200, 900))
        start = np.sort(rng.integers(0, 2_000_000, n)) if n else np.zeros(0, np.int64)
        start[1::7] = start[:-1:7]  # items sharing a start
        is_nccl = rng.random(n) < 0.04
        is_kernel = is_nccl | (rng.random(n) < 0.95)
        name = np.where(is_nccl, 0, rng.integers(0, 5 + seed % 6, n) + 2 * r)
        name[rng.random(n) < 0.03] = -1
        duration = np.where(is_nccl, rng.integers(20_000, 200_000, n), rng.integers(100, 9_000, n))
        end = start + duration
        busy = np.zeros(n, bool)
        for s, e in zip(start[is_nccl], end[is_nccl]):
            busy |= (start < e) & (end > s)
        end = np.where(busy & ~is_nccl & (name % 2 == 0), end + duration // 3, end)  # NCCL slows the even names
        works[r] = GpuWork.of_columns(start=start, end=end, name=name, short_name=np.where(name >= 0, name + 100, -1),
                                      is_nccl=is_nccl, is_kernel=is_kernel, ctas=np.ones(n, np.int64),
                                      stream=is_nccl.astype(np.int64))
    if seed % 4 == 3:
        none = np.zeros(0, np.int64)
        works[len(works)] = GpuWork.of_columns(start=none, end=none, name=none, short_name=none, is_nccl=np.zeros(0, bool),
                                               is_kernel=np.zeros(0, bool), ctas=none, stream=none)
    return SimpleNamespace(timeline=_Timeline(works), ops={r: None for r in works})


class _Timeline(dict):
    """Ranks' GPU work whose names enter the one table as each rank is first built (as
    model.timeline.Timeline's do): before every rank is built, the table lacks some."""

    def __init__(self, works):
        super().__init__(works)
        self.names = SimpleNamespace(values=[])
        self._built: set[int] = set()

    def __getitem__(self, rank):
        w = super().__getitem__(rank)
        if rank not in self._built:
            self._built.add(rank)
            top = int(max(w.name.max(initial=-1), w.short_name.max(initial=-1)))
            self.names.values.extend(f"name {i}" for i in range(len(self.names.values), top + 1))
        return w


@pytest.mark.parametrize("max_runs", [40, 2_000])
def test_rank_by_rank_is_the_job_wide_gathering(monkeypatch, max_runs):
    monkeypatch.setattr(contention, "MAX_RUNS", max_runs)
    fitted = 0
    for seed in range(16):
        got, got_changes = contention._compute_slowdown(_drawn_job(seed))
        want, want_changes = _job_wide(_drawn_job(seed))
        assert got == want, seed
        for g, w in zip(got_changes, want_changes, strict=True):
            for key in ("rank", "row", "ns"):
                assert g[key].dtype == w[key].dtype and np.array_equal(g[key], w[key]), (seed, key)
        fitted += len(got)
    assert fitted >= 16  # the drawn jobs do give fitted kernels to compare


def _union_lengths_by_group(group, lo, hi):
    """_union_lengths as it was: per dense group 0..G-1 (np.unique's inverse), sorted by lexsort."""
    order = np.lexsort((lo, group))
    g, lo, hi = group[order], lo[order], hi[order]
    width = int(hi.max(initial=0)) + 1
    reach = np.maximum.accumulate(hi + g * width) - g * width
    before = np.r_[np.iinfo(np.int64).min, reach[:-1]]
    before[np.r_[True, g[1:] != g[:-1]]] = np.iinfo(np.int64).min
    added = np.maximum(0, hi - np.maximum(lo, before))
    return np.bincount(g, weights=added, minlength=int(group.max(initial=-1)) + 1)


def test_union_lengths_are_those_of_the_sort_by_group():
    """Keys repeated or not, intervals nested, touching, equal and apart, starts tied, in any
    order; and no intervals at all."""
    rng = np.random.default_rng(0)
    for case in range(60):
        n = int(rng.integers(0, 400)) if case else 0
        key = rng.integers(0, 1 + case * 50, n) * int(rng.integers(1, 48))
        lo = rng.integers(0, 1 + case * 1_000, n)
        hi = lo + rng.integers(1, 1 + case * 300, n)
        lo[::5] = lo[::5] // 10 * 10  # ties
        code, at = np.unique(key, return_inverse=True)
        keys, lengths = contention._union_lengths(key, lo, hi)
        assert np.array_equal(keys, code)
        assert lengths.tobytes() == _union_lengths_by_group(at.ravel(), lo, hi).tobytes()
        if n:
            one = int(key[0])  # one key's union by brute force, ns by ns
            covered = np.zeros(int(hi.max()) + 1, bool)
            for a, b in zip(lo[key == one], hi[key == one]):
                covered[a:b] = True
            assert lengths[np.searchsorted(keys, one)] == covered.sum()


def test_places_in_sorted_steps_are_those_of_the_loop():
    """The steps' positions (contention._positions_in_step): each instance's place in its step's
    run of the sorted steps (their occurrence), as the loop over the instances gave it; one run,
    runs of one, and none."""
    rng = np.random.default_rng(0)
    for case in range(40):
        values = np.sort(rng.integers(0, 1 + case % 7, int(rng.integers(0, 60)) if case else 0))
        want = np.zeros(len(values), dtype=np.int64)
        for k in range(1, len(values)):
            want[k] = want[k - 1] + 1 if values[k] == values[k - 1] else 0
        got = grouping.occurrence(values)
        assert got.dtype == want.dtype and np.array_equal(got, want)
