"""Building the result (result.Result) from the model and the attribution: the document, with
every figure checked, and the evidence the renderers draw beside it. The result itself depends on
nothing of the analysis; this is where the analysis becomes it."""

from __future__ import annotations

from collections import Counter

import numpy as np

from nsys_collective import causes
from nsys_collective.attribution.evidence import evidence_panels
from nsys_collective.attribution.findings import verdict_lines
from nsys_collective.model.links import NIC_OPTION, link_of
from nsys_collective.model.nccl import OPS
from nsys_collective.model.timing import bus_bandwidth_gbps
from nsys_collective.result import (BLAME_OF, SCHEMA_VERSION, AlignmentInfo, AlignmentQuality, Blame, BlockingKernel,
                                    BlockingLaunch, CausePart, CleanCheck, Collective, ComputeSlowdown, ContentionEntry,
                                    ContentionFit, Document, Evidence, Fidelity, HostClock, Input, LeftOutStep, Observations,
                                    RankReached, RankRow, RanksClock, Result, Saving, Spread, StartError, StepRow,
                                    StepSelectionInfo, StepTime, StoppedCommunicator, Summary, WhatIfBlock,
                                    WhatIfCause)


def _int_or_none(value: int) -> int | None:
    return None if value < 0 else int(value)


def _ints(column: np.ndarray) -> list[int]:
    """A column as Python ints (as int() of each value gives them)."""
    return column.astype(np.int64, copy=False).tolist()


def _blame(entry: dict, variant: dict[str, type]) -> Blame:
    return variant[entry["cause"]](**entry)


def _whatif(w) -> WhatIfBlock | None:
    if w is None:
        return None
    f = w.fidelity
    return WhatIfBlock(
        fidelity=Fidelity(ops=int(f["ops"]), explained_start_share=float(f["explained_start_share"]),
                          start_error_ns=StartError(**{k: int(v) for k, v in f["start_error_ns"].items()}),
                          slack_ns=int(f["slack_ns"]), inferred_dependencies=int(f["inferred_dependencies"]),
                          recorded_dependencies=int(f["recorded_dependencies"])),
        ideal=Saving(**w.ideal), coverage=w.coverage, steps=w.steps,
        step_times=tuple(StepTime(**s) for s in w.step_times),
        causes=tuple(WhatIfCause(**{**c, "parts": tuple(CausePart(**p) for p in c["parts"]) if c["parts"] else None,
                                    **{k: None if c[k] is None else tuple(c[k]) for k in ("ranks", "context")}})
                     for c in w.causes))


def _step_selection(job) -> StepSelectionInfo | None:
    sel = job.steps
    if sel is None:
        return None
    return StepSelectionInfo(pattern=sel.pattern, complete_only=sel.complete_only, steps=sel.steps,
                             analyzed=sel.kept if sel.restricts else sel.steps,
                             left_out=tuple(LeftOutStep(lo.step, lo.reason, lo.ranks) for lo in sel.left_out),
                             collectives_left_out=job.collectives_outside_steps)


def _alignment_quality(q) -> AlignmentQuality:
    spread = q.same_clock_end_spread
    return AlignmentQuality(collectives=q.collectives, fitted=q.fitted, spread_shrunk=q.spread_shrunk,
                            same_clock_end_spread_ns=Spread(**spread.as_dict()) if spread else None,
                            tolerance_ns=q.tolerance_ns, issues=q.issues)


def _over_the_nic(collectives: list[Collective], nic_gbps: float | None) -> list[str]:
    """A network collective faster than the NIC speed the user gave: the speed is too low, or
    NCCL spread the transfer over several NICs per GPU (their sum is the capacity then)."""
    over = [c for c in collectives if c.link_capacity_source and c.link_share is not None and c.link_share > 1]
    if not over:
        return []
    top = max(over, key=lambda c: c.link_share)
    return [f"{len(over)} of the collectives across hosts ran faster than --nic-gbps {nic_gbps:g} allows (up to "
            f"{top.link_share:.2f}x, busbw {top.busbw_gbps:.1f} GB/s): give the NIC speed each GPU has in all, "
            "the sum where NCCL uses several NICs per GPU"]


