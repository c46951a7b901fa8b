"""NCCL work on one rank: its operations, what each one is, and when it ran.

An operation is one NCCL kernel, or the copies of one copy-engine collective (NCCL 2.28+ runs some
collectives as memcpys on its stream instead of a kernel). Its kind comes, in order of trust, from
NCCL's own NVTX API range around the launch (`ncclAllReduce`, ...), from PyTorch's range around it
(`nccl:all_to_all, op_id = N`: grouped send/recv calls launch one `SendRecv` kernel for a whole
all-to-all), else from the kernel name, which does not always say what NCCL ran.
"""

from __future__ import annotations

import functools
import json
import math
import re
from dataclasses import dataclass

import numpy as np

from nsys_collective.ingest.capture import MEMCPY_NAME, NVTX_PUSH_POP_RANGE, NVTX_START_END_RANGE, Export
from nsys_collective.model import cuda_api
from nsys_collective.model.nccl_net import wire_bytes

OPS = ("AllReduce", "AllGather", "ReduceScatter", "Broadcast", "Reduce", "AllToAll", "SendRecv", "Send", "Recv", "Generic")
"""Operation kinds; `NcclOps.op` holds indices into this tuple."""
SYNC_OPS = frozenset({"AllReduce", "AllGather", "ReduceScatter", "AllToAll", "SendRecv"})
"""Operations in which every rank waits for every other: no rank ends before the last one starts
(a matched send/receive pair, SendRecv, too: its transfer starts once both peers are in)."""

ALGORITHMS = ("RING", "TREE", "COLLNET_DIRECT", "COLLNET_CHAIN", "NVLS_TREE", "NVLS", "PAT")
"""Algorithms a kernel name may carry (`ncclKernel_AllReduce_TREE_LL_Sum_float`,
`ncclDevKernel_AllReduce_Sum_f32_RING_LL`); `NcclOps.algorithm` holds indices, -1 where the name
says none (`SendRecv`, `Generic`, copy-engine collectives)."""
_KERNEL_ALGORITHM = re.compile(r"_(" + "|".join(ALGORITHMS) + r")(_|$)")

# Longer names first: "ReduceScatter" and "AllReduce" both contain "Reduce".
_KERNEL_OP = re.compile(r"(ReduceScatter|AllReduce|AllGather|AllToAll|AlltoAll|Broadcast|SendRecv|Reduce|Send|Recv|Generic)", re.I)
_CANONICAL = {name.lower(): name for name in OPS} | {"alltoall": "AllToAll"}
# NCCL's NVTX API ranges (domain "NCCL"): the call names; grouping calls launch what the group held.
_API_OP = {"ncclAllReduce": "AllReduce", "ncclAllGather": "AllGather", "ncclReduceScatter": "ReduceScatter",
           "ncclBroadcast": "Broadcast", "ncclBcast": "Broadcast", "ncclReduce": "Reduce", "ncclAllToAll": "AllToAll",
           "ncclAlltoAll": "AllToAll", "ncclSend": "Send", "ncclRecv": "Recv"}
_API_GROUP = {"ncclGroupEnd"}


def algorithm_of_kernel(name: str) -> int:
    """Index into ALGORITHMS of the algorithm a kernel name carries, -1 for none."""
    match = _KERNEL_ALGORITHM.search(name)
    return ALGORITHMS.index(match.group(1)) if match else -1


@functools.cache  # asked once per NCCL operation, of a few distinct names
def op_of_kernel(name: str) -> str:
    """The operation a kernel name (any NCCL era) or a PyTorch range name (`all_to_all`) says."""
    match = _KERNEL_OP.search(name.replace("_", ""))
    return _CANONICAL[match.group(1).lower()] if match else "Generic"


def _is_api(name) -> bool:
    return name in _API_OP or name in _API_GROUP


def _is_pytorch(name) -> bool:
    return name is not None and name.startswith("nccl:")


@dataclass
class NcclOps:
    """One rank's NCCL operations, sorted by start. Times are UTC ns."""

    start: np.ndarray
    end: np.ndarray
    stream: np.ndarray
    op: np.ndarray
    bytes: np.ndarray  # message size, -1 where unknown (NCCL payloads are not in a default export)
    # (an all-gather's or reduce-scatter's payload size is one rank's part: model.timing.message_sizes)
    # Bytes the rank sent over the network during the operation (NCCL's network NVTX,
    # model.nccl_net), -1 where none was recorded.
    wire_bytes: np.ndarray | None = None
    launch: np.ndarray | None = None  # start of the launching call (own clock), -1 where unknown
    algorithm: np.ndarray | None = None  # index into ALGORITHMS from the kernel name, -1 where unknown
    size_source: np.ndarray | None = None  # where `bytes` came from: index into SIZE_SOURCES, -1 unknown

    def __post_init__(self):
        if self.size_source is None:
            self.size_source = np.where(self.bytes >= 0, 0, -1).astype(np.int64)
        if self.algorithm is None:
            self.algorithm = np.full(len(self.start), -1, dtype=np.int64)
        if self.wire_bytes is None:
            self.wire_bytes = np.full(len(self.start), -1, dtype=np.int64)
        if self.launch is None:
            self.launch = np.full(len(self.start), -1, dtype=np.int64)

    def __len__(self) -> int:
        return len(self.start)


