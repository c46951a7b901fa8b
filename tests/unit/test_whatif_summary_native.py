"""The summary bindings (`_native.rank_summaries`, `_native.replay_collectives`) on the hand-worked
job of test_whatif_native: each rank alone condensed, the job replayed over its one collective,
the same wait as the whole graph's by hand, and the errors they raise."""

from __future__ import annotations

import numpy as np
import pytest

from nsys_collective import _native
from nsys_collective.errors import InputError
from test_whatif_native import late_kernel_job


def own_graphs():
    """Each rank's rows of the job as a graph of its own (rank 0, op rows from 0)."""
    calls, ops, members = late_kernel_job()
    graphs = []
    for rank in range(3):
        c = {k: v[calls["rank"] == rank] for k, v in calls.items()}
        mine = ops["rank"] == rank
        o = {k: v[mine] for k, v in ops.items()}
        c["rank"], o["rank"] = c["rank"] * 0, o["rank"] * 0
        m = {"instance": np.zeros(1, np.int64), "op": members["op"][[rank]] - np.flatnonzero(mine)[0]}
        graphs.append(_native.ReplayGraph(c, o, m, launch_latency_ns=10, tolerance_ns=5))
    return graphs


def test_the_collective_replay_from_summaries_is_the_wait_worked_out_by_hand():
    graphs = own_graphs()
    summaries = [_native.rank_summaries(g)[0] for g in graphs]
    rows, instance = [np.array([r]) for r in range(3)], np.zeros(3, np.int64)
    base = _native.replay_collectives(summaries, rows, instance, 1)
    assert base["total_wait"] == 100 and base["transfer_start"].tolist() == [160]
    assert base["arrival"].tolist() == [110, 110, 160] and base["step_rank_end"].shape == (1, 3)
    # Rank 2's K (its op row 0) as fast as the others': its summary swapped, nobody waits.
    [fixed] = _native.rank_summaries(graphs[2], [{"op": [0], "op_ns": [100]}])
    out = _native.replay_collectives(summaries[:2] + [fixed], rows, instance, 1)
    assert out["total_wait"] == 0 and base["step_end"][0] - out["step_end"][0] == 50
    # A transfer is the reduce's: rank 0's member 30 ns longer ends the step 10 ns later.
    longer = _native.replay_collectives(summaries, rows, instance, 1, {"member": [0], "member_ns": [30]})
    assert longer["total_wait"] == 100 and longer["step_end"][0] - base["step_end"][0] == 10


def test_bad_summaries_and_rows_are_refused_in_one_line():
    graphs = own_graphs()
    summaries = [_native.rank_summaries(g)[0] for g in graphs]
    instance = np.zeros(3, np.int64)
    with pytest.raises(InputError, match="member row 0 is in two ranks' summaries"):
        _native.replay_collectives(summaries, [np.array([0]), np.array([1]), np.array([0])], instance, 1)
    with pytest.raises(InputError, match="member row 2 is in no rank's summary"):
        _native.replay_collectives(summaries[:2], [np.array([0]), np.array([1])], instance, 1)
    broken = dict(summaries[0], off=summaries[0]["off"][:-1])
    with pytest.raises(InputError, match="inconsistent arrays"):
        _native.replay_collectives([broken] + summaries[1:], [np.array([r]) for r in range(3)], instance, 1)
    whole = _native.ReplayGraph(*late_kernel_job(), launch_latency_ns=10, tolerance_ns=5)
    with pytest.raises(InputError, match="one rank's graph"):
        _native.rank_summaries(whole)
