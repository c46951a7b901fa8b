"""Host synchronization time per process: how long the host sat in cudaDeviceSynchronize,
cudaStreamSynchronize and cudaEventSynchronize (and their driver-API twins).

Calls belong to a process, not to a GPU: the figure is grouped by process id (the two processes of
the real nsys-ai-2gpu report both record deviceId 0 in their synchronization records, and a
grouping by device merges them). Ranks of one process (one process driving several GPUs) show the
same figure. With a step selection (model.steps), only calls that began in an analyzed step count.
"""

from __future__ import annotations

from nsys_collective.model.steps import StepSelection
from nsys_collective.model.trace import RankTrace


def host_sync(trace: RankTrace, selection: StepSelection | None, rank: int) -> dict:
    """host_sync_ns and host_sync_calls of the rank's process."""
    calls = trace.calls
    if calls is None or not len(calls.start):
        return {"host_sync_ns": 0, "host_sync_calls": 0}
    mine = trace.synchronize_calls
    if selection is not None:  # only the synchronize calls searched among the steps, not every call
        mine = mine[selection.analyzed(rank, calls.start[mine])]
    return {"host_sync_ns": int((calls.end[mine] - calls.start[mine]).sum()), "host_sync_calls": len(mine)}
