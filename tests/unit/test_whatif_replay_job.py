"""The what-if graph's input from per-rank parts (`_native.ReplayJob`): the same graph as from the
joined int64 tables, whatever the parts' dtypes, and the errors it raises."""

from __future__ import annotations

import numpy as np
import pytest

from nsys_collective import _native
from nsys_collective.errors import CollectiveTraceError, InputError
from tests.unit.test_whatif_native import late_kernel_job


def per_rank(table: dict, narrow: dict) -> list[dict]:
    """The table's rows of each rank, `rank` as one int, columns cast as `narrow` says."""
    parts = []
    for r in np.unique(table["rank"]):
        rows = table["rank"] == r
        parts.append({"rank": int(r), **{k: v[rows].astype(narrow.get(k, v.dtype)) for k, v in table.items() if k != "rank"}})
    return parts


def plain(x):
    """Arrays, tuples and dicts as plain lists and dicts, to compare with ==."""
    if isinstance(x, dict):
        return {k: plain(v) for k, v in x.items()}
    if isinstance(x, (tuple, list)):
        return [plain(v) for v in x]
    return np.asarray(x).tolist() if isinstance(x, np.ndarray) else x


def fingerprint(g) -> list:
    nodes = np.arange(g.n_nodes)
    return plain([g.fidelity(), g.slack(nodes), g.describe(nodes), g.replay(times=True, chain_steps=10),
                  g.replay({"op": [4], "op_ns": [100]})])


def test_parts_of_any_integer_dtype_make_the_joined_tables_graph():
    calls, ops, members = late_kernel_job()
    joined = _native.ReplayGraph(calls, ops, members, launch_latency_ns=10, tolerance_ns=5)
    calls["blocking"] = np.zeros(len(calls["start"]), np.int64)
    job = _native.ReplayJob(per_rank(calls, {"thread": np.int32, "correlation": np.uint16, "blocking": bool}),
                            per_rank(ops, {"stream": np.int8, "step": np.int32}), members)
    parts = job.build(launch_latency_ns=10, tolerance_ns=5)
    assert fingerprint(parts) == fingerprint(joined)
    assert parts.replay()["total_wait"] == 100  # late_kernel_job's wait, worked out by hand
    with pytest.raises(CollectiveTraceError, match="built already"):
        job.build()


def test_strided_columns_and_narrow_times_make_the_same_graph():
    # The graph borrows contiguous arrays; a strided view (a column of a 2-D table, say) is copied,
    # and times of another width are read as well.
    calls, ops, members = late_kernel_job()
    joined = _native.ReplayGraph(calls, ops, members, launch_latency_ns=10, tolerance_ns=5)
    strided = {k: np.repeat(v, 2)[::2] for k, v in ops.items()}
    assert not strided["start"].flags.c_contiguous
    narrow = {**calls, "start": calls["start"].astype(np.int32), "end": calls["end"].astype(np.uint32)}
    g = _native.ReplayJob(narrow, strided, members).build(launch_latency_ns=10, tolerance_ns=5)
    assert fingerprint(g) == fingerprint(joined)


def test_shifted_times_a_part_running_on_and_own_segments_make_the_joined_tables_graph():
    # The what-if's own form (attribution/whatif/graph.py): each rank's calls on its own clock with
    # the shift onto the job's, its gaps named by their own rows as own_segment; ranks 1 and 2 with
    # their last call in a part of its own (as a rank's threads' anchors are).
    calls, ops, members = late_kernel_job()
    rows = np.arange(len(calls["start"]))
    calls["segment"] = np.where(rows % 2 == 1, rows, -1)  # each rank's second call's gap
    joined = _native.ReplayGraph(calls, ops, members, launch_latency_ns=10, tolerance_ns=5)
    parts = []
    for r in range(3):
        mine = np.flatnonzero(calls["rank"] == r)
        head, tail = (mine, mine[:0]) if r == 0 else (mine[:-1], mine[-1:])
        shift = 1000 * r - 700
        parts.append({"rank": r, "thread": calls["thread"][head].astype(np.int32),
                      "start": (calls["start"][head] - shift, shift), "end": (calls["end"][head] - shift, shift),
                      "correlation": calls["correlation"][head].astype(np.int32),
                      "own_segment": np.where(calls["segment"][head] >= 0, 3, -1).astype(np.int32)})
        if len(tail):
            parts.append({"rank": r, **{k: calls[k][tail] for k in ("thread", "start", "end", "correlation", "segment")}})
    g = _native.ReplayJob(parts, ops, members).build(launch_latency_ns=10, tolerance_ns=5)
    assert fingerprint(g) == fingerprint(joined)
    cut = {"segment": [1, 3, 5], "segment_ns": [0, 0, 0], "call": [0], "call_ns": [1]}
    assert plain(g.replay(cut, times=True)) == plain(joined.replay(cut, times=True))
    with pytest.raises(InputError, match=r'calls\[0\]\["start"\]: \(values, shift\) needs int64 values'):
        _native.ReplayJob({**calls, "start": (calls["start"].astype(np.int32), 5)}, ops, members)


def test_an_optional_column_some_parts_lack_takes_its_default():
    calls, ops, members = late_kernel_job()
    parts = per_rank(ops, {})
    for p in parts[1:]:
        del p["step"]  # rank 0's ops in step 0; the others' in none
    g = _native.ReplayJob(calls, parts, members).build()
    assert g.n_steps == 1
    assert g.replay()["step_rank_end"][0].tolist()[1:] == [np.iinfo(np.int64).min] * 2


def test_bad_parts_raise_input_error_naming_the_part():
    calls, ops, members = late_kernel_job()
    parts = per_rank(ops, {})
    with pytest.raises(InputError, match=r'ops\[1\]\["end"\]: 1 rows'):
        _native.ReplayJob(calls, [parts[0], {**parts[1], "end": parts[1]["end"][:1]}, parts[2]], members)
    with pytest.raises(InputError, match=r'calls\[0\]: unknown column "strat"'):
        _native.ReplayJob({**calls, "strat": calls["start"]}, ops, members)
    with pytest.raises(InputError, match="integers"):
        _native.ReplayJob({**calls, "start": calls["start"].astype(np.float64)}, ops, members)
    with pytest.raises(InputError, match=r'ops\[2\]: column "stream" missing'):
        _native.ReplayJob(calls, [*parts[:2], {k: v for k, v in parts[2].items() if k != "stream"}], members)
