"""Kineto twins: the same simulated job written by scripts/generate_fixture.py as Nsight Systems
exports (`--format nsys`) and as PyTorch profiler traces (`--format kineto`, same seed) must tell
the same story. The traces themselves are checked with plain gzip + json here, independently of
the reader; the findings through `collectivetrace-nsys analyze --json`, against each other and
against the planted truth.

On the realistic DDP model every bucket but the last overlaps backward compute, so analyze warns
that those collectives have no clean transfer baseline: that warning is expected (OVERLAP_NOTE).
"""

from __future__ import annotations

import gzip
import json
import re
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from conftest import gen
from nsys_collective.cli import app
from nsys_collective.ingest.capture import read_kineto

SET = dict(ranks=4, hosts=2, steps=6, kernels_per_step=40, buckets=3)
SEEDS = {"slow_kernel": 22, "host_stall": 24, "contention": 25}
OVERLAP_NOTE = "overlapped compute but no collective of their kind ran alone"


def problems(doc):
    """analyze's warnings but the expected notes: overlapped buckets have no contention baseline, and
    the nsys twin records no message size (the Kineto twin's record_param_comms do)."""
    return [w for w in doc["warnings"] if OVERLAP_NOTE not in w and not w.startswith("message size unknown")]
BLOCK_NS = 7_889_238 * 10**9


def analyze(folder: Path) -> dict:
    result = CliRunner().invoke(app, ["analyze", str(folder), "--json"])
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout)


def trace(path: Path) -> dict:
    with gzip.open(path, "rt") as f:
        return json.load(f)


def within(got, want, tolerance) -> bool:
    return abs(got - want) <= tolerance * abs(want)


@pytest.fixture(scope="module")
def twins(tmp_path_factory):
    """Per scenario: (nsys truth, nsys document, kineto truth, kineto document, kineto folder)."""
    out = {}
    for scenario, seed in SEEDS.items():
        base = tmp_path_factory.mktemp(scenario)
        tn = gen.generate(base / "nsys", scenario=scenario, seed=seed, **SET)
        tk = gen.generate(base / "kineto", scenario=scenario, seed=seed, format="kineto", **SET)
        out[scenario] = (tn, analyze(base / "nsys"), tk, analyze(base / "kineto"), base / "kineto")
    return out


# ---- the generator: one job, two formats ------------------------------------------------------

@pytest.mark.parametrize("scenario", list(SEEDS))
def test_twins_are_the_same_job(twins, scenario):
    tn, _, tk, _, folder = twins[scenario]
    for key in ("seed", "scenario", "t0_ns", "hosts", "collectives", "causes", "expected", "streams", "whatif",
                "communicators"):
        assert tn[key] == tk[key], key
    assert tn["format"] == "nsys" and tk["format"] == "kineto"
    assert {k: v for k, v in tk["params"].items() if k != "format"} == {k: v for k, v in tn["params"].items() if k != "format"}
    assert tk["params"]["format"] == "kineto"
    assert sorted(p.name for p in folder.iterdir()) == [f"rank_{r}.json.gz" for r in range(SET["ranks"])] + ["truth.json"]
    for rn, rk in zip(tn["ranks"], tk["ranks"]):
        assert rk["file"] == f"rank_{rk['rank']}.json.gz"
        for key in ("rank", "host", "local_rank", "pid", "device", "utc_epoch_ns", "kernels", "nccl_kernels", "memcpys",
                    "memsets", "runtime_calls"):
            assert rn[key] == rk[key], key


