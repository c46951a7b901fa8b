"""Why a rank's communication/computation overlap is zero, and what to do about it.

A rank whose NCCL kernels never run beside a compute kernel shows 0% overlap. Three reasons:

* `same_stream`: every NCCL kernel runs on a stream that also runs the rank's compute kernels; a
  stream runs one kernel at a time, so they cannot overlap (nsys-ai says the same). The fix: NCCL
  on a stream of its own (PyTorch's process groups do that unless a collective is issued on the
  compute stream, e.g. NCCL called directly on `torch.cuda.current_stream()`), with asynchronous
  collectives (`async_op=True`, waited on only where the result is needed);
* `no_compute`: the rank ran no compute kernel (in the analyzed steps);
* `serialized`: NCCL has its own stream, but compute never ran beside it: the compute stream waits
  for every collective (a `wait()` right after each, a synchronization) or the program has nothing
  to overlap.
"""

from __future__ import annotations

import numpy as np

from nsys_collective.model.trace import RankTrace


def zero_overlap(trace: RankTrace, analyzed: np.ndarray, overlap_ns: int,
                 nccl_time_ns: int) -> tuple[str | None, list[int]]:
    """The reason (None where overlap is not zero, or the rank has no NCCL time) and the NCCL
    streams it concerns; `analyzed`: which of its GPU ops the analysis covers
    (activity.analyzed_ops)."""
    g = trace.gpu
    if g is None or nccl_time_ns <= 0 or overlap_ns > 0:
        return None, []
    mine = analyzed & g.is_kernel
    nccl_streams = np.unique(g.stream[mine & g.is_nccl])
    compute_streams = np.unique(g.stream[mine & ~g.is_nccl])
    if not len(compute_streams):
        return "no_compute", nccl_streams.tolist()
    if len(nccl_streams) and np.isin(nccl_streams, compute_streams).all():
        return "same_stream", nccl_streams.tolist()
    return "serialized", nccl_streams.tolist()


def same_stream_finding(notes: dict[int, tuple[str | None, list[int]]]) -> str | None:
    """One sentence for every rank whose NCCL shares the compute stream, with the fix."""
    ranks = sorted(r for r, (cause, _) in notes.items() if cause == "same_stream")
    if not ranks:
        return None
    streams = sorted({s for r in ranks for s in notes[r][1]})
    who = f"rank{'s' * (len(ranks) > 1)} {', '.join(map(str, ranks))}"
    where = f"stream{'s' * (len(streams) > 1)} {', '.join(map(str, streams))}"
    return (f"{who}: 0% communication/computation overlap because the NCCL kernels run on the compute "
            f"{where}, one kernel at a time; put NCCL on a stream of its own (a process group's stream, "
            "not the current stream) and issue collectives asynchronously (async_op=True, waiting only "
            "where the result is needed) so that compute runs beside them.")
