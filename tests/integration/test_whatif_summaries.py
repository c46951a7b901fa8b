"""The what-if from per-rank summaries equals the full replay (issue 22 item 6), on every committed
fixture and every real set the golden documents use.

Every replay the what-if asks of the job's graph (the unchanged job, each candidate cause, the
compute changes, the ideal's sets) is answered from the ranks' max-plus summaries instead
(attribution/whatif/summaries.py), and checked against the full graph's answer array by array;
the document built from those answers is then the golden document, byte for byte: every cause's
wait and step time saved, the ideal, the per-collective figures.
"""

from __future__ import annotations

import sys
from concurrent.futures import Future

import numpy as np
import pytest

from conftest import ROOT, no_real_data
from nsys_collective import pipeline
from nsys_collective.attribution.whatif import graph as graph_module
from nsys_collective.attribution.whatif.summaries import RankSummaries
from nsys_collective.model.job import Filters

sys.path.insert(0, str(ROOT / "scripts"))
import golden  # noqa: E402

KEYS = ("arrival", "transfer_start", "wait", "total_wait", "step_end", "step_rank_end", "rank_end")


class FromSummaries:
    """The job's ReplayGraph, its replays answered from the ranks' summaries, each checked
    against its own answer; everything else is the graph's."""

    def __init__(self, full, summaries: RankSummaries):
        self.full, self.summaries, self.compared = full, summaries, 0

    def __getattr__(self, name):
        return getattr(self.full, name)

    def _checked(self, changes, want, got):
        for change, w, g in zip(changes, want, got):
            for key in KEYS:
                assert np.array_equal(np.asarray(w[key]), np.asarray(g[key])), (key, sorted(change))
            self.compared += 1
        return got

    def replay(self, change=None):
        return self._checked([change or {}], [self.full.replay(change)], [self.summaries.replay(change)])[0]

    def replay_many(self, changes, threads=None):
        return self._checked(changes, self.full.replay_many(changes, threads=threads), self.summaries.replay_many(changes))


@pytest.mark.parametrize("name", sorted(golden.CASES))
def test_the_whatif_from_summaries_is_the_golden_document(name, monkeypatch):
    args = golden.CASES[name]
    if not (ROOT / golden.REAL).is_dir() and any(a.startswith(golden.REAL) for a in args):
        pytest.skip(no_real_data(golden.REAL))
    graphs = []
    build = graph_module.build_graph

    def build_from_summaries(job, tolerance_ns, step_pattern=None):
        g = build(job, tolerance_ns, step_pattern)
        if g is not None:
            assert g.graph.fidelity()["dropped_dependencies"] == 0  # else a rank alone may break a cycle elsewhere
            proxy = FromSummaries(g.graph, RankSummaries(job, g, tolerance_ns))
            g.building = Future()
            g.building.set_result(proxy)
            graphs.append(proxy)
        return g

    monkeypatch.setattr(graph_module, "build_graph", build_from_summaries)
    monkeypatch.chdir(ROOT)
    paths, options = golden.split_args(args)
    result = pipeline.analyze(paths, Filters.parse(**options))
    assert (result.to_json() + "\n").encode() == (golden.GOLDEN / f"{name}.json").read_bytes()
    if result.doc["whatif"] is None:  # nothing to replay (no collective across ranks)
        assert not graphs
    else:
        assert len(graphs) == 1 and graphs[0].compared >= 1 + len(result.doc["whatif"]["causes"])


@pytest.mark.parametrize("name", ["demo-4rank-2host", "slow-kernel-8rank-3host"])
def test_the_replay_with_the_ranks_on_dask_workers_is_the_full_replay(name):
    """batch.replay_on_workers: traces read, kept and summarized on the workers; the client models
    the job from thin traces and replays over collectives: the same outcome as the job's graph."""
    from conftest import FIXTURES, analyzed
    from nsys_collective.attribution.blocking import tolerance
    from nsys_collective.attribution.whatif.graph import build_graph
    from nsys_collective.batch import dask_client, replay_on_workers

    inputs = sorted((FIXTURES / name).iterdir())
    job, _ = analyzed([FIXTURES / name])
    g = build_graph(job, tolerance(job))
    want = g.graph.replay()
    with dask_client(threads=2) as client:
        got = replay_on_workers([p for p in inputs if p.suffix == ".sqlite"], client)
    assert got["ranks"] == g.ranks and got["instances"] == len(job.collectives)
    for key in KEYS:
        assert np.array_equal(np.asarray(got[key]), np.asarray(want[key])), key
    assert want["total_wait"] > 0
