"""The cause registry (nsys_collective/causes.py): every kind declares all it needs, an unknown
kind is an error everywhere a cause is worded or drawn, and a new cause is its registry entry plus
its candidate function (the stub below: nothing else in the package changes, yet the what-if
replays it and every output words and draws it)."""

from __future__ import annotations

import dataclasses
import json
import string
from pathlib import Path

import numpy as np
import pytest
from conftest import FIXTURES
from rich.console import Console

from nsys_collective import causes
from nsys_collective.attribution.findings import _cause_sentence
from nsys_collective.attribution.whatif.candidate import Candidate
from nsys_collective.attribution.whatif.replay import analyze
from nsys_collective.result import BLAME_OF

GOLDEN = Path(__file__).resolve().parents[1] / "golden"
CAUSE = {"cause": "kernel", "rank": 3, "host": "node1", "name": "gemm", "name_full": "gemm<float>", "reference": "peers",
         "excess_ns": 2_000_000, "wait_saved_ns": 5_000_000, "step_time_saved_ns": 1_000_000, "collectives": 4,
         "confidence": "high", "slowdown": 0.3, "runs": 8, "reference_runs": 6, "ranks": [3]}
BLAME = {"rank": 3, "host": "node1", "ns": 1_000, "wait_saved_ns": 1_000, "step_time_saved_ns": 10, "kernel": "gemm",
         "kernel_full": "gemm<float>", "nvtx": "DataLoader", "name": "AllReduce transfers"}


@pytest.mark.parametrize("kind", list(causes.CAUSES.values()), ids=lambda k: k.kind)
def test_every_kind_declares_everything_it_needs(kind):
    assert kind.family in causes.FAMILIES and kind.family in BLAME_OF, "its family has a blame variant in result.py"
    assert kind.acts_on in ("rank", "host", "job")
    for field in ("label", "unnamed", "subject", "caption"):
        assert getattr(kind, field).strip(), field
    assert len(kind.note) == 2 and (kind.family.draws_runs or all(kind.note))
    # Its texts name only fields a blame entry (or the chart's figures) has.
    allowed = set(BLAME) | {"part", "ns", "cause"}
    for text in (kind.caption, kind.subject, *kind.note):
        assert {f for _, f, _, _ in string.Formatter().parse(text) if f} <= allowed, text
    if kind.replayed:
        assert callable(causes.candidate_function(kind))
        sentence = kind.finding({**CAUSE, "cause": kind.kind}, causes.where(CAUSE), "would save 5 ms")
        assert sentence.endswith(".") and "would save 5 ms" in sentence
    else:
        assert kind.finding is None


def test_the_document_allows_exactly_the_registered_kinds():
    allowed = {dataclasses.fields(v)[0].type for v in BLAME_OF.values()}
    assert all(t.startswith("Literal[_") for t in allowed)  # read from the registry, not spelled out
    for path in sorted(GOLDEN.glob("*.json")):
        doc = json.loads(path.read_text())
        seen = {b["cause"] for c in doc["collectives"] for b in c["blame"]}
        seen |= {c["cause"] for c in (doc.get("whatif") or {"causes": []})["causes"]}
        assert seen <= set(causes.CAUSES), path.name


def test_an_unknown_kind_is_an_error_not_another_kinds_words():
    odd = {**CAUSE, "cause": "gremlins"}
    with pytest.raises(causes.UnknownCause, match="gremlins"):
        _cause_sentence(odd, 10_000_000)
    for call in (causes.naming_fields, causes.table_label, causes.in_few_words):
        with pytest.raises(causes.UnknownCause):
            call({**BLAME, **odd})
    from nsys_collective.render import charts

    with pytest.raises(causes.UnknownCause):
        charts._cause_line({**BLAME, "cause": "gremlins"}, 5_000)


def test_the_idle_sentence_is_the_idle_kinds_own():
    """Before the registry, every kind findings.py did not know got the idle sentence."""
    idle = _cause_sentence({**CAUSE, "cause": "idle"}, 10_000_000)
    assert "sat idle" in idle
    assert "sat idle" not in _cause_sentence({**CAUSE, "cause": "transfer"}, 10_000_000)


# A new cause: its entry and its candidate function, nothing else. -------------------------------

def stub_candidates(ctx) -> list[Candidate]:
    """The stub cause: every compute kernel of the rank that arrived last most often, not run."""
    job, g = ctx.job, ctx.graph
    rank = int(np.bincount(job.timing.straggler, weights=job.timing.wait_cost).argmax())
    w = job.timeline[rank]
    rows = np.flatnonzero(w.is_kernel & ~w.is_nccl)
    excess = int((w.end - w.start)[rows].sum())
    return [Candidate(cause="stub_kernel", rank=rank, host=job.by_number[rank].host, name="every compute kernel",
                      name_full="every compute kernel", reference="peers", excess_ns=excess, systematic=True,
                      change={"op": g.op_offset[rank] + rows, "op_ns": np.zeros(len(rows), np.int64)})]


STUB = causes.Kind(
    "stub_kernel", causes.KERNEL, "rank", label="stub kernel", unnamed="stub kernels", subject="{kernel}",
    caption="{kernel}\n    stubbed on the straggler: {part}", note=("", ""), qualifier="stub",
    finding=lambda c, where, gain: f"{where}: STUB {c['name']}; removing it {gain}.",
    candidates=f"{__name__}:stub_candidates")


@pytest.fixture
def stubbed(monkeypatch):
    monkeypatch.setitem(causes.CAUSES, STUB.kind, STUB)
    from conftest import analyzed

    from nsys_collective.attribution import attribute

    job, _ = analyzed(sorted((FIXTURES / "demo-4rank-2host").glob("*.sqlite")))
    return job, attribute(job)


def test_a_stub_cause_is_replayed_worded_and_drawn_from_its_entry_alone(stubbed, tmp_path):
    job, at = stubbed
    (stub,) = [c for c in at.blocking.whatif.causes if c["cause"] == "stub_kernel"]
    assert stub["wait_saved_ns"] > 0 and stub["name"] == "every compute kernel"
    assert any(s.startswith(f"rank {stub['rank']}: STUB every compute kernel") for s in at.findings)
    # Its blame entries are named as its family names kernels; the kernel family sums it.
    blamed = [b for entries in at.blocking.blame for b in entries if b["cause"] == "stub_kernel"]
    assert blamed and all(b["kernel"] == "every compute kernel" for b in blamed)
    assert any(k["cause"] == "stub_kernel" for k in at.blocking.kernels)
    from nsys_collective.render import charts, html, terminal
    from nsys_collective.attribution.build import build_result

    result = build_result(job, at, [], "test")
    console = Console(width=100, record=True, color_system=None)
    terminal.render(result, console)
    assert "stub_kernel" in console.export_text()
    assert "(stub)" in html.render(result, {})
    assert "stubbed on the straggler" in charts._cause_line(blamed[0], 5_000)
    written = charts.write_charts(result, tmp_path)
    assert written