def build_result(job, attribution, inputs, tool_version: str, source: str = "", nic_gbps: float | None = None) -> Result:
    """The result of a job (model.job.Job), its attribution (attribution.Attribution) and its
    inputs (model.trace.InputFacts, in input order); `nic_gbps`: the NIC speed the user gave."""
    a, t, c = job.alignment, job.timing, job.collectives
    b, ct = attribution.blocking, attribution.contention
    ranks = []
    for r in job.ranks:
        fitted = job.clock_fitted(r.rank)
        ranks.append(RankRow(
            rank=r.rank, host=r.host, pid=r.pid, device=r.device, report=r.report, rank_source=r.rank_source,
            clock_offset_ns=a.rank_offset_ns(r.rank) if fitted else None,
            clock_drift_ppm=a.rank_drift_ppm(r.rank) if fitted else None,
            kernels=r.kernels, nccl_kernels=r.nccl_kernels, nccl_time_ns=r.nccl_time_ns,
            compute_overlap_ns=r.compute_overlap_ns, overlap_share=r.overlap_share, first_ns=r.first_ns, last_ns=r.last_ns,
            **attribution.ranks.get(r.rank, {})))
    links = {name: link_of({job.by_number[r].host for r in members}, [job.traces[r].gpu_name for r in members], nic_gbps)
             for name, members in c.communicators.items()}
    # Each column as Python numbers once: the loop below runs per collective (10^3-10^5).
    seq, nranks, ops = _ints(c.seq), _ints(c.nranks), _ints(c.op)
    first, last, straggler, skew = _ints(t.first_arrival), _ints(t.last_arrival), _ints(t.straggler), _ints(t.skew)
    wait_cost, transfer, shortest, overlap = _ints(t.wait_cost), _ints(t.transfer), _ints(t.shortest_duration), _ints(ct.overlap)
    nbytes, baseline, excess = c.bytes.tolist(), ct.baseline.tolist(), ct.excess.tolist()  # -1: unknown (_int_or_none)
    pressure = [round(x, 4) for x in ct.sm_pressure.astype(float).tolist()]
    sources = c.bytes_source.tolist()
    # Each kind's blame variant by the kind's name, from the registry as it stands (a family's hash,
    # its dict key, is one of all its fields: once per kind, not per entry).
    variant = {kind: BLAME_OF[k.family] for kind, k in causes.CAUSES.items()}
    metrics = {f: [None if x != x else round(x, 2) for x in v.astype(float).tolist()]  # NaN: not measured
               for f, v in ct.metrics.items()}
    steps = job.step.tolist() if job.step is not None else [None] * len(c)
    collectives = []
    for i in range(len(c)):
        op, n = OPS[ops[i]], nranks[i]
        busbw = bus_bandwidth_gbps(op, int(nbytes[i]), n, transfer[i])
        link, capacity = links.get(c.comm[i], (None, None))
        collectives.append(Collective(
            id=i, comm=c.comm[i], seq=seq[i], op=op, bytes=_int_or_none(nbytes[i]), ranks=n,
            start_ns=first[i], last_arrival_ns=last[i], straggler_rank=straggler[i], skew_ns=skew[i],
            wait_cost_ns=wait_cost[i], transfer_ns=transfer[i], transfer_shortest_ns=shortest[i],
            busbw_gbps=busbw,
            blame_method=b.method[i],
            blame=tuple([_blame(e, variant) for e in b.blame[i]]),
            compute_overlap_ns=overlap[i], sm_pressure=pressure[i],
            baseline_transfer_ns=_int_or_none(baseline[i]), contention_excess_ns=_int_or_none(excess[i]),
            gpu_metrics={f: v[i] for f, v in metrics.items()},
            step=steps[i], bytes_source=sources[i],
            link=link, link_capacity_gbps=capacity,
            link_capacity_source=NIC_OPTION if link == "network" and capacity is not None else None,
            link_share=round(busbw / capacity, 4) if busbw is not None and capacity else None))
    inflicted = Counter()
    for straggler, cost in zip(t.straggler.tolist(), t.wait_cost.tolist()):
        inflicted[straggler] += cost
    host_of = {r.rank: r.host for r in job.ranks}
    hosts = []
    for clock, name in enumerate(a.clock_names):
        members = sorted(r for r, k in a.clock_of_rank.items() if k == clock)
        host, offset, drift = host_of[members[0]], int(round(a.offset_ns[clock])), float(a.drift_ppm[clock])
        # Ranks that disagreed with their host got a clock of their own.
        hosts.append(HostClock(host, offset, drift) if name == host else RanksClock(host, offset, drift, tuple(members)))
    whatif = _whatif(b.whatif)
    document = Document(
        schema_version=SCHEMA_VERSION,
        tool_version=tool_version,
        inputs=tuple(Input(path=f.report, export=f.export, nsys_version=f.session.nsys_version, schema=f.session.schema_version)
                     for f in inputs),
        ranks=tuple(ranks),
        alignment=AlignmentInfo(
            method=a.method, t_ref_ns=a.t_ref_ns, hosts=tuple(hosts),
            end_spread_ns_before=Spread(**a.spread_before.as_dict()) if a.spread_before else None,
            end_spread_ns_after=Spread(**a.spread_after.as_dict()) if a.spread_after else None,
            violations_before=a.violations_before, violations_after=a.violations_after,
            drift_fitted=a.drift_fitted, instances_used=a.instances_used,
            quality=_alignment_quality(job.alignment_quality)),
        collectives=tuple(collectives),
        blocking_kernels=tuple(BlockingKernel(**e) for e in b.kernels),
        blocking_launches=tuple(BlockingLaunch(**e) for e in b.launches),
        contention=tuple(ContentionEntry(**e) for e in ct.entries),
        compute_slowdown=tuple(ComputeSlowdown(**e) for e in ct.compute_slowdown),
        whatif=whatif,
        summary=Summary(
            ranks=len(job.ranks), collectives=len(c), nccl_time_ns=sum(r.nccl_time_ns for r in job.ranks),
            wait_ns=int(t.wait_cost.sum()),
            # GPU-time, like every total over ranks: each instance's transfer on each of its ranks.
            transfer_ns=int((t.transfer * c.nranks).sum()),
            explained_wait_share=b.explained_wait_share, top_blocking_kernel=b.top_blocking_kernel, idle_wait_ns=b.idle,
            top_straggler_rank=max(inflicted, key=inflicted.get) if inflicted and max(inflicted.values()) > 0 else None,
            top_cause=whatif.causes[0] if whatif and whatif.causes else None,
            avoidable_wait_ns=whatif.ideal.wait_saved_ns if whatif else None),
        steps=tuple(StepRow(**s) for s in attribution.steps),
        findings=tuple(attribution.findings),
        warnings=tuple(job.warnings + attribution.warnings + _over_the_nic(collectives, nic_gbps)),
        step_selection=_step_selection(job),
        stopped=tuple(StoppedCommunicator(s.communicator, s.streams, tuple(RankReached(*r) for r in s.reached), s.early)
                      for s in job.collectives.stopped),
        contention_fit=ContentionFit(**{**ct.fit_summary, "clean_check": CleanCheck(**ct.check) if ct.check else None})
        if ct.fit_summary else None,
    )
    evidence = Evidence(
        verdict=tuple(verdict_lines(job)), clocks=tuple(a.clock_names), tolerance_ns=b.tolerance_ns,
        observations=Observations(instance=c.obs_instance, rank=c.obs_rank, start=job.aligned_start, end=job.aligned_end,
                                  utc_end=c.obs_end),
        panels=tuple(evidence_panels(job, b)), contention_points=tuple(ct.points))
    # A negative wait or a share of -511% is a bug, never an output: Result.checked refuses it.
    return Result.checked(document, evidence, source, job.timeline)
