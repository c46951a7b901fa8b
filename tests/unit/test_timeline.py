"""The aligned timeline holds nothing twice: a rank on the reference clock keeps its trace's own
times, a trace whose string table the shared one begins with keeps its own name ids; the others
get the same numbers the per-time correction and the table lookup gave."""

from __future__ import annotations

import numpy as np
import pytest

from nsys_collective.model.alignment import Alignment, _apply
from nsys_collective.model.timeline import Timeline
from nsys_collective.model.trace import GpuItems, RankTrace

T0 = 1_750_000_000_000_000_000


def alignment(offsets, drifts, clock_of_rank) -> Alignment:
    return Alignment(method="test", t_ref_ns=T0 + 5_000, clock_names=[str(c) for c in range(len(offsets))],
                     clock_of_rank=clock_of_rank, offset_ns=np.array(offsets, np.float64),
                     drift_ppm=np.array(drifts, np.float64), spread_before=None, spread_after=None, violations_before=0,
                     violations_after=0, drift_fitted=any(drifts), instances_used=0)


def trace(rng, strings, key) -> RankTrace:
    n = 50
    start = np.sort(T0 + rng.integers(0, 10_000_000, n))
    is_kernel = rng.random(n) < 0.8
    gpu = GpuItems.of_columns(start=start, end=start + rng.integers(0, 9_000, n), name=rng.integers(-1, len(strings), n).astype(np.int32),
                              short_name=rng.integers(-1, len(strings), n).astype(np.int32),
                              launch_call=np.full(n, -1, np.int32), calls=None,
                              is_nccl=is_kernel & (rng.random(n) < 0.3), is_kernel=is_kernel, ctas=np.ones(n, np.int32),
                              stream=np.full(n, 7, np.int32))
    return RankTrace(index=0, report="r", host="h", pid=1, device=0, env_rank=None, file_rank=None, counts={},
                     strings=tuple(strings), ops=None, gpu=gpu, ranges=None, calls=None, sm_count=None, key=key)


@pytest.mark.parametrize("offset", [0.0, -0.0, 0.4, 0.5, 1.5, -2.5, 605535.2234677, -1e9 + 0.5])
def test_a_constant_shift_gives_the_per_time_numbers(offset):
    a = alignment([0.0, offset], [0.0, 0.0], {0: 0, 1: 1})
    utc = T0 + np.random.default_rng(1).integers(-10**12, 10**12, 1000)
    assert np.array_equal(a.correct_rank(1, utc), _apply(utc, a.offset_ns[1], 0.0, a.t_ref_ns))
    assert a.correct_rank(0, utc) is utc  # the reference clock: the times themselves
    drifting = alignment([0.0, offset], [0.0, 3.7], {0: 0, 1: 1})
    assert np.array_equal(drifting.correct_rank(1, utc), _apply(utc, offset, 3.7, drifting.t_ref_ns))


def test_ranks_on_the_reference_clock_and_shared_string_tables_hold_nothing_twice():
    rng = np.random.default_rng(7)
    names = ["gemm", "ncclDevKernel_AllReduce", "[CUDA memcpy]"]
    traces = {0: trace(rng, names, key=1), 1: trace(rng, names, key=2), 2: trace(rng, ["other"] + names, key=3)}
    timeline = Timeline(traces, alignment([0.0, 1234.6], [0.0, 0.0], {0: 0, 1: 1, 2: 0}))
    w0, w1, w2 = timeline[0], timeline[1], timeline[2]
    g0, g1, g2 = traces[0].gpu, traces[1].gpu, traces[2].gpu
    assert w0.start is g0.start and w0.end is g0.end
    assert w0.name is g0.name and w1.short_name_by_name is g1.short_name_by_name  # the shared table begins with theirs
    assert np.array_equal(w1.start, g1.start + 1235) and np.array_equal(w1.end, g1.end + 1235)
    # Another table: its ids looked up (-1 stays -1), as int32.
    assert w2.name.dtype == np.int32 and w2.start is g2.start
    want = np.array([timeline.names.values.index(traces[2].strings[i]) if i >= 0 else -1 for i in g2.name.tolist()])
    assert np.array_equal(w2.name, want)
    want_short = [timeline.names.values.index(traces[2].strings[i]) if i >= 0 else -1 for i in g2.short_name.tolist()]
    assert w2.short_name.tolist() == want_short
    assert np.array_equal(w2.is_nccl, g2.is_nccl) and np.array_equal(w2.is_kernel, g2.is_kernel)



def test_released_work_is_built_again_the_same_on_its_next_use():
    rng = np.random.default_rng(8)
    names = ["gemm", "ncclDevKernel_AllReduce"]
    traces = {0: trace(rng, names, key=1), 1: trace(rng, ["other"] + names, key=2)}
    timeline = Timeline(traces, alignment([0.0, -77.0], [0.0, 2.5], {0: 0, 1: 1}))
    before = {r: timeline[r] for r in traces}
    timeline.release()
    for r, w in before.items():
        again = timeline[r]
        assert again is not w  # built anew: the old copies are the caller's alone
        for field in ("start", "end", "name", "short_name", "is_nccl", "is_kernel", "ctas", "stream"):
            assert np.array_equal(getattr(again, field), getattr(w, field))


def test_name_id_pairs_are_packed_in_int64():
    """The contention fit packs (full, short) name id pairs into one integer: with int32 ids of a
    job with 60,000 names, the packing must not wrap."""
    from nsys_collective.attribution.contention import _distinct_pairs

    rng = np.random.default_rng(3)
    full, short = rng.integers(-1, 60_000, 500).astype(np.int32), rng.integers(-1, 60_000, 500).astype(np.int32)
    pairs, at = _distinct_pairs(full, short)
    want, want_at = np.unique(np.stack([full, short]).astype(np.int64), axis=1, return_inverse=True)
    assert np.array_equal(pairs, want) and np.array_equal(at, want_at.ravel())


@pytest.mark.parametrize("seed", range(20))
def test_short_of_is_the_short_name_of_each_full_names_first_item(seed):
    """short_of marks each name's first item in one pass: the dict np.unique(return_index=True)
    gave, keys in the same order (unnamed items, -1, included; no item at all: empty)."""
    from nsys_collective.model.timeline import GpuWork

    rng = np.random.default_rng(seed)
    n = int(rng.integers(0, 300)) if seed else 0
    name = rng.integers(-1, int(rng.integers(1, 50)), n).astype(np.int32)
    short = rng.integers(0, 1000, n).astype(np.int32)
    none = np.zeros(n, bool)
    w = GpuWork.of_columns(start=np.arange(n), end=np.arange(n), name=name, short_name=short, is_nccl=none, is_kernel=none,
                           ctas=np.zeros(n, np.int32), stream=np.zeros(n, np.int32))
    full, first = np.unique(name, return_index=True)
    want = dict(zip(full.tolist(), short[first].tolist()))
    assert w.short_of == want and list(w.short_of) == list(want)
