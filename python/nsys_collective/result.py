"""The result of one analyzed run: one typed, immutable `Result`.

`Result.document` is the `--json` contract (docs/output-contract.md) as typed
dataclasses: names exactly as there, integer ns on the aligned clock, None where a value is
unknown. `Result.doc` is the same as plain JSON data, what `--json` prints. Beside the document, a
result holds what the renderers need that the contract does not carry: the verdict lines, the
clock names, every (collective, rank) observation and the GPU work around the worst collectives
(`Evidence`), so that a run stored by `batch` renders exactly like a fresh one. Only a fresh run
also holds the whole aligned timeline (`timeline`, as `AlignedTimeline` describes it), for the
Perfetto trace.

The result is data: this module imports the standard library, numpy and the leaves it shares with
every stage (the cause registry, units), nothing of the analysis, the renderers or the store.
attribution.build assembles a result from the model and the attribution; `Result.from_stored`
from a stored document and its extras (validated into the same classes, so a stored run is read by
one path). The renderers, compare and the store read `Result.document`'s attributes, which a type
checker follows (tests/unit/test_typed_readers.py); `doc` is for `--json` and the Python API. The
JSON Schema of the document is generated from these classes (`document_schema`, checked in as
docs/output.schema.json).
"""

from __future__ import annotations

import json
import math
from json.encoder import c_make_encoder, encode_basestring_ascii
import numbers
from dataclasses import dataclass, field, fields, is_dataclass
from functools import cached_property
from typing import Any, Literal, Protocol

import numpy as np

from nsys_collective import causes
from nsys_collective.units import count, duration

SCHEMA_VERSION = 2
# Validation of stored documents: no unknown keys, so that the variants of a union are told apart.
_STRICT = {"extra": "forbid"}
# A field with this metadata is left out of the JSON where None: one only an option sets, so that
# documents made without the option stay as they were, byte for byte.
OMITTED_IF_NONE = {"omitted_if_none": True}


# The cause kinds each part of the document allows, from the registry (causes.py).
_KERNEL_BLAME = causes.kinds(causes.KERNEL)
_HOST_BLAME = causes.kinds(causes.HOST)
_TRANSFER_BLAME = causes.kinds(causes.TRANSFER)
_IDLE_BLAME = causes.kinds(causes.IDLE)
_RANK_BLAME = causes.kinds(causes.RANK)
_UNEXPLAINED_BLAME = causes.kinds(causes.UNEXPLAINED)
_KERNEL_CAUSES = causes.kinds(causes.KERNEL, replayed=True)
_HOST_CAUSES = causes.kinds(causes.HOST, replayed=True)
_REPLAYED = causes.kinds(replayed=True)


# The document (docs/output-contract.md) ---------------------------------------------------------------

@dataclass(frozen=True)
class Input:
    __pydantic_config__ = _STRICT
    path: str
    export: str
    nsys_version: str | None
    schema: str | None


@dataclass(frozen=True)
class RankRow:
    __pydantic_config__ = _STRICT
    rank: int
    host: str | None
    pid: int | None
    device: int | None
    report: str
    rank_source: str
    clock_offset_ns: int | None
    clock_drift_ppm: float | None
    kernels: int
    nccl_kernels: int
    nccl_time_ns: int
    compute_overlap_ns: int
    overlap_share: float | None
    first_ns: int | None
    last_ns: int | None
    # Explanations (attribution: overlap, idle, host_sync); None in documents stored before them.
    zero_overlap_cause: Literal["same_stream", "no_compute", "serialized"] | None = None
    idle_ns: int | None = None
    idle_host_wait_ns: int | None = None
    idle_sync_wait_ns: int | None = None
    idle_other_ns: int | None = None
    host_sync_ns: int | None = None  # the rank's process's
    host_sync_calls: int | None = None


@dataclass(frozen=True)
class Spread:
    __pydantic_config__ = _STRICT
    p50: int
    p95: int
    max: int


