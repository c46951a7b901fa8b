"""A job's inputs are read a few at a time and each is released once traced (pipeline.map_inputs):
what the analysis holds is its ranks' traces, never every raw export at once; and how many are
read at a time does not change the result."""

from __future__ import annotations

import gc
import weakref

import pytest

from conftest import FIXTURES, gen
from nsys_collective import pipeline
from nsys_collective.ingest import formats


def most_alive_while_mapping(folder, threads: int, monkeypatch) -> tuple[int, str]:
    """The most exports alive at once while the folder's inputs are mapped, and the result's JSON."""
    alive: list[weakref.ref] = []
    most = 0
    read = formats.read

    def counting(paths, *args):
        nonlocal most
        gc.collect()
        before = sum(r() is not None for r in alive)
        exports = read(paths, *args)
        alive.extend(weakref.ref(e) for e in exports)
        most = max(most, before + len(exports))
        return exports

    monkeypatch.setattr(formats, "read", counting)
    inputs = pipeline.prepare([folder])
    result = pipeline.reduce(pipeline.map_inputs(inputs, threads))
    return most, result.to_json()


@pytest.mark.parametrize("scenario, extra", [("mixed", {}), ("extra_kernel", {"format": "kineto"})])
def test_few_exports_alive_and_the_same_result_whatever_the_chunk(tmp_path, monkeypatch, scenario, extra):
    gen.generate(tmp_path, ranks=8, hosts=2, steps=4, kernels_per_step=28, buckets=2, scenario=scenario, seed=41, **extra)
    one_at_a_time, text_1 = most_alive_while_mapping(tmp_path, 1, monkeypatch)
    two_at_a_time, text_2 = most_alive_while_mapping(tmp_path, 2, monkeypatch)
    assert text_1 == text_2
    assert one_at_a_time == 1 and 1 <= two_at_a_time <= 2, "8 inputs, never more read than the chunk"


def test_the_committed_demo_reads_one_export_at_a_time(monkeypatch):
    most, _ = most_alive_while_mapping(FIXTURES / "demo-4rank-2host", 1, monkeypatch)
    assert most == 1


@pytest.mark.parametrize("command", [["analyze", "{demo}", "--json"], ["batch", "{root}", "--db", "sqlite:///{db}"],
                                     ["compare", "{demo}", "{demo}"]])
def test_a_command_shares_one_heap_before_it_starts_any_thread(command, monkeypatch, tmp_path):
    """The commands that analyze make their threads allocate from the main heap (memory.one_heap),
    whose free top malloc_trim returns, before any Python thread of theirs starts (the limit binds
    only threads that have not allocated yet). The core's worker threads start on its first
    parallel call, after; threads started on import (none of ours) this cannot see."""
    import shutil
    import threading

    from typer.testing import CliRunner

    from nsys_collective import memory
    from nsys_collective.cli import app

    shutil.copytree(FIXTURES / "demo-4rank-2host", tmp_path / "jobs" / "demo")
    before = set(threading.enumerate())
    seen = []
    monkeypatch.setattr(memory, "one_heap", lambda: seen.append(set(threading.enumerate()) - before))
    args = [a.format(demo=tmp_path / "jobs" / "demo", root=tmp_path / "jobs", db=tmp_path / "runs.db") for a in command]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert seen == [set()]  # called once, no thread of the command's started before it
