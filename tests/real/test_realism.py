"""The generated jobs against real traces: a DDP job's stream layout, event usage and overlap next
to the real 8-rank DLRM step (PyTorch profiler traces), the Kineto twin's categories and argument
keys next to real Kineto traces, the nsys synchronization rows next to a real 2026.2 export."""

from __future__ import annotations

import gzip
import json
import sqlite3
from collections import Counter, defaultdict

import pytest

from conftest import REAL, gen, no_real_data

DLRM = REAL / "kineto" / "param-dlrm-8rank"
HTA = REAL / "kineto" / "hta-trace_filter-2rank"


def load(path):
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rt") as f:
        return json.load(f)


def layout(doc):
    """Per trace: compute streams, NCCL streams, NCCL kernels, how many overlap a compute kernel,
    cudaStreamWaitEvent calls."""
    ev = doc["traceEvents"]
    kernels = [e for e in ev if e.get("cat") == "kernel"]
    nccl = [e for e in kernels if e["name"].startswith("nccl")]
    compute = [e for e in kernels if not e["name"].startswith("nccl")]
    overlapping = sum(1 for n in nccl if any(c["ts"] < n["ts"] + n["dur"] and c["ts"] + c["dur"] > n["ts"]
                                             for c in compute))
    return {"compute_streams": {e["args"]["stream"] for e in compute}, "nccl_streams": {e["args"]["stream"] for e in nccl},
            "nccl": len(nccl), "overlapping": overlapping,
            "waits": sum(1 for e in ev if e.get("cat") == "cuda_runtime" and e["name"] == "cudaStreamWaitEvent")}


@pytest.fixture(scope="module")
def ddp(tmp_path_factory):
    """A DDP job shaped like the DLRM one: 8 ranks on one host, Kineto traces."""
    folder = tmp_path_factory.mktemp("ddp")
    truth = gen.generate(folder, style="ddp", ranks=8, hosts=1, steps=2, kernels_per_step=64, buckets=4,
                         scenario="balanced", seed=4, format="kineto")
    return [load(folder / r["file"]) for r in truth["ranks"]]


@pytest.fixture(scope="module")
def dlrm():
    files = sorted(DLRM.glob("*.json"))
    if not files:
        pytest.skip(no_real_data(DLRM))
    return [load(f) for f in files]


def test_stream_layout_and_event_usage_like_dlrm(ddp, dlrm):
    for name, docs in (("dlrm", dlrm), ("generated", ddp)):
        for doc in docs:
            x = layout(doc)
            # NCCL on a stream of its own, compute on one or more others
            assert len(x["nccl_streams"]) == 1 and not x["nccl_streams"] & x["compute_streams"], name
            assert len(x["compute_streams"]) >= 1
            # a few cudaStreamWaitEvent per NCCL operation (DLRM: 5.5)
            assert 1 <= x["waits"] / x["nccl"] <= 8, (name, x)
            # not a barrier: NCCL kernels run beside compute kernels
            assert 0.2 <= x["overlapping"] / x["nccl"] < 1, (name, x)
    real = sum(layout(d)["waits"] / layout(d)["nccl"] for d in dlrm) / len(dlrm)
    ours = sum(layout(d)["waits"] / layout(d)["nccl"] for d in ddp) / len(ddp)
    assert 0.25 <= ours / real <= 4, (ours, real)


def keys_by_category(doc):
    keys = defaultdict(set)
    for e in doc["traceEvents"]:
        if e.get("ph") == "X":
            keys[e["cat"]] |= set(e.get("args", {}))
    return keys


def test_kineto_categories_and_args_like_real_traces(ddp, dlrm):
    ours = keys_by_category(ddp[0])
    reals = [keys_by_category(dlrm[0])]
    hta = sorted(HTA.glob("*.json.gz"))
    if hta:
        reals.append(keys_by_category(load(hta[0])))
    for real in reals:
        assert set(real) <= set(ours), set(real) - set(ours)
        for cat in ("kernel", "gpu_memcpy", "gpu_memset", "cuda_runtime"):
            assert real.get(cat, set()) <= ours[cat], (cat, real.get(cat, set()) - ours[cat])
        for cat in ("cpu_op", "user_annotation"):  # record_shapes' Input Dims/type: not written
            assert {"External id", "Ev Idx"} <= real[cat] & ours[cat]
    assert {"cuda_sync", "cuda_driver"} <= set(ours)
    real_top = set(dlrm[0]) - {"traceEvents", "record_shapes"}
    assert real_top <= set(ddp[0]), real_top - set(ddp[0])
    # the same CUPTI callback ids for the calls both have
    cbids = {}
    for doc in (dlrm[0], ddp[0]):
        for e in doc["traceEvents"]:
            if e.get("cat") == "cuda_runtime":
                assert cbids.setdefault(e["name"], e["args"]["cbid"]) == e["args"]["cbid"], e["name"]
    assert {"cudaLaunchKernel", "cudaStreamWaitEvent", "cudaStreamSynchronize", "cudaMemcpyAsync"} <= set(cbids)


def sync_rows(path):
    db = sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True)
    rows = db.execute("SELECT s.syncType, s.start - r.start, r.end - s.end, s.streamId, s.eventId, v.value "
                      "FROM CUPTI_ACTIVITY_KIND_SYNCHRONIZATION s JOIN CUPTI_ACTIVITY_KIND_RUNTIME r "
                      "ON r.correlationId = s.correlationId AND (r.globalTid >> 24) = (s.globalPid >> 24) "
                      "JOIN StringIds v ON v.id = r.nameId").fetchall()
    db.close()
    return rows


def test_sync_rows_like_a_real_export(real_dir, tmp_path):
    real = sync_rows(real_dir / "nsys-ai-2gpu" / "mfu_2gpu_before.sqlite")
    gen.generate(tmp_path, style="fsdp", ranks=2, hosts=1, steps=2, kernels_per_step=40, scenario="balanced", seed=2,
                 nsys_version="2026.2")
    ours = sync_rows(tmp_path / "rep_0.sqlite")
    for rows in (real, ours):
        # inside their call, within a few microseconds of its edges
        assert all(0 < a < 5_000 and 0 < b < 5_000 for _, a, b, *_ in rows)
        by_type = Counter(t for t, *_ in rows)
        assert by_type[2] > 0 and by_type[3] > 0
        # stream waits name a stream and an event; stream syncs no event
        assert all(s != 4294967295 and e != 4294967295 for t, _, _, s, e, _ in rows if t == 2)
        assert all(e == 4294967295 for t, _, _, _, e, _ in rows if t == 3)
        names = {(t, n) for t, *_, n in rows}
        assert {(2, "cudaStreamWaitEvent_v3020"), (3, "cudaStreamSynchronize_v3020")} <= names
