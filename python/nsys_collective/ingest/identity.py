"""Which rank a capture's process is: what each export says of its ranks' numbers.

Rank numbers come from the most trusted source every rank has (docs/nsys-export.md, "Identity"): a
PyTorch profiler trace's distributedInfo, the rank variables of the profiled process's environment
(only for reports holding one rank: a report of several ranks records its launcher's
environment), else a `rank<N>` in the file name (`-o report_rank%q{RANK}`), else a stable order
(host, pid, device, report); model.ranks numbers them across the job. NCCL's `ncclCommInitRank`
payload would come first, but default exports do not carry payload values.
"""

from __future__ import annotations

import re
from pathlib import Path

from nsys_collective.ingest.capture import Export

RANK_VARIABLES = ("RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "SLURM_PROCID", "MV2_COMM_WORLD_RANK")
_RANK_IN_NAME = re.compile(r"rank[_\-.]?(\d+)", re.IGNORECASE)
_ENV_ASSIGNMENT = re.compile(r'^([A-Za-z_][A-Za-z0-9_]*)="?(.*?)"?$')

Candidate = tuple[int, str]  # (rank number, where it came from)


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


def rank_from_environment(export: Export) -> Candidate | None:
    # PyTorch profiler traces say it themselves.
    if export.metadata.get("distributedInfo.rank", "").strip().isdigit():
        return int(export.metadata["distributedInfo.rank"]), "distributedInfo (PyTorch profiler)"
    env = environment(export)
    for name in RANK_VARIABLES:
        if env.get(name, "").strip().isdigit():
            return int(env[name]), f"environment ({name})"
    return None


def rank_from_file_name(report: str) -> Candidate | None:
    m = _RANK_IN_NAME.search(Path(report).name)
    return (int(m.group(1)), "file name") if m else None