@dataclass(frozen=True)
class HostClock:
    __pydantic_config__ = _STRICT
    host: str | None
    offset_ns: int
    drift_ppm: float


@dataclass(frozen=True)
class RanksClock(HostClock):
    """A clock of some ranks that disagreed with the rest of their host."""
    ranks: tuple[int, ...]


@dataclass(frozen=True)
class AlignmentQuality:
    """How far to trust the clock fit (model.alignment_quality)."""

    __pydantic_config__ = _STRICT
    collectives: int
    fitted: bool
    spread_shrunk: bool | None
    same_clock_end_spread_ns: Spread | None
    tolerance_ns: int
    issues: tuple[Literal["few_collectives", "spread_not_shrunk", "same_clock_ranks_disagree"], ...]


@dataclass(frozen=True)
class AlignmentInfo:
    __pydantic_config__ = _STRICT
    method: str
    t_ref_ns: int
    hosts: tuple[HostClock | RanksClock, ...]
    end_spread_ns_before: Spread | None
    end_spread_ns_after: Spread | None
    violations_before: int
    violations_after: int
    drift_fitted: bool
    instances_used: int
    quality: AlignmentQuality | None = None  # None in documents stored before it existed


@dataclass(frozen=True)
class KernelBlame:
    __pydantic_config__ = _STRICT
    cause: Literal[_KERNEL_BLAME]
    kernel: str
    kernel_full: str
    rank: int
    host: str | None
    ns: int  # the wait fixing it saved in this collective (window: its overlap)
    wait_saved_ns: int | None
    step_time_saved_ns: int | None


@dataclass(frozen=True)
class HostBlame:
    __pydantic_config__ = _STRICT
    cause: Literal[_HOST_BLAME]
    nvtx: str | None
    rank: int | None
    host: str | None
    ns: int
    wait_saved_ns: int | None
    step_time_saved_ns: int | None


@dataclass(frozen=True)
class TransferBlame:
    __pydantic_config__ = _STRICT
    cause: Literal[_TRANSFER_BLAME]
    name: str | None
    rank: int | None
    host: str | None
    ns: int
    wait_saved_ns: int | None
    step_time_saved_ns: int | None


@dataclass(frozen=True)
class IdleBlame:
    __pydantic_config__ = _STRICT
    cause: Literal[_IDLE_BLAME]
    rank: int | None
    host: str | None
    ns: int
    wait_saved_ns: int | None
    step_time_saved_ns: int | None


@dataclass(frozen=True)
class RankBlame:
    __pydantic_config__ = _STRICT
    cause: Literal[_RANK_BLAME]
    name: str | None  # api_stall: the API that stalled most
    rank: int
    host: str | None
    ns: int
    wait_saved_ns: int | None
    step_time_saved_ns: int | None


@dataclass(frozen=True)
class UnexplainedBlame:
    __pydantic_config__ = _STRICT
    cause: Literal[_UNEXPLAINED_BLAME]
    rank: int
    ns: int
    wait_saved_ns: None
    step_time_saved_ns: None


Blame = KernelBlame | HostBlame | TransferBlame | IdleBlame | RankBlame | UnexplainedBlame
# Each family's blame variant; every kind of the registry is one of them (tests/unit/test_causes.py).
BLAME_OF = {causes.KERNEL: KernelBlame, causes.HOST: HostBlame, causes.TRANSFER: TransferBlame, causes.IDLE: IdleBlame,
            causes.RANK: RankBlame, causes.UNEXPLAINED: UnexplainedBlame}


def blamed_name(entry: Blame) -> str | None:
    """What names a blame entry's cause: its family's first naming field (a kernel, an NVTX range, a
    name); None for a family nothing names (idle time, the unexplained rest)."""
    named_by = causes.of(entry.cause).family.fields
    return getattr(entry, named_by[0][0]) if named_by else None


