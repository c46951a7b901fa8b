"""Tests of the fixture generator (fixturegen/, scripts/generate_fixture.py): determinism, row counts,
the recorded times against the planted truth, the job's realism (queues, event waits, stalls),
the committed fixtures.

Only plain sqlite3 queries here: the point is to check the generator, not to test a reader.
"""

from __future__ import annotations

import hashlib
import json
import re
import shlex
import sqlite3
from pathlib import Path

import numpy as np
import pytest

from conftest import FIXTURES, ROOT, gen

SMALL = dict(ranks=4, hosts=2, steps=4, kernels_per_step=28, buckets=2)
SCENARIOS = ("balanced", "mixed") + gen.CAUSES


def _db(path):
    return sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True)


def _table_digests(path):
    """sha256 of every table's DDL and rows, in stored order."""
    out = {}
    with _db(path) as db:
        for name, sql in db.execute("SELECT name, sql FROM sqlite_master WHERE type='table' ORDER BY name"):
            h = hashlib.sha256(sql.encode())
            for row in db.execute(f'SELECT * FROM "{name}" ORDER BY rowid'):
                h.update(repr(row).encode())
            out[name] = h.hexdigest()
    return out


def _set_digests(d):
    return {p.name: _table_digests(p) for p in sorted(Path(d).glob("rep_*.sqlite"))}


def _truth(d):
    return json.loads((Path(d) / "truth.json").read_text())


def _true_time(stored, rank, truth):
    """Undo the planted clock: stored -> recorded UTC -> true UTC (int64 ns)."""
    r = truth["ranks"][rank]
    h = truth["hosts"][r["host"]]
    rec = np.asarray(stored, np.int64) + (0 if truth["time_normalized"] else r["utc_epoch_ns"])
    t0 = truth["t0_ns"]
    return t0 + np.rint((rec - t0 - h["offset_ns"]) / (1.0 + h["drift_ppm"] * 1e-6)).astype(np.int64)


def _nccl_kernels(db):
    return db.execute(
        "SELECT k.start, k.end FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s ON s.id = k.shortName "
        "WHERE s.value LIKE 'nccl%' ORDER BY k.start, k.end").fetchall()


def _calls(db, name):
    return db.execute("SELECT r.start, r.end, r.correlationId FROM CUPTI_ACTIVITY_KIND_RUNTIME r JOIN StringIds s "
                      "ON s.id = r.nameId WHERE s.value = ? ORDER BY r.start", (name,)).fetchall()


@pytest.fixture(scope="module")
def small_sets(tmp_path_factory):
    """One small DDP set per scenario (module-wide: generating is the slow part)."""
    base = tmp_path_factory.mktemp("sets")
    out = {}
    for sc in SCENARIOS:
        d = base / sc
        gen.generate(d, scenario=sc, seed=11, drift_ppm=20.0, **SMALL)
        out[sc] = d
    return out


def test_same_seed_same_output(tmp_path):
    a, b, c = tmp_path / "a", tmp_path / "b", tmp_path / "c"
    gen.generate(a, seed=5, scenario="mixed", shuffle_rows=True, **SMALL)
    gen.generate(b, seed=5, scenario="mixed", shuffle_rows=True, **SMALL)
    gen.generate(c, seed=6, scenario="mixed", shuffle_rows=True, **SMALL)
    assert (a / "truth.json").read_bytes() == (b / "truth.json").read_bytes()
    assert all((a / p.name).read_bytes() == p.read_bytes() for p in b.glob("rep_*.sqlite"))
    assert _set_digests(a) == _set_digests(b)
    assert _set_digests(a) != _set_digests(c)


