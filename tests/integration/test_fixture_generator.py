"""Tests of scripts/generate_fixture.py: determinism, counts, committed fixtures, planted truth.

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
        "WHERE s.value LIKE 'nccl%' ORDER BY k.start").fetchall()


@pytest.fixture(scope="module")
def small_sets(tmp_path_factory):
    """One small set per scenario (module-wide: generating is the slow part)."""
    base = tmp_path_factory.mktemp("sets")
    out = {}
    for sc in gen.SCENARIOS:
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
    assert _set_digests(a) == _set_digests(b)
    assert _set_digests(a) != _set_digests(c)


def test_shuffle_changes_order_only(tmp_path):
    gen.generate(tmp_path / "o", seed=2, scenario="late_launch", **SMALL)
    gen.generate(tmp_path / "s", seed=2, scenario="late_launch", shuffle_rows=True, **SMALL)
    to, ts = _truth(tmp_path / "o"), _truth(tmp_path / "s")
    assert to["collectives"] == ts["collectives"] and to["causes"] == ts["causes"]
    for table in ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_RUNTIME", "NVTX_EVENTS"):
        with _db(tmp_path / "o" / "rep_1.sqlite") as do, _db(tmp_path / "s" / "rep_1.sqlite") as ds:
            ro = do.execute(f"SELECT * FROM {table}").fetchall()
            rs = ds.execute(f"SELECT * FROM {table}").fetchall()
        key = lambda r: tuple((x is None, x) for x in r)  # noqa: E731
        assert sorted(ro, key=key) == sorted(rs, key=key)
        assert [r[0] for r in ro] == sorted(r[0] for r in ro)  # default: time order
        assert [r[0] for r in rs] != sorted(r[0] for r in rs)


def test_counts_match_tables(small_sets):
    for sc, d in small_sets.items():
        truth = _truth(d)
        for r in truth["ranks"]:
            with _db(d / r["file"]) as db:
                q = lambda sql: db.execute(sql).fetchone()[0]  # noqa: E731
                assert q("SELECT COUNT(*) FROM CUPTI_ACTIVITY_KIND_KERNEL") == r["kernels"], sc
                assert len(_nccl_kernels(db)) == r["nccl_kernels"] == len(truth["collectives"])
                assert q("SELECT COUNT(*) FROM CUPTI_ACTIVITY_KIND_MEMCPY") == r["memcpys"]
                assert q("SELECT COUNT(*) FROM CUPTI_ACTIVITY_KIND_RUNTIME") == r["runtime_calls"]
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


def test_arrivals_recovered_from_tables(small_sets, tmp_path):
    sets = dict(small_sets)
    gen.generate(tmp_path / "n", seed=4, scenario="extra_kernel", normalized_time=True, drift_ppm=50.0, **SMALL)
    sets["normalized"] = tmp_path / "n"
    for sc, d in sets.items():
        truth = _truth(d)
        for r in truth["ranks"]:
            with _db(d / r["file"]) as db:
                rows = np.array(_nccl_kernels(db), np.int64)
            starts = _true_time(rows[:, 0], r["rank"], truth)
            ends = _true_time(rows[:, 1], r["rank"], truth)
            want_a = np.array([c["arrival_ns"][r["rank"]] for c in truth["collectives"]])
            want_e = np.array([c["end_ns"][r["rank"]] for c in truth["collectives"]])
            assert np.abs(starts - want_a).max() <= 1_000, sc
            assert np.abs(ends - want_e).max() <= 1_000, sc


def test_truth_is_self_consistent(small_sets):
    for sc, d in small_sets.items():
        truth = _truth(d)
        for c in truth["collectives"]:
            a = np.array(c["arrival_ns"])
            assert c["last_arrival_ns"] == a.max() and c["straggler_rank"] == int(a.argmax())
            assert c["wait_ns"] == (a.max() - a).tolist() and c["wait_cost_ns"] == sum(c["wait_ns"])
            assert all(e > c["last_arrival_ns"] for e in c["end_ns"])
            assert abs(np.median(c["end_ns"]) - c["last_arrival_ns"] - c["transfer_ns"]) <= 2_000
        for cause in truth["causes"]:
            if cause["type"] != "contention":
                assert cause["extra_ns_total"] == sum(cause["extra_ns_per_step"]) > 0


def _stragglers(truth, pick=lambda c: True):
    return [c["straggler_rank"] for c in truth["collectives"] if pick(c)]


def test_slow_kernel_rank_is_every_straggler(small_sets):
    truth = _truth(small_sets["slow_kernel"])
    (cause,) = truth["causes"]
    assert set(_stragglers(truth)) == {cause["rank"]}
    assert cause["expected"]["collectives_delayed"] == len(truth["collectives"])
    # the tables show the kernel 35% longer on the planted rank
    means = []
    for r in truth["ranks"]:
        with _db(small_sets["slow_kernel"] / r["file"]) as db:
            means.append(db.execute(
                "SELECT AVG(k.end - k.start) FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s "
                "ON s.id = k.shortName WHERE s.value = ?", (cause["kernel"],)).fetchone()[0])
    others = np.median([m for i, m in enumerate(means) if i != cause["rank"]])
    assert means[cause["rank"]] / others == pytest.approx(gen.SLOW_FACTOR, rel=0.03)


def test_bucket0_causes_make_their_rank_late(small_sets):
    for sc in ("extra_kernel", "late_launch"):
        truth = _truth(small_sets[sc])
        (cause,) = truth["causes"]
        assert set(_stragglers(truth, lambda c: c["bucket"] == 0)) == {cause["rank"]}, sc
        assert cause["expected"]["collectives_delayed"] == truth["params"]["steps"]
    truth = _truth(small_sets["mixed"])
    slow, late = truth["causes"]
    assert slow["rank"] != late["rank"]
    assert set(_stragglers(truth, lambda c: c["step"] % 2 == 0)) == {slow["rank"]}
    assert set(_stragglers(truth, lambda c: c["step"] % 2 == 1 and c["bucket"] == 0)) == {late["rank"]}
    assert all(len(c["planted"]) <= 1 for c in truth["collectives"])


def test_late_launch_sits_in_dataloader_range(small_sets):
    truth = _truth(small_sets["late_launch"])
    (cause,) = truth["causes"]
    r = truth["ranks"][cause["rank"]]
    with _db(small_sets["late_launch"] / r["file"]) as db:
        ranges = db.execute(
            "SELECT n.start, n.end FROM NVTX_EVENTS n JOIN StringIds s ON s.id = n.textId "
            "WHERE s.value = ? AND n.eventType = 59", (cause["nvtx"],)).fetchall()
        launches = db.execute(
            "SELECT r.start, k.start FROM CUPTI_ACTIVITY_KIND_RUNTIME r JOIN CUPTI_ACTIVITY_KIND_KERNEL k "
            "ON k.correlationId = r.correlationId ORDER BY k.start").fetchall()
    long_ranges = [(s, e) for s, e in ranges if e - s > 1_000_000]
    assert len(long_ranges) == truth["params"]["steps"]
    for s, e in long_ranges:
        # the GPU idles from the previous kernel's end until the late kernel; the range covers that
        nxt = min(i for i, (ls, _) in enumerate(launches) if ls > e)
        late_launch, late_kernel = launches[nxt]
        assert 0 < late_launch - e <= 2_000
        assert late_kernel - s > 0.8 * gen.LATE_DELAY


def test_contention_overlaps_the_slow_transfers(small_sets):
    d = small_sets["contention"]
    truth = _truth(d)
    (cause,) = truth["causes"]
    slowed = [c for c in truth["collectives"] if c["slowed"]]
    assert [c["seq"] for c in slowed] == cause["collectives"]
    assert all(c["step"] % 2 == 1 for c in slowed) and len(slowed) < len(truth["collectives"])
    for c in slowed:
        assert c["transfer_ns"] == round(c["base_transfer_ns"] * gen.CONTENTION_FACTOR)
    r = truth["ranks"][cause["rank"]]
    with _db(d / r["file"]) as db:
        side = np.array(db.execute("SELECT start, end FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE streamId = ? "
                                   "ORDER BY start", (gen.STREAM_SIDE,)).fetchall(), np.int64)
    assert len(side) == len(slowed)
    s, e = _true_time(side[:, 0], r["rank"], truth), _true_time(side[:, 1], r["rank"], truth)
    for c, si, ei in zip(slowed, s, e):
        assert c["last_arrival_ns"] < si < ei < min(c["end_ns"])
        assert ei - si > 0.5 * c["transfer_ns"]


def test_contention_on_all_ranks(tmp_path):
    gen.generate(tmp_path, scenario="contention", contention_ranks="all", seed=3, **SMALL)
    truth = _truth(tmp_path)
    (cause,) = truth["causes"]
    assert cause["rank"] is None and cause["ranks"] == list(range(SMALL["ranks"]))
    assert cause["contention_ns_total"] == SMALL["ranks"] * sum(cause["extra_transfer_ns"])
    for r in truth["ranks"]:
        with _db(tmp_path / r["file"]) as db:
            n = db.execute("SELECT COUNT(*) FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE streamId = ?",
                           (gen.STREAM_SIDE,)).fetchone()[0]
        assert n == len(cause["collectives"])


@pytest.mark.parametrize("version", sorted(gen.EXPORT_VERSIONS))
def test_table_layout_follows_nsys_version(version, tmp_path):
    gen.generate(tmp_path, nsys_version=version, seed=9, **SMALL)
    ddl = dict(gen.DDL_2024_5)
    if version == "2026.2":
        ddl.update(gen.DDL_2026_2_CHANGED)
    with _db(tmp_path / "rep_0.sqlite") as db:
        assert dict(db.execute("SELECT name, sql FROM sqlite_master WHERE type = 'table'")) == ddl
        meta = dict(db.execute("SELECT name, value FROM META_DATA_EXPORT"))
        assert db.execute("SELECT COUNT(*) FROM sqlite_master WHERE type = 'index'").fetchone()[0] == 0
    assert meta["EXPORT_PRODUCT_VERSION"] == gen.EXPORT_VERSIONS[version]["product"]
    assert meta["EXPORT_SCHEMA_VERSION"] == gen.EXPORT_VERSIONS[version]["schema"]
    assert meta["EXPORT_PARAM_TIME_NORMALIZE"] == "false" and meta["EXPORT_PARAM_INCLUDE_BLOBS"] == "false"
    assert meta["GENERATED_BY"].startswith("scripts/generate_fixture.py --seed 9 ")


def test_balanced_has_no_dominant_straggler(tmp_path):
    # enough collectives (60) for the share to mean something; small_sets' 8 would not
    gen.generate(tmp_path / "b", ranks=4, hosts=2, steps=30, kernels_per_step=28, buckets=2,
                 scenario="balanced", seed=1)
    for d in (tmp_path / "b", FIXTURES / "balanced-2rank"):
        truth = _truth(d)
        assert truth["causes"] == []
        counts = np.bincount(_stragglers(truth), minlength=len(truth["ranks"]))
        assert counts.max() <= 0.6 * counts.sum(), (d, counts)


def test_host_timeline_is_consistent(small_sets):
    """Runtime calls never overlap on the thread, precede their kernel, and NVTX ranges nest."""
    for sc, d in small_sets.items():
        truth = _truth(d)
        for r in truth["ranks"]:
            with _db(d / r["file"]) as db:
                calls = db.execute("SELECT start, end, correlationId FROM CUPTI_ACTIVITY_KIND_RUNTIME "
                                   "ORDER BY start").fetchall()
                gpu = dict(db.execute("SELECT correlationId, start FROM CUPTI_ACTIVITY_KIND_KERNEL UNION ALL "
                                      "SELECT correlationId, start FROM CUPTI_ACTIVITY_KIND_MEMCPY"))
                ranges = db.execute("SELECT start, end FROM NVTX_EVENTS WHERE eventType = 59 "
                                    "ORDER BY start, end DESC").fetchall()
            assert len(gpu) == len(calls) == r["runtime_calls"]
            assert all(c[1] < n[0] for c, n in zip(calls, calls[1:])), sc
            assert all(0 < gpu[c] - e < 10_000 for _, e, c in calls), sc
            stack = []
            for s, e in ranges:
                while stack and stack[-1] <= s:
                    stack.pop()
                assert not stack or e <= stack[-1], (sc, s, e)
                stack.append(e)


def test_refuses_non_empty_out_dir(tmp_path):
    (tmp_path / "keep.txt").write_text("x")
    with pytest.raises(FileExistsError):
        gen.generate(tmp_path, **SMALL)
    assert gen.main([str(tmp_path), "--ranks", "2", "--steps", "1", "--kernels-per-step", "12"]) == 2
    assert [p.name for p in tmp_path.iterdir()] == ["keep.txt"]
    assert gen.main([str(tmp_path), "--ranks", "2", "--steps", "1", "--kernels-per-step", "12",
                     "--scenario", "balanced", "--force"]) == 0
    assert (tmp_path / "truth.json").exists() and (tmp_path / "keep.txt").exists()


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
