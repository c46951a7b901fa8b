"""Ranks: one (report, host, pid, device) each, with their GPU work counted and their number.

A report holds one rank per process and GPU that ran GPU work; a report without any GPU work is
still a rank (with zero kernels), so a rank that did nothing is seen, not silently dropped.

Rank numbers come from the most trusted source every rank has (nsys-export.md, "Identity"):
a PyTorch profiler trace's distributedInfo, the rank variables of the profiled process's
environment (only for reports holding one rank: a
report of several ranks records its launcher's environment), else a `rank<N>` in the file name
(`-o report_rank%q{RANK}`), else a stable order (host, pid, device, report). NCCL's
`ncclCommInitRank` payload would come first, but default exports do not carry payload values.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from nsys_collective.intervals import covered_ns, overlap_ns
from nsys_collective.nccl import nccl_kernel_mask
from nsys_collective.reader import Export

GPU_ACTIVITY_TABLES = ("kernels", "memcpy", "memset")
RANK_VARIABLES = ("RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "SLURM_PROCID", "MV2_COMM_WORLD_RANK")
_RANK_IN_NAME = re.compile(r"rank[_\-.]?(\d+)", re.IGNORECASE)
_ENV_ASSIGNMENT = re.compile(r'^([A-Za-z_][A-Za-z0-9_]*)="?(.*?)"?$')


@dataclass
class Rank:
    rank: int
    report: str
    host: str | None
    pid: int | None
    device: int | None
    rank_source: str
    kernels: int
    nccl_kernels: int
    nccl_time_ns: int
    compute_overlap_ns: int
    overlap_share: float | None
    first_ns: int | None
    last_ns: int | None
    export_index: int  # which of the analyzed exports holds this rank


def environment(export: Export) -> dict[str, str]:
    """The profiled process's environment: META_DATA_CAPTURE's ENVIRONMENT_VARIABLE rows
    (`NAME="value"`), else TARGET_INFO_SYSTEM_ENV's DeviceEnvironment (`NAME=value;...`)."""
    env: dict[str, str] = {}
    for key, value in export.capture:
        if key.endswith(":ENVIRONMENT_VARIABLE") and (m := _ENV_ASSIGNMENT.match(value)):
            env.setdefault(m.group(1), m.group(2))
    for assignment in export.system_env.get("DeviceEnvironment", "").split(";"):
        name, sep, value = assignment.partition("=")
        if sep:
            env.setdefault(name, value)
    return env


def _rank_from_environment(env: dict[str, str], metadata: dict[str, str]) -> tuple[int, str] | None:
    # PyTorch profiler traces say it themselves.
    if metadata.get("distributedInfo.rank", "").strip().isdigit():
        return int(metadata["distributedInfo.rank"]), "distributedInfo (PyTorch profiler)"
    for name in RANK_VARIABLES:
        if env.get(name, "").strip().isdigit():
            return int(env[name]), f"environment ({name})"
    return None


def _rank_from_file_name(report: str) -> tuple[int, str] | None:
    m = _RANK_IN_NAME.search(Path(report).name)
    return (int(m.group(1)), "file name") if m else None


def _on(table: dict[str, np.ndarray], pid: int | None, device: int | None) -> np.ndarray:
    return (table["pid"] == pid) & (table["device"] == device)


def _gpu_work(export: Export, pid: int | None, device: int | None, is_nccl: np.ndarray) -> dict:
    k = export.kernels
    mine = _on(k, pid, device)
    nccl, compute = mine & is_nccl, mine & ~is_nccl
    nccl_intervals = (k["start"][nccl], k["end"][nccl])
    nccl_time = covered_ns(*nccl_intervals)
    tables = [getattr(export, t) for t in GPU_ACTIVITY_TABLES]
    starts = np.concatenate([t["start"][_on(t, pid, device)] for t in tables])
    ends = np.concatenate([t["end"][_on(t, pid, device)] for t in tables])
    overlap = overlap_ns(nccl_intervals, (k["start"][compute], k["end"][compute]))
    return {
        "kernels": int(mine.sum()),
        "nccl_kernels": int(nccl.sum()),
        "nccl_time_ns": nccl_time,
        "compute_overlap_ns": overlap,
        # HTA's and NVIDIA's headline figure: the share of NCCL time with compute running beside it.
        "overlap_share": overlap / nccl_time if nccl_time else None,
        "first_ns": int(starts.min()) if len(starts) else None,
        "last_ns": int(ends.max()) if len(ends) else None,
    }


def ranks_of(export: Export, index: int, report: str) -> tuple[list[dict], list[str]]:
    """The not yet numbered ranks of one export, with their GPU work counted: what numbering
    needs, so that the export itself can be released afterwards."""
    tables = [getattr(export, t) for t in GPU_ACTIVITY_TABLES]
    # (pid, device) packed in one integer: np.unique on rows is many times slower.
    packed = np.unique(np.concatenate([(t["pid"] << 20) + (t["device"] + 1) for t in tables]))
    keys = [(int(k >> 20), int((k & 0xFFFFF) - 1)) for k in packed]
    warnings = []
    if not keys:
        warnings.append(f"{report}: no CUDA kernels or copies captured; counted as a rank with zero kernels")
        keys = [(None, None)]
    env = _rank_from_environment(environment(export), export.metadata) if len(keys) == 1 else None
    file = _rank_from_file_name(report) if len(keys) == 1 else None
    is_nccl = nccl_kernel_mask(export)
    return [{"index": index, "report": report, "pid": pid, "device": device, "host": export.session.hostname,
             "env": env, "file": file, "work": _gpu_work(export, pid, device, is_nccl)} for pid, device in keys], warnings


def number_ranks(found: list[dict]) -> tuple[list[Rank], list[str]]:
    """Numbers the ranks of all exports (see the module's docstring); sorted by number."""
    warnings = []
    found = sorted(found, key=lambda f: (f["host"] or "", -1 if f["pid"] is None else f["pid"], -1 if f["device"] is None else f["device"], f["report"]))
    numbers = None
    for source in ("env", "file"):
        candidates = [f[source] for f in found]
        if all(candidates) and len({c[0] for c in candidates}) == len(candidates):
            numbers = candidates
            break
        if any(candidates):
            warnings.append(f"rank numbers from the {'environment' if source == 'env' else 'file names'} are missing or repeat; not used")
    if numbers is None:
        numbers = [(i, "order (host, pid, device)") for i in range(len(found))]
    ranks = [Rank(rank=number, report=f["report"], host=f["host"], pid=f["pid"], device=f["device"], rank_source=source,
                  export_index=f["index"], **f["work"]) for f, (number, source) in zip(found, numbers)]
    ranks.sort(key=lambda r: r.rank)
    return ranks, warnings


def find_ranks(exports: Sequence[Export], reports: list[str]) -> tuple[list[Rank], list[str]]:
    """The ranks of all exports, numbered. `reports` names each export as the user gave it."""
    found, warnings = [], []
    for index, (export, report) in enumerate(zip(exports, reports)):
        entries, said = ranks_of(export, index, report)
        found += entries
        warnings += said
    ranks, said = number_ranks(found)
    return ranks, warnings + said
