"""Stream waits inferred from the calls: the core's pairing (crates/core/src/stream_waits.rs) pairs
each wait with the record a plain per-wait scan finds (the definition in model/stream_waits.py), and
answers exactly as the numpy version it replaced, on random calls with ties."""

from types import SimpleNamespace

import numpy as np
import pytest

from conftest import name_matches

from nsys_collective.model import cuda_api
from nsys_collective.model.cuda_api import SyncType
from nsys_collective.model.stream_waits import stream_waits_from_calls

NAMES = ["cudaEventRecord", "cudaStreamWaitEvent", "cudaLaunchKernel", "cuEventRecord_v2", None]


def names_of(ids):
    return [NAMES[i] if i >= 0 else None for i in ids]


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
    name = rng.integers(-1, 4, n)
    calls = SimpleNamespace(start=start, end=start + 1, tid=rng.integers(1, 4, n), name=name,
                            kind=cuda_api.kinds(name, NAMES), correlation=np.arange(n) + 1000)
    gpu = SimpleNamespace(launch=np.where(rng.random(m) < 0.1, -1, rng.integers(0, 2000, m)),
                          launch_tid=rng.integers(1, 4, m), stream=rng.integers(7, 10, m))
    syncs, events = stream_waits_from_calls(calls, gpu)
    before = numpy_version(calls, gpu, NAMES)
    # Ids narrowed to int32, as the rank's trace holds them where they fit: read as they are.
    narrow = SimpleNamespace(**{**vars(gpu), "launch_tid": gpu.launch_tid.astype(np.int32), "stream": gpu.stream.astype(np.int32)})
    for mine, theirs in zip(stream_waits_from_calls(SimpleNamespace(**{**vars(calls), "tid": calls.tid.astype(np.int32)}),
                                                    narrow), (syncs, events)):
        assert (mine is None and theirs is None) or all(np.array_equal(v, theirs[k]) for k, v in mine.items())
    assert (syncs is None) == (before[0] is None)
    if syncs is not None:
        for mine, theirs in zip((syncs, events), before):
            assert mine.keys() == theirs.keys()
            assert all(v.dtype == theirs[k].dtype and np.array_equal(v, theirs[k]) for k, v in mine.items())
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

    class Counting(list):
        def __getitem__(self, i):
            seen.append(i)
            return super().__getitem__(i)

    ids = np.array([0, 1, 1, 2, 0, -1, 3, 3] * 1000)
    got = name_matches(cuda_api.EVENT_RECORD, ids, Counting(NAMES))
    assert sorted(seen) == [0, 1, 2, 3]  # the distinct ids named, not the 8,000 calls
    assert got.tolist() == [n is not None and n in ("cudaEventRecord", "cuEventRecord_v2") for n in names_of(ids)]


def numpy_version(calls, gpu, strings) -> tuple[dict | None, dict | None]:
    """model/stream_waits.py before the core paired the calls, verbatim but for its names
    (name_matches: what cuda_api.matches was)."""
    if calls is None or gpu is None or not len(calls.start):
        return None, None
    is_record = name_matches(cuda_api.EVENT_RECORD, calls.name, strings)
    is_wait = name_matches(cuda_api.STREAM_WAIT, calls.name, strings)
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