def nccl_kernel_mask(export: Export) -> np.ndarray:
    """Which kernels are NCCL's: every NCCL naming era starts with `nccl`."""
    is_nccl_name = np.array([s.startswith("nccl") for s in export.strings] + [False], dtype=bool)
    return is_nccl_name[export.kernels["short_name"]]  # -1 (unnamed) takes the last slot


def _ranges(export: Export, pid: int, wanted, domain: str | None, values: np.ndarray | None = None):
    """NVTX ranges of one process whose name is `wanted`, per thread: (start, end, name) by start,
    or (start, end, value) with `values`, a column of the nvtx table.

    Ranges must be in `domain` where the export recorded domain names; derived exports lose the
    domain-create events, so there the names alone must do.
    """
    nvtx = export.nvtx
    is_range = np.isin(nvtx["type"], [NVTX_PUSH_POP_RANGE, NVTX_START_END_RANGE]) & (nvtx["pid"] == pid)
    in_domain = cuda_api.by_name(lambda d: d is None or d == domain, nvtx["domain_name"], export.strings)
    pick = np.flatnonzero(is_range & in_domain & cuda_api.by_name(wanted, nvtx["name"], export.strings))
    out = {}
    for tid in np.unique(nvtx["tid"][pick]):
        rows = pick[nvtx["tid"][pick] == tid]
        rows = rows[np.argsort(nvtx["start"][rows], kind="stable")]
        out[int(tid)] = (nvtx["start"][rows], nvtx["end"][rows], export.names(nvtx["name"][rows]) if values is None else values[rows])
    return out