def test_trace_layout_and_counts_match_truth(twins):
    _, _, truth, _, folder = twins["host_stall"]
    for r in truth["ranks"]:
        raw = gzip.decompress((folder / r["file"]).read_bytes()).decode()
        # Kineto's text: base after the events, ts with exactly three decimals
        assert raw.index('"traceEvents"') < raw.index('"baseTimeNanoseconds"')
        doc = json.loads(raw)
        assert doc["schemaVersion"] == 1 and doc["baseTimeNanoseconds"] == r["base_time_ns"]
        assert doc["baseTimeNanoseconds"] % BLOCK_NS == 0 and 0 <= r["utc_epoch_ns"] - r["base_time_ns"] < BLOCK_NS
        assert doc["distributedInfo"] | {"pg_config": None} == {
            "backend": "nccl", "rank": r["rank"], "world_size": SET["ranks"], "pg_count": 1, "pg_config": None,
            "nccl_version": "2.21.5"}
        assert [g["id"] for g in doc["deviceProperties"]] == list(range(len(truth["hosts"][r["host"]]["ranks"])))
        assert all(g["numSms"] == 132 and (g["computeMajor"], g["computeMinor"]) == (9, 0) for g in doc["deviceProperties"])
        events = doc["traceEvents"]
        x = [e for e in events if e.get("ph") == "X"]
        cats = Counter(e["cat"] for e in x)
        assert len(events) == r["trace_events"]
        assert cats["kernel"] == r["kernels"] and cats["gpu_memcpy"] == r["memcpys"] and cats["gpu_memset"] == r["memsets"]
        assert cats["cuda_sync"] == r["cuda_sync"] > 0
        assert cats["cuda_runtime"] + cats["cuda_driver"] == r["runtime_calls"] and cats["cuda_driver"] == r["driver_calls"]
        assert cats["cpu_op"] == r["cpu_ops"] and cats["user_annotation"] == r["user_annotations"]
        comms = [e for e in x if e["name"] == "record_param_comms"]
        assert len(comms) == r["record_param_comms"] == r["nccl_kernels"] == len(truth["collectives"])
        assert [e["args"]["Seq"] for e in comms] == list(range(1, len(comms) + 1))
        assert {e["args"]["Collective name"] for e in comms} == {"allreduce"}
        assert [e["args"]["In msg nelems"] * 2 for e in comms] == [c["bytes"] for c in truth["collectives"]]
        nccl = [e for e in x if e["cat"] == "kernel" and e["name"].startswith("ncclDevKernel_AllReduce")]
        assert len(nccl) == r["nccl_kernels"] and {e["args"]["Collective name"] for e in nccl} == {"allreduce"}
        # identity: CPU rows on (pid, tid), GPU rows on (device, stream)
        cpu = [e for e in x if e["cat"] in ("cpu_op", "user_annotation", "cuda_runtime", "cuda_driver")]
        gpu = [e for e in x if e["cat"] in ("kernel", "gpu_memcpy", "gpu_memset")]
        assert {(e["pid"], e["tid"]) for e in cpu} == {(r["pid"], r["tid"])}
        assert {e["pid"] for e in gpu} == {r["device"]} and {e["tid"] for e in gpu} == {7, 13}
        assert all(e["args"]["device"] == r["device"] for e in gpu)
        assert all(len(t.split(".")[1]) == 3 for t in re.findall(r'"(?:ts|dur)": (\d+\.\d+)', raw))
        # every launch has its kernel, copy or memset, by correlation, and shares the CPU op's External id;
        # the other calls (events, waits, synchronize) launch nothing
        launch = {e["args"]["correlation"]: e for e in cpu if e["cat"].startswith("cuda_")}
        work = {e["args"]["correlation"] for e in gpu}
        assert work <= set(launch) and len(work) == len(gpu)
        assert {launch[c]["name"] for c in set(launch) - work} == {
            "cudaEventRecord", "cudaStreamWaitEvent", "cudaStreamSynchronize"}
        assert {launch[c]["name"] for c in work} == {"cudaLaunchKernel", "cuLaunchKernelEx", "cudaMemcpyAsync",
                                                     "cudaMemsetAsync"}
        assert all(launch[e["args"]["correlation"]]["args"]["External id"] == e["args"]["External id"] for e in gpu)
        assert {e["name"] for e in cpu if e["cat"] == "cuda_driver"} == {"cuLaunchKernelEx"}
        # each stream wait's cuda_sync names the stream and the cudaEventRecord it waits for
        waits = [e for e in x if e["cat"] == "cuda_sync" and e["name"] == "Stream Wait Event"]
        assert len(waits) == sum(1 for e in cpu if e["name"] == "cudaStreamWaitEvent")
        for w in waits:
            a = w["args"]
            rec = launch[a["wait_on_cuda_event_record_corr_id"]]
            assert rec["name"] == "cudaEventRecord" and rec["ts"] < w["ts"] and a["cuda_sync_kind"] == w["name"]
            assert w["tid"] == a["stream"] != a["wait_on_stream"] and launch[a["correlation"]]["name"] == "cudaStreamWaitEvent"
        # what the reader makes of it
        (export,) = read_kineto([folder / r["file"]])
        assert len(export.kernels["start"]) == r["kernels"] and len(export.memcpy["start"]) == r["memcpys"]
        assert len(export.runtime["start"]) == r["runtime_calls"] and len(export.nvtx["start"]) == r["nvtx_ranges"]
        assert set(export.kernels["pid"].tolist()) == {r["pid"]} and export.metadata["distributedInfo.rank"] == str(r["rank"])
        assert export.session.utc_epoch_ns == r["base_time_ns"] and export.warnings == []
        assert len(export.memset["start"]) == r["memsets"]


