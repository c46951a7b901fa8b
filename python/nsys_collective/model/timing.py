"""Per-instance timing on aligned clocks (docs/method.md section 3).

For instance c with aligned starts a_r and ends e_r: last arrival L = max a_r, whose rank is the
straggler; reference arrival = median a_r; wait w_r = L - a_r (time rank r spun), wait cost
W = sum w_r (GPU-time lost); transfer x = max(0, median e_r - L); skew = L - reference.
The clock-free cross-check of the transfer is the shortest kernel duration across ranks.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from nsys_collective.model.nccl import ALGORITHMS, OPS, SIZE_SOURCES

# nccl-tests' bus bandwidth factors, by operation, for n ranks.
BUS_FACTOR = {
    "AllReduce": lambda n: 2 * (n - 1) / n,
    "AllGather": lambda n: (n - 1) / n,
    "ReduceScatter": lambda n: (n - 1) / n,
    "AllToAll": lambda n: (n - 1) / n,
}


@dataclass
class Timing:
    """Instance arrays (by instance id) and observation arrays (by observation row)."""

    first_arrival: np.ndarray
    last_arrival: np.ndarray
    straggler: np.ndarray  # rank number
    reference_arrival: np.ndarray
    skew: np.ndarray
    wait_cost: np.ndarray
    transfer: np.ndarray
    shortest_duration: np.ndarray
    wait: np.ndarray  # per observation


def _group_bounds(inst: np.ndarray) -> np.ndarray:
    """Start offsets of each instance's run in an instance-sorted array."""
    return np.flatnonzero(np.r_[True, inst[1:] != inst[:-1]])


def _median_per_group(inst: np.ndarray, values: np.ndarray, starts: np.ndarray, counts: np.ndarray) -> np.ndarray:
    order = np.lexsort((values, inst))
    v = values[order]
    lo, hi = starts + (counts - 1) // 2, starts + counts // 2
    return v[lo] + (v[hi] - v[lo]) // 2


def instance_timing(inst: np.ndarray, rank: np.ndarray, start: np.ndarray, end: np.ndarray) -> Timing:
    """Timing of every instance from aligned observations sorted by instance."""
    if len(inst) == 0:
        empty = np.zeros(0, dtype=np.int64)
        return Timing(*([empty] * 9))
    starts = _group_bounds(inst)
    counts = np.diff(np.r_[starts, len(inst)])
    last = np.maximum.reduceat(start, starts)
    # The straggler: the latest arrival (the lowest rank on a tie).
    latest = np.lexsort((rank, -start, inst))[starts]
    reference = _median_per_group(inst, start, starts, counts)
    wait = last[np.repeat(np.arange(len(starts)), counts)] - start
    return Timing(
        first_arrival=np.minimum.reduceat(start, starts),
        last_arrival=last,
        straggler=rank[latest],
        reference_arrival=reference,
        skew=last - reference,
        wait_cost=np.add.reduceat(wait, starts),
        transfer=np.maximum(0, _median_per_group(inst, end, starts, counts) - last),
        shortest_duration=np.minimum.reduceat(end - start, starts),
        wait=wait,
    )


def bus_factor(op: str, nranks: int) -> float:
    """nccl-tests' bus factor: what each rank puts on the wire, per byte of the message."""
    return BUS_FACTOR.get(op, lambda n: 1.0)(nranks)


# Operations NCCL runs only as a ring or as point-to-point sends, whatever the kernel name says.
_RING_OR_P2P = frozenset({"Broadcast", "Reduce", "AllToAll", "SendRecv", "Send", "Recv"})


def wire_gives_size(op: np.ndarray, algorithm: np.ndarray) -> np.ndarray:
    """Whether a rank's network sends give the message size by the bus factor: in a ring (or a
    point-to-point exchange) every rank sends size x factor; a tree, CollNet or NVLS moves other
    amounts (a tree's inner ranks send to parent and children)."""
    ring_only = np.array([OPS[int(o)] in _RING_OR_P2P for o in range(len(OPS))])
    return ring_only[op] | (algorithm == ALGORITHMS.index("RING"))


def message_sizes(nbytes: np.ndarray, wire: np.ndarray, op: np.ndarray, nranks: np.ndarray,
                  algorithm: np.ndarray, recorded_from: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Per instance: the message size and where it came from. A recorded size (PyTorch's
    record_param_comms: its element counts, or its input's dims; `recorded_from` indexes
    nccl.SIZE_SOURCES) first; else, for a ring, the bytes a rank sent over the network (NCCL's
    network NVTX) over the bus factor: busbw = algbw x factor means each rank sends size x factor
    (a ring AllReduce sends 2(n-1)/n of the message). -1 and None where neither is known."""
    source = np.full(len(nbytes), None, dtype=object)
    known = np.flatnonzero(nbytes >= 0)
    codes = np.zeros(len(nbytes), np.int64) if recorded_from is None else np.maximum(recorded_from, 0)
    source[known] = np.array(SIZE_SOURCES, dtype=object)[codes[known]]
    out = nbytes.copy()
    # NCCL's payload holds one rank's part of an all-gather or reduce-scatter (sendcount or
    # recvcount x type size, collectives.cc); nccl-tests' size, which the factors take, is the whole.
    parts = np.isin(op, [OPS.index("AllGather"), OPS.index("ReduceScatter")])
    per_rank = (nbytes >= 0) & (codes == SIZE_SOURCES.index("nvtx_payload")) & parts
    out[per_rank] = nbytes[per_rank] * nranks[per_rank]
    use = np.flatnonzero((nbytes < 0) & (wire >= 0) & wire_gives_size(op, algorithm))
    if len(use):
        pairs, at = np.unique(np.stack([op[use], nranks[use]], axis=1), axis=0, return_inverse=True)
        factor = np.array([bus_factor(OPS[int(o)], int(n)) for o, n in pairs.tolist()])[at.ravel()]
        ok = factor > 0
        out[use[ok]] = np.rint(wire[use[ok]] / factor[ok]).astype(np.int64)
        source[use[ok]] = "nccl_net_nvtx"
    return out, source


def bus_bandwidth_gbps(op: str, nbytes: int, nranks: int, transfer_ns: int) -> float | None:
    """busbw in GB/s (nccl-tests convention), None when the size or transfer is unknown."""
    if nbytes < 0 or transfer_ns <= 0:
        return None
    return nbytes / transfer_ns * bus_factor(op, nranks)
