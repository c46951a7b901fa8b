"""One meaning per word (issue 21): 'transfer' is one collective's, its sum over ranks is 'GPU
transfer'; 'slowdown' says of what; warnings write durations as the tables do; compare names a rank
as a rank and hosts as hosts; the help says what the tool reads."""

from __future__ import annotations

import json
import re
from types import SimpleNamespace

from typer.testing import CliRunner

from conftest import ROOT
from nsys_collective import glossary
from nsys_collective.cli import app
from nsys_collective.causes import rank_or_hosts
from nsys_collective.render.terminal import alignment_title


def test_the_glossary_says_each_meaning_once():
    terms = [t for t, _ in glossary.TERMS]
    assert len(terms) == len(set(terms))
    assert {"transfer", "GPU transfer", "transfer slowdown", "longer by", "compute slowdown"} <= set(terms)
    assert "slowdown" not in terms, "a slowdown says of what"
    defs = dict(glossary.TERMS)
    assert "Of one collective" in defs["transfer"] and "summed over" in defs["GPU transfer"]


def test_warnings_write_durations_as_the_tables_do():
    for golden in sorted((ROOT / "tests" / "golden").glob("*.json")):
        for warning in json.loads(golden.read_text()).get("warnings", []):
            assert not re.search(r"\d us\b", warning), (golden.name, warning)


def test_compare_names_ranks_and_hosts_for_what_they_are():
    assert rank_or_hosts(3) == "rank 3"
    assert rank_or_hosts("ault42.cscs.ch, ault43.cscs.ch") == "ault42.cscs.ch, ault43.cscs.ch"


def test_the_alignment_title_reads_as_words():
    assert alignment_title(SimpleNamespace(method="none (one clock)", instances_used=0)) == \
        "Clock alignment: none needed, every rank reads one clock"
    assert alignment_title(SimpleNamespace(method="collectives", instances_used=18)) == \
        "Clock alignment (fitted on 18 collectives, collectives method)"


def test_the_main_help_names_both_inputs():
    text = " ".join(CliRunner().invoke(app, ["--help"], terminal_width=200).stdout.split())
    assert "Nsight Systems reports and PyTorch profiler traces" in text
