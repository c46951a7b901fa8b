"""Complete steps by default (issue 14, point 5): where ranks mark ProfilerStep ranges (or --steps),
only the steps captured whole are analyzed, the document and a warning say which were left out,
and --all keeps everything. Planted with the generator's capture stop (the profiler stops in the
last step: GPU work in flight is lost), checked against HTA's figures on the real 2-rank traces."""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pytest
from typer.testing import CliRunner

from conftest import FIXTURES, REAL, analyzed, gen, need_real
from nsys_collective.model import cuda_api
from nsys_collective.model.job import Filters
from nsys_collective.model.steps import select_steps
from nsys_collective.model.trace import lost_launches

JOB = dict(style="ddp", ranks=4, hosts=2, steps=4, buckets=3, kernels_per_step=40, scenario="slow_kernel", seed=2)


@pytest.fixture(scope="module", params=["nsys", "kineto"])
def cut(request, tmp_path_factory):
    """A job whose profilers stopped 80% of the way through its last step."""
    folder = tmp_path_factory.mktemp(f"cut-{request.param}")
    return folder, gen.generate(folder, capture_stop=0.8, format=request.param, **JOB)


def test_the_step_the_capture_stopped_in_is_left_out(cut):
    folder, truth = cut
    stop, (last,) = truth["capture_stop_ns"], truth["steps_cut"]
    captured = [c for c in truth["collectives"] if max(c["end_ns"]) <= stop]  # whole on every rank
    in_cut = [c for c in captured if c["step"] == last]
    assert len(in_cut) == 2  # the capture holds collectives of the cut step: they must go
    _, result = analyzed([folder])
    doc = result.doc
    sel = doc["step_selection"]
    assert sel["left_out"] == [{"step": f"ProfilerStep#{last}", "reason": "lost_gpu_work", "ranks": [0, 1, 2, 3]}]
    assert sel["analyzed"] == [f"ProfilerStep#{k}" for k in range(last)] and sel["collectives_left_out"] == len(in_cut)
    assert [(c["comm"].split(":")[0], c["seq"], c["step"]) for c in doc["collectives"]] == [
        ("c0", c["seq"], f"ProfilerStep#{c['step']}") for c in captured if c["step"] != last]
    assert [s["step"] for s in doc["steps"]] == sel["analyzed"]
    assert any(w.startswith(f"analyzed the {last} complete steps matching 'ProfilerStep#*': left out the incomplete "
                            f"step ProfilerStep#{last} (kernels it launched are missing from the capture on ranks 0, 1, 2, 3); "
                            f"{len(in_cut)} of {len(captured)} collectives lay outside them") for w in doc["warnings"])


def test_all_keeps_the_incomplete_step(cut):
    folder, truth = cut
    captured = [c for c in truth["collectives"] if max(c["end_ns"]) <= truth["capture_stop_ns"]]
    _, complete = analyzed([folder])
    _, everything = analyzed([folder], Filters(keep_all=True))
    assert [c["step"] for c in everything.doc["collectives"]] == [f"ProfilerStep#{c['step']}" for c in captured]
    assert everything.doc["step_selection"]["left_out"] == [] and not everything.doc["step_selection"]["complete_only"]
    assert not any(w.startswith("analyzed the") for w in everything.doc["warnings"])
    # per-rank NCCL time counts the analyzed steps only
    for a, b in zip(complete.doc["ranks"], everything.doc["ranks"]):
        assert 0 < a["nccl_time_ns"] < b["nccl_time_ns"]


def test_all_on_the_command_line_and_in_the_api(cut):
    from nsys_collective import load
    from nsys_collective.cli import app

    folder, _ = cut
    out = CliRunner().invoke(app, ["analyze", str(folder), "--all", "--json"])
    assert out.exit_code == 0, out.stderr
    assert json.loads(out.stdout)["summary"]["collectives"] == load(folder, keep_all=True).summary["collectives"] == 11
    assert load(folder).summary["collectives"] == 9


