"""What the analysis knows of CUDA API calls by name, in one place: which calls block the host
until GPU work ends, which synchronize, which launch one kernel (or a graph), which record and
wait on events; and the kinds of synchronization record (CUPTI's `syncType`, Kineto's
`cuda_sync` mapped onto it by the native reader). nsys names carry suffixes (`_v2`, `_ptsz`,
`_ptds`); the runtime API (`cuda*`) and the driver API (`cu*`) are both matched.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from enum import IntEnum

import numpy as np

_SUFFIX = r"(_v\d+|_ptsz|_ptds)*$"


class SyncType(IntEnum):
    """CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE: what a synchronization record waited for."""

    EVENT_SYNCHRONIZE = 1  # cudaEventSynchronize: the host waits for an event
    STREAM_WAIT_EVENT = 2  # cudaStreamWaitEvent: a stream (not the host) waits for an event
    STREAM_SYNCHRONIZE = 3  # cudaStreamSynchronize: the host waits for a stream
    CONTEXT_SYNCHRONIZE = 4  # cudaDeviceSynchronize / cuCtxSynchronize: the host waits for the device


# The host waits for the GPU in these (synchronize calls).
SYNCHRONIZE = re.compile(r"^(cuda(Device|Stream|Event|Thread)Synchronize|cu(Ctx|Stream|Event)Synchronize)" + _SUFFIX)
# Calls that return only once GPU work has ended: the synchronize calls and synchronous copies.
# cudaStreamWaitEvent makes a stream wait, not the host; cudaMemcpy*Async does not block.
BLOCKING = re.compile(
    r"^(cuda(Stream|Device|Event|Thread)Synchronize|cu(Stream|Ctx|Event)Synchronize"
    r"|cudaMemcpy(2D|3D)?(To|From)?(Symbol|Array)?(Peer)?|cuMemcpy(DtoH|HtoD|DtoD|Peer)?(_v2)?)(_v\d+)?$")
# Calls that launch exactly one kernel (or a graph's): their GPU work must be in the capture.
LAUNCH = re.compile(r"^(cudaLaunchKernel(ExC)?|cuLaunchKernel(Ex)?|cudaLaunchCooperativeKernel|cuLaunchCooperativeKernel"
                    r"|cudaGraphLaunch|cuGraphLaunch)" + _SUFFIX)
EVENT_RECORD = re.compile(r"^(cudaEventRecord(WithFlags)?|cuEventRecord(WithFlags)?)(_v\d+|_ptsz)?$")
STREAM_WAIT = re.compile(r"^(cudaStreamWaitEvent|cuStreamWaitEvent)(_v\d+|_ptsz)?$")


def by_name(test, ids: np.ndarray, strings: Sequence[str | None], dtype=bool) -> np.ndarray:
    """test(name) of each of `ids` (ids into `strings`; -1, unnamed, is None) as `dtype`, asked once
    per id used, found by marking a table as long as `strings` (a rank's holds only the names its
    ranks use): millions of calls or ranges, a few hundred names."""
    used = np.bincount(ids + 1, minlength=len(strings) + 1)  # -1 counted first
    answer = np.zeros(len(strings) + 1, dtype)  # -1 takes the last slot
    for i in (np.flatnonzero(used) - 1).tolist():
        answer[i] = test(strings[i] if i >= 0 else None)
    return answer.take(ids)


# What a rank's trace asks of every call (model/trace.py's HostCalls.kind): bit k for KINDS[k].
KINDS = (BLOCKING, SYNCHRONIZE, LAUNCH, EVENT_RECORD, STREAM_WAIT)


def kinds(ids: np.ndarray, strings: Sequence[str | None]) -> np.ndarray:
    """Per call (ids into `strings`, -1 unnamed), which of KINDS its name matches, as bits (uint8):
    every kind asked of each name at once (of_kind reads one), not each kind's names looked up
    over every call again."""
    return by_name(lambda name: sum(1 << k for k, pattern in enumerate(KINDS) if name and pattern.match(name)),
                   ids, strings, np.uint8)


def of_kind(kinds: np.ndarray, pattern: re.Pattern) -> np.ndarray:
    """Which calls of `kinds` (as `kinds` gives them) `pattern`, one of KINDS, matches."""
    return (kinds & (1 << KINDS.index(pattern))) != 0
