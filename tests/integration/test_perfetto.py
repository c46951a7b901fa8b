"""The Perfetto / chrome://tracing export: a valid trace-event file whose slices nest the way
Perfetto reads them, one process per rank, every GPU work item, and blame arrows that start in
the blocking kernel and end in the collectives it delayed."""

from __future__ import annotations

import json
from collections import defaultdict

import numpy as np
import pytest

from conftest import FIXTURES, REAL, analyzed, gen, need_real
from nsys_collective.errors import InputError
from nsys_collective.render.perfetto import write_trace

SET = dict(ranks=4, hosts=2, steps=6, kernels_per_step=40, buckets=3)
WORK_CATEGORIES = {"kernel", "nccl", "memcpy", "memset"}
EPS_US = 1e-3  # 1 ns: float µs are compared with this much slack


def analyze(folder):
    """(job, result) of the folder's exports."""
    return analyzed(sorted(folder.glob("*.sqlite")))


def export(result, folder):
    path = folder / "trace.json"
    counts = write_trace(result, path)
    doc = json.loads(path.read_text())
    assert counts["events"] == len(doc["traceEvents"])
    assert counts["flows"] == sum(e["ph"] == "s" for e in doc["traceEvents"])
    return doc


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    analysis, result = analyze(FIXTURES / "demo-4rank-2host")
    return analysis, export(result, tmp_path_factory.mktemp("demo")), result


@pytest.fixture(scope="module")
def slow(tmp_path_factory):
    folder = tmp_path_factory.mktemp("slow")
    truth = gen.generate(folder, scenario="slow_kernel", seed=31, **SET)
    analysis, result = analyze(folder)
    truth["_document"] = result.doc  # what analyze --json says of it
    return analysis, export(result, folder), truth


def slices(doc) -> dict:
    """X events by (pid, tid)."""
    tracks = defaultdict(list)
    for e in doc["traceEvents"]:
        if e["ph"] == "X":
            tracks[(e["pid"], e["tid"])].append(e)
    return tracks


def perfetto_ns(us: float) -> int:
    """What Perfetto's JSON importer makes of a µs value: int64(us * 1000.0), truncated."""
    return int(us * 1000.0)


def enclosing(tracks, event) -> list[dict]:
    """The X slices on the event's track whose inside holds its ts (strictly, in Perfetto's ns:
    on an edge, the event could bind to the neighbour)."""
    t = perfetto_ns(event["ts"])
    return [x for x in tracks[(event["pid"], event["tid"])]
            if perfetto_ns(x["ts"]) < t < perfetto_ns(x["ts"]) + perfetto_ns(x["dur"])]


