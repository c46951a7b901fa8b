"""The causes blame names (output-contract.md: `whatif.causes[].cause`, `blame[].cause`), one enum
for the whole package, and how host ranges are named in them."""

from __future__ import annotations

import re
from enum import Enum


class Cause(str, Enum):
    KERNEL = "kernel"  # a kernel that ran longer than its reference (peers, or itself in other steps)
    EXTRA_KERNEL = "extra_kernel"  # kernels a rank ran more often than its peers
    HOST = "host"  # host time inside an NVTX range or CPU operator, on one rank
    HOST_GROUP = "host_group"  # the same, on every rank of one host
    TRANSFER = "transfer"  # transfers slower than their kind's baseline
    IDLE = "idle"  # GPU idle that no recorded or inferred dependency explains
    WINDOW = "window"  # no reference: what ran on the straggler while the others waited
    UNEXPLAINED = "unexplained"  # wait that fixing every cause at once does not save


_NVTX_COUNTERS = re.compile(r"(, (seq|op_id) = \d+)+$|(?<=#)\d+$")


def nvtx_family(name: str | None) -> str | None:
    """An NVTX name without its per-call counters (PyTorch's `, seq = N, op_id = N`, a step's
    `#N`), so that every call of one operation is counted together."""
    return _NVTX_COUNTERS.sub(lambda m: "N" if m.group(0).isdigit() else "", name) if name else name
