"""Every parallelism style x planted cause: the generated files hold what truth.json says, the job
is deterministic, and the what-if truth behaves as a what-if (the no-cause twin waits only its
baseline, removing a blocking cause never adds wait, two causes at once each get theirs)."""

from __future__ import annotations

import gzip
import hashlib
import json
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from conftest import gen
from test_fixture_generator import check_arrivals, check_counts, check_host_timeline, check_sync_records, check_truth

JOB = dict(ranks=4, hosts=2, steps=4, buckets=3, microbatches=2)
KERNELS = {"ddp": 40, "fsdp": 40, "tp": 40, "tp+ddp": 40, "pp": 80}
CASES = ("balanced",) + gen.CAUSES
BLOCKING = ("slow_kernel", "extra_kernel", "host_stall", "host_group")
# Their no-cause run keeps their kernels (removing the cause removes the slowdown only): it is not the balanced job.
KEEP_KERNELS = gen.overlap_causes.OVERLAP_CAUSES
SEED = 9


def make(folder, style, scenario, **kw):
    return gen.generate(folder, style=style, scenario=scenario, seed=kw.pop("seed", SEED),
                        kernels_per_step=KERNELS[style], **{**JOB, **kw})


@pytest.fixture(scope="module")
def jobs(tmp_path_factory):
    """style -> case -> (folder, truth), nsys format."""
    root = tmp_path_factory.mktemp("scenarios")
    out = {}
    for style in gen.STYLES:
        for case in CASES:
            folder = root / f"{style}-{case}".replace("+", "_")
            out.setdefault(style, {})[case] = (folder, make(folder, style, case))
    return out


@pytest.mark.parametrize("style", gen.STYLES)
@pytest.mark.parametrize("case", CASES)
def test_files_hold_the_truth(jobs, style, case):
    folder, truth = jobs[style][case]
    assert truth["style"] == style and truth["scenario"] == case
    assert [c["type"] for c in truth["causes"]] == ([] if case == "balanced" else [case])
    check_counts(folder, truth)
    check_arrivals(folder, truth)
    check_truth(truth)
    check_host_timeline(folder, truth)
    check_sync_records(folder, truth)


@pytest.mark.parametrize("style", gen.STYLES)
def test_the_no_cause_twin_waits_only_its_baseline(jobs, style):
    """The balanced job of the same seed is every scenario's no-cause run: its wait and step ends are
    each scenario's baseline, exactly; outside pipelines (whose recv kernels spin through the fill
    and drain bubbles) that wait is small: jitter."""
    twin = jobs[style]["balanced"][1]["whatif"]["actual"]
    for case in CASES:
        if case in KEEP_KERNELS:
            continue
        w = jobs[style][case][1]["whatif"]
        assert w["baseline"]["wait_ns"] == twin["wait_ns"], case
        assert w["baseline"]["step_end_ns"] == twin["step_end_ns"], case
    if style != "pp":
        per_collective = twin["wait_ns"] / len(jobs[style]["balanced"][1]["collectives"])
        assert per_collective < 300_000, f"{per_collective:.0f} ns of jitter wait per collective"
        for case in BLOCKING:
            assert twin["wait_ns"] < 0.5 * jobs[style][case][1]["whatif"]["actual"]["wait_ns"], case


