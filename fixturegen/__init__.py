"""Synthetic multi-rank jobs with a planted, what-if truth: the test tool behind every blame test.

An event-driven simulation of a distributed training job on true time (``simulate.py``): per rank
a host thread issuing CUDA API calls and GPU streams executing them in order, collectives that
start their transfer when the last rank arrives. Parallelism styles (``program.py``: ddp, fsdp,
tp, pp, tp+ddp), causes planted one at a time or together (``causes.py``), the truth as a what-if
(``truth.py``: the same job rerun with each cause removed), written as Nsight Systems SQLite
exports (``nsys.py``) or PyTorch profiler traces (``kineto.py``). ``scripts/generate_fixture.py``
is the command line; ``generate()`` the Python entry point. Not part of the installed package.
"""

from .catalog import CATALOG, CONTEND, EXTRA_KERNEL, MS, SLOW_KERNEL, US
from .causes import (
    CAUSES,
    CONTENTION_FACTOR,
    NETWORK_FACTOR,
    SCENARIOS,
    SLOW_FACTOR,
    STALL_KINDS,
    STALL_RANGES,
)
from .ddl import DDL_2024_5, DDL_2024_5_SYNC, DDL_2026_2_CHANGED, DDL_2026_2_SYNC, EXPORT_VERSIONS
from .generate import FORMATS, SCRIPT, T0_NS, generate, main
from .nsys import ddl_for
from .program import (
    DATALOADER,
    STALL_NS,
    STREAM_AG,
    STREAM_COMPUTE,
    STREAM_DP,
    STREAM_NCCL,
    STREAM_RS,
    STREAM_SIDE,
    STREAM_TP,
    STYLES,
)

__all__ = [
    "CATALOG", "CAUSES", "CONTEND", "CONTENTION_FACTOR", "DATALOADER", "DDL_2024_5", "DDL_2024_5_SYNC",
    "DDL_2026_2_CHANGED", "DDL_2026_2_SYNC", "EXPORT_VERSIONS", "EXTRA_KERNEL", "FORMATS", "MS", "NETWORK_FACTOR",
    "SCENARIOS", "SCRIPT", "SLOW_FACTOR", "SLOW_KERNEL", "STALL_KINDS", "STALL_NS", "STALL_RANGES", "STREAM_AG",
    "STREAM_COMPUTE", "STREAM_DP", "STREAM_NCCL", "STREAM_RS", "STREAM_SIDE", "STREAM_TP", "STYLES", "T0_NS", "US",
    "ddl_for", "generate", "main",
]