def test_a_whole_run_keeps_every_step_and_labels_each_collective_with_its_step(tmp_path):
    truth = gen.generate(tmp_path, **JOB)
    _, result = analyzed([tmp_path])
    doc = result.doc
    assert doc["step_selection"]["left_out"] == [] and doc["step_selection"]["collectives_left_out"] == 0
    assert [c["step"] for c in doc["collectives"]] == [f"ProfilerStep#{c['step']}" for c in truth["collectives"]]
    assert not any(w.startswith("analyzed the") for w in doc["warnings"])


def test_exports_without_steps_have_no_selection():
    _, result = analyzed([need_real(REAL / "nsys-ai-2gpu")])
    assert result.doc["step_selection"] is None and result.doc["steps"] == []


def test_a_steps_pattern_nothing_matches_selects_nothing():
    _, result = analyzed([FIXTURES / "demo-4rank-2host"], Filters(steps="Epoch*"))
    assert result.doc["collectives"] == [] and result.doc["step_selection"] is None
    assert "no NVTX range matches --steps 'Epoch*': no collective selected" in result.doc["warnings"]


def _trace(steps, lost_at=()):
    """A stand-in rank trace: step ranges (name, start, end), and kernel launches at `lost_at`
    whose kernels are not in the capture (plus one that ran)."""
    names = [n for n, _, _ in steps] + ["cudaLaunchKernel_v7000"]
    ranges = SimpleNamespace(start=np.array([s for _, s, _ in steps]), end=np.array([e for _, _, e in steps]),
                             name=np.arange(len(steps)))
    launches = [5] + list(lost_at)
    calls = SimpleNamespace(start=np.array(launches), kind=cuda_api.kinds(np.full(len(launches), len(steps)), names),
                            correlation=np.arange(len(launches)))
    return SimpleNamespace(ranges=ranges, lost_launches=lost_launches(calls, np.array([0])), strings=tuple(names),
                           names=lambda ids: np.array([names[i] for i in ids], dtype=object))


def test_steps_missing_on_a_rank_or_without_an_end_are_incomplete():
    traces = {0: _trace([("ProfilerStep#1", 0, 100), ("ProfilerStep#2", 100, 200), ("ProfilerStep#3", 200, 200)]),
              1: _trace([("ProfilerStep#2", 100, 200), ("ProfilerStep#3", 200, 300)], lost_at=[250])}
    sel = select_steps(traces, None, keep_all=False)
    assert sel.steps == ("ProfilerStep#1", "ProfilerStep#2", "ProfilerStep#3") and sel.kept == ("ProfilerStep#2",)
    assert [(lo.step, lo.reason, lo.ranks) for lo in sel.left_out] == [
        ("ProfilerStep#1", "missing", (1,)), ("ProfilerStep#3", "lost_gpu_work", (1,)), ("ProfilerStep#3", "not_closed", (0,))]
    assert sel.analyzed(1, np.array([-1, 50, 150, 250])).tolist() == [False, False, True, False]
    assert select_steps(traces, None, keep_all=True).kept == sel.steps


def test_real_hta_traces_both_steps_complete_and_htas_step_gives_htas_overlap():
    """HTA 0.5.0: 11.81% and 20.05% overlap, after dropping the last ProfilerStep by convention. Both
    steps are whole here (every launch has its kernel, both ranges closed): the default keeps both
    (14.95% / 19.93%, the whole capture, as before); the step HTA keeps gives HTA's figures."""
    folder = need_real(REAL / "kineto" / "hta-trace_filter-2rank")
    _, result = analyzed([folder])
    sel = result.doc["step_selection"]
    assert sel["analyzed"] == sel["steps"] == ["ProfilerStep#551", "ProfilerStep#552"] and sel["left_out"] == []
    assert [round(100 * r["overlap_share"], 2) for r in result.doc["ranks"]] == [14.95, 19.93]
    _, hta = analyzed([folder], Filters(steps="ProfilerStep#551"))
    assert [round(100 * r["overlap_share"], 2) for r in hta.doc["ranks"]] == [11.81, 20.05]
    assert [r["nccl_time_ns"] for r in hta.doc["ranks"]] == [195_327_000, 168_027_000]  # HTA's µs of communication