@dataclass(frozen=True)
class Collective:
    __pydantic_config__ = _STRICT
    id: int
    comm: str
    seq: int
    op: str
    bytes: int | None
    ranks: int
    start_ns: int
    last_arrival_ns: int
    straggler_rank: int
    skew_ns: int
    wait_cost_ns: int
    transfer_ns: int
    transfer_shortest_ns: int
    busbw_gbps: float | None
    blame_method: Literal["whatif", "window", "none"]
    blame: tuple[Blame, ...]
    compute_overlap_ns: int
    sm_pressure: float
    baseline_transfer_ns: int | None
    contention_excess_ns: int | None
    gpu_metrics: dict[str, float | None]
    step: str | None
    # Where `bytes` came from; None where nothing recorded it (a warning says so).
    bytes_source: Literal["record_param_comms", "input_dims", "nvtx_payload", "nccl_net_nvtx"] | None = None
    # The link its traffic crossed (model/links.py: network across hosts, else NVLink or PCIe by
    # the GPU model), that link's capacity per direction and the share of it busbw used.
    link: Literal["network", "nvlink", "pcie"] | None = None
    link_capacity_gbps: float | None = None
    link_share: float | None = None
    # "--nic-gbps" where the capacity is the NIC speed the user gave; absent otherwise (a capacity
    # then comes from the GPU model, model/links.py).
    link_capacity_source: Literal["--nic-gbps"] | None = field(default=None, metadata=OMITTED_IF_NONE)


@dataclass(frozen=True)
class BlockingKernel:
    __pydantic_config__ = _STRICT
    kernel: str
    kernel_full: str
    rank: int
    cause: Literal[_KERNEL_CAUSES]
    reference: Literal["peers", "self"] | None
    blame_ns: int  # the kernel's own excess over its reference (or the extra runs' time)
    inflicted_wait_ns: int  # kept for one release: wait_saved_ns, at least 0
    wait_saved_ns: int
    step_time_saved_ns: int
    collectives: int
    confidence: Literal["high", "low"]
    slowdown: float | None
    runs: int | None
    reference_runs: int | None


@dataclass(frozen=True)
class BlockingLaunch:
    __pydantic_config__ = _STRICT
    nvtx: str | None
    rank: int | None
    host: str | None
    cause: Literal[_HOST_CAUSES]
    blame_ns: int  # host time beyond the reference
    inflicted_wait_ns: int  # kept for one release: wait_saved_ns, at least 0
    wait_saved_ns: int
    step_time_saved_ns: int
    collectives: int
    confidence: Literal["high", "low"]


@dataclass(frozen=True)
class ContentionEntry:
    __pydantic_config__ = _STRICT
    kernel: str
    kernel_full: str
    rank: int | None
    overlap_ns: int
    # The fitted extra transfer time it caused (GPU time over the member ranks): its coefficient x
    # its overlap (attribution/overlap_fit.py); None where its overlap does not vary enough to tell,
    # 0 where the fit cannot tell it from no effect.
    contention_ns: int | None
    sm_footprint: float
    collectives: int
    kernels: tuple[str, ...] = ()  # more than one: kernels that always overlap together, fitted as one
    contention_low_ns: int | None = None  # 90% bootstrap interval of contention_ns
    contention_high_ns: int | None = None
    slowdown_per_overlap: float | None = None  # extra transfer ns per ns of overlap (the coefficient)
    confidence: Literal["high", "low"] | None = None


@dataclass(frozen=True)
class CleanCheck:
    """The fitted baselines against the transfers nothing overlapped, per class that has some."""
    __pydantic_config__ = _STRICT
    classes: int
    instances: int
    median_error: float  # |fitted baseline - median clean transfer| / median clean transfer
    max_error: float


@dataclass(frozen=True)
class ContentionFit:
    """The contention fit (attribution/overlap_fit.py): transfer = class baseline + sum of
    coefficient x overlap, over these collectives."""
    __pydantic_config__ = _STRICT
    classes: int
    collectives: int
    kernels: int
    trimmed: int  # collectives left out: far from what the overlapping kernels explain
    residual_share: float  # RMS residual over the mean transfer
    clean_check: CleanCheck | None
    # kernels whose slowdown failed its partial F test (not distinguishable from none): figure 0, refitted without
    not_distinguishable: int = 0


