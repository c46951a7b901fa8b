"""The one pipeline: the only place the stages are assembled, for the CLI, the API and batch
(locally or on Dask).

    paths --ingest--> inputs --map (per input)--> rank traces --reduce (per job)--> Result
                                 read + trace          model -> attribution -> result

`map_input` reads one input and traces its ranks (model.trace): it is what a Dask worker runs per
rank file, and only its small output travels. `reduce` builds the cross-rank model, attributes
and assembles the result. `analyze` is both, on this machine: inputs read in parallel by the
native readers, a few at a time, each released once traced.
"""

from __future__ import annotations

import importlib
import math
import os
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from nsys_collective import memory
from nsys_collective.errors import InputError
from nsys_collective.ingest import formats
from nsys_collective.ingest.capture import Limits
from nsys_collective.ingest.discover import find_inputs, shown
from nsys_collective.model.job import Filters, Job, build_job
from nsys_collective.model.trace import InputFacts, RankTrace, trace_export

if TYPE_CHECKING:
    from nsys_collective.result import Result

Traced = tuple[InputFacts, list[RankTrace]]


@dataclass(frozen=True)
class Inputs:
    """One job's inputs as the user named them, and what the readers read for each."""

    reports: list[Path]
    readable: list[Path]
    limits: Limits = Limits()
    warnings: tuple[str, ...] = ()  # discovery's (a file named twice)


def prepare(paths: Sequence[str | os.PathLike], nsys: str | None = None, cache_dir: Path | None = None,
            progress: bool = False, limits: Limits = Limits(), export_timeout: float | None = None) -> Inputs:
    """The inputs `paths` name (files, folders, globs), reports exported with nsys (cached)."""
    reports, warnings = find_inputs(paths)
    readable = formats.readable_paths(reports, nsys, cache_dir, progress, export_timeout)
    return Inputs(reports=reports, readable=readable, limits=limits, warnings=tuple(warnings))


def map_input(readable: Path, index: int, report: str | os.PathLike, limits: Limits = Limits()) -> Traced:
    """Read one input and trace its ranks."""
    [export] = formats.read([readable], 1, limits)
    return trace_export(export, index, shown(report))


# More reader threads than this per core only cost memory and start-up time.
THREADS_PER_CORE = 4


def check_threads(threads: int | None) -> None:
    """Refuse (InputError) a thread count below 1 or above THREADS_PER_CORE per core."""
    cap = THREADS_PER_CORE * (os.cpu_count() or 1)
    if threads is not None and not 1 <= threads <= cap:
        raise InputError(f"--threads {threads}: must be 1 to {cap} ({THREADS_PER_CORE} per core)")


# Faster than any NIC (1.6 Tb/s is the fastest port sold in 2026): a typo, or bytes for bits.
MAX_NIC_GBPS = 100_000.0


def check_nic_gbps(nic_gbps: float | None) -> None:
    """Refuse (InputError) a NIC speed that is not a number of Gb/s above 0 and at most MAX_NIC_GBPS."""
    if nic_gbps is not None and not (math.isfinite(nic_gbps) and 0 < nic_gbps <= MAX_NIC_GBPS):
        raise InputError(f"--nic-gbps {nic_gbps:g}: the NIC's speed in Gb/s, above 0 and at most {MAX_NIC_GBPS:g}")


def map_inputs(inputs: Inputs, threads: int | None = None, on_read: Callable[[int], None] | None = None) -> list[Traced]:
    """Every input read and traced, `threads` files at once (all cores when None): each chunk of
    inputs is read in parallel, traced, and released before the next is read."""
    check_threads(threads)
    chunk = max(1, threads or os.cpu_count() or 1)
    traced = []
    for at in range(0, len(inputs.readable), chunk):
        traced += _map_chunk(inputs, at, at + chunk, threads)  # the chunk's exports are released on return
        if on_read:
            on_read(len(inputs.readable[at:at + chunk]))
    # Once, after the last chunk: the next chunk's exports reuse the pages the last one freed
    # (handed back between chunks, each read faulted them in anew: a quarter of the map's faults).
    memory.release()
    return traced


def _map_chunk(inputs: Inputs, lo: int, hi: int, threads: int | None) -> list[Traced]:
    """The chunk's inputs, each read and traced in a thread of its own: the native reader and the
    core's part of the trace release the GIL, so one input's trace runs beside another's read
    (the chunk was read first, then traced on one core), and each export is released once traced.
    The first unusable input, in input order, raises."""
    def one(k: int) -> Traced:
        return map_input(inputs.readable[k], k, inputs.reports[k], inputs.limits)

    chunk = range(lo, min(hi, len(inputs.readable)))
    if len(chunk) <= 1:
        return [one(k) for k in chunk]
    with ThreadPoolExecutor(max_workers=len(chunk), thread_name_prefix="map") as pool:
        futures = [pool.submit(one, k) for k in chunk]
        return [f.result() for f in futures]


def model(traced: Sequence[Traced], filters: Filters | None = None, warnings: Sequence[str] = ()) -> Job:
    """The cross-rank model of one job from its inputs' traces (in input order); `warnings`:
    discovery's (Inputs.warnings)."""
    warnings = list(warnings) + [w for facts, _ in traced for w in facts.warnings]
    return build_job([t for _, ranks in traced for t in ranks], warnings, filters)


