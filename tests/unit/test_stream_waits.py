"""Stream waits inferred from the calls: the sorted search pairs each wait with the record a
plain per-wait scan finds (the definition in model/stream_waits.py), on random calls with ties."""

from types import SimpleNamespace

import numpy as np
import pytest

from nsys_collective.model import cuda_api
from nsys_collective.model.stream_waits import stream_waits_from_calls

NAMES = ["cudaEventRecord", "cudaStreamWaitEvent", "cudaLaunchKernel", "cuEventRecord_v2", None]


class Names:
    def names(self, ids):
        return np.array([NAMES[i] if i >= 0 else None for i in ids], dtype=object)


def _scan(calls, gpu):
    """The definition, one wait at a time."""
    pairs = []
    is_record = np.isin(calls.name, [0, 3])
    is_wait = calls.name == 1
    for t in np.unique(calls.tid[is_record | is_wait]).tolist():
        launched = np.flatnonzero((gpu.launch_tid == t) & (gpu.launch >= 0))
        order = launched[np.argsort(gpu.launch[launched], kind="stable")]
        if not len(order):
            continue
        when, stream = gpu.launch[order], gpu.stream[order]
        for wait in np.flatnonzero(is_wait & (calls.tid == t)).tolist():
            after = np.searchsorted(when, calls.start[wait], side="right")
            if after >= len(order):
                continue
            ws = stream[after]
            best = None
            for rec in np.flatnonzero(is_record & (calls.tid == t)).tolist():
                before = np.searchsorted(when, calls.start[rec], side="left") - 1
                if before >= 0 and calls.start[rec] <= calls.start[wait] and stream[before] != ws:
                    best = (rec, stream[before])
            if best is not None:
                pairs.append((best[0], int(best[1]), wait, int(ws)))
    return pairs


@pytest.mark.parametrize("seed", range(20))
def test_each_wait_gets_the_latest_record_of_another_stream(seed):
    rng = np.random.default_rng(seed)
    n, m = 300, 200
    start = np.sort(rng.integers(0, 2000, n))  # ties on purpose
    calls = SimpleNamespace(start=start, end=start + 1, tid=rng.integers(1, 4, n), name=rng.integers(-1, 4, n),
                            correlation=np.arange(n) + 1000)
    gpu = SimpleNamespace(launch=np.where(rng.random(m) < 0.1, -1, rng.integers(0, 2000, m)),
                          launch_tid=rng.integers(1, 4, m), stream=rng.integers(7, 10, m))
    syncs, events = stream_waits_from_calls(calls, gpu, Names())
    want = _scan(calls, gpu)
    if not want:
        assert syncs is None and events is None
        return
    got = list(zip((events["correlation"] - 1000).tolist(), events["stream"].tolist(),
                   (syncs["correlation"] - 1000).tolist(), syncs["stream"].tolist()))
    assert got == want
    assert (syncs["kind"] == cuda_api.SyncType.STREAM_WAIT_EVENT).all() and syncs["inferred"].all()
    assert (syncs["event"] == events["event"]).all()
    assert (syncs["record_correlation"] == events["correlation"]).all()


def test_names_are_matched_once_per_string_id():
    seen = []

    class Counting(Names):
        def names(self, ids):
            seen.append(len(ids))
            return super().names(ids)

    ids = np.array([0, 1, 1, 2, 0, -1, 3, 3] * 1000)
    got = cuda_api.matches(cuda_api.EVENT_RECORD, ids, Counting())
    assert seen == [5]  # the distinct ids, not the 8,000 calls
    assert got.tolist() == [n is not None and n in ("cudaEventRecord", "cuEventRecord_v2")
                            for n in Names().names(ids)]