def launches(export: Export, pid: int, correlation: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(thread, UTC time) of the runtime call that launched each correlation id of process pid,
    -1 where the export has no such call (same process, same correlation id; a negative id is
    unknown); the first by start where several share one. The rank traces get their launches from
    the core (GpuItems.launch); this reads them straight from an export, for scripts/compare_hta.py
    and as the definition tests/unit/test_rank_trace.py holds the core to."""
    rt = export.runtime
    mine = np.flatnonzero(rt["pid"] == pid)
    mine = mine[np.argsort(rt["start"][mine], kind="stable")]
    mine = mine[rt["correlation"][mine] >= 0]
    order = mine[np.argsort(rt["correlation"][mine], kind="stable")]
    if len(order) == 0:
        return np.full(len(correlation), -1), np.full(len(correlation), -1)
    at = np.minimum(np.searchsorted(rt["correlation"][order], correlation), len(order) - 1)
    found = rt["correlation"][order[at]] == correlation
    return np.where(found, rt["tid"][order[at]], -1), np.where(found, rt["start"][order[at]], -1)


def _covering_range(ranges, tid: np.ndarray, when: np.ndarray) -> np.ndarray:
    """The value (a name, a size) of the latest-starting range on the launching thread that covers
    each launch; None where none does. `ranges`: thread -> (starts, ends, values), by start."""
    out = np.full(len(tid), None, dtype=object)
    for t, (start, end, names) in ranges.items():
        rows = np.flatnonzero(tid == t)
        at = np.searchsorted(start, when[rows], side="right") - 1
        ok = (at >= 0) & (end[np.maximum(at, 0)] >= when[rows])
        out[rows[ok]] = names[at[ok]]
    return out


# Bytes per element of PyTorch's dtype names, as record_param_comms writes them ("dtype"), as its
# "Input type" spells them (C++ type names), and as NCCL kernel names end (..._Sum_bf16_RING_LL).
_DTYPE_BYTES = {"Double": 8, "Long": 8, "ComplexFloat": 8, "Float": 4, "Int": 4, "BFloat16": 2, "Half": 2,
                "Short": 2, "Byte": 1, "Char": 1, "Bool": 1, "Float8_e4m3fn": 1, "Float8_e5m2": 1,
                "double": 8, "long int": 8, "int64_t": 8, "float": 4, "int": 4, "c10::BFloat16": 2, "c10::Half": 2,
                "short int": 2, "unsigned char": 1, "signed char": 1, "bool": 1, "c10::Float8_e4m3fn": 1,
                "c10::Float8_e5m2": 1}
_KERNEL_DTYPE = re.compile(r"_(f64|double|f32|float|f16|half|bf16|i64|int64_t|u64|uint64_t|i32|int32_t|u32|uint32_t|"
                           r"i8|int8_t|u8|uint8_t|f8e4m3|f8e5m2)(?:_|\(|$)")
_KERNEL_DTYPE_BYTES = {"f64": 8, "double": 8, "f32": 4, "float": 4, "f16": 2, "half": 2, "bf16": 2, "i64": 8,
                       "int64_t": 8, "u64": 8, "uint64_t": 8, "i32": 4, "int32_t": 4, "u32": 4, "uint32_t": 4,
                       "i8": 1, "int8_t": 1, "u8": 1, "uint8_t": 1, "f8e4m3": 1, "f8e5m2": 1}
# Where a message size came from (NcclOps.size_source), as collectives[].bytes_source says it.
SIZE_SOURCES = ("record_param_comms", "input_dims", "nvtx_payload")


def kernel_dtype_bytes(name: str) -> int:
    """Element size from an NCCL kernel name's data type (-1 where it names none: SendRecv's int8_t
    is NCCL moving bytes, not the tensor's type)."""
    if "SendRecv" in name:
        return -1
    m = _KERNEL_DTYPE.search(name)
    return _KERNEL_DTYPE_BYTES[m.group(1)] if m else -1


def _dims_elements(text: str | None) -> int:
    """Elements of the first input of record_param_comms' "Input Dims" (e.g. [[4,2048,4096],[]]):
    -1 where it is a tensor list or a scalar (no dims), or not a list of integer lists."""
    try:
        dims = json.loads(text) if text else None
    except ValueError:
        return -1
    if not (isinstance(dims, list) and dims and isinstance(dims[0], list) and dims[0]
            and all(isinstance(d, int) and d >= 0 for d in dims[0])):
        return -1
    return math.prod(dims[0])


def _first_type(text: str | None) -> str | None:
    try:
        types = json.loads(text) if text else None
    except ValueError:
        return None
    return types[0] if isinstance(types, list) and types and isinstance(types[0], str) else None


def _per_string(export: Export, ids: np.ndarray, parse) -> np.ndarray:
    """parse() of each distinct string id once (Python per distinct text, not per row)."""
    uniq, at = np.unique(ids, return_inverse=True)
    return np.array([parse(export.name(int(u))) for u in uniq.tolist()], dtype=object)[at.ravel()]


def _message_bytes(export: Export, pid: int, tid: np.ndarray, when: np.ndarray,
                   kernel_bytes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Message size of each launch, and where it came from (an index into SIZE_SOURCES, -1
    unknown), from the PyTorch record_param_comms call around it (Kineto traces carry them; nsys
    exports only with NVTX payloads): the larger of the input and output element counts times the
    element size, as nccl-tests counts it; else its first input's dims times the element size of
    "Input type", or of the kernel's data type (`kernel_bytes`, per launch)."""
    c = export.collectives
    unknown = np.full(len(tid), -1, dtype=np.int64)
    if c is None or len(c["start"]) == 0:
        return unknown, unknown.copy()
    size = np.array([_DTYPE_BYTES.get(export.name(int(d)) or "", -1) for d in c["dtype"]], dtype=np.int64)
    nelems = np.maximum(c["in_nelems"], c["out_nelems"])
    nbytes = np.where((size > 0) & (nelems >= 0), nelems * size, -1)
    row = np.arange(len(nbytes))
    calls = {}
    for t in np.unique(c["tid"][c["pid"] == pid]).tolist():
        rows = np.flatnonzero((c["pid"] == pid) & (c["tid"] == t))
        rows = rows[np.argsort(c["start"][rows], kind="stable")]
        calls[t] = (c["start"][rows], c["end"][rows], row[rows])
    found = _covering_range(calls, tid, when)
    at = np.array([-1 if r is None else int(r) for r in found], dtype=np.int64)
    out, source = unknown.copy(), unknown.copy()
    has = at >= 0
    out[has] = nbytes[at[has]]
    source[has & (out >= 0)] = 0
    if "input_dims" in c:
        dims = np.asarray(_per_string(export, c["input_dims"], _dims_elements), dtype=np.int64)
        typed = np.array([_DTYPE_BYTES.get(t or "", -1) for t in _per_string(export, c["input_type"], _first_type)],
                         dtype=np.int64)
        use = np.flatnonzero(has & (out < 0))
        elements = dims[at[use]]
        element = np.where(typed[at[use]] > 0, typed[at[use]], kernel_bytes[use])
        ok = (elements >= 0) & (element > 0)
        out[use[ok]] = elements[ok] * element[ok]
        source[use[ok]] = 1
    return out, source


def _payload_bytes(export: Export, pid: int, tid: np.ndarray, when: np.ndarray) -> np.ndarray:
    """The message size NCCL's NVTX payload gives the API call around each launch (exports made
    with --include-blobs; the reader decodes it by the export's schema tables), -1 where none: a
    call inside a group launches in ncclGroupEnd, whose payload holds no size."""
    column = export.nvtx.get("payload_bytes")  # a profiler trace has none
    if column is None or not (column >= 0).any():
        return np.full(len(tid), -1, dtype=np.int64)
    found = _covering_range(_ranges(export, pid, _is_api, "NCCL", values=column), tid, when)
    return np.array([-1 if v is None else int(v) for v in found], dtype=np.int64)


def nccl_ops(export: Export, pid: int, gpu, strings: tuple[str, ...]) -> NcclOps:
    """The NCCL operations of a rank of process `pid` of the export, from its GPU work (`gpu`:
    model.trace's GpuItems, in start order with each item's launch; names ids into `strings`)."""
    rows = np.flatnonzero(gpu.is_nccl)
    ranges = _ranges(export, pid, _is_api, "NCCL")
    item_tid, item_launch = gpu.launch_tid, gpu.launch  # read off the calls once
    tid, when = item_tid[rows], item_launch[rows]
    api = _covering_range(ranges, tid, when)
    pytorch = _covering_range(_ranges(export, pid, _is_pytorch, None), tid, when)
    names, at = np.unique(gpu.short_name[rows], return_inverse=True)  # parse each distinct name once
    texts = [strings[n] if n >= 0 else None for n in names.tolist()]
    kernel_names = np.array(texts, dtype=object)[at.ravel()]
    ops = [_API_OP.get(a) or (op_of_kernel(p[5:]) if p else op_of_kernel(n or ""))
           for a, p, n in zip(api, pytorch, kernel_names)]
    start, end, stream = gpu.start[rows], gpu.end[rows], gpu.stream[rows].astype(np.int64)
    launch = when.copy()
    algorithm = np.array([algorithm_of_kernel(n or "") for n in texts], dtype=np.int64)[at.ravel()]
    element = np.array([kernel_dtype_bytes(n or "") for n in texts], dtype=np.int64)[at.ravel()]
    nbytes, size_source = _message_bytes(export, pid, tid, when, element)
    payload = _payload_bytes(export, pid, tid, when)
    nbytes = np.where(payload >= 0, payload, nbytes)
    size_source = np.where(payload >= 0, SIZE_SOURCES.index("nvtx_payload"), size_source)

    # Copy-engine collectives: copies launched inside a collective API range that launched no kernel.
    others = np.flatnonzero(~gpu.is_kernel)
    copies = others[cuda_api.by_name(lambda n: n == MEMCPY_NAME, gpu.name[others], strings)]
    if len(copies) and ranges:
        ctid, cwhen = item_tid[copies], item_launch[copies]
        capi = _covering_range(ranges, ctid, cwhen)
        kernel_launch_times = set(when.tolist())
        ce = [i for i, a in enumerate(capi) if a in _API_OP]
        # One operation per API call: its copies, from the first start to the last end.
        calls: dict[tuple[int, int], list[int]] = {}
        for i in ce:
            t = int(ctid[i])
            start_of_call = _call_start(ranges[t], int(cwhen[i]))
            if start_of_call not in kernel_launch_times:
                calls.setdefault((t, start_of_call), []).append(i)
        for (t, _), members in calls.items():
            sel = copies[members]
            start = np.append(start, gpu.start[sel].min())
            end = np.append(end, gpu.end[sel].max())
            stream = np.append(stream, gpu.stream[sel][0])
            nbytes = np.append(nbytes, -1)  # what the copies add up to depends on the algorithm: unknown
            size_source = np.append(size_source, -1)
            launch = np.append(launch, cwhen[members].min())
            algorithm = np.append(algorithm, -1)
            ops.append(_API_OP[capi[members[0]]])
    order = np.argsort(start, kind="stable")
    codes = np.array([OPS.index(o) for o in ops], dtype=np.int64)
    start, end = start[order], end[order]
    return NcclOps(start=start, end=end, stream=stream[order], op=codes[order] if len(codes) else codes,
                   bytes=nbytes[order], wire_bytes=wire_bytes(export, pid, start, end), launch=launch[order],
                   algorithm=algorithm[order], size_source=size_source[order])


def _call_start(ranges, when: int) -> int:
    start, _, _ = ranges
    return int(start[np.searchsorted(start, when, side="right") - 1])
