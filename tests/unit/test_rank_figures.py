"""Per-rank explanations (attribution.idle, attribution.host_sync) held to the versions they
replaced, on random ranks: the idle split, whose busy blocks' analyzed work was counted by a
bincount over every op and whose waiting streams' ops were always sorted by launch; and the host
synchronization time, which searched every call among the steps, not only the synchronize ones."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from conftest import name_matches

from nsys_collective.attribution.host_sync import host_sync
from nsys_collective.attribution.idle import _gated, idle_split
from nsys_collective.model import cuda_api
from nsys_collective.model.activity import analyzed_ops
from nsys_collective.model.cuda_api import SyncType
from nsys_collective.model.steps import RankSteps, StepSelection

NAMES = ["cudaLaunchKernel", "cudaStreamSynchronize", "cudaDeviceSynchronize_v2", "cudaStreamWaitEvent", "cudaMemcpyAsync"]


def gated_before(trace) -> np.ndarray:
    g, calls = trace.gpu, trace.calls
    out = np.zeros(len(g.start), dtype=bool)
    syncs, _ = trace.stream_waits
    if syncs is None or calls is None or not len(calls.start):
        return out
    waits = np.flatnonzero(syncs["kind"] == SyncType.STREAM_WAIT_EVENT)
    order = np.argsort(calls.correlation, kind="stable")
    at = np.minimum(np.searchsorted(calls.correlation[order], syncs["correlation"][waits]), len(order) - 1)
    found = calls.correlation[order[at]] == syncs["correlation"][waits]
    when, stream = calls.start[order[at[found]]], syncs["stream"][waits[found]]
    for s in np.unique(stream).tolist():
        ops = np.flatnonzero((g.stream == s) & (g.launch >= 0))
        ops = ops[np.argsort(g.launch[ops], kind="stable")]
        k = np.searchsorted(g.launch[ops], when[stream == s], side="left")
        out[ops[k[k < len(ops)]]] = True
    return out


def idle_before(trace, selection, rank) -> dict:
    g = trace.gpu
    reach = np.maximum.accumulate(g.end)
    begins = np.flatnonzero(g.start[1:] > reach[:-1]) + 1
    if not len(begins):
        return {"idle_ns": 0, "idle_host_wait_ns": 0, "idle_sync_wait_ns": 0, "idle_other_ns": 0}
    analyzed = analyzed_ops(trace, selection, rank)
    busy_block = np.cumsum(np.r_[True, g.start[1:] > reach[:-1]]) - 1
    block_analyzed = np.bincount(busy_block, weights=analyzed, minlength=busy_block[-1] + 1) > 0
    counted = block_analyzed[busy_block[begins]] & block_analyzed[busy_block[begins] - 1]
    begins = begins[counted]
    g0, g1 = reach[begins - 1], g.start[begins]
    gap = g1 - g0
    launch = g.launch[begins]
    host = np.where(launch >= 0, np.clip(launch - g0, 0, gap), 0)
    rest = gap - host
    sync = np.where(gated_before(trace)[begins], rest, 0)
    return {"idle_ns": int(gap.sum()), "idle_host_wait_ns": int(host.sum()), "idle_sync_wait_ns": int(sync.sum()),
            "idle_other_ns": int((rest - sync).sum())}


def host_sync_before(trace, selection, rank) -> dict:
    calls = trace.calls
    mine = name_matches(cuda_api.SYNCHRONIZE, calls.name, trace.strings)
    if selection is not None:
        mine &= selection.analyzed(rank, calls.start)
    return {"host_sync_ns": int((calls.end[mine] - calls.start[mine]).sum()), "host_sync_calls": int(mine.sum())}


def random_rank(rng):
    """GPU ops in start order on three streams (launches mostly in order, some unknown), calls with
    shuffled correlation ids, stream waits on them (some of unknown calls), a few step ranges."""
    n = int(rng.integers(2, 80))
    start = np.sort(rng.integers(0, 2_000, n)).astype(np.int64)
    end = start + rng.integers(0, 60, n)
    launch = np.where(rng.random(n) < 0.1, -1, start - rng.integers(0, 30, n) - rng.integers(0, 2, n) * rng.integers(0, 200, n))
    gpu = SimpleNamespace(start=start, end=end, launch=launch, stream=rng.integers(0, 3, n).astype(np.int64))
    m = int(rng.integers(1, 60))
    corr = rng.permutation(m * 2)[:m].astype(np.int64)
    calls = SimpleNamespace(start=np.sort(rng.integers(0, 2_000, m)).astype(np.int64), correlation=corr,
                            name=rng.integers(-1, len(NAMES), m).astype(np.int32))
    calls.end = calls.start + rng.integers(0, 40, m)
    k = int(rng.integers(0, 20))
    syncs = {"kind": rng.choice([SyncType.STREAM_WAIT_EVENT, SyncType.STREAM_SYNCHRONIZE], k).astype(np.int64),
             "correlation": rng.integers(0, m * 2, k).astype(np.int64), "stream": rng.integers(0, 3, k).astype(np.int64)}
    trace = SimpleNamespace(gpu=gpu, calls=calls, stream_waits=(syncs, None), strings=NAMES,
                            synchronize_calls=np.flatnonzero(name_matches(cuda_api.SYNCHRONIZE, calls.name, NAMES)))
    s = int(rng.integers(1, 6))
    step_start = np.sort(rng.integers(0, 2_000, s)).astype(np.int64)
    steps = RankSteps(start=step_start, end=step_start + rng.integers(0, 600, s), label=[f"step {i}" for i in range(s)])
    kept = tuple(label for label in steps.label if rng.random() < 0.7)
    selection = StepSelection(pattern="step *", complete_only=True, restricts=True, steps=tuple(steps.label), kept=kept,
                              left_out=(), ranks={0: steps})
    return trace, selection


@pytest.mark.parametrize("seed", range(60))
def test_the_idle_split_and_host_sync_are_those_of_before(seed):
    rng = np.random.default_rng(seed)
    trace, selection = random_rank(rng)
    assert _gated(trace, trace.gpu.launch).tolist() == gated_before(trace).tolist()
    for sel in (selection, None):
        assert idle_split(trace, analyzed_ops(trace, sel, 0)) == idle_before(trace, sel, 0)
        assert host_sync(trace, sel, 0) == host_sync_before(trace, sel, 0)


@pytest.mark.parametrize("seed", range(30))
def test_gated_ops_with_calls_sharing_correlations_are_those_of_before(seed):
    """Calls sharing a correlation id (damaged or merged captures): a wait's call is the first of
    them, as the stable sort of every call found it; no wait found at all gates nothing."""
    rng = np.random.default_rng(seed)
    trace, _ = random_rank(rng)
    m = len(trace.calls.start)
    trace.calls.correlation = rng.integers(0, max(1, m // 3), m).astype(np.int64)
    assert _gated(trace, trace.gpu.launch).tolist() == gated_before(trace).tolist()
    trace.calls.correlation = trace.calls.correlation + 10 * m  # no wait names a call
    assert _gated(trace, trace.gpu.launch).tolist() == gated_before(trace).tolist() == [False] * len(trace.gpu.start)
