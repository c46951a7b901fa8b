"""Stream waits where the capture recorded none: which `cudaStreamWaitEvent` waited for which
`cudaEventRecord`, inferred from the host calls and the GPU work they launched (the what-if replay's
cross-stream edges, the idle split's sync waits). The trace classified the calls by name
(HostCalls.kind); the pairing is the core's (crates/core/src/stream_waits.rs), one walk over each
thread's launches. tests/unit/test_stream_waits.py keeps the numpy version it replaced."""

from __future__ import annotations

import numpy as np

from nsys_collective import _native
from nsys_collective.model import cuda_api
from nsys_collective.model.grouping import ids
from nsys_collective.model.cuda_api import SyncType


def stream_waits_from_calls(calls, gpu) -> tuple[dict | None, dict | None]:
    """Stream waits inferred where the capture recorded none (no SYNCHRONIZATION or CUDA_EVENT
    rows, no Kineto cuda_sync): a `cudaStreamWaitEvent` waits for the latest `cudaEventRecord`
    before it on the same thread that recorded another stream; the recording stream is the one the
    thread last launched work on before the record, the waiting stream the one it next launches
    work on. PyTorch records and waits on the thread that launches (DDP's reducer, FSDP's
    prefetch, tensor-parallel collectives). Marked inferred: the fidelity counts them so.
    `calls`, `gpu`: the rank's HostCalls (in start order, each call's kind by name) and GpuItems."""
    if calls is None or gpu is None or not len(calls.start):
        return None, None
    is_record = cuda_api.of_kind(calls.kind, cuda_api.EVENT_RECORD)
    is_wait = cuda_api.of_kind(calls.kind, cuda_api.STREAM_WAIT)
    if not is_record.any() or not is_wait.any():
        return None, None
    rec_call, rec_stream, wait_call, wait_stream = _native.infer_stream_waits(
        ids(calls.tid), _ints(calls.start), is_record, is_wait, ids(gpu.launch_tid), _ints(gpu.launch), ids(gpu.stream))
    if not len(wait_call):
        return None, None
    event = np.arange(len(rec_call), dtype=np.int64)  # each pairing its own event id
    events = {"stream": rec_stream, "event": event, "correlation": calls.correlation[rec_call]}
    syncs = {"kind": np.full(len(wait_call), SyncType.STREAM_WAIT_EVENT, np.int64),
             "stream": wait_stream, "event": event,
             "correlation": calls.correlation[wait_call], "record_correlation": calls.correlation[rec_call],
             "inferred": np.ones(len(wait_call), np.int64)}
    return syncs, events


def _ints(column) -> np.ndarray:
    return np.ascontiguousarray(column, dtype=np.int64)
