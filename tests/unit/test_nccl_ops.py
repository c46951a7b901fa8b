"""NCCL operations on one rank: kinds from NVTX or kernel names, copy-engine collectives."""

from __future__ import annotations

import numpy as np
import pytest

from conftest import FIXTURES
from nsys_collective import read_exports
from nsys_collective.model.nccl import OPS, nccl_kernel_mask, nccl_ops, op_of_kernel
from nsys_collective.model.trace import trace_ranks


@pytest.mark.parametrize("name, op", [
    ("ncclAllReduceRingLLKernel_sum_f32", "AllReduce"),           # NCCL 2.4-2.7
    ("ncclKernel_ReduceScatter_RING_LL_Sum_half", "ReduceScatter"),  # 2.8-2.18
    ("ncclDevKernel_AllGather_RING_LL", "AllGather"),             # 2.19+
    ("ncclDevKernel_Reduce_Sum_f32_RING_LL", "Reduce"),
    ("ncclDevKernel_SendRecv", "SendRecv"),
    ("ncclDevKernel_Generic", "Generic"),
    ("ncclSymkDevKernel_AllGather_LL", "AllGather"),              # 2.28 symmetric kernels
    ("all_to_all", "AllToAll"),                                   # PyTorch's nccl:all_to_all range
    ("_reduce_scatter_base", "ReduceScatter"),
])
def test_operation_of_every_naming_era(name, op):
    assert op_of_kernel(name) == op


def _ops(export, pid, device):
    [(gpu, *_)], strings = trace_ranks(export, [(pid, device)], nccl_kernel_mask(export))
    return nccl_ops(export, pid, gpu, strings)


def test_copy_engine_collective_is_one_operation():
    """NCCL 2.28+ can run a collective as copies on its stream: a memcpy launched inside an
    ncclAllReduce range that launched no kernel is that collective."""
    (export,) = read_exports([FIXTURES / "demo-4rank-2host" / "rep_0.sqlite"])
    pid, device = int(export.kernels["pid"][0]), int(export.kernels["device"][0])
    before = _ops(export, pid, device)
    k = export.kernels
    first = np.flatnonzero(nccl_kernel_mask(export))[0]
    # The first NCCL kernel becomes two copies of the same call (split in time), on its stream.
    middle = (k["start"][first] + k["end"][first]) // 2
    copies = {
        "start": [k["start"][first], middle], "end": [middle, k["end"][first]], "device": [device] * 2,
        "stream": [k["stream"][first]] * 2, "correlation": [k["correlation"][first]] * 2, "pid": [pid] * 2,
        "bytes": [1 << 20] * 2, "kind": [10] * 2,
    }
    export.memcpy = {c: np.concatenate([export.memcpy[c], np.array(v, dtype=np.int64)]) for c, v in copies.items()}
    export.kernels = {c: np.delete(v, first) for c, v in k.items()}
    after = _ops(export, pid, device)
    assert len(after) == len(before)
    np.testing.assert_array_equal(after.start, before.start)
    np.testing.assert_array_equal(after.end, before.end)
    assert OPS[after.op[0]] == "AllReduce"


def test_the_trace_kept_holds_each_ops_launching_call_not_its_time_and_thread():
    # The launch times and threads are the calls' own: the trace the reduce holds for every rank
    # names each op's launching call (int32), and reads them off the calls.
    import dataclasses

    from nsys_collective.pipeline import map_input

    path = sorted((FIXTURES / "demo-4rank-2host").glob("*.sqlite"))[0]
    _, [trace] = map_input(path, 0, path)
    g = trace.gpu
    assert {"launch", "launch_tid"}.isdisjoint(f.name for f in dataclasses.fields(g)) and g.launch_call.dtype == np.int32
    assert g.calls is trace.calls and len(trace.ops.start) > 0
    assert np.array_equal(g.launch, trace.calls.start[g.launch_call]) and (g.launch_call >= 0).all()
    assert np.array_equal(g.launch_tid, trace.calls.tid[g.launch_call])  # unknown ones: tests/unit/test_rank_trace.py
