"""Stream waits where the capture recorded none: which `cudaStreamWaitEvent` waited for which
`cudaEventRecord`, inferred from the host calls and the GPU work they launched (the what-if replay's
cross-stream edges, the idle split's sync waits)."""

from __future__ import annotations

import numpy as np

from nsys_collective.model import cuda_api
from nsys_collective.model.cuda_api import SyncType
from nsys_collective.model.trace import RankTrace



def stream_waits_from_calls(trace: RankTrace) -> tuple[dict | None, dict | None]:
    """Stream waits inferred where the capture recorded none (no SYNCHRONIZATION or CUDA_EVENT
    rows, no Kineto cuda_sync): a `cudaStreamWaitEvent` waits for the latest `cudaEventRecord`
    before it on the same thread that recorded another stream; the recording stream is the one the
    thread last launched work on before the record, the waiting stream the one it next launches
    work on. PyTorch records and waits on the thread that launches (DDP's reducer, FSDP's
    prefetch, tensor-parallel collectives). Marked inferred: the fidelity counts them so."""
    calls, gpu = trace.calls, trace.gpu
    names = trace.names(calls.name)
    is_record = np.array([bool(n and cuda_api.EVENT_RECORD.match(n)) for n in names.tolist()], dtype=bool)
    is_wait = np.array([bool(n and cuda_api.STREAM_WAIT.match(n)) for n in names.tolist()], dtype=bool)
    if not is_record.any() or not is_wait.any():
        return None, None
    rec_call, rec_stream, wait_call, wait_stream, wait_record = [], [], [], [], []
    for t in np.unique(calls.tid[is_record | is_wait]).tolist():
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
        for wait, ws in zip(waits.tolist(), w_stream.tolist()):
            earlier = np.flatnonzero((calls.start[records] <= calls.start[wait]) & (r_stream != ws))
            if len(earlier):
                k = int(earlier[-1])
                rec_call.append(int(records[k]))
                rec_stream.append(int(r_stream[k]))
                wait_call.append(wait)
                wait_stream.append(ws)
                wait_record.append(len(rec_call) - 1)
    if not wait_call:
        return None, None
    rec_call, wait_call = np.array(rec_call, np.int64), np.array(wait_call, np.int64)
    event = np.arange(len(rec_call), dtype=np.int64)  # each pairing its own event id
    events = {"stream": np.array(rec_stream, np.int64), "event": event, "correlation": calls.correlation[rec_call]}
    syncs = {"kind": np.full(len(wait_call), SyncType.STREAM_WAIT_EVENT, np.int64), "stream": np.array(wait_stream, np.int64),
             "event": event[np.array(wait_record, np.int64)], "correlation": calls.correlation[wait_call],
             "record_correlation": calls.correlation[rec_call[np.array(wait_record, np.int64)]],
             "inferred": np.ones(len(wait_call), np.int64)}
    return syncs, events