def check_trace(doc, analysis):
    """Everything any trace must satisfy."""
    events = doc["traceEvents"]
    assert doc["displayTimeUnit"] == "ns"
    assert doc["otherData"]["t_ref_ns"] == analysis.alignment.t_ref_ns
    assert doc["otherData"]["origin_ns"] <= analysis.alignment.t_ref_ns
    for e in events:
        assert {"ph", "pid", "tid", "ts"} <= e.keys(), e
        assert e["ts"] >= 0, e  # Perfetto refuses negative timestamps
        if e["ph"] == "X":
            assert e["dur"] >= 0, e

    # One process per rank, named and sorted by rank.
    names = {e["pid"]: e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "process_name"}
    assert names == {r.rank + 1: f"rank {r.rank} · {r.host} (pid {r.pid}, GPU {r.device})" for r in analysis.ranks}
    order = {e["pid"]: e["args"]["sort_index"] for e in events if e["ph"] == "M" and e["name"] == "process_sort_index"}
    assert order == {r.rank + 1: r.rank for r in analysis.ranks}

    # Every GPU work item of every rank, once; every track named.
    per_pid = defaultdict(int)
    for e in events:
        if e["ph"] == "X" and e["cat"] in WORK_CATEGORIES:
            per_pid[e["pid"]] += 1
    assert dict(per_pid) == {r.rank + 1: len(analysis.timeline[r.rank]) for r in analysis.ranks if len(analysis.timeline[r.rank])}
    tracks = slices(doc)
    named = {(e["pid"], e["tid"]) for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    assert set(tracks) <= named

    # As Perfetto reads them (ns truncated), the slices of a track nest or are disjoint: a slice
    # overlapping another partially would be dropped.
    for key, track in tracks.items():
        spans = sorted(((perfetto_ns(x["ts"]), perfetto_ns(x["dur"])) for x in track), key=lambda s: (s[0], -s[1]))
        open_ends = []
        for start, dur in spans:
            while open_ends and open_ends[-1] <= start:
                open_ends.pop()
            assert not open_ends or start + dur <= open_ends[-1], f"{key}: slice at {start} ns overlaps its parent partially"
            open_ends.append(start + dur)

    # Flows: one start and one end per id, each inside a slice on its own track.
    flows = defaultdict(dict)
    for e in events:
        if e["ph"] in "sf":
            assert (e["cat"], e["name"], e["bp"]) == ("blame", "delayed", "e")
            assert e["ph"] not in flows[e["id"]], f"flow {e['id']} has two {e['ph']} events"
            flows[e["id"]][e["ph"]] = e
            assert enclosing(tracks, e), f"flow {e['ph']} event outside any slice: {e}"
    assert all(set(pair) == {"s", "f"} for pair in flows.values())

    # The wait and transfer children lie inside their NCCL kernel.
    parents = {(e["pid"], e["args"]["collective"]): e for e in events if e["ph"] == "X" and "collective" in e.get("args", {})
               and e["cat"] == "nccl"}
    children = [e for e in events if e["ph"] == "X" and e["cat"] == "collective"]
    for child in children:
        parent = parents[(child["pid"], child["args"]["collective"])]
        assert child["tid"] == parent["tid"]
        assert parent["ts"] - EPS_US <= child["ts"] and child["ts"] + child["dur"] <= parent["ts"] + parent["dur"] + EPS_US
    return flows, tracks


def test_demo_trace_is_valid(demo):
    analysis, doc, _ = demo
    flows, _ = check_trace(doc, analysis)
    assert flows, "the demo's stragglers were blamed on kernels: arrows expected"
    # Every matched collective's NCCL kernel carries its timing, on every participating rank.
    c, t = analysis.collectives, analysis.timing
    tagged = {(e["pid"] - 1, e["args"]["collective"]): e for e in doc["traceEvents"]
              if e["ph"] == "X" and e["cat"] == "nccl" and "collective" in e["args"]}
    assert set(tagged) == set(zip(c.obs_rank.tolist(), c.obs_instance.tolist()))
    for row, (r, i) in enumerate(zip(c.obs_rank.tolist(), c.obs_instance.tolist())):
        args = tagged[(r, i)]["args"]
        assert (args["op"], args["comm"], args["seq"], args["straggler"]) == (analysis.op_name(i), c.comm[i], int(c.seq[i]), int(t.straggler[i]))
        assert (args["wait_ns"], args["transfer_ns"]) == (int(t.wait[row]), int(t.transfer[i]))


def test_times_are_aligned_ns_after_the_origin(demo):
    analysis, doc, _ = demo
    origin = doc["otherData"]["origin_ns"]
    w = analysis.timeline[0]
    kernels = sorted((e["ts"], e["dur"]) for e in doc["traceEvents"] if e["pid"] == 1 and e.get("cat") in WORK_CATEGORIES)
    ts = np.array([k[0] for k in kernels])
    assert np.array_equal(np.floor(ts * 1000).astype(np.int64) + origin, np.sort(w.start))


def test_wait_and_transfer_split_each_nccl_kernel_at_the_last_arrival(demo):
    analysis, doc, _ = demo
    origin, t = doc["otherData"]["origin_ns"], analysis.timing
    parents = {(e["pid"], e["args"]["collective"]): e for e in doc["traceEvents"]
               if e["ph"] == "X" and e["cat"] == "nccl" and "collective" in e["args"]}
    children = [e for e in doc["traceEvents"] if e["ph"] == "X" and e["cat"] == "collective"]
    assert {e["name"] for e in children} == {"wait", "transfer"}
    for e in children:
        parent = parents[(e["pid"], e["args"]["collective"])]
        last = (int(t.last_arrival[e["args"]["collective"]]) - origin) / 1e3
        split = min(max(last, parent["ts"]), parent["ts"] + parent["dur"])
        if e["name"] == "wait":
            assert e["ts"] == parent["ts"] and e["ts"] + e["dur"] == pytest.approx(split, abs=EPS_US)
            assert e["args"]["wait_ns"] > 0
        else:
            assert e["ts"] == pytest.approx(split, abs=EPS_US)
            assert e["ts"] + e["dur"] == pytest.approx(parent["ts"] + parent["dur"], abs=EPS_US)


def _arrows_from(flows, tracks, pid, kernel):
    """Collectives an arrow from `kernel` on process `pid` ends in: the straggler's NCCL kernel, and
    per collective the ranks whose wait slice gets one."""
    to_straggler, to_waiters = set(), defaultdict(set)
    for pair in flows.values():
        s, f = pair["s"], pair["f"]
        if s["pid"] != pid or not any(x["name"] == kernel for x in enclosing(tracks, s)):
            continue
        for x in enclosing(tracks, f):
            if x["cat"] == "nccl" and f["pid"] == pid:
                to_straggler.add(x["args"]["collective"])
            elif x["name"] == "wait":
                to_waiters[x["args"]["collective"]].add(f["pid"] - 1)
    return to_straggler, to_waiters


def test_slow_kernel_arrows_point_from_the_planted_kernel_to_the_collectives_blamed_on_it(slow):
    analysis, doc, truth = slow
    flows, tracks = check_trace(doc, analysis)
    (cause,) = truth["causes"]
    to_straggler, to_waiters = _arrows_from(flows, tracks, cause["rank"] + 1, cause["kernel"])
    blamed = {i for i, c in enumerate(truth["_document"]["collectives"])
              if any(b["cause"] == "kernel" and b.get("kernel") == cause["kernel"] and b["rank"] == cause["rank"]
                     for b in c["blame"])}
    assert len(blamed) >= 0.75 * cause["expected"]["collectives_delayed"]
    assert to_straggler == blamed
    # The waiting ranks' wait slices get an arrow too: every rank that waited.
    c, t = analysis.collectives, analysis.timing
    for i in blamed:
        waited = {r for r, inst, w in zip(c.obs_rank.tolist(), c.obs_instance.tolist(), t.wait.tolist()) if inst == i and w > 0}
        assert to_waiters[i] == waited


def test_slow_kernel_arrows_reach_every_collective_it_delayed(slow):
    analysis, doc, truth = slow
    flows, tracks = check_trace(doc, analysis)
    (cause,) = truth["causes"]
    instance_of_seq = {int(s): i for i, s in enumerate(analysis.collectives.seq.tolist())}
    delayed = {instance_of_seq[c["seq"]] for c in truth["collectives"]
               if c["id"] in cause["collectives"] and c["straggler_rank"] == cause["rank"]}
    assert len(delayed) == cause["expected"]["collectives_delayed"]
    to_straggler, _ = _arrows_from(flows, tracks, cause["rank"] + 1, cause["kernel"])
    assert delayed <= to_straggler


def test_replaces_its_own_trace_whole_and_only_with_force(demo, tmp_path):
    _, _, result = demo
    path = tmp_path / "trace.json"
    write_trace(result, path)
    with pytest.raises(InputError, match="--force"):
        write_trace(result, path)
    write_trace(result, path, force=True)
    json.loads(path.read_text())
    assert [p.name for p in tmp_path.iterdir()] == ["trace.json"], "no temporary file left behind"
    path.write_text("someone else's")
    with pytest.raises(InputError, match="not written by collectivetrace-nsys"):
        write_trace(result, path, force=True)
    assert path.read_text() == "someone else's"


@pytest.mark.parametrize("name", ["fs24-allreduce2x-9rank-3node", "nsys-ai-2gpu"])
def test_real_exports_write_valid_traces(name, tmp_path):
    analysis, result = analyze(need_real(REAL / name))
    check_trace(export(result, tmp_path), analysis)
