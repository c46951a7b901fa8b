"""Stream waits where the capture recorded none: which `cudaStreamWaitEvent` waited for which
`cudaEventRecord`, inferred from the host calls and the GPU work they launched (the what-if replay's
cross-stream edges, the idle split's sync waits). Per-event work is numpy over whole columns: call
names are classified once per string id, each wait finds its record by a sorted search."""

from __future__ import annotations

import numpy as np

from nsys_collective.model import cuda_api
from nsys_collective.model.cuda_api import SyncType


def stream_waits_from_calls(calls, gpu, names) -> tuple[dict | None, dict | None]:
    """Stream waits inferred where the capture recorded none (no SYNCHRONIZATION or CUDA_EVENT
    rows, no Kineto cuda_sync): a `cudaStreamWaitEvent` waits for the latest `cudaEventRecord`
    before it on the same thread that recorded another stream; the recording stream is the one the
    thread last launched work on before the record, the waiting stream the one it next launches
    work on. PyTorch records and waits on the thread that launches (DDP's reducer, FSDP's
    prefetch, tensor-parallel collectives). Marked inferred: the fidelity counts them so.
    `calls`, `gpu`: the rank's HostCalls (in start order) and GpuItems; `names`: what turns string
    ids into names (the rank's trace)."""
    if calls is None or gpu is None or not len(calls.start):
        return None, None
    is_record = cuda_api.matches(cuda_api.EVENT_RECORD, calls.name, names)
    is_wait = cuda_api.matches(cuda_api.STREAM_WAIT, calls.name, names)
    if not is_record.any() or not is_wait.any():
        return None, None
    rec_call, rec_stream, wait_call, wait_stream = [], [], [], []
    for t in np.unique(calls.tid[is_record | is_wait]).tolist():  # a few threads
        launched = np.flatnonzero((gpu.launch_tid == t) & (gpu.launch >= 0))
        order = launched[np.argsort(gpu.launch[launched], kind="stable")]
        when, stream = gpu.launch[order], gpu.stream[order]
        if not len(order):
            continue
        records = np.flatnonzero(is_record & (calls.tid == t))
        before = np.searchsorted(when, calls.start[records], side="left") - 1
        records, r_stream = records[before >= 0], stream[before[before >= 0]]
        waits = np.flatnonzero(is_wait & (calls.tid == t))
        after = np.searchsorted(when, calls.start[waits], side="right")
        waits, w_stream = waits[after < len(order)], stream[after[after < len(order)]]
        # Each wait's record: the latest at or before it of those that recorded another stream,
        # searched per waiting stream (a handful) among the records of the other streams.
        found = np.full(len(waits), -1, dtype=np.int64)
        for s in np.unique(w_stream).tolist():
            mine = np.flatnonzero(w_stream == s)
            other = np.flatnonzero(r_stream != s)
            k = np.searchsorted(calls.start[records[other]], calls.start[waits[mine]], side="right") - 1
            found[mine] = np.where(k >= 0, other[np.maximum(k, 0)], -1)
        paired = found >= 0
        rec_call.append(records[found[paired]])
        rec_stream.append(r_stream[found[paired]])
        wait_call.append(waits[paired])
        wait_stream.append(w_stream[paired])
    if not rec_call or not sum(len(w) for w in wait_call):
        return None, None
    rec_call, wait_call = np.concatenate(rec_call).astype(np.int64), np.concatenate(wait_call).astype(np.int64)
    event = np.arange(len(rec_call), dtype=np.int64)  # each pairing its own event id
    events = {"stream": np.concatenate(rec_stream).astype(np.int64), "event": event,
              "correlation": calls.correlation[rec_call]}
    syncs = {"kind": np.full(len(wait_call), SyncType.STREAM_WAIT_EVENT, np.int64),
             "stream": np.concatenate(wait_stream).astype(np.int64), "event": event,
             "correlation": calls.correlation[wait_call], "record_correlation": calls.correlation[rec_call],
             "inferred": np.ones(len(wait_call), np.int64)}
    return syncs, events
