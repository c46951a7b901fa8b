"""Attribution (docs/method.md sections 4 and 5): what blocked each collective (blocking), what slowed
its transfer (contention, with GPU metrics), per-step results, per-rank explanations (why overlap
is zero, where the GPU sat idle, how long the host synchronized) and the findings in plain words.
It works on the model (`model.job.Job`) only, never on raw capture columns."""

from __future__ import annotations

from dataclasses import dataclass

from nsys_collective.attribution import blocking, contention, whatif
from nsys_collective.attribution.findings import findings
from nsys_collective.attribution.host_sync import host_sync
from nsys_collective.attribution.idle import idle_split
from nsys_collective.attribution.overlap import same_stream_finding, zero_overlap
from nsys_collective.attribution.steps import per_step
from nsys_collective.model.job import Job


@dataclass(frozen=True)
class Attribution:
    blocking: blocking.Blocking
    contention: contention.Contention
    steps: list[dict]
    findings: list[str]
    warnings: list[str]
    ranks: dict[int, dict]  # per rank number: zero_overlap_cause, idle split, host synchronization


def explain_ranks(job: Job) -> tuple[dict[int, dict], str | None]:
    """Per rank: why its overlap is zero, its idle split and its process's host synchronization
    time; and the finding sentence for ranks whose NCCL shares the compute stream."""
    out, notes = {}, {}
    for r in job.ranks:
        trace = job.traces[r.rank]
        analyzed = job.analyzed[r.rank]
        notes[r.rank] = zero_overlap(trace, analyzed, r.compute_overlap_ns, r.nccl_time_ns)
        out[r.rank] = {"zero_overlap_cause": notes[r.rank][0], **idle_split(trace, analyzed),
                       **host_sync(trace, job.steps, r.rank)}
    return out, same_stream_finding(notes)


def attribute(job: Job, step_pattern: str | None = None, consume: bool = False) -> Attribution:
    """The attribution of a job; `consume`: nothing reads the job after this, so the ranks' host
    calls go once their last reader is done (whatif.analyze)."""
    tolerance = blocking.tolerance(job)
    # The what-if's graph is built natively in a thread, without the GIL: started first, it is
    # built while the contention fit and the per-rank explanations (Python) run on the other core.
    # Most pickers wait for it: its last transient and theirs are never held together (the peak).
    graph = whatif.graph.build_graph(job, tolerance, step_pattern)
    ct = contention.attribute(job)
    ranks, same_stream = explain_ranks(job)
    w = whatif.analyze(job, graph, ct.kind, tolerance, step_pattern, ct, consume=consume)
    del graph  # the replays are done: the graph and its replays' buffers (260 MB at 1.9M) go before the rest
    for j, (wait_saved, step_saved) in (w.compute.items() if w else ()):
        ct.compute_slowdown[j].update(wait_saved_ns=wait_saved, step_time_saved_ns=step_saved)
    b = blocking.attribute(job, w, tolerance)
    warnings = ct.warnings + (w.warnings if w else [])
    said = findings(job, b, ct, ranks) + ([same_stream] if same_stream else [])
    return Attribution(blocking=b, contention=ct, steps=per_step(job, b), findings=said, warnings=warnings, ranks=ranks)
