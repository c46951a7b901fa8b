"""Every golden case renders from the typed result (issue 18): the terminal at 80 and 120 columns,
the tables, the Perfetto trace, the store and compare read `result.document`, and a run stored and
read back (validated into the same typed Document) renders and compares exactly like the fresh one.
"""

from __future__ import annotations

import io
import json
import sys

import pytest
from rich.console import Console

from conftest import ROOT, analyzed, no_real_data
from nsys_collective.compare import compare_documents
from nsys_collective.model.job import Filters
from nsys_collective.render import perfetto, terminal
from nsys_collective.render.compare import render_comparison
from nsys_collective.render.tables import SCHEMAS, arrow_tables
from nsys_collective.store import open_store
from nsys_collective.store.runs import load_result, write_run
from nsys_collective.units import duration

sys.path.insert(0, str(ROOT / "scripts"))
import golden  # noqa: E402


def _analyzed(args: list[str]):
    """The result `analyze ARGS` renders, from the repository root (as the golden documents name their inputs)."""
    paths, options = golden.split_args(args)
    return analyzed(paths, Filters.parse(**options))[1]


def _shown(result, width: int) -> str:
    out = Console(width=width, file=io.StringIO(), highlight=False, color_system=None)
    terminal.render(result, out)
    return out.file.getvalue()


@pytest.mark.parametrize("name", sorted(golden.CASES))
def test_every_output_renders_from_the_typed_result(name, tmp_path, monkeypatch):
    args = golden.CASES[name]
    if any(a.startswith(golden.REAL) for a in args) and not (ROOT / golden.REAL).is_dir():
        pytest.skip(no_real_data(golden.REAL))
    monkeypatch.chdir(ROOT)
    result = _analyzed(args)
    document = result.document
    assert result.doc == json.loads((golden.GOLDEN / f"{name}.json").read_text()), "the typed document is the golden one"

    # Terminal: within its width, each shown cause with what fixing it saves.
    for width in (80, 120):
        text = _shown(result, width)
        assert max(map(len, text.splitlines())) <= width
        for cause in (document.whatif.causes[:terminal.WORST] if document.whatif and document.collectives else ()):
            assert terminal.wait_saved_text(cause.wait_saved_ns) in text, (width, cause)

    # Tables: one row per record of the document, the declared columns first.
    tables = arrow_tables(result)
    counts = {"collectives": len(document.collectives), "blame": sum(len(c.blame) for c in document.collectives),
              "blocking": len(document.whatif.causes) if document.whatif else 0, "contention": len(document.contention),
              "ranks": len(document.ranks), "steps": len(document.steps)}
    assert {n: t.num_rows for n, t in tables.items()} == counts
    assert all(t.column_names[:len(SCHEMAS[n])] == SCHEMAS[n].names for n, t in tables.items())

    # Perfetto: the aligned clock's origin and the inputs, from the typed alignment and inputs.
    trace = tmp_path / "trace.json"
    written = perfetto.write_trace(result, trace)
    other = json.loads(trace.read_text())["otherData"]
    assert other["t_ref_ns"] == document.alignment.t_ref_ns and other["reports"] == [i.path for i in document.inputs]
    assert written["events"] > 0

    # The store: written from the typed document, read back through validation into the same one.
    engine = open_store(str(tmp_path / "runs.db"))
    stored = load_result(engine, write_run(engine, name, [], "hash", result))
    engine.dispose()
    assert stored.document == document
    assert _shown(stored, 80) == _shown(result, 80)

    # Compare: the run against its stored self changes nothing.
    cmp = compare_documents(document, stored.document)
    assert cmp["findings"][0] == (f"Total collective wait is unchanged ({duration(document.summary.wait_ns)})."
                                  if document.collectives else
                                  "Neither run has a collective matched across ranks: there is nothing to compare.")
    assert not any(g["moved"] for g in cmp["blocking_by_cause"]) and all(r["wait_saved_ns"]["delta"] == 0 for r in cmp["blocking"])
    out = Console(width=80, file=io.StringIO(), highlight=False, color_system=None)
    render_comparison(cmp, out)
    assert max(map(len, out.file.getvalue().splitlines())) <= 80