@pytest.mark.parametrize("style", gen.STYLES)
def test_removing_a_cause_saves(jobs, style):
    """One planted cause: removing it never makes steps longer. A blocking cause (outside pipelines,
    where a late stage can hide in a bubble) saves wait too: on the whole, and next to nothing is
    lost on any collective; where it saves, its rank (one of its ranks) arrived last."""
    for case in gen.CAUSES:
        truth = jobs[style][case][1]
        (cause,) = truth["causes"]
        assert cause["step_time_saved_ns"] >= 0, case
        if case in ("contention", "slow_network", *gen.overlap_causes.TRANSFER_CAUSES):
            assert cause["step_time_saved_ns"] >= 0 and cause["collectives_slowed"], case
            assert cause["step_time_saved_ns"] > 0 or case in gen.overlap_causes.TRANSFER_CAUSES, case
            continue
        if case == "nccl_slows_compute":  # every rank slowed alike: no straggler to speak of
            assert cause["extra_ns_total"] > 0, case
            continue
        if style == "pp":
            continue
        assert cause["wait_saved_ns"] > 0 and cause["step_time_saved_ns"] > 0, case
        saved = [c["saved_wait_ns"].get(cause["id"], 0) for c in truth["collectives"]]
        # A slow device is late in every collective: without it, its rank now and then arrives
        # first by jitter and waits a little (a few percent of what it saves elsewhere).
        lost = 0.03 if case == "slow_device" else 0.01
        assert -sum(x for x in saved if x < 0) <= lost * cause["wait_saved_ns"], case
        helped = [c for c, x in zip(truth["collectives"], saved) if x > 0 and set(c["ranks"]) & set(cause["ranks"])]
        late = sum(1 for c in helped if c["straggler_rank"] in cause["ranks"])
        # tp+ddp: a stall shows in the tensor-parallel group first, then the data-parallel groups
        assert late >= (0.5 if style == "tp+ddp" else 1.0) * len(helped) > 0, (case, late, len(helped))


@pytest.mark.parametrize("style", ["ddp", "tp+ddp", "pp"])
def test_two_causes_at_once(tmp_path, style):
    truth = make(tmp_path, style, "slow_kernel+host_stall")
    slow, stall = truth["causes"]
    assert (slow["type"], stall["type"]) == ("slow_kernel", "host_stall") and slow["rank"] != stall["rank"]
    check_truth(truth)
    w = truth["whatif"]
    for c in (slow, stall):
        assert {"wait_saved_ns", "step_time_saved_ns", "step_end_ns_without", "collectives"} <= set(c)
    # each what-if is the job without that one cause: the same seed with only the other cause planted
    for kept, removed in ((slow, stall), (stall, slow)):
        alone = make(tmp_path / f"only-{kept['type']}", style, kept["type"])
        assert alone["whatif"]["actual"]["wait_ns"] == w["actual"]["wait_ns"] - removed["wait_saved_ns"]
        assert alone["whatif"]["actual"]["step_end_ns"] == removed["step_end_ns_without"]
    if style != "pp":
        # the stalled rank's lateness masks the slow kernel: saving both is worth more than the sum
        # of each alone would suggest, and the ideal saves the most
        assert w["ideal"]["wait_saved_ns"] >= max(slow["wait_saved_ns"], stall["wait_saved_ns"])
        assert w["ideal"]["step_time_saved_ns"] >= max(slow["step_time_saved_ns"], stall["step_time_saved_ns"])


def digests(folder):
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(Path(folder).iterdir())}


@pytest.mark.parametrize("style", gen.STYLES)
def test_same_arguments_same_bytes(jobs, style, tmp_path):
    folder, _ = jobs[style]["host_group"]
    again = make(tmp_path / "again", style, "host_group")
    assert digests(tmp_path / "again") == digests(folder)
    other = make(tmp_path / "other", style, "host_group", seed=SEED + 1)
    assert other["collectives"] != again["collectives"]
    k1 = make(tmp_path / "k1", style, "extra_kernel", format="kineto")
    make(tmp_path / "k2", style, "extra_kernel", format="kineto")
    assert digests(tmp_path / "k1") == digests(tmp_path / "k2")
    skip = ("format", "params", "ranks", "export", "clock_model", "kineto")
    assert {k: v for k, v in k1.items() if k not in skip} == \
        {k: v for k, v in jobs[style]["extra_kernel"][1].items() if k not in skip}


def trace(path):
    with gzip.open(path, "rt") as f:
        return json.load(f)


