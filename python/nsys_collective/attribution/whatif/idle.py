"""Idle candidates (`idle`): a rank's GPU ops starting later than anything recorded or inferred
explains (the graph's slack). Fixed: the slack goes."""

from __future__ import annotations

import numpy as np

from nsys_collective.attribution.whatif.candidate import Candidate, Context


def idle_candidates(ctx: Context) -> list[Candidate]:
    """GPU ops that started later than anything recorded or inferred explains, per rank. Fixed:
    the slack goes."""
    job, g, tolerance, min_excess = ctx.job, ctx.graph, ctx.tolerance_ns, ctx.min_excess
    out = []
    graph = g.graph
    for rank in g.ranks:
        n = len(job.timeline[rank])
        if not n:
            continue
        rows = np.arange(g.op_offset[rank], g.op_offset[rank] + n)
        nodes = graph.nodes("op_start", rows)
        slack = graph.slack(nodes)
        late = slack > tolerance
        excess = int(slack[late].sum())
        if excess < min_excess:
            continue
        out.append(Candidate(cause="idle", rank=rank, host=job.by_number[rank].host, name=None, name_full=None,
                             reference=None, excess_ns=excess, systematic=False, change={"zero_slack": nodes[late]}))
    return out