@pytest.mark.parametrize("boundary", [False, True])
def test_nccl_kernel_times_undo_to_the_planted_arrivals(tmp_path, boundary):
    truth = gen.generate(tmp_path, scenario="mixed", seed=7, format="kineto", drift_ppm=40.0,
                         kineto_base_boundary=boundary, **SET)
    t0 = truth["t0_ns"]
    for r in truth["ranks"]:
        h = truth["hosts"][r["host"]]
        doc = trace(tmp_path / r["file"])
        nccl = sorted((e for e in doc["traceEvents"] if e.get("cat") == "kernel" and e["name"].startswith("nccl")),
                      key=lambda e: e["ts"])
        for field, edge in (("arrival_ns", 0), ("end_ns", 1)):
            # recorded = base + ts; true = t0 + (recorded - t0 - offset) / (1 + drift)
            rec = np.array([doc["baseTimeNanoseconds"] + round((e["ts"] + edge * e["dur"]) * 1000) for e in nccl], np.int64)
            true = t0 + np.rint((rec - t0 - h["offset_ns"]) / (1.0 + h["drift_ppm"] * 1e-6)).astype(np.int64)
            want = np.array([c[field][r["rank"]] for c in truth["collectives"]])
            assert np.abs(true - want).max() <= 1_000, (r["rank"], field)


def test_same_seed_same_bytes_and_shuffle_reorders_only(tmp_path):
    a = gen.generate(tmp_path / "a", scenario="contention", seed=3, format="kineto", **SET)
    gen.generate(tmp_path / "b", scenario="contention", seed=3, format="kineto", **SET)
    gen.generate(tmp_path / "s", scenario="contention", seed=3, format="kineto", shuffle_rows=True, **SET)
    for r in a["ranks"]:
        assert (tmp_path / "a" / r["file"]).read_bytes() == (tmp_path / "b" / r["file"]).read_bytes()
        plain, shuffled = trace(tmp_path / "a" / r["file"])["traceEvents"], trace(tmp_path / "s" / r["file"])["traceEvents"]
        key = lambda e: json.dumps(e, sort_keys=True)  # noqa: E731
        assert plain != shuffled and sorted(map(key, plain)) == sorted(map(key, shuffled))
    assert (tmp_path / "a" / "truth.json").read_bytes() == (tmp_path / "b" / "truth.json").read_bytes()
    with pytest.raises(ValueError, match="nsys exports only"):
        gen.generate(tmp_path / "n", format="kineto", normalized_time=True, **SET)
    with pytest.raises(ValueError, match="unknown format"):
        gen.generate(tmp_path / "n", format="chrome", **SET)


# ---- the analysis: the same findings from both --------------------------------------------------

def _confident(doc):
    return [e for e in doc["blocking_kernels"] + doc["blocking_launches"] if e["confidence"] == "high"]


@pytest.mark.parametrize("scenario", list(SEEDS))
def test_twins_recover_the_same_findings(twins, scenario):
    truth, dn, tk, dk, _ = twins[scenario]
    # ranks numbered from distributedInfo, each its own trace, pid and device as planted
    assert [(r["rank"], Path(r["report"]).name, r["pid"], r["device"], r["rank_source"]) for r in dk["ranks"]] == [
        (r["rank"], r["file"], r["pid"], r["device"], "distributedInfo (PyTorch profiler)") for r in tk["ranks"]]
    assert [r["kernels"] for r in dk["ranks"]] == [r["kernels"] for r in dn["ranks"]]
    assert problems(dk) == problems(dn) == []
    assert len(dn["collectives"]) == len(dk["collectives"]) == len(truth["collectives"])
    assert [c["op"] for c in dk["collectives"]] == [c["op"] for c in dn["collectives"]]
    assert [c["straggler_rank"] for c in dk["collectives"]] == [c["straggler_rank"] for c in dn["collectives"]]
    for doc in (dn, dk):
        assert doc["alignment"]["violations_after"] == 0 and doc["alignment"]["end_spread_ns_after"]["max"] < 10_000
    (cause,) = truth["causes"]
    tn, tk = _top(dn, scenario), _top(dk, scenario)
    if scenario == "contention":
        assert tn["kernel"] == tk["kernel"] == cause["kernel"] and tn["collectives"] == tk["collectives"]
        assert within(tk["contention_ns"], tn["contention_ns"], 0.05)
        assert _confident(dn) == _confident(dk) == [] and dn["summary"]["top_blocking_kernel"] is None
        assert dk["summary"]["top_blocking_kernel"] is None
        return
    if scenario == "slow_kernel":
        assert (tn["kernel"], tn["rank"]) == (tk["kernel"], tk["rank"]) == (cause["kernel"], cause["rank"])
        assert dn["summary"]["top_blocking_kernel"] == dk["summary"]["top_blocking_kernel"] == cause["kernel"]
    else:
        assert (tn["nvtx"], tn["rank"]) == (tk["nvtx"], tk["rank"]) == (cause["nvtx"], cause["rank"])
        assert _confident(dn) == [tn] and _confident(dk) == [tk]
    assert tn["confidence"] == tk["confidence"] == "high"
    assert within(tk["wait_saved_ns"], tn["wait_saved_ns"], 0.05), (tk["wait_saved_ns"], tn["wait_saved_ns"])
    assert dn["summary"]["top_straggler_rank"] == dk["summary"]["top_straggler_rank"] == cause["rank"]
    delayed = [c["id"] for c in truth["collectives"] if c["straggler_rank"] == cause["rank"]]
    assert len(delayed) == cause["expected"]["collectives_delayed"] == len(truth["collectives"])
    assert all(dk["collectives"][j]["straggler_rank"] == cause["rank"] for j in delayed)