@dataclass(frozen=True)
class ComputeSlowdown:
    __pydantic_config__ = _STRICT
    kernel: str
    kernel_full: str
    overlapped_mean_ns: int
    alone_mean_ns: int
    slowdown: float  # how much longer its runs beside NCCL took than the fit says they would alone
    overlapped_runs: int
    alone_runs: int
    # The fit (its duration = baseline + coefficient x overlap with NCCL): the time NCCL added over
    # all its runs, GPU time, with a 90% bootstrap range; what removing that saves, replayed.
    slowed_ns: int = 0
    slowed_low_ns: int = 0
    slowed_high_ns: int = 0
    slowdown_per_overlap: float = 0.0
    confidence: Literal["high", "low"] = "low"
    wait_saved_ns: int | None = None
    step_time_saved_ns: int | None = None


@dataclass(frozen=True)
class StartError:
    __pydantic_config__ = _STRICT
    p50: int
    p99: int
    max: int


@dataclass(frozen=True)
class Fidelity:
    """How much of the trace the replayed dependency graph explains (docs/method.md section 4)."""

    __pydantic_config__ = _STRICT
    ops: int
    explained_start_share: float
    start_error_ns: StartError
    slack_ns: int
    inferred_dependencies: int
    recorded_dependencies: int


@dataclass(frozen=True)
class Saving:
    __pydantic_config__ = _STRICT
    wait_saved_ns: int
    step_time_saved_ns: int


@dataclass(frozen=True)
class CausePart:
    __pydantic_config__ = _STRICT
    name: str | None
    excess_ns: int
    wait_saved_ns: int | None  # None: not replayed alone (an API's share of a rank's API stalls)


@dataclass(frozen=True)
class WhatIfCause:
    __pydantic_config__ = _STRICT
    cause: Literal[_REPLAYED]
    rank: int | None
    host: str | None
    name: str | None
    reference: Literal["peers", "self", "baseline", "none", "fit"] | None  # none: work the peers do not do; fit: a kernel's share of the contention fit
    excess_ns: int
    wait_saved_ns: int
    step_time_saved_ns: int
    collectives: int
    confidence: Literal["high", "low"]
    name_full: str | None
    slowdown: float | None
    runs: int | None
    reference_runs: int | None
    ranks: tuple[int, ...] | None  # the ranks it acts on; None for transfers (every rank)
    context: tuple[str, ...] | None  # the ranges around the one that names it, in the same host gap
    parts: tuple[CausePart, ...] | None  # a rank-level cause's largest parts
    parent: int | None  # the rank-level cause (index in whatif.causes) this one is a part of


@dataclass(frozen=True)
class StepTime:
    __pydantic_config__ = _STRICT
    step: str
    duration_ns: int
    wait_share: float
    idle_share: float


@dataclass(frozen=True)
class WhatIfBlock:
    __pydantic_config__ = _STRICT
    fidelity: Fidelity
    ideal: Saving
    coverage: float | None  # share of the wait that fixing every cause at once removes
    steps: int
    step_times: tuple[StepTime, ...]
    causes: tuple[WhatIfCause, ...]


@dataclass(frozen=True)
class Summary:
    __pydantic_config__ = _STRICT
    ranks: int
    collectives: int
    nccl_time_ns: int
    wait_ns: int
    transfer_ns: int
    explained_wait_share: float | None
    top_blocking_kernel: str | None
    idle_wait_ns: dict[int, int]
    top_straggler_rank: int | None
    top_cause: WhatIfCause | None
    avoidable_wait_ns: int | None


