"""Bytes a rank sent over the network, from NCCL's network NVTX (docs/method.md section 3, bus bandwidth).

Some NCCL builds (the real `nccl-net-2rank-2node` set) name every call of the network plugin with
an NVTX range or mark whose text holds the transfer:

    ncclNetIsend(): Data_Size: 1048576, Sender_Rank: 0, Receiver_Rank: 1, Channel_ID: 0, Sequence: 4

The proxy thread retries a send the plugin is not ready for, so one send can appear hundreds of
times: a send is counted once per (receiver, channel, sequence). A send belongs to the NCCL
operation of its process running when it was posted (on the process's own clock, the kernels'),
and the bytes a rank put on the wire for an operation are the sum of its distinct sends. Only
network sends show: traffic between the GPUs of one host (P2P, SHM) records nothing here.

Parsing works on the export's distinct strings, never per event; the rest is numpy columns.
"""

from __future__ import annotations

import re

import numpy as np

from nsys_collective.ingest.capture import Export

NET_SEND = re.compile(r"^ncclNetIsend\(\):\s*Data_Size:\s*(\d+),\s*Sender_Rank:\s*(\d+),\s*Receiver_Rank:\s*(\d+),"
                      r"\s*Channel_ID:\s*(\d+),\s*Sequence:\s*(\d+)")


def _send_fields(export: Export, name_ids: np.ndarray) -> np.ndarray:
    """Per distinct string id: (size, receiver, channel, sequence) of a network send, -1 where the
    string is not one. Rows follow np.unique(name_ids)."""
    ids = np.unique(name_ids)
    out = np.full((len(ids), 4), -1, dtype=np.int64)
    for k, text in enumerate(export.names(ids).tolist()):
        match = NET_SEND.match(text) if text else None
        if match:
            size, _, receiver, channel, sequence = (int(g) for g in match.groups())
            out[k] = (size, receiver, channel, sequence)
    return out


def wire_bytes(export: Export, pid: int, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Bytes process `pid` sent over the network during each of its NCCL operations ([start, end],
    its own clock, sorted by start); -1 for an operation with no network send recorded."""
    out = np.full(len(start), -1, dtype=np.int64)
    nvtx = export.nvtx
    mine = np.flatnonzero((nvtx["pid"] == pid) & (nvtx["name"] >= 0))
    if not len(mine) or not len(start):
        return out
    fields = _send_fields(export, nvtx["name"][mine])
    at = np.searchsorted(np.unique(nvtx["name"][mine]), nvtx["name"][mine])
    sends = mine[fields[at, 0] >= 0]
    if not len(sends):
        return out
    size, receiver, channel, sequence = fields[at[fields[at, 0] >= 0]].T
    when = nvtx["start"][sends]
    # The operation running when the send was posted: the latest started at or before it, if not
    # yet ended.
    op = np.searchsorted(start, when, side="right") - 1
    inside = (op >= 0) & (when <= end[np.maximum(op, 0)])
    op, size, receiver, channel, sequence = op[inside], size[inside], receiver[inside], channel[inside], sequence[inside]
    if not len(op):
        return out
    # One count per distinct send of an operation: retries repeat (receiver, channel, sequence).
    keys = np.stack([op, receiver, channel, sequence], axis=1)
    _, first = np.unique(keys, axis=0, return_index=True)
    sent = np.bincount(op[first], weights=size[first].astype(np.float64), minlength=len(start))
    has = np.bincount(op[first], minlength=len(start)) > 0
    out[has] = np.rint(sent[has]).astype(np.int64)
    return out
