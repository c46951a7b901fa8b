"""The per-rank explanations of the model (idle split, host synchronization, why overlap is zero)
and the alignment's quality issues reach the terminal and the report, not only --json."""

from __future__ import annotations

import io

from rich.console import Console

from conftest import FIXTURES, analyzed
from nsys_collective.render.html import ALIGNMENT_ISSUES, write_report
from nsys_collective.render.terminal import render
from nsys_collective.units import duration


def shown(result, width: int = 160) -> str:
    out = Console(width=width, file=io.StringIO(), highlight=False, color_system=None)
    render(result, out)
    return out.file.getvalue()


def test_the_terminal_shows_each_ranks_idle_split_and_host_sync():
    result = analyzed([FIXTURES / "demo-4rank-2host"])[1]
    text = shown(result)
    table = text.split("GPU idle, host synchronization and overlap per rank", 1)[1]
    for r in result.doc["ranks"]:
        row = next(line for line in table.splitlines() if line.split() and line.split()[0] == str(r["rank"]))
        for figure in ("idle_ns", "idle_host_wait_ns", "idle_other_ns"):
            assert duration(r[figure]) in row, (figure, row)
        assert row.split()[-2] == str(r["host_sync_calls"]) and duration(r["host_sync_ns"]) in row
    assert "0% overlap on" not in table  # every rank overlaps: nothing to explain


def test_the_report_says_what_is_wrong_with_the_alignment(tmp_path, real_dir):
    result = analyzed([real_dir / "fs24-ring-6rank-2node"])[1]
    assert set(result.doc["alignment"]["quality"]["issues"]) == set(ALIGNMENT_ISSUES)
    write_report(result, {}, tmp_path / "report.html")
    html = (tmp_path / "report.html").read_text()
    for sentence in ALIGNMENT_ISSUES.values():
        assert sentence.split(":")[0] in html


def test_same_stream_nccl_is_named_with_its_fix(tmp_path, real_dir):
    result = analyzed([real_dir / "nsys-ai-2gpu" / "mfu_2gpu_before.sqlite"])[1]
    text = shown(result, 80)
    # under the per-rank table, as prose: nothing clipped at 80 columns
    assert "0% overlap on 2 ranks (0, 1): NCCL on the compute stream; give it a stream of its own." in " ".join(text.split())
    assert all(len(line) <= 80 for line in text.splitlines())
    write_report(result, {}, tmp_path / "report.html")
    assert "give it a stream of its own" in (tmp_path / "report.html").read_text()


def test_an_ideal_that_moves_the_wait_is_not_shown_as_a_saving(tmp_path, real_dir):
    """An ideal that saves negative wait (fixing a rank that was not the late one makes it wait
    longer) is never called avoidable, by the card or the terminal. The replay's own ideal leaves
    such causes out (issue 19): on the HTA sample, where every candidate fixed at once used to save
    -28 ms, its causes shorten the steps and save no wait; the negative ideal is put back by hand."""
    import dataclasses

    result = analyzed([real_dir / "kineto" / "hta-trace_filter-2rank"])[1]
    assert result.doc["summary"]["avoidable_wait_ns"] >= 0
    d = result.document
    ideal = dataclasses.replace(d.whatif.ideal, wait_saved_ns=-28_000_000)
    moved = dataclasses.replace(result, document=dataclasses.replace(
        d, whatif=dataclasses.replace(d.whatif, ideal=ideal),
        summary=dataclasses.replace(d.summary, avoidable_wait_ns=-28_000_000)))
    assert "Fixed together: no wait saved (" in shown(moved)
    write_report(moved, {}, tmp_path / "report.html")
    assert "none found" in (tmp_path / "report.html").read_text()