def test_shuffle_changes_order_only(tmp_path):
    gen.generate(tmp_path / "o", seed=2, scenario="host_stall", **SMALL)
    gen.generate(tmp_path / "s", seed=2, scenario="host_stall", shuffle_rows=True, **SMALL)
    to, ts = _truth(tmp_path / "o"), _truth(tmp_path / "s")
    assert to["collectives"] == ts["collectives"] and to["causes"] == ts["causes"] and to["whatif"] == ts["whatif"]
    for table in ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_RUNTIME", "NVTX_EVENTS",
                  "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION"):
        with _db(tmp_path / "o" / "rep_1.sqlite") as do, _db(tmp_path / "s" / "rep_1.sqlite") as ds:
            ro = do.execute(f"SELECT * FROM {table}").fetchall()
            rs = ds.execute(f"SELECT * FROM {table}").fetchall()
        key = lambda r: tuple((x is None, x) for x in r)  # noqa: E731
        assert sorted(ro, key=key) == sorted(rs, key=key)
        assert [r[0] for r in ro] == sorted(r[0] for r in ro)  # default: time order
        assert [r[0] for r in rs] != sorted(r[0] for r in rs)


def check_counts(d, truth):
    """Row counts in truth.json equal SELECT COUNT(*) of the tables; identity as planted."""
    for r in truth["ranks"]:
        with _db(Path(d) / r["file"]) as db:
            q = lambda sql: db.execute(sql).fetchone()[0]  # noqa: E731
            tables = {n for (n,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            assert q("SELECT COUNT(*) FROM CUPTI_ACTIVITY_KIND_KERNEL") == r["kernels"]
            member_of = sum(1 for c in truth["collectives"] if r["rank"] in c["ranks"])
            assert len(_nccl_kernels(db)) == r["nccl_kernels"] == member_of
            assert q("SELECT COUNT(*) FROM CUPTI_ACTIVITY_KIND_MEMCPY") == r["memcpys"]
            assert q("SELECT COUNT(*) FROM CUPTI_ACTIVITY_KIND_MEMSET") == r["memsets"]
            assert q("SELECT COUNT(*) FROM CUPTI_ACTIVITY_KIND_RUNTIME") == r["runtime_calls"]
            if truth["params"]["sync_records"]:
                assert q("SELECT COUNT(*) FROM CUPTI_ACTIVITY_KIND_SYNCHRONIZATION") == r["sync_records"] > 0
                assert q("SELECT COUNT(*) FROM CUPTI_ACTIVITY_KIND_CUDA_EVENT") == r["event_records"] > 0
            else:
                assert not tables & {"CUPTI_ACTIVITY_KIND_SYNCHRONIZATION", "CUPTI_ACTIVITY_KIND_CUDA_EVENT"}
                assert r["sync_records"] == r["event_records"] == 0
            assert q("SELECT COUNT(*) FROM NVTX_EVENTS") == r["nvtx_events"]
            assert q("SELECT COUNT(*) FROM NVTX_EVENTS WHERE eventType = 59") == r["nvtx_ranges"]
            assert q("SELECT COUNT(*) FROM StringIds") == r["strings"]
            assert q("SELECT utcEpochNs FROM TARGET_INFO_SESSION_START_TIME") == r["utc_epoch_ns"]
            assert q("SELECT value FROM TARGET_INFO_SYSTEM_ENV WHERE name = 'Hostname'") == r["host"]
            env = {v for (v,) in db.execute(
                "SELECT value FROM META_DATA_CAPTURE WHERE name = 'PROCESS_0:ENVIRONMENT_VARIABLE'")}
            assert f'RANK="{r["rank"]}"' in env and f'LOCAL_RANK="{r["local_rank"]}"' in env
            assert q("SELECT pid FROM PROCESSES") == r["pid"] == (r["global_pid"] >> 24) & 0xFFFFFF
            assert {x for (x,) in db.execute("SELECT DISTINCT deviceId FROM CUPTI_ACTIVITY_KIND_KERNEL")} \
                == {r["device"]}


def test_counts_match_tables(small_sets):
    for sc, d in small_sets.items():
        check_counts(d, _truth(d))


def check_arrivals(d, truth, tolerance=1_000):
    """Each rank's NCCL kernels, undone to true time, are the truth's arrivals and ends."""
    for r in truth["ranks"]:
        with _db(Path(d) / r["file"]) as db:
            rows = np.array(_nccl_kernels(db), np.int64)
        mine = [(c["arrival_ns"][c["ranks"].index(r["rank"])], c["end_ns"][c["ranks"].index(r["rank"])])
                for c in truth["collectives"] if r["rank"] in c["ranks"]]
        want = np.array(sorted(mine), np.int64)
        assert np.abs(_true_time(rows[:, 0], r["rank"], truth) - want[:, 0]).max() <= tolerance
        assert np.abs(_true_time(rows[:, 1], r["rank"], truth) - want[:, 1]).max() <= tolerance


def test_arrivals_recovered_from_tables(small_sets, tmp_path):
    sets = dict(small_sets)
    gen.generate(tmp_path / "n", seed=4, scenario="extra_kernel", normalized_time=True, drift_ppm=50.0, **SMALL)
    sets["normalized"] = tmp_path / "n"
    for sc, d in sets.items():
        check_arrivals(d, _truth(d))


def check_truth(truth):
    """The truth's own arithmetic: waits from arrivals, what-if sums, the ideal."""
    total = 0
    for c in truth["collectives"]:
        a = np.array(c["arrival_ns"])
        assert c["last_arrival_ns"] == a.max() and c["straggler_rank"] == c["ranks"][int(a.argmax())]
        assert c["wait_ns"] == (a.max() - a).tolist() and c["wait_cost_ns"] == sum(c["wait_ns"])
        assert all(e > c["last_arrival_ns"] for e in c["end_ns"])
        ends = np.array(c["end_ns"], np.int64) - c["last_arrival_ns"]  # relative: float64 cannot hold UTC ns
        assert abs(np.median(ends) - c["transfer_ns"]) <= 2_000
        assert c["transfer_ns"] >= c["base_transfer_ns"]
        total += c["wait_cost_ns"]
    w = truth["whatif"]
    assert w["actual"]["wait_ns"] == total == truth["expected"]["wait_cost_ns_total"]
    assert w["ideal"]["wait_saved_ns"] == w["actual"]["wait_ns"] - w["baseline"]["wait_ns"]
    steps = truth["params"]["steps"]
    for block in (w["actual"], w["baseline"]):
        ends = np.array(block["step_end_ns"])
        assert len(ends) == steps and np.all(np.diff(ends) > 0)
        assert block["step_time_ns"] == np.diff(np.concatenate([[block["job_start_ns"]], ends])).tolist()
    ideal_step = np.mean(np.array(w["actual"]["step_time_ns"]) - np.array(w["baseline"]["step_time_ns"]))
    assert w["ideal"]["step_time_saved_ns"] == round(ideal_step)
    for cause in truth["causes"]:
        per = [c["saved_wait_ns"].get(cause["id"], 0) for c in truth["collectives"]]
        assert sum(per) == cause["wait_saved_ns"]
        assert cause["collectives"] == [i for i, p in enumerate(per) if p != 0]
        assert len(cause["step_end_ns_without"]) == steps
        if cause["type"] not in ("contention", "slow_network", *gen.overlap_causes.TRANSFER_CAUSES):
            assert cause["extra_ns_total"] == sum(cause["extra_ns_per_step"]) > 0
    if len(truth["causes"]) == 1:  # removing the only cause is the ideal
        (cause,) = truth["causes"]
        assert cause["wait_saved_ns"] == w["ideal"]["wait_saved_ns"]
        assert cause["step_time_saved_ns"] == w["ideal"]["step_time_saved_ns"]


def test_truth_is_self_consistent(small_sets):
    for sc, d in small_sets.items():
        check_truth(_truth(d))


def _stragglers(truth, pick=lambda c: True):
    return [c["straggler_rank"] for c in truth["collectives"] if pick(c)]


def test_slow_kernel_rank_is_every_straggler(small_sets):
    truth = _truth(small_sets["slow_kernel"])
    (cause,) = truth["causes"]
    assert set(_stragglers(truth)) == {cause["rank"]}
    assert cause["expected"]["collectives_delayed"] == len(truth["collectives"])
    assert cause["wait_saved_ns"] > 0.5 * truth["whatif"]["actual"]["wait_ns"]
    # the tables show the kernel 35% longer on the planted rank
    means = []
    for r in truth["ranks"]:
        with _db(small_sets["slow_kernel"] / r["file"]) as db:
            means.append(db.execute(
                "SELECT AVG(k.end - k.start) FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s "
                "ON s.id = k.shortName WHERE s.value = ?", (cause["kernel"],)).fetchone()[0])
    others = np.median([m for i, m in enumerate(means) if i != cause["rank"]])
    assert means[cause["rank"]] / others == pytest.approx(gen.SLOW_FACTOR, rel=0.03)


def test_a_rank_late_early_stays_late_for_every_later_bucket(small_sets):
    """DDP's buckets queue on the NCCL stream while backward goes on: a rank late before bucket 0
    (an extra kernel in its forward pass, a host stall at the step's start) is the straggler of
    every bucket of the step, and removing the cause saves wait in all of them."""
    for sc in ("extra_kernel", "host_stall"):
        truth = _truth(small_sets[sc])
        (cause,) = truth["causes"]
        assert set(_stragglers(truth)) == {cause["rank"]}, sc
        assert cause["expected"]["collectives_delayed"] == len(truth["collectives"])
        assert cause["collectives"] == list(range(len(truth["collectives"]))), "every bucket saves wait"
        last_buckets = [c for c in truth["collectives"] if c["bucket"] == max(x["bucket"] for x in truth["collectives"])]
        assert all(c["saved_wait_ns"][cause["id"]] > 0 for c in last_buckets)
    truth = _truth(small_sets["mixed"])
    slow, stall = truth["causes"]
    assert slow["rank"] != stall["rank"] and slow["steps"] == [0, 2] and stall["steps"] == [1, 3]
    assert set(_stragglers(truth, lambda c: c["step"] % 2 == 0)) == {slow["rank"]}
    assert set(_stragglers(truth, lambda c: c["step"] % 2 == 1)) == {stall["rank"]}
    assert all(set(c["saved_wait_ns"]) <= {slow["id"] if c["step"] % 2 == 0 else stall["id"]}
               for c in truth["collectives"])


def test_collectives_queue_behind_each_other_and_overlap_backward(small_sets):
    """Not a barrier: the compute stream goes on while the all-reduces run, and each all-reduce
    starts no earlier than the previous one on the NCCL stream ended."""
    d = small_sets["balanced"]
    truth = _truth(d)
    r = truth["ranks"][0]
    with _db(d / r["file"]) as db:
        nccl = np.array(db.execute("SELECT start, end FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE streamId = 13 "
                                   "ORDER BY start").fetchall(), np.int64)
        compute = np.array(db.execute("SELECT start, end FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE streamId = 7 "
                                      "ORDER BY start").fetchall(), np.int64)
    assert np.all(nccl[1:, 0] >= nccl[:-1, 1])
    overlapped = [np.sum(np.minimum(compute[:, 1], e) - np.maximum(compute[:, 0], s) > 0) for s, e in nccl]
    buckets = truth["size"]["buckets"]
    # every bucket but the last overlaps backward kernels; the last one runs alone (the optimizer waits for it)
    assert [o > 0 for o in overlapped] == [b != buckets - 1 for b in range(buckets)] * truth["params"]["steps"]


def test_stall_sits_in_its_range_while_the_gpu_idles(small_sets):
    truth = _truth(small_sets["host_stall"])
    (cause,) = truth["causes"]
    assert (cause["kind"], cause["nvtx"]) == ("dataloader", "DataLoader.__next__")
    r = truth["ranks"][cause["rank"]]
    with _db(small_sets["host_stall"] / r["file"]) as db:
        ranges = db.execute(
            "SELECT n.start, n.end FROM NVTX_EVENTS n JOIN StringIds s ON s.id = n.textId "
            "WHERE s.value = ? AND n.eventType = 59 ORDER BY n.start", (cause["nvtx"],)).fetchall()
        gpu = np.array(db.execute("SELECT start, end FROM CUPTI_ACTIVITY_KIND_KERNEL UNION ALL "
                                  "SELECT start, end FROM CUPTI_ACTIVITY_KIND_MEMCPY ORDER BY 1").fetchall(), np.int64)
    assert len(ranges) == truth["params"]["steps"]
    for (s, e), planted in zip(ranges, cause["extra_ns_per_step"]):
        assert 0.85 * gen.STALL_NS <= planted <= 1.15 * gen.STALL_NS
        assert e - s > planted
        # the GPU did nothing inside the range: the previous step had synchronized (loss.item())
        assert not np.any((gpu[:, 0] < e) & (gpu[:, 1] > s))


@pytest.mark.parametrize("kind", ["gc", "item"])
def test_other_stall_kinds(kind, tmp_path):
    truth = gen.generate(tmp_path, scenario="host_stall", stall=kind, seed=3, **SMALL)
    (cause,) = truth["causes"]
    assert cause["kind"] == kind and cause["nvtx"] == gen.STALL_RANGES[kind]
    assert cause["wait_saved_ns"] > 0 and cause["step_time_saved_ns"] > 0
    r = truth["ranks"][cause["rank"]]
    with _db(tmp_path / r["file"]) as db:
        ranges = db.execute("SELECT start, end FROM NVTX_EVENTS WHERE text = ? AND eventType = 59",
                            (cause["nvtx"],)).fetchall()
        sync_copies = _calls(db, "cudaMemcpy_v3020")
    assert len(ranges) == truth["params"]["steps"]
    assert all(e - s >= 0.85 * gen.STALL_NS for s, e in ranges)
    if kind == "item":  # a synchronous D2H copy of the metric inside each log_metrics range
        assert len(sync_copies) == len(ranges)
        assert all(any(s < cs and ce < e for cs, ce, _ in sync_copies) for s, e in ranges)
    else:
        assert sync_copies == []


def test_contention_overlaps_the_slow_transfers(small_sets):
    d = small_sets["contention"]
    truth = _truth(d)
    (cause,) = truth["causes"]
    slowed = [c for c in truth["collectives"] if c["slowed"]]
    assert [c["id"] for c in slowed] == cause["collectives_slowed"]
    assert all(c["step"] % 2 == 1 for c in slowed) and len(slowed) < len(truth["collectives"])
    for c in slowed:  # the contender covers the whole transfer phase: exactly 1.6x
        assert c["slowdown_factor"] == pytest.approx(gen.CONTENTION_FACTOR, abs=0.01)
    assert all(c["slowdown_factor"] == 1.0 for c in truth["collectives"] if not c["slowed"])
    r = truth["ranks"][cause["rank"]]
    with _db(d / r["file"]) as db:
        side = np.array(db.execute("SELECT k.start, k.end FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s "
                                   "ON s.id = k.shortName WHERE s.value = ? ORDER BY k.start",
                                   (cause["kernel"],)).fetchall(), np.int64)
        streams = {s for (s,) in db.execute("SELECT DISTINCT streamId FROM CUPTI_ACTIVITY_KIND_KERNEL")}
    assert len(side) == len(slowed)
    assert {gen.STREAM_SIDE, gen.STREAM_SIDE + 4} <= streams
    s, e = _true_time(side[:, 0], r["rank"], truth), _true_time(side[:, 1], r["rank"], truth)
    for c, si, ei in zip(slowed, s, e):
        assert si <= c["last_arrival_ns"] and ei >= max(c["end_ns"])
    assert cause["step_time_saved_ns"] > 0


def test_contention_on_all_ranks(tmp_path):
    gen.generate(tmp_path, scenario="contention", contention_ranks="all", seed=3, **SMALL)
    truth = _truth(tmp_path)
    (cause,) = truth["causes"]
    assert cause["rank"] is None and cause["ranks"] == list(range(SMALL["ranks"]))
    assert cause["contention_ns_total"] == SMALL["ranks"] * sum(cause["extra_transfer_ns"])
    for r in truth["ranks"]:
        with _db(tmp_path / r["file"]) as db:
            n = db.execute("SELECT COUNT(*) FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s ON s.id = k.shortName "
                           "WHERE s.value = ?", (cause["kernel"],)).fetchone()[0]
        assert n == len(cause["collectives_slowed"])


def test_slow_network_slows_the_transfers_leaving_its_host(small_sets):
    truth = _truth(small_sets["slow_network"])
    (cause,) = truth["causes"]
    assert cause["host"] in truth["hosts"] and cause["ranks"] == truth["hosts"][cause["host"]]["ranks"]
    slowed = [c for c in truth["collectives"] if c["slowed"]]
    assert [c["id"] for c in slowed] == cause["collectives_slowed"] and all(c["step"] % 2 == 1 for c in slowed)
    assert all(c["slowdown_factor"] == pytest.approx(gen.NETWORK_FACTOR, abs=0.01) for c in slowed)
    assert cause["step_time_saved_ns"] > 0


@pytest.mark.parametrize("version", sorted(gen.EXPORT_VERSIONS))
@pytest.mark.parametrize("sync_records", [True, False])
def test_table_layout_follows_nsys_version(version, sync_records, tmp_path):
    gen.generate(tmp_path, nsys_version=version, seed=9, sync_records=sync_records, **SMALL)
    with _db(tmp_path / "rep_0.sqlite") as db:
        assert dict(db.execute("SELECT name, sql FROM sqlite_master WHERE type = 'table'")) == \
            gen.ddl_for(version, sync_records)
        meta = dict(db.execute("SELECT name, value FROM META_DATA_EXPORT"))
        assert db.execute("SELECT COUNT(*) FROM sqlite_master WHERE type = 'index'").fetchone()[0] == 0
    assert meta["EXPORT_PRODUCT_VERSION"] == gen.EXPORT_VERSIONS[version]["product"]
    assert meta["EXPORT_SCHEMA_VERSION"] == gen.EXPORT_VERSIONS[version]["schema"]
    assert meta["EXPORT_PARAM_TIME_NORMALIZE"] == "false" and meta["EXPORT_PARAM_INCLUDE_BLOBS"] == "false"
    assert meta["GENERATED_BY"].startswith("scripts/generate_fixture.py --seed 9 ")


def test_ddl_is_verbatim_from_the_real_exports(real_dir):
    """Every table layout the generator writes is sqlite_master.sql of a real export, byte for byte."""
    def sql(path, table):
        with _db(path) as db:
            return db.execute("SELECT sql FROM sqlite_master WHERE name = ?", (table,)).fetchone()[0]
    fs24 = real_dir / "fs24-ring-6rank-2node" / "example_2_nsys_report_ault44.cscs.ch_739537.sqlite"
    ai = real_dir / "nsys-ai-2gpu" / "mfu_2gpu_before.sqlite"
    for table, text in {**gen.DDL_2024_5, **gen.DDL_2024_5_SYNC}.items():
        assert sql(fs24, table) == text, table
    for table, text in {**gen.DDL_2026_2_CHANGED, **gen.DDL_2026_2_SYNC}.items():
        assert sql(ai, table) == text, table


def test_balanced_has_no_dominant_straggler(tmp_path):
    # enough collectives (60) for the share to mean something; small_sets' 8 would not
    gen.generate(tmp_path / "b", ranks=4, hosts=2, steps=30, kernels_per_step=28, buckets=2,
                 scenario="balanced", seed=1)
    for d in (tmp_path / "b", FIXTURES / "balanced-2rank"):
        truth = _truth(d)
        assert truth["causes"] == [] and truth["whatif"]["ideal"]["wait_saved_ns"] == 0
        counts = np.bincount(_stragglers(truth), minlength=len(truth["ranks"]))
        assert counts.max() <= 0.6 * counts.sum(), (d, counts)


def check_host_timeline(d, truth):
    """Runtime calls never overlap on the thread, every GPU op starts after its call returned,
    NVTX ranges nest."""
    for r in truth["ranks"]:
        with _db(Path(d) / r["file"]) as db:
            calls = db.execute("SELECT start, end, correlationId FROM CUPTI_ACTIVITY_KIND_RUNTIME "
                               "ORDER BY start").fetchall()
            gpu = dict(db.execute("SELECT correlationId, start FROM CUPTI_ACTIVITY_KIND_KERNEL UNION ALL "
                                  "SELECT correlationId, start FROM CUPTI_ACTIVITY_KIND_MEMCPY UNION ALL "
                                  "SELECT correlationId, start FROM CUPTI_ACTIVITY_KIND_MEMSET"))
            sync_copy = {c for _, _, c in _calls(db, "cudaMemcpy_v3020")}
            ranges = db.execute("SELECT start, end FROM NVTX_EVENTS WHERE eventType = 59 "
                                "ORDER BY start, end DESC").fetchall()
        assert len(gpu) == r["kernels"] + r["memcpys"] + r["memsets"]
        assert len(calls) == r["runtime_calls"] > len(gpu), "event records, waits, synchronize calls too"
        assert all(c[1] < n[0] for c, n in zip(calls, calls[1:]))
        starts = {c: (s, e) for s, e, c in calls}
        assert set(gpu) <= set(starts)
        # asynchronous work starts after its call returned; a synchronous copy while its call blocks
        assert all(gpu[c] > starts[c][1] if c not in sync_copy else starts[c][0] < gpu[c] < starts[c][1] for c in gpu)
        stack = []
        for s, e in ranges:
            while stack and stack[-1] <= s:
                stack.pop()
            assert not stack or e <= stack[-1], (s, e)
            stack.append(e)


def test_host_timeline_is_consistent(small_sets, tmp_path):
    for sc, d in small_sets.items():
        check_host_timeline(d, _truth(d))
    gen.generate(tmp_path, scenario="host_stall", stall="item", seed=2, **SMALL)
    check_host_timeline(tmp_path, _truth(tmp_path))


def check_sync_records(d, truth):
    """SYNCHRONIZATION and CUDA_EVENT rows as nsys writes them, and the dependencies they record
    hold in the GPU timeline: after a stream wait, the waiting stream's next op starts no earlier
    than the work the waited-for record captured ended; a synchronize returns after its stream's
    last op ended."""
    for r in truth["ranks"]:
        with _db(Path(d) / r["file"]) as db:
            work = db.execute("SELECT start, end, streamId, correlationId FROM CUPTI_ACTIVITY_KIND_KERNEL UNION ALL "
                              "SELECT start, end, streamId, correlationId FROM CUPTI_ACTIVITY_KIND_MEMCPY UNION ALL "
                              "SELECT start, end, streamId, correlationId FROM CUPTI_ACTIVITY_KIND_MEMSET").fetchall()
            calls = {c: (s, e, n) for s, e, c, n in db.execute(
                "SELECT r.start, r.end, r.correlationId, s.value FROM CUPTI_ACTIVITY_KIND_RUNTIME r "
                "JOIN StringIds s ON s.id = r.nameId")}
            syncs = db.execute("SELECT start, end, streamId, correlationId, syncType, eventId "
                               "FROM CUPTI_ACTIVITY_KIND_SYNCHRONIZATION ORDER BY correlationId").fetchall()
            records = db.execute("SELECT streamId, correlationId, eventId FROM CUPTI_ACTIVITY_KIND_CUDA_EVENT "
                                 "ORDER BY correlationId").fetchall()
        names = {4294967295: None}
        expected = {"cudaStreamWaitEvent_v3020": 2, "cudaStreamSynchronize_v3020": 3,
                    "cudaDeviceSynchronize_v3020": 4, "cudaEventSynchronize_v3020": 1}
        assert sorted(c for c, (_, _, n) in calls.items() if n in expected) == [s[3] for s in syncs]
        assert sorted(c for c, (_, _, n) in calls.items() if n == "cudaEventRecord_v3020") == [x[1] for x in records]
        by_stream = {}
        for s, e, st, c in sorted(work, key=lambda w: w[3]):  # in call order
            by_stream.setdefault(st, []).append((c, s, e))
        for s, e, stream, corr, typ, event in syncs:
            cs, ce, name = calls[corr]
            assert expected[name] == typ and cs < s < e < ce
            if typ == 2:
                rec = [x for x in records if x[2] == event and x[1] < corr][-1]
                before = [w for w in by_stream.get(rec[0], []) if w[0] < rec[1]]
                after = [w for w in by_stream.get(stream, []) if w[0] > corr]
                if before and after:
                    assert after[0][1] >= before[-1][2]
            elif typ == 3:
                assert event == 4294967295 and names.get(stream, 0) is not None
                done = [w for w in by_stream[stream] if w[0] < corr]
                assert ce > done[-1][2]
            elif typ == 4:
                assert stream == event == 4294967295
                assert ce > max(w[2] for ws in by_stream.values() for w in ws if w[0] < corr)


def test_sync_records_match_the_timeline(small_sets, tmp_path):
    for sc in ("balanced", "host_stall", "contention"):
        check_sync_records(small_sets[sc], _truth(small_sets[sc]))
    for style in ("fsdp", "pp"):  # event synchronize (FSDP's all-gather limit), device synchronize (pp)
        gen.generate(tmp_path / style, style=style, scenario="balanced", seed=3, ranks=3, hosts=1, steps=2,
                     kernels_per_step=80 if style == "pp" else 40, microbatches=2)
        check_sync_records(tmp_path / style, _truth(tmp_path / style))


def test_no_sync_records_leaves_out_only_those_tables(tmp_path):
    gen.generate(tmp_path / "with", scenario="mixed", seed=8, **SMALL)
    gen.generate(tmp_path / "without", scenario="mixed", seed=8, sync_records=False, **SMALL)
    tw, to = _truth(tmp_path / "with"), _truth(tmp_path / "without")
    for key in ("collectives", "causes", "whatif", "hosts"):
        assert tw[key] == to[key], key
    dw, do = _set_digests(tmp_path / "with"), _set_digests(tmp_path / "without")
    for name, tables in dw.items():
        gone = {"CUPTI_ACTIVITY_KIND_SYNCHRONIZATION", "CUPTI_ACTIVITY_KIND_CUDA_EVENT", "ENUM_CUPTI_SYNC_TYPE"}
        assert set(tables) - set(do[name]) == gone
        same = {t: h for t, h in tables.items() if t not in gone | {"META_DATA_EXPORT"}}
        assert same == {t: h for t, h in do[name].items() if t in same}


def test_refuses_non_empty_out_dir(tmp_path):
    (tmp_path / "keep.txt").write_text("x")
    with pytest.raises(FileExistsError):
        gen.generate(tmp_path, **SMALL)
    assert gen.main([str(tmp_path), "--ranks", "2", "--steps", "1", "--kernels-per-step", "12"]) == 2
    assert [p.name for p in tmp_path.iterdir()] == ["keep.txt"]
    assert gen.main([str(tmp_path), "--ranks", "2", "--steps", "1", "--kernels-per-step", "12",
                     "--scenario", "balanced", "--force"]) == 0
    assert (tmp_path / "truth.json").exists() and (tmp_path / "keep.txt").exists()


def test_bad_arguments_are_refused(tmp_path):
    for kwargs, words in [(dict(scenario="slow_kernel+nope"), "unknown scenario"),
                          (dict(scenario="host_group", hosts=1), "at least 2 hosts"),
                          (dict(style="zero"), "unknown style"), (dict(stall="disk"), "unknown stall"),
                          (dict(scenario="slow_kernel+slow_kernel"), "twice"),
                          (dict(style="tp+ddp", ranks=5, hosts=2), "same number of ranks")]:
        with pytest.raises(ValueError, match=words):
            gen.generate(tmp_path / "x", **{**SMALL, **kwargs})
        assert not (tmp_path / "x").exists()


def _readme_commands():
    text = (FIXTURES / "README.md").read_text()
    return re.findall(r"^python scripts/generate_fixture\.py (fixtures/\S+) (.+)$", text, re.M)


def test_readme_lists_every_committed_set():
    listed = sorted(Path(d).name for d, _ in _readme_commands())
    present = sorted(p.name for p in FIXTURES.iterdir() if p.is_dir())
    assert listed == present == ["balanced-2rank", "demo-4rank-2host", "slow-kernel-8rank-3host"]


@pytest.mark.parametrize("out, rest", _readme_commands(), ids=[Path(o).name for o, _ in _readme_commands()])
def test_committed_fixtures_regenerate(out, rest, tmp_path):
    assert gen.main([str(tmp_path / "set"), *shlex.split(rest)]) == 0
    committed = ROOT / out
    assert (tmp_path / "set" / "truth.json").read_bytes() == (committed / "truth.json").read_bytes()
    assert _set_digests(tmp_path / "set") == _set_digests(committed)
    size = sum(p.stat().st_size for p in committed.iterdir())
    assert size < 1_500_000
