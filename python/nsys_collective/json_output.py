"""The `--json` document of `analyze` (../shared/docs/output-contract.md): names exactly as
there, integer ns on the aligned clock, null where a value is unknown."""

from __future__ import annotations

from collections import Counter

import numpy as np

from nsys_collective import __version__
from nsys_collective.analysis import Analysis
from nsys_collective.findings import findings
from nsys_collective.steps import per_step
from nsys_collective.timing import bus_bandwidth_gbps

SCHEMA_VERSION = 1


def _int_or_none(value: int) -> int | None:
    return None if value < 0 else int(value)


def document(analysis: Analysis, export_paths: list[str]) -> dict:
    a, t, c = analysis.alignment, analysis.timing, analysis.collectives
    b, ct = analysis.blocking, analysis.contention
    ranks = []
    for r in analysis.ranks:
        fitted = analysis.clock_fitted(r.rank)
        ranks.append({
            "rank": r.rank, "host": r.host, "pid": r.pid, "device": r.device, "report": r.report,
            "rank_source": r.rank_source,
            "clock_offset_ns": a.rank_offset_ns(r.rank) if fitted else None,
            "clock_drift_ppm": a.rank_drift_ppm(r.rank) if fitted else None,
            "kernels": r.kernels, "nccl_kernels": r.nccl_kernels, "nccl_time_ns": r.nccl_time_ns,
            "compute_overlap_ns": r.compute_overlap_ns, "overlap_share": r.overlap_share, "first_ns": r.first_ns, "last_ns": r.last_ns,
        })
    collectives = []
    for i in range(len(c)):
        op, n = analysis.op_name(i), int(c.nranks[i])
        collectives.append({
            "id": i, "comm": c.comm[i], "seq": int(c.seq[i]), "op": op, "bytes": _int_or_none(c.bytes[i]), "ranks": n,
            "start_ns": int(t.first_arrival[i]), "last_arrival_ns": int(t.last_arrival[i]),
            "straggler_rank": int(t.straggler[i]), "skew_ns": int(t.skew[i]), "wait_cost_ns": int(t.wait_cost[i]),
            "transfer_ns": int(t.transfer[i]), "transfer_shortest_ns": int(t.shortest_duration[i]),
            "busbw_gbps": bus_bandwidth_gbps(op, int(c.bytes[i]), n, int(t.transfer[i])),
            "reference_rank": _int_or_none(b.reference[i]),
            "blame_method": b.method[i],
            "blame": b.blame[i],
            "compute_overlap_ns": int(ct.overlap[i]),
            "sm_pressure": round(float(ct.sm_pressure[i]), 4),
            "baseline_transfer_ns": _int_or_none(ct.baseline[i]),
            "contention_excess_ns": _int_or_none(ct.excess[i]),
            "gpu_metrics": {f: None if np.isnan(v[i]) else round(float(v[i]), 2) for f, v in ct.metrics.items()},
            "step": analysis.step[i] if analysis.step is not None else None,
        })
    inflicted = Counter()
    for straggler, cost in zip(t.straggler.tolist(), t.wait_cost.tolist()):
        inflicted[straggler] += cost
    host_of = {r.rank: r.host for r in analysis.ranks}
    hosts = []
    for clock, name in enumerate(a.clock_names):
        members = sorted(r for r, k in a.clock_of_rank.items() if k == clock)
        entry = {"host": host_of[members[0]], "offset_ns": int(round(a.offset_ns[clock])), "drift_ppm": float(a.drift_ppm[clock])}
        if name != entry["host"]:  # ranks that disagreed with their host got a clock of their own
            entry["ranks"] = members
        hosts.append(entry)
    return {
        "schema_version": SCHEMA_VERSION,
        "tool_version": __version__,
        "inputs": [
            {"path": r, "export": p, "nsys_version": f.session.nsys_version, "schema": f.session.schema_version}
            for r, p, f in zip(analysis.reports, export_paths, analysis.facts)
        ],
        "ranks": ranks,
        "alignment": {
            "method": a.method,
            "t_ref_ns": a.t_ref_ns,
            "hosts": hosts,
            "end_spread_ns_before": a.spread_before.as_dict() if a.spread_before else None,
            "end_spread_ns_after": a.spread_after.as_dict() if a.spread_after else None,
            "violations_before": a.violations_before,
            "violations_after": a.violations_after,
            "drift_fitted": a.drift_fitted,
            "instances_used": a.instances_used,
        },
        "collectives": collectives,
        "blocking_kernels": b.kernels,
        "blocking_launches": b.launches,
        "contention": ct.entries,
        "compute_slowdown": ct.compute_slowdown,
        "summary": {
            "ranks": len(analysis.ranks),
            "collectives": len(c),
            "nccl_time_ns": sum(r.nccl_time_ns for r in analysis.ranks),
            "wait_ns": int(t.wait_cost.sum()),
            # GPU-time, like every total over ranks: each instance's transfer on each of its ranks.
            "transfer_ns": int((t.transfer * c.nranks).sum()),
            "explained_wait_share": b.explained_wait_share,
            "top_blocking_kernel": b.top_blocking_kernel,
            "idle_wait_ns": b.idle,
            "top_straggler_rank": max(inflicted, key=inflicted.get) if inflicted and max(inflicted.values()) > 0 else None,
        },
        "steps": per_step(analysis),
        "findings": findings(analysis),
        "warnings": analysis.warnings,
    }