@dataclass(frozen=True)
class StepRow:
    __pydantic_config__ = _STRICT
    step: str
    collectives: int
    first_ns: int
    wait_ns: int
    transfer_ns: int
    top_straggler_rank: int | None
    top_blocker: str | None
    top_blocker_rank: int | None
    top_blocker_wait_ns: int | None
    # From the what-if's replay of the measured trace: the step's duration (its end minus the
    # previous step's), and the shares of its GPU time (over all ranks) spent waiting and idle.
    duration_ns: int | None
    wait_share: float | None
    idle_share: float | None


@dataclass(frozen=True)
class LeftOutStep:
    __pydantic_config__ = _STRICT
    step: str
    reason: Literal["not_closed", "lost_gpu_work", "missing"]
    ranks: tuple[int, ...]


@dataclass(frozen=True)
class StepSelectionInfo:
    """Which training steps were analyzed (model.steps)."""

    __pydantic_config__ = _STRICT
    pattern: str
    complete_only: bool
    steps: tuple[str, ...]
    analyzed: tuple[str, ...]
    left_out: tuple[LeftOutStep, ...]
    collectives_left_out: int


@dataclass(frozen=True)
class RankReached:
    __pydantic_config__ = _STRICT
    rank: int
    operations: int  # how many of the communicator's operations it reached
    last_op: str  # the kind of the last one


@dataclass(frozen=True)
class StoppedCommunicator:
    """A communicator whose ranks did not all reach its last operation (a hang, a mismatch, a
    capture cut short on some ranks): which ranks stopped where."""

    __pydantic_config__ = _STRICT
    communicator: str | None  # None: a rank's stream that matches no other rank's
    streams: tuple[int, ...]
    reached: tuple[RankReached, ...]
    stopped_early: tuple[int, ...]


@dataclass(frozen=True)
class Document:
    """The `analyze --json` document."""

    __pydantic_config__ = _STRICT
    schema_version: int
    tool_version: str
    inputs: tuple[Input, ...]
    ranks: tuple[RankRow, ...]
    alignment: AlignmentInfo
    collectives: tuple[Collective, ...]
    blocking_kernels: tuple[BlockingKernel, ...]
    blocking_launches: tuple[BlockingLaunch, ...]
    contention: tuple[ContentionEntry, ...]
    compute_slowdown: tuple[ComputeSlowdown, ...]
    whatif: WhatIfBlock | None
    summary: Summary
    steps: tuple[StepRow, ...]
    findings: tuple[str, ...]
    warnings: tuple[str, ...]
    # None where no rank marks a step (and in documents stored before it existed).
    step_selection: StepSelectionInfo | None = None
    # Communicators whose ranks stopped at different operations (empty in documents stored before it).
    stopped: tuple[StoppedCommunicator, ...] = ()
    contention_fit: ContentionFit | None = None  # None where nothing overlapped a transfer


_FIELD_NAMES: dict[type, tuple[str, ...]] = {}


def _field_names(cls: type) -> tuple[str, ...] | None:
    """A dataclass's field names in order (None for any other type), looked up once per class."""
    names = _FIELD_NAMES.get(cls)
    if names is None and is_dataclass(cls):
        names = _FIELD_NAMES[cls] = tuple(f.name for f in fields(cls))
    return names


_OMITTED: dict[type, frozenset[str]] = {}


def _omitted_if_none(cls: type) -> frozenset[str]:
    omitted = _OMITTED.get(cls)
    if omitted is None:
        omitted = _OMITTED[cls] = frozenset(f.name for f in fields(cls) if f.metadata.get("omitted_if_none"))
    return omitted


def plain(value: Any) -> Any:
    """JSON data: dataclasses as dicts (fields in order, OMITTED_IF_NONE ones only where set),
    tuples as lists, mapping keys as text."""
    if isinstance(value, (str, int, float)) or value is None:
        return value
    names = _field_names(type(value))
    if names is not None:
        omitted = _omitted_if_none(type(value))
        return {name: plain(getattr(value, name)) for name in names
                if not (name in omitted and getattr(value, name) is None)}
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    return [plain(v) for v in value]


