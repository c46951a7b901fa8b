"""The terminal output as a person reads it (issue 14): at 80, 100 and 160 columns every kernel
row can be told apart, no name or header is cut, and a pipe gets lines that split no word."""

from __future__ import annotations

import io
import re
from dataclasses import replace

import pytest
from rich.console import Console
from typer.testing import CliRunner

from conftest import FIXTURES, analyzed
from nsys_collective.cli import app
from nsys_collective.render.terminal import render
from nsys_collective.units import duration

WIDTHS = (80, 100, 160)
DEMO = FIXTURES / "demo-4rank-2host"
# Six GEMMs that differ only in the middle of their names: cut at a fixed width they all read alike.
SIMILAR = [f"sm90_xmma_gemm_bf16bf16_bf16f32_f32_nn_n_tilesize{t}_warpgroupsize2x1x1_execute_segment_k_off_kernel__5x_cublas"
           for t in ("64x64x64", "64x128x64", "128x64x64", "128x128x64", "128x256x64", "256x128x64")]
HEADERS = {"wait saved", "step time saved", "excess", "collectives", "confidence", "overlap", "transfer slowdown", "90% range",
           "last to arrive", "skew", "wait caused", "straggler", "transfer", "offset", "drift ppm", "NCCL kernels",
           "NCCL time", "clock offset"}


@pytest.fixture(scope="module")
def demo():
    return analyzed([DEMO])[1]


@pytest.fixture(scope="module")
def similar(demo):
    """The demo with six similar kernels, as causes and as contention."""
    d = demo.document
    cause, entry = d.whatif.causes[1], d.contention[0]
    whatif = replace(d.whatif, causes=tuple(replace(cause, name=n, name_full=n, wait_saved_ns=9_000_000 - k)
                                            for k, n in enumerate(SIMILAR)))
    return replace(demo, document=replace(d, whatif=whatif, contention=tuple(replace(entry, kernel=n, kernel_full=n) for n in SIMILAR)))


def shown(result, width: int) -> str:
    out = Console(width=width, file=io.StringIO(), highlight=False, color_system=None)
    render(result, out)
    return out.file.getvalue()


def recoverable(text: str, name: str) -> bool:
    """The whole name can be read from the text: on one line, or wrapped in place (each following
    line goes on at the same column)."""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        col = line.find(name[:12])
        while col >= 0:
            rest, j = name, i
            while j < len(lines) and rest:
                segment = lines[j][col:]
                k = next((m for m, (a, b) in enumerate(zip(segment, rest)) if a != b), min(len(segment), len(rest)))
                if k == 0:
                    break
                rest, j = rest[k:], j + 1
            if not rest:
                return True
            col = line.find(name[:12], col + 1)
    return False


def test_the_recoverable_check_catches_a_cut_name():
    name = SIMILAR[0]
    assert recoverable(f"  1 {name[:40]}\n    {name[40:]}\n", name)
    assert not recoverable(f"  1 {name[:40]}…\n", name)
    assert not recoverable(f"  1 {name[:40]}\n      {name[40:]}\n", name), "a continuation elsewhere is not the name"


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("case", ["demo", "similar"])
def test_every_kernel_row_can_be_told_apart(case, width, request):
    result = request.getfixturevalue(case)
    text = shown(result, width)
    names = [c["name"] for c in result.doc["whatif"]["causes"] if c["cause"] != "host"] + [e["kernel"] for e in result.doc["contention"]]
    assert names and all(recoverable(text, n) for n in names), text
    assert "…" not in text, "nothing is cut"
    assert max(map(len, text.splitlines())) <= width


@pytest.mark.parametrize("width", WIDTHS)
def test_no_header_is_cut(demo, width):
    text = shown(demo, width)
    words = set(re.findall(r"[\w%]+", text))
    for header in HEADERS:
        assert set(header.split()) <= words, (header, text)
    assert "…" not in text


def test_notes_are_prose_not_narrow_captions(demo):
    # The alignment note reads as one paragraph at the console's width, not squeezed under its table.
    text = shown(demo, 80)
    note = next(i for i, line in enumerate(text.splitlines()) if line.startswith("End-time spread"))
    assert len(text.splitlines()[note]) > 60


def test_piped_output_splits_no_word():
    result = CliRunner().invoke(app, ["analyze", str(DEMO)])  # stdout is not a terminal here
    assert result.exit_code == 0, result.stderr
    lines = result.stdout.splitlines()
    doc = CliRunner().invoke(app, ["analyze", str(DEMO), "--json"]).stdout
    import json

    for finding in json.loads(doc)["findings"]:
        assert finding in lines, "each finding is one whole line in a pipe"
    for cause in json.loads(doc)["whatif"]["causes"]:
        assert any(cause["name"] in line for line in lines)


def test_piped_batch_output_keeps_job_names_whole(tmp_path):
    import shutil

    root = tmp_path / "jobs"
    long = "a-training-job-with-a-rather-long-descriptive-name-2026-11-03-run-7"
    shutil.copytree(DEMO, root / long)
    result = CliRunner().invoke(app, ["batch", str(root), "--db", str(tmp_path / "runs.db")])
    assert result.exit_code == 0, result.stderr
    assert any(long in line for line in result.stdout.splitlines()), result.stdout
    # batch's summary names each job's top cause (issue 19: the top blocking kernel column was "-"
    # for every job whose top cause is no kernel), whole.
    assert "host DataLoader.__next__ on rank 0" in result.stdout


def test_the_readme_shows_the_terminal_output_at_80_columns(demo):
    from conftest import ROOT

    readme = (ROOT / "README.md").read_text()
    block = readme.split("in an 80-column terminal", 1)[1].split("```\n", 2)[1]
    printed = "\n".join(line.rstrip() for line in shown(demo, 80).splitlines()).strip("\n") + "\n"
    assert block == printed, "the README's first screen is stale: paste the demo's output at 80 columns"


def test_a_cause_on_several_hosts_leaves_its_figures_whole_at_80_columns(real_dir):
    """The 9-rank job's top cause is two hosts late in ncclCommInitRank: their names go with the
    cause's name, under the table, and no figure or header is cut."""
    result = analyzed([real_dir / "fs24-allreduce2x-9rank-3node"])[1]
    text = shown(result, 80)
    assert "…" not in text and all(len(line.rstrip()) <= 80 for line in text.splitlines())
    row = next(line for line in text.splitlines() if "host_group" in line)
    cause = result.doc["whatif"]["causes"][0]
    assert row.split()[1:3] == ["2", "hosts"] and duration(cause["wait_saved_ns"]) in row
    assert "host in 'ncclCommInitRank' on ault42.cscs.ch, ault43.cscs.ch" in text