def _top(doc, scenario):
    if scenario == "contention":
        return doc["contention"][0]
    if scenario == "slow_kernel":
        return doc["blocking_kernels"][0]
    return _confident(doc)[0]


@pytest.mark.parametrize("scenario", list(SEEDS))
def test_twins_blame_what_removing_the_cause_saves(twins, scenario):
    """Both formats save what removing the cause saves (the generator's what-if), within 10%: the
    wait for a blocking cause; for contention (transfers slowed while buckets queue, so the ranks
    wait no more) the step time the slow transfers cost."""
    truth, dn, _, dk, _ = twins[scenario]
    (cause,) = truth["causes"]
    for doc in (dn, dk):
        if scenario == "contention":
            (transfer,) = [c for c in doc["whatif"]["causes"] if c["cause"] == "transfer"]
            assert within(transfer["step_time_saved_ns"], cause["step_time_saved_ns"], 0.10), (transfer, cause)
        else:
            assert within(_top(doc, scenario)["wait_saved_ns"], cause["wait_saved_ns"], 0.10)


def test_ranks_on_either_side_of_a_base_time_block_still_align(tmp_path):
    """--kineto-base-boundary: the ranks' programs load on either side of a 91-day block boundary,
    so their baseTimeNanoseconds differ by a block and their ts by 91 days the other way."""
    truth = gen.generate(tmp_path, scenario="slow_kernel", seed=SEEDS["slow_kernel"], format="kineto",
                         kineto_base_boundary=True, **SET)
    bases = {r["rank"]: trace(tmp_path / r["file"])["baseTimeNanoseconds"] for r in truth["ranks"]}
    assert sorted(set(bases.values())) == truth["kineto"]["base_time_ns"]
    low, high = truth["kineto"]["base_time_ns"]
    assert high - low == BLOCK_NS and truth["kineto"]["boundary_ns"] == high
    assert all(b == r["base_time_ns"] == r["utc_epoch_ns"] // BLOCK_NS * BLOCK_NS
               for r, b in zip(truth["ranks"], bases.values()))
    doc = analyze(tmp_path)
    a = doc["alignment"]
    assert a["end_spread_ns_before"]["max"] < 10 * 10**6  # the hosts' ms offset, not 91 days
    assert a["end_spread_ns_after"]["max"] < 10_000 and a["violations_after"] == 0
    assert a["violations_before"] > 0  # there was something to align
    fitted = {r["rank"]: r["clock_offset_ns"] for r in doc["ranks"]}
    for r in truth["ranks"]:  # each rank's fitted correction undoes its host's planted offset
        assert abs(fitted[r["rank"]] + truth["hosts"][r["host"]]["offset_ns"]) < 5_000, (r["rank"], fitted)
    (cause,) = truth["causes"]
    assert [c["straggler_rank"] for c in doc["collectives"]] == [c["straggler_rank"] for c in truth["collectives"]]
    assert doc["summary"]["top_straggler_rank"] == cause["rank"]
    top = doc["blocking_kernels"][0]
    assert (top["kernel"], top["rank"], top["confidence"]) == (cause["kernel"], cause["rank"], "high")
    assert problems(doc) == []


def test_kineto_sizes_give_bytes_and_bus_bandwidth(tmp_path):
    """record_param_comms carries the message size: each collective gets its bytes and busbw (the
    generator's transfers run at 40 GB/s bus bandwidth across hosts after 20 us of latency)."""
    truth = gen.generate(tmp_path, ranks=4, hosts=2, steps=3, kernels_per_step=40, buckets=3, scenario="balanced", seed=5, format="kineto")
    result = CliRunner().invoke(app, ["analyze", str(tmp_path), "--json"])
    assert result.exit_code == 0, result.stderr
    collectives = json.loads(result.stdout)["collectives"]
    assert [c["bytes"] for c in collectives] == [c["bytes"] for c in truth["collectives"]]
    for c in collectives:
        latency_free = c["bytes"] * 2 * 3 / 4 / (c["transfer_ns"] - 20_000)
        assert latency_free == pytest.approx(40.0, rel=0.02)
        assert c["busbw_gbps"] == pytest.approx(c["bytes"] / c["transfer_ns"] * 2 * 3 / 4)
