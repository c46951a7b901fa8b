"""A capture: one input file read into whole numpy columns by the native (Rust) readers.

`read_exports` reads Nsight Systems SQLite exports, `read_kineto` PyTorch profiler traces, into the
same `Export`: files in parallel, the GIL released. (The pure-Python oracle of the SQLite reader
is a test tool: tests/reference_reader.py.)
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from nsys_collective import _native
from nsys_collective.ingest.limits import Limits  # noqa: F401 - every reader's signature; the command line's defaults

Table = dict[str, np.ndarray]
"""Columns of one table, every one int64 and of equal length. Names are ids into `strings`;
times are absolute UTC ns; a missing value is -1."""

TABLES = ("kernels", "memcpy", "memset", "runtime", "nvtx", "gpu_metrics", "gpu_metric_names", "gpus", "sync", "cuda_event",
          "cpu_ops")

# NVTX event types (NVTX_EVENTS.eventType) the analysis uses.
NVTX_PUSH_POP_RANGE = 59
NVTX_START_END_RANGE = 60
NVTX_DOMAIN_CREATE = 75
# The names the analysis gives copies and memsets (nsys's own labels): they have none in the tables.
MEMCPY_NAME = "[CUDA memcpy]"
MEMSET_NAME = "[CUDA memset]"


@dataclass
class Session:
    nsys_version: str | None
    schema_version: str | None
    time_normalized: bool
    utc_epoch_ns: int | None
    hostname: str | None
    # When the capture started (UTC ns), where the format records it: an Nsight Systems session
    # starts at utc_epoch_ns; a Kineto trace's baseTimeNanoseconds is only the origin of its
    # timestamps, which may lie days before the capture (None).
    capture_start_ns: int | None = None


@dataclass
class Export:
    """Everything the analysis needs from one export."""

    path: Path
    session: Session
    metadata: dict[str, str]
    system_env: dict[str, str]
    capture: list[tuple[str, str]]
    """META_DATA_CAPTURE rows in order; keys repeat (one ENVIRONMENT_VARIABLE row per variable)."""
    strings: list[str]
    kernels: Table
    memcpy: Table
    memset: Table
    runtime: Table
    nvtx: Table
    gpu_metrics: Table
    gpu_metric_names: Table
    gpus: Table
    sync: Table  # CUPTI SYNCHRONIZATION rows, Kineto cuda_sync events
    cuda_event: Table  # CUPTI CUDA_EVENT rows (event records)
    cpu_ops: Table  # Kineto cpu_op ranges, in the nvtx table's layout (empty for an export)
    warnings: list[str] = field(default_factory=list)
    collectives: Table | None = None
    """PyTorch profiler traces only: one row per record_param_comms call (sizes, dtype, group)."""

    @classmethod
    def from_dict(cls, raw: dict, origin_is_capture_start: bool) -> Export:
        # Lists of pairs, not dicts, cross the boundary: a repeated key keeps its first value.
        def first_wins(pairs):
            out: dict[str, str] = {}
            for key, value in pairs:
                out.setdefault(key, value)
            return out

        return cls(
            path=Path(raw["path"]),
            session=Session(**raw["session"], capture_start_ns=raw["session"]["utc_epoch_ns"] if origin_is_capture_start else None),
            metadata=first_wins(raw["metadata"]),
            system_env=first_wins(raw["system_env"]),
            capture=[tuple(pair) for pair in raw["capture"]],
            strings=raw["strings"],
            warnings=list(raw["warnings"]),
            collectives=raw.get("collectives"),
            **{name: raw[name] for name in TABLES},
        )

    def name(self, string_id: int) -> str | None:
        return self.strings[string_id] if string_id >= 0 else None

    def names(self, string_ids: np.ndarray) -> np.ndarray:
        """Strings of many ids at once (None for -1), as an object array."""
        table = np.array(self.strings + [None], dtype=object)
        return table[np.where(string_ids >= 0, string_ids, len(self.strings))]


def read_exports(paths: Sequence[str | os.PathLike], threads: int | None = None, limits: Limits = Limits()) -> list[Export]:
    """Reads exports with the native reader, `threads` files at once (all cores when None).
    (`limits` is every reader's signature: an export's reads are bounded by its own row counts.)

    Raises `InputError` (one line, naming the file) for the first unusable input.
    """
    raw = _native.read_exports([os.fspath(p) for p in paths], threads)
    return [Export.from_dict(r, origin_is_capture_start=True) for r in raw]


def read_kineto(paths: Sequence[str | os.PathLike], threads: int | None = None, limits: Limits = Limits()) -> list[Export]:
    """Reads PyTorch profiler (Kineto) traces, `.json` or `.json.gz`, one per rank, with the native
    reader, `threads` files at once (all cores when None). Same `Export` as `read_exports`: times are
    absolute UTC ns (`baseTimeNanoseconds` + ts), GPU rows carry the host pid, `record_param_comms`
    ops are `nccl:<collective>` ranges, and `distributedInfo` is in `metadata` as
    `distributedInfo.rank`, `distributedInfo.world_size`, ...

    Raises `InputError` (one line, naming the file) for the first unusable input.
    """
    raw = _native.read_kineto_traces([os.fspath(p) for p in paths], threads, limits.max_trace_bytes, limits.max_gzip_ratio)
    return [Export.from_dict(r, origin_is_capture_start=False) for r in raw]