@pytest.mark.parametrize("style", gen.STYLES)
def test_kineto_twin_holds_the_same_job(style, tmp_path):
    tk = make(tmp_path / "k", style, "contention", format="kineto")
    tn = make(tmp_path / "n", style, "contention")
    assert tk["collectives"] == tn["collectives"] and tk["causes"] == tn["causes"] and tk["whatif"] == tn["whatif"]
    for rk, rn in zip(tk["ranks"], tn["ranks"]):
        doc = trace(tmp_path / "k" / rk["file"])
        cats = Counter(e.get("cat") for e in doc["traceEvents"] if e.get("ph") == "X")
        assert cats["kernel"] == rk["kernels"] == rn["kernels"] and cats["gpu_memcpy"] == rk["memcpys"] == rn["memcpys"]
        assert cats["gpu_memset"] == rk["memsets"] == rn["memsets"]
        assert cats["cuda_runtime"] + cats["cuda_driver"] == rk["runtime_calls"] == rn["runtime_calls"]
        assert cats["cuda_sync"] == rk["cuda_sync"] == rn["sync_records"] > 0
        # every stream wait names the cudaEventRecord it waits for, as HTA pairs them
        events = doc["traceEvents"]
        records = {e["args"]["correlation"]: e for e in events if e.get("name") == "cudaEventRecord"}
        waits = [e for e in events if e.get("cat") == "cuda_sync" and e["name"] == "Stream Wait Event"]
        assert waits and all(w["args"]["wait_on_cuda_event_record_corr_id"] in records for w in waits)
        assert all(records[w["args"]["wait_on_cuda_event_record_corr_id"]]["ts"] < w["ts"] for w in waits)
        comms = [e for e in events if e.get("name") == "record_param_comms"]
        assert len(comms) == rk["nccl_kernels"] == rk["record_param_comms"]
        member = [c for c in tk["collectives"] if rk["rank"] in c["ranks"]]
        assert sorted((e["args"]["Process Group Name"], e["args"]["Seq"]) for e in comms) == sorted(
            (str(next(x["index"] for x in tk["communicators"] if x["name"] == c["comm"])), c["seq"] + 1) for c in member)


def test_no_sync_records_in_kineto(tmp_path):
    t = make(tmp_path, "ddp", "balanced", format="kineto", sync_records=False)
    for r in t["ranks"]:
        cats = Counter(e.get("cat") for e in trace(tmp_path / r["file"])["traceEvents"])
        assert cats["cuda_sync"] == r["cuda_sync"] == 0 and cats["cuda_runtime"] > 0
        names = Counter(e["name"] for e in trace(tmp_path / r["file"])["traceEvents"] if e.get("cat") == "cuda_runtime")
        assert names["cudaStreamWaitEvent"] > 0 and names["cudaEventRecord"] > 0, "the calls stay; only CUPTI's records go"


def test_pipeline_stages_run_different_programs(jobs):
    folder, truth = jobs["pp"]["balanced"]
    import sqlite3

    kernels = []
    for r in truth["ranks"]:
        db = sqlite3.connect(f"file:{folder / r['file']}?mode=ro&immutable=1", uri=True)
        kernels.append({n for (n,) in db.execute("SELECT DISTINCT s.value FROM CUPTI_ACTIVITY_KIND_KERNEL k "
                                                 "JOIN StringIds s ON s.id = k.shortName")})
        db.close()
    assert "indexSelectLargeIndex" in kernels[0] and "indexSelectLargeIndex" not in kernels[-1]
    assert "cunn_SoftMaxForward" in kernels[-1] and "cunn_SoftMaxForward" not in kernels[0]
    assert all(c["op"] == "SendRecv" and len(c["ranks"]) == 2 and sorted(c["roles"]) == ["Recv", "Send"]
               for c in truth["collectives"])
    pairs = Counter(c["comm"] for c in truth["collectives"])
    assert sorted(pairs) == ["pp0-1", "pp1-2", "pp2-3"] and len(set(pairs.values())) == 1


def test_tp_ddp_has_two_communicators_per_rank(jobs):
    _, truth = jobs["tp+ddp"]["balanced"]
    comms = {c["name"]: c for c in truth["communicators"]}
    assert sorted(comms) == ["dp0", "dp1", "tp0", "tp1"]
    for r in range(JOB["ranks"]):
        mine = [c for c in comms.values() if r in c["ranks"]]
        assert sorted(c["stream"][str(r)] for c in mine) == [13, 17]
    assert comms["tp0"]["ranks"] == truth["hosts"]["node0"]["ranks"]
    assert [r for r in range(JOB["ranks"]) if r in comms["dp0"]["ranks"]] == [0, 2]
    np.testing.assert_array_equal(sorted(Counter(c["comm"] for c in truth["collectives"]).values())[:2],
                                  [JOB["steps"] * truth["size"]["buckets"]] * 2)