# Figures that may be negative: clock corrections, relative changes (slowdown, at least -1),
# instants on the aligned clock, and what-if savings (fixing one of two late hosts makes the
# others wait longer for the second). Every other number (durations, counts, sizes, ids) may not.
_SIGNED = frozenset({"clock_offset_ns", "offset_ns", "clock_drift_ppm", "drift_ppm", "slowdown", "t_ref_ns", "start_ns",
                     "last_arrival_ns", "first_ns", "last_ns", "wait_saved_ns", "step_time_saved_ns", "avoidable_wait_ns"})
_SHARES = frozenset({"overlap_share", "explained_wait_share", "explained_start_share"})


class InvalidFigure(ValueError):
    """The analysis produced a figure no input justifies (a bug): named by its place in the document."""


def check_figures(value: Any, where: str = "", name: str | None = None) -> None:
    """Raise InvalidFigure for a number of the document that is not finite, negative where it
    cannot be, or a share outside [0, 1]."""
    if value is None or isinstance(value, (str, bool)):
        return
    if isinstance(value, numbers.Real):
        if not math.isfinite(value):
            problem = "is not a number"
        elif name in _SHARES and not 0 <= value <= 1:
            problem = "is a share outside [0, 1]"
        elif name == "slowdown" and value < -1:
            problem = "is below -1 (a duration cannot shrink below zero)"
        elif name not in _SIGNED and value < 0:
            problem = "cannot be negative"
        else:
            problem = None
        if problem:
            raise InvalidFigure(f"the analysis produced {where.lstrip('.')} = {value}, which {problem}")
        return
    names = _field_names(type(value))
    if names is not None:
        for n in names:
            check_figures(getattr(value, n), f"{where}.{n}", n)
    elif isinstance(value, dict):
        for k, v in value.items():  # a plain dict's keys name its figures as fields do
            check_figures(v, f"{where}[{k}]", k if isinstance(k, str) else name)
    else:
        for i, v in enumerate(value):
            check_figures(v, f"{where}[{i}]", name)


class _Invalid(Exception):
    pass


def checked_plain(value: Any) -> Any:
    """plain(value), every figure checked as check_figures checks it, in one walk (the document
    of 1.9M kernels has 150k values: one walk instead of two, and no path text for valid ones).
    Raises InvalidFigure, named by check_figures."""
    try:
        return _checked_plain(value, None)
    except _Invalid:
        check_figures(value)
        raise InvalidFigure("the analysis produced a figure that fails its check") from None  # check_figures names it


def _checked_plain(value: Any, name: str | None) -> Any:
    t = type(value)  # the exact types first: the walk visits every value of the document
    if t is str or value is None:
        return value
    if t is int or t is float:
        if 0 <= value < math.inf and name not in _SHARES:  # the common case; NaN fails the comparison
            return value
        if _valid_figure(value, name):
            return value
        raise _Invalid
    names = _field_names(t)
    if names is not None:
        omitted = _omitted_if_none(t)
        out = {}
        for n in names:
            v = getattr(value, n)
            k = type(v)
            if k is str or ((k is int or k is float) and 0 <= v < math.inf and n not in _SHARES):
                out[n] = v  # the walk's common case, inline: most values are fields' text and numbers
            elif v is not None:
                out[n] = _checked_plain(v, n)
            elif n not in omitted:
                out[n] = None
        return out
    if isinstance(value, str):  # subclasses
        return value
    if isinstance(value, (int, float)):  # bool, and subclasses
        if isinstance(value, bool) or _valid_figure(value, name):
            return value
        raise _Invalid
    if isinstance(value, dict):
        return {str(k): _checked_plain(v, k if isinstance(k, str) else name) for k, v in value.items()}
    return [_checked_plain(v, name) for v in value]


def _valid_figure(value: int | float, name: str | None) -> bool:
    """check_figures' rules for one number."""
    if isinstance(value, float) and not math.isfinite(value):
        return False
    if name in _SHARES:
        return 0 <= value <= 1
    if name == "slowdown":
        return value >= -1
    return value >= 0 or name in _SIGNED