def finish(job: Job, traced: Sequence[Traced], source: str = "", filters: Filters | None = None,
           nic_gbps: float | None = None, consume: bool = False) -> Result:
    """The result of a modelled job: attributed and assembled. `nic_gbps`: the speed of the NIC
    each GPU uses (Gb/s), the network's capacity, which no capture records (--nic-gbps);
    `consume`: nothing reads the job and its traces after this, so what they hold goes once its
    last reader is done (attribution.attribute)."""
    _wait_for_prefetch()
    from nsys_collective.attribution import attribute
    from nsys_collective.attribution.build import build_result
    from nsys_collective.version import __version__

    attribution = attribute(job, filters.steps if filters else None, consume=consume)
    return build_result(job, attribution, [facts for facts, _ in traced], __version__, source, nic_gbps=nic_gbps)


def reduce(traced: Sequence[Traced], filters: Filters | None = None, source: str = "",
           warnings: Sequence[str] = (), nic_gbps: float | None = None) -> Result:
    """The result of one job from its inputs' traces (in input order), which it consumes: what
    they hold goes once its last reader is done (finish)."""
    return finish(model(traced, filters, warnings), traced, source, filters, nic_gbps, consume=True)


# What the reduce imports that the map does not: scipy.optimize above all (0.8 s, the contention
# fit's), the attribution and the result. Loaded in a thread while the native readers, which
# release the GIL, read the inputs.
REDUCE_MODULES = ("scipy.optimize", "scipy.special", "nsys_collective.attribution", "nsys_collective.attribution.build",
                  "nsys_collective.result", "nsys_collective.version")
_prefetch: list[threading.Thread] = []


def prefetch_reduce() -> None:
    """Start loading the reduce's modules in the background (once per process), unless the
    process's address space is limited (ulimit -v, -d): there the read may need all of it, and
    scipy's libraries and their BLAS buffers (130 MB or more) would take it from the read, or a
    library's loading would run out of it, where C code may crash rather than raise. There the
    reduce imports them itself, on the main thread, once the read succeeded."""
    if not _prefetch and not _address_space_limited():
        _prefetch.append(threading.Thread(target=_import_quietly, args=(REDUCE_MODULES,), name="prefetch", daemon=True))
        _prefetch[0].start()


def _address_space_limited() -> bool:
    try:
        import resource
    except ImportError:  # not a POSIX system: no such limits
        return False
    return any(resource.getrlimit(limit)[0] != resource.RLIM_INFINITY for limit in (resource.RLIMIT_AS, resource.RLIMIT_DATA))


def _import_quietly(names: Sequence[str]) -> None:
    for name in names:
        try:
            importlib.import_module(name)
        except BaseException:  # the reduce's own import raises it, where it is needed
            return


def _wait_for_prefetch() -> None:
    # The reduce imports only once the prefetch is done, so the two never import the same modules
    # at once (a wait on each other's module locks); the map imports none of them.
    if _prefetch:
        _prefetch[0].join()


def thin(traced: Traced, step_pattern: str | None = None) -> tuple[Traced, list[bool]]:
    """What the model needs of an input's traces to number its ranks, match the collectives, align
    the clocks and find the steps (NCCL ops, the step ranges, the start times of the launches whose
    GPU work was lost), without the per-event columns, which stay in the map stage; and which ranks have GPU
    work. The map stage of the what-if from summaries (`summarize_rank`) sends only this."""
    import dataclasses

    import numpy as np

    from nsys_collective.model.steps import STEP_PATTERN, step_rows

    facts, ranks = traced
    out = []
    for t in ranks:
        ranges = t.ranges
        if ranges is not None and len(ranges.start):
            rows = step_rows(t, step_pattern or STEP_PATTERN)
            ranges = dataclasses.replace(ranges, **{f.name: getattr(ranges, f.name)[rows] for f in dataclasses.fields(ranges)})
        out.append(dataclasses.replace(t, gpu=None, calls=None, ranges=ranges, metrics=None, stream_waits=(None, None),
                                       synchronize_calls=np.zeros(0, np.int64)))
    return (facts, out), [t.gpu is not None for t in ranks]


def summarize_rank(traced: Traced, k: int, rank_slice) -> dict:
    """The map stage's last step for one rank (the k-th of an input): its max-plus summary
    (attribution/whatif/summaries.py) from its own trace and its slice of the model."""
    from nsys_collective.attribution.whatif.summaries import summarize

    return summarize(traced[1][k], rank_slice)


def source_of(paths: Sequence[str | os.PathLike]) -> str:
    """What was analyzed, for people: the first path, and how many more."""
    return shown(paths[0]) + (f" and {len(paths) - 1} more" if len(paths) > 1 else "")


def analyze(paths: Sequence[str | os.PathLike], filters: Filters | None = None, *, nsys: str | None = None,
            cache_dir: Path | None = None, threads: int | None = None, progress: bool = False,
            limits: Limits = Limits(), export_timeout: float | None = None, nic_gbps: float | None = None) -> Result:
    """`collectivetrace-nsys analyze PATHS`: the whole pipeline on this machine."""
    prefetch_reduce()
    inputs = prepare(paths, nsys, cache_dir, progress, limits, export_timeout)
    return reduce(map_inputs(inputs, threads), filters, source_of(paths), inputs.warnings, nic_gbps)
