"""Why each rank's GPU sat idle: host wait, sync wait or other (HTA's idle time breakdown, per GPU).

The GPU is idle where none of its streams runs a kernel, copy or memset. Each idle gap ends when
some op starts; what held that op back splits the gap:

* host wait: until its launch call started, the host had not asked for it (a data loader, Python,
  a late `.item()`): the part of the gap before the launch call;
* sync wait: the rest, when the op waited on another stream or an event (a stream wait recorded
  by CUPTI or Kineto, or inferred from `cudaStreamWaitEvent` calls) issued on its stream after
  the previous op of that stream was launched;
* other: the rest otherwise (launch latency, dependencies nothing records).

HTA splits per stream and calls a short gap "kernel wait" (launch overhead); here the GPU is one
timeline, as the ranks' waits are, and launch overhead falls in "other". Only gaps between GPU work
of the analyzed steps (model.steps) count; the time before the first op and after the last does
not (the capture's edges, not the job's).
"""

from __future__ import annotations

import numpy as np

from nsys_collective.model.cuda_api import SyncType
from nsys_collective.model.trace import RankTrace

def _gated(trace: RankTrace, launch: np.ndarray) -> np.ndarray:
    """Which GPU ops (trace.gpu rows) a stream wait was issued for: the first op launched on the
    waiting stream at or after the wait call. `launch`: the ops' launch times (GpuItems.launch)."""
    g, calls = trace.gpu, trace.calls
    out = np.zeros(len(g.start), dtype=bool)
    syncs, _ = trace.stream_waits
    if syncs is None or calls is None or not len(calls.start):
        return out
    waits = np.flatnonzero(syncs["kind"] == SyncType.STREAM_WAIT_EVENT)
    # The wait call's start, by correlation id (calls are the process's runtime calls; the first
    # where several share one): only the calls whose correlation a wait names are sorted, a few
    # thousand of a quarter million.
    wanted = syncs["correlation"][waits]
    named = np.flatnonzero(np.isin(calls.correlation, wanted))
    if not len(named):
        return out
    order = named[np.argsort(calls.correlation[named], kind="stable")]
    at = np.minimum(np.searchsorted(calls.correlation[order], wanted), len(order) - 1)
    found = calls.correlation[order[at]] == wanted
    when, stream = calls.start[order[at[found]]], syncs["stream"][waits[found]]
    launched = launch >= 0
    for s in np.unique(stream).tolist():  # a handful of streams
        ops = np.flatnonzero((g.stream == s) & launched)
        on_stream = launch[ops]
        if (on_stream[1:] < on_stream[:-1]).any():  # a stream's ops mostly run in launch order already
            by_launch = np.argsort(on_stream, kind="stable")
            ops, on_stream = ops[by_launch], on_stream[by_launch]
        k = np.searchsorted(on_stream, when[stream == s], side="left")
        out[ops[k[k < len(ops)]]] = True
    return out


def idle_split(trace: RankTrace, analyzed: np.ndarray) -> dict:
    """idle_ns and its parts idle_host_wait_ns, idle_sync_wait_ns, idle_other_ns for one rank;
    `analyzed`: which of its GPU ops the analysis covers (activity.analyzed_ops)."""
    none = {"idle_ns": 0, "idle_host_wait_ns": 0, "idle_sync_wait_ns": 0, "idle_other_ns": 0}
    g = trace.gpu
    if g is None or len(g.start) < 2:
        return none
    reach = np.maximum.accumulate(g.end)  # ops are sorted by start: the GPU is busy until reach
    begins = np.flatnonzero(g.start[1:] > reach[:-1]) + 1  # the first op after each idle gap
    if not len(begins):
        return none
    # The GPU's busy blocks start at its first op and where each gap ends; a gap counts between
    # two blocks with analyzed work.
    block_analyzed = np.logical_or.reduceat(analyzed, np.r_[0, begins])
    begins = begins[block_analyzed[1:] & block_analyzed[:-1]]
    g0, g1 = reach[begins - 1], g.start[begins]
    gap = g1 - g0
    launch_all = g.launch  # read off the calls once (GpuItems.launch)
    launch = launch_all[begins]
    host = np.where(launch >= 0, np.clip(launch - g0, 0, gap), 0)
    rest = gap - host
    sync = np.where(_gated(trace, launch_all)[begins], rest, 0)
    return {"idle_ns": int(gap.sum()), "idle_host_wait_ns": int(host.sum()), "idle_sync_wait_ns": int(sync.sum()),
            "idle_other_ns": int((rest - sync).sum())}