def _document_adapter():
    """Validation of documents against the classes above (pydantic, imported only when needed:
    writing a document does not use it)."""
    from pydantic import TypeAdapter

    return TypeAdapter(Document)


def document_schema() -> dict:
    """The JSON Schema of the document, generated from the classes above."""
    return _document_adapter().json_schema()


def indented_json(value: Any, indent: int) -> str:
    """`json.dumps(value, indent=indent)`, byte for byte, of JSON data as `plain` makes it (dicts
    with text keys, lists, text, numbers, None). CPython's C encoder takes no indent, so json.dumps
    writes an indented document in Python, value by value (0.1 s for the 4.6 MB document of 1.9M
    kernels); here the C encoder writes each run of plain values in one call, the separator
    between them starting each one's line, and only the containers holding containers are walked
    in Python."""
    if c_make_encoder is None:  # no C encoder (not CPython): the standard library's own way
        return json.dumps(value, indent=indent)
    parts: list[str] = []
    _write_json(value, "\n", " " * indent, {}, parts)
    return "".join(parts)


_CONTAINERS = (dict, list, tuple)


def _not_json(value: Any) -> Any:
    raise TypeError(f"Object of type {value.__class__.__name__} is not JSON serializable")


def _write_json(value: Any, newline: str, step: str, encoders: dict, parts: list[str]) -> None:
    """Append the JSON of `value`, whose first line is already indented, its further lines
    starting with `newline`; one encoder per depth, its items joined by ",\n" and their indent."""
    inner = newline + step
    encode = encoders.get(inner)
    if encode is None:  # json.dumps' defaults: ASCII only, NaN allowed
        encode = encoders[inner] = c_make_encoder(None, _not_json, encode_basestring_ascii, None, ": ", "," + inner,
                                                  False, False, True)
    if type(value) is dict:
        if not value:
            parts.append("{}")
            return
        opened, run = "{" + inner, {}
        for key, v in value.items():
            if type(v) in _CONTAINERS:
                if run:  # the plain values before it, written at once, braces cut off
                    parts.append(opened + "".join(encode(run, 0))[1:-1])
                    opened, run = "," + inner, {}
                parts.append(opened + encode_basestring_ascii(key) + ": ")
                _write_json(v, inner, step, encoders, parts)
                opened = "," + inner
            else:
                run[key] = v
        if run:
            parts.append(opened + "".join(encode(run, 0))[1:-1])
        parts.append(newline + "}")
    elif type(value) in _CONTAINERS:
        if not value:
            parts.append("[]")
            return
        opened, run = "[" + inner, []
        for v in value:
            if type(v) in _CONTAINERS:
                if run:
                    parts.append(opened + "".join(encode(run, 0))[1:-1])
                    opened, run = "," + inner, []
                parts.append(opened)
                _write_json(v, inner, step, encoders, parts)
                opened = "," + inner
            else:
                run.append(v)
        if run:
            parts.append(opened + "".join(encode(run, 0))[1:-1])
        parts.append(newline + "]")
    else:
        parts.append("".join(encode(value, 0)))


# What renderers need beside the document -------------------------------------------------------

@dataclass(frozen=True)
class Observations:
    """One row per (collective, rank), sorted by collective then rank: aligned arrival and end,
    and the end on the rank's own clock (before alignment)."""

    instance: np.ndarray
    rank: np.ndarray
    start: np.ndarray
    end: np.ndarray
    utc_end: np.ndarray

    def to_json(self) -> dict:
        return {f.name: getattr(self, f.name).tolist() for f in fields(self)}

    @classmethod
    def from_json(cls, data: dict) -> Observations:
        return cls(**{f.name: np.asarray(data[f.name], dtype=np.int64) for f in fields(cls)})


