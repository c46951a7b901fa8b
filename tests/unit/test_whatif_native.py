"""The what-if replay binding (`_native.ReplayGraph`): a tiny job built from Python, a replayed wait
worked out by hand, the batch, the binding chain, and the errors the binding raises."""

from __future__ import annotations

import numpy as np
import pytest

from nsys_collective import _native
from nsys_collective.errors import InputError


def i64(values) -> np.ndarray:
    return np.asarray(values, dtype=np.int64)


def late_kernel_job():
    """3 ranks, one stream each: kernel K (launched at [0, 5], starting 10) then NCCL kernel N
    (launched at [6, 8]). K runs 100 ns, 150 on rank 2. N arrives at K's end: 110, 110, 160;
    T = 160; every N ends at 180 (x = 20). Wait W = 50 + 50 + 0 = 100. Each op names its call by
    the call's row among its rank's calls (its correlation id too)."""
    calls = {"rank": [], "thread": [], "start": [], "end": [], "correlation": []}
    ops = {"rank": [], "stream": [], "start": [], "end": [], "launch": [], "step": []}
    members = {"instance": [], "op": []}
    for rank, k in [(0, 100), (1, 100), (2, 150)]:
        for row, (call, op) in enumerate([((0, 5), (10, 10 + k)), ((6, 8), (10 + k, 180))]):
            for key, v in zip(calls, [rank, 0, *call, row]):
                calls[key].append(v)
            for key, v in zip(ops, [rank, 1, *op, row, 0]):
                ops[key].append(v)
        members["instance"].append(0)
        members["op"].append(len(ops["rank"]) - 1)
    as_arrays = lambda d: {k: i64(v) for k, v in d.items()}  # noqa: E731
    return as_arrays(calls), as_arrays(ops), as_arrays(members)


def test_a_replayed_fix_saves_the_wait_worked_out_by_hand():
    calls, ops, members = late_kernel_job()
    g = _native.ReplayGraph(calls, ops, members, launch_latency_ns=10, tolerance_ns=5)
    assert (g.n_ops, g.n_calls, g.n_instances, g.n_ranks, g.n_steps) == (6, 6, 1, 3, 1)

    base = g.replay(times=True)
    assert base["total_wait"] == 100
    assert base["transfer_start"].tolist() == [160]
    assert base["arrival"].tolist() == [110, 110, 160]
    assert base["step_rank_end"].shape == (1, 3)
    assert base["op_start"].tolist() == ops["start"].tolist()  # no change reproduces the trace

    k_rank2 = 4  # rank 2's K is op row 4
    fixed = g.replay({"op": [k_rank2], "op_ns": [100]})
    assert fixed["total_wait"] == 0
    assert base["total_wait"] - fixed["total_wait"] == 50 * 2
    assert base["step_end"][0] - fixed["step_end"][0] == 50

    many = g.replay_many([{"op": [k_rank2], "op_ns": [d]} for d in (100, 125, 150)], threads=2)
    assert [m["total_wait"] for m in many] == [0, 50, 100]
    # The kept time buffers let go: the next replays make new ones, with the same outcomes.
    g.release_buffers()
    assert [m["total_wait"] for m in g.replay_many([{"op": [k_rank2], "op_ns": [d]} for d in (100, 125, 150)], threads=1)] == [0, 50, 100]
    assert g.replay()["total_wait"] == base["total_wait"]


def test_fidelity_and_the_binding_chain_back_to_the_late_kernel():
    g = _native.ReplayGraph(*late_kernel_job(), launch_latency_ns=10, tolerance_ns=5)
    f = g.fidelity()
    assert f["ops"] == 6 and f["explained_start_share"] == 1.0
    assert f["start_error_ns"] == {"p50": 0, "p99": 0, "max": 0}
    assert f["launch_latency_ns"].tolist() == [10, 10, 10]

    out = g.replay(chain_steps=4)
    chain = out["chain_nodes"][out["chain_offsets"][0] : out["chain_offsets"][1]]
    kinds, rows = g.describe(chain)
    names = [_native.ReplayGraph.NODE_KINDS[k] for k in kinds]
    assert names[:3] == ["op_start", "op_end", "op_start"] and rows[:3].tolist() == [5, 4, 4]

    # Rank 2's N starts 0 ns after K ends, its launch at 6 + 10: nothing unexplained anywhere.
    assert g.slack(g.nodes("op_start", range(6))).tolist() == [0] * 6

    links = g.binding_chain(int(g.nodes("op_start", [5])[0]))
    via = [_native.ReplayGraph.EDGE_KINDS[v] for v in links["via"]]
    assert via[:2] == ["stream", "duration"] and links["lag"][1] == 150
    assert via[-1] == "anchor"


def test_bad_input_raises_input_error_naming_the_fault():
    calls, ops, members = late_kernel_job()
    with pytest.raises(InputError, match=r'ops\[0\]\["end"\]: 5 rows, the part\'s other columns 6'):
        _native.ReplayGraph(calls, {**ops, "end": ops["end"][:5]}, members)
    with pytest.raises(InputError, match='unknown column "strat"'):
        _native.ReplayGraph({**calls, "strat": calls["start"]}, ops, members)
    with pytest.raises(InputError, match="integers is needed"):
        _native.ReplayGraph({**calls, "start": calls["start"].astype(np.float64)}, ops, members)
    with pytest.raises(InputError, match=r"ops row 1: launch 2 out of range \(rank 0 has 2 calls\)"):
        _native.ReplayGraph(calls, {**ops, "launch": np.where(np.arange(6) == 1, 2, ops["launch"])}, members)
    g = _native.ReplayGraph(calls, ops, members)
    with pytest.raises(InputError, match="op row 99 out of range"):
        g.replay({"op": [99], "op_ns": [0]})
    with pytest.raises(InputError, match="change its transfer"):
        g.replay({"op": [5], "op_ns": [0]})
    with pytest.raises(InputError, match="unknown key"):
        g.replay({"ops": [1]})
    with pytest.raises(InputError, match="go together"):
        g.replay({"op": [1]})
