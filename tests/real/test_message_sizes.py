"""Message sizes from NCCL's network NVTX (issue 14, point 7): the real nccl-net set records every
ncclNetIsend with its Data_Size, channel and sequence; a ring's sends give the message size by the
nccl-tests bus factor, a tree's do not, and where nothing records a size it stays null, a warning
saying why."""

from __future__ import annotations

import re
import sqlite3
from types import SimpleNamespace

import numpy as np
import pytest

from conftest import REAL, analyzed, gen, need_real
from nsys_collective.model.nccl_net import wire_bytes
from nsys_collective.model.timing import message_sizes
from nsys_collective.model.nccl import ALGORITHMS, OPS

MIB = 1 << 20


def real(name):
    return need_real(REAL / name)


def distinct_sends_in_kernel(path):
    """(distinct sends, their bytes, every Isend event) inside the rank's NCCL kernel, read with sqlite3."""
    with sqlite3.connect(f"file:{path}?immutable=1", uri=True) as db:
        start, end = db.execute("SELECT start, end FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()
        texts = [t for (t,) in db.execute(
            "SELECT COALESCE(e.text, s.value) FROM NVTX_EVENTS e LEFT JOIN StringIds s ON s.id = e.textId "
            "WHERE e.start BETWEEN ? AND ?", (start, end)) if t and t.startswith("ncclNetIsend(): Data_Size")]
    fields = {tuple(int(x) for x in re.findall(r"\d+", t)) for t in texts}  # size, sender, receiver, channel, sequence
    return len(fields), sum(f[0] for f in fields), len(texts)


def test_nccl_net_allreduce_is_8_mib_from_its_ranks_distinct_sends():
    folder = real("nccl-net-2rank-2node")
    for path in sorted(folder.glob("*.sqlite")):
        distinct, sent, events = distinct_sends_in_kernel(path)
        assert distinct == 8 and sent == 8 * MIB  # eight 1 MiB slices on channel 0, sequences 0..14
        assert events >= distinct  # rank 0 retried its first send hundreds of times
    job, result = analyzed([folder])
    assert job.collectives.wire_bytes.tolist() == [8 * MIB]
    (c,) = result.doc["collectives"]
    # 2 ranks: a ring AllReduce sends 2(n-1)/n = 1 x the message from every rank
    assert (c["op"], c["ranks"], c["bytes"], c["bytes_source"]) == ("AllReduce", 2, 8 * MIB, "nccl_net_nvtx")
    assert c["busbw_gbps"] == pytest.approx(8 * MIB / c["transfer_ns"])
    assert not any("message size unknown" in w for w in result.doc["warnings"])


def test_retries_of_one_send_count_once():
    folder = real("nccl-net-2rank-2node")
    rank0 = next(p for p in folder.glob("*.sqlite") if "906448" in p.name)
    distinct, _, events = distinct_sends_in_kernel(rank0)
    assert (distinct, events) == (8, 717)  # 707 posts of sequence 0 alone


def test_six_rank_ring_size_within_chunk_rounding():
    """fs24-ring (RING, 2M floats = 8 MiB): the rank crossing hosts sent 10/6 of the message, give
    or take NCCL's chunk rounding (0.1%)."""
    _, result = analyzed([real("fs24-ring-6rank-2node")])
    (c,) = result.doc["collectives"]
    assert c["bytes_source"] == "nccl_net_nvtx" and c["bytes"] == pytest.approx(8 * MIB, rel=0.001)


def test_tree_sends_give_no_size_and_a_warning_says_why():
    _, result = analyzed([real("fs24-allreduce2x-9rank-3node")])
    assert [(c["bytes"], c["bytes_source"]) for c in result.doc["collectives"]] == [(None, None)] * 2
    assert any(w.startswith("message size unknown for 2 of 2 collectives whose network sends NCCL's NVTX recorded: "
                            "they did not run as a ring") for w in result.doc["warnings"])


def test_sets_without_sizes_keep_null_with_the_reason():
    _, result = analyzed([real("nsys-ai-2gpu")])
    assert {c["bytes_source"] for c in result.doc["collectives"]} == {None}
    assert any(w.startswith("message size unknown for 33 of 33 collectives, so bytes and busbw_gbps are null")
               for w in result.doc["warnings"])


def test_recorded_sizes_of_profiler_traces_say_so(tmp_path):
    truth = gen.generate(tmp_path, style="ddp", ranks=2, hosts=2, steps=2, buckets=2, kernels_per_step=12,
                         scenario="balanced", seed=1, format="kineto")
    _, result = analyzed([tmp_path])
    got = [(c["bytes"], c["bytes_source"]) for c in result.doc["collectives"]]
    assert got == [(c["bytes"], "record_param_comms") for c in truth["collectives"]]


def test_wire_bytes_dedupes_retries_and_assigns_sends_to_the_running_operation():
    text = ["ncclNetIsend(): Data_Size: {}, Sender_Rank: 0, Receiver_Rank: 1, Channel_ID: {}, Sequence: {}",
            "ncclNetIrecv(): Data_Size: 100, Sender_Rank: 1, Receiver_Rank: 0, Channel_ID: 0, Sequence: 0",
            "ncclNetIsend()"]
    strings = [text[0].format(1000, 0, 0), text[0].format(1000, 1, 0), text[0].format(500, 0, 2), text[1], text[2],
               text[0].format(7, 0, 4)]
    # (time, string): op 0 runs [100, 200], op 1 [300, 400]
    events = [(110, 0), (120, 0), (130, 0), (140, 1), (150, 3), (160, 4), (310, 2), (320, 2), (250, 5), (500, 5)]
    nvtx = {"start": np.array([t for t, _ in events]), "name": np.array([s for _, s in events]),
            "pid": np.full(len(events), 7)}
    export = SimpleNamespace(nvtx=nvtx, names=lambda ids: np.array([strings[i] for i in ids], dtype=object))
    got = wire_bytes(export, 7, np.array([100, 300, 600]), np.array([200, 400, 700]))
    assert got.tolist() == [2000, 500, -1]  # a retried send once, two channels, the receive and between-op sends not


def test_only_rings_and_point_to_point_convert_wire_bytes():
    op = np.array([OPS.index("AllReduce")] * 3 + [OPS.index("SendRecv"), OPS.index("AllGather")])
    algorithm = np.array([ALGORITHMS.index("RING"), ALGORITHMS.index("TREE"), -1, -1, ALGORITHMS.index("RING")])
    size, source = message_sizes(np.full(5, -1), np.array([1200, 1200, 1200, 64, 300]), op, np.full(5, 4), algorithm)
    assert size.tolist() == [800, -1, -1, 64, 400]  # 2(n-1)/n = 1.5 and (n-1)/n = 0.75 for n = 4
    assert source.tolist() == ["nccl_net_nvtx", None, None, "nccl_net_nvtx", "nccl_net_nvtx"]


@pytest.mark.parametrize("name", ["nccl-net-2rank-2node", "nsys-ai-2gpu", "fs24-ring-6rank-2node"])
def test_real_exports_declare_the_payload_schemas_but_hold_no_blob(name):
    """Every real set declares NCCL's "Message size [bytes]" entry, but none was exported with
    --include-blobs (binaryData NULL, by sqlite3): the reader finds no size and warns of nothing."""
    from nsys_collective import _native

    for path in sorted(real(name).glob("*.sqlite")):
        with sqlite3.connect(f"file:{path}?immutable=1", uri=True) as db:
            [(sizes,)] = db.execute("SELECT count(*) FROM NVTX_PAYLOAD_SCHEMA_ENTRIES "
                                    "WHERE name = 'Message size [bytes]' AND type = 22").fetchall()
            [(blobs,)] = db.execute("SELECT count(*) FROM NVTX_EVENTS WHERE binaryData IS NOT NULL").fetchall()
        db.close()
        assert sizes > 0 and blobs == 0, path.name
        raw = _native.read_exports([str(path)], 1)[0]
        assert (raw["nvtx"]["payload_bytes"] == -1).all() and not any("payload" in w for w in raw["warnings"])