@dataclass(frozen=True)
class Evidence:
    """What the renderers show beside the document: the lines the verdict opens with, the clock
    names (in `alignment.hosts` order), the blame tolerance, every observation, and the GPU work
    around the worst collectives (attribution.evidence panels, as JSON data)."""

    verdict: tuple[str, ...]
    clocks: tuple[str, ...]
    tolerance_ns: int
    observations: Observations
    panels: tuple[dict, ...]
    # Per kernel of the most contention: each overlapped collective's overlap with it and its
    # transfer less the baseline and the other kernels' share (contention._points).
    contention_points: tuple[dict, ...] = ()

    def to_json(self) -> str:
        return json.dumps({"verdict": list(self.verdict), "clocks": list(self.clocks), "tolerance_ns": self.tolerance_ns,
                           "observations": self.observations.to_json(), "panels": list(self.panels),
                           "contention_points": list(self.contention_points)},
                          separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> Evidence:
        data = json.loads(text)
        return cls(verdict=tuple(data["verdict"]), clocks=tuple(data["clocks"]), tolerance_ns=data["tolerance_ns"],
                   observations=Observations.from_json(data["observations"]), panels=tuple(data["panels"]),
                   contention_points=tuple(data.get("contention_points", ())))  # runs stored before it was kept


class GpuWorkView(Protocol):
    """One rank's GPU work on the aligned clock, sorted by start (model.timeline.GpuWork)."""

    start: np.ndarray
    end: np.ndarray
    name: np.ndarray  # id (AlignedTimeline.names) of the full name
    short_name: np.ndarray  # id of the short name
    is_nccl: np.ndarray
    is_kernel: np.ndarray
    ctas: np.ndarray  # thread blocks of kernels, 0 for copies
    stream: np.ndarray

    def __len__(self) -> int: ...

    def index_of(self, start: np.ndarray, end: np.ndarray) -> np.ndarray:
        """Per (start, end), the row of the op with exactly those times, -1 where none."""
        ...


class NameTable(Protocol):
    values: list[str]  # by id

    def intern(self, value: str) -> int: ...


class AlignedTimeline(Protocol):
    """What the Perfetto trace reads of the job's aligned GPU work (model.timeline.Timeline)."""

    names: NameTable

    def __getitem__(self, rank: int) -> GpuWorkView: ...


@dataclass(frozen=True)
class Result:
    document: Document
    evidence: Evidence | None  # None for runs stored before it was kept: they compare, but do not render
    source: str = ""  # what was analyzed, for people: a folder, a file and how many more, a run id
    timeline: AlignedTimeline | None = field(default=None, repr=False, compare=False)  # fresh runs only

    @classmethod
    def checked(cls, document: Document, evidence: Evidence, source: str, timeline: AlignedTimeline | None) -> Result:
        """A fresh result, every figure of its document checked (InvalidFigure) in the walk that
        makes its JSON data, `doc`."""
        doc = checked_plain(document)
        result = cls(document=document, evidence=evidence, source=source, timeline=timeline)
        result.__dict__["doc"] = doc  # doc's cache (cached_property keeps it there)
        return result

    @cached_property
    def doc(self) -> dict:
        """The document as JSON data (what --json prints). Read it, don't change it."""
        return plain(self.document)

    def to_json(self, indent: int | None = 2) -> str:
        """The document as `--json` prints it."""
        return indented_json(self.doc, indent) if indent else json.dumps(self.doc, indent=indent)

    @property
    def summary(self) -> dict:
        return self.doc["summary"]

    @property
    def findings(self) -> list[str]:
        return self.doc["findings"]

    def __repr__(self) -> str:
        s = self.document.summary
        return f"<Result {self.source}: {count(s.ranks, 'rank')}, {count(s.collectives, 'collective')}, wait {duration(s.wait_ns)}>"

    @classmethod
    def from_stored(cls, document_json: str, evidence_json: str | None, source: str = "") -> Result:
        """A result from a stored document and evidence (store.runs)."""
        document = _document_adapter().validate_json(document_json)
        evidence = Evidence.from_json(evidence_json) if evidence_json else None
        return cls(document=document, evidence=evidence, source=source)
