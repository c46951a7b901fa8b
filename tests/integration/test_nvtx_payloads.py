"""NCCL's NVTX payloads (issue 20, item 4): the message size of each collective from the blobs an
export made with --include-blobs holds, decoded by the export's own schema tables (crates/core/src/
payload.rs); and the network's share with --nic-gbps. Jobs are generated with their payloads
(fixturegen --nvtx-payloads), whose planted sizes the truth holds."""

from __future__ import annotations

import json
import sqlite3

import pytest
from typer.testing import CliRunner

import reference_reader
from conftest import gen
from nsys_collective import _native
from nsys_collective.cli import app
from nsys_collective.model.timing import bus_factor
from test_reader_hardening import assert_same_raw

SMALL = dict(ranks=4, hosts=2, steps=3, kernels_per_step=24, scenario="balanced", seed=3)
UNDECODED = "NVTX payload blobs did not decode"


def analyze(folder, *options) -> dict:
    result = CliRunner().invoke(app, ["analyze", str(folder), "--json", *options])
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout)


@pytest.fixture(scope="module")
def jobs(tmp_path_factory):
    """style -> (folder, truth) of small jobs written with their payloads."""
    out = {}
    for style in ("ddp", "fsdp"):
        folder = tmp_path_factory.mktemp(style)
        out[style] = folder, gen.generate(folder, style=style, nvtx_payloads=True, **SMALL)
    return out


@pytest.mark.parametrize("style", ["ddp", "fsdp"])
def test_sizes_and_busbw_are_the_planted_ones(jobs, style):
    folder, truth = jobs[style]
    doc = analyze(folder)
    planted = truth["collectives"]
    assert len(doc["collectives"]) == len(planted) > 0
    for found, want in zip(doc["collectives"], planted):
        assert (found["op"], found["bytes"], found["bytes_source"]) == (want["op"], want["bytes"], "nvtx_payload")
        n, factor = want["ranks"], bus_factor(want["op"], len(want["ranks"]))
        assert found["busbw_gbps"] == pytest.approx(want["bytes"] / found["transfer_ns"] * factor)
        # ... and the planted bus bandwidth, within the transfer's measurement (10 us of a ms)
        assert found["busbw_gbps"] == pytest.approx(want["bytes"] / want["transfer_ns"] * factor, rel=0.02), n
    assert not any(UNDECODED in w for w in doc["warnings"])
    if style == "fsdp":  # one rank's part in NCCL's payload, the whole buffer in bytes
        assert {c["op"] for c in doc["collectives"]} == {"AllGather", "ReduceScatter"}


def test_without_payloads_the_same_job_has_no_size(tmp_path):
    gen.generate(tmp_path, **SMALL)
    doc = analyze(tmp_path)
    assert {c["bytes"] for c in doc["collectives"]} == {None}


def test_both_readers_read_the_payloads(jobs):
    folder, _ = jobs["ddp"]
    path = folder / "rep_0.sqlite"
    raw = _native.read_exports([str(path)], 1)[0]
    assert_same_raw(raw, reference_reader.read_raw(path))
    nvtx = raw["nvtx"]
    sized = nvtx["payload_bytes"] >= 0
    assert sized.sum() == 3 and set(nvtx["payload_bytes"][sized].tolist()) == {25 * 2**20}
    assert set(nvtx["payload_op"][sized].tolist()) == {0}  # ncclSum
    # ncclCommInitRank carries a payload without a size: nothing, and no warning
    assert (nvtx["payload_op"] >= 0).sum() == 3 and not raw["warnings"]


def test_short_blobs_are_dropped_with_a_counted_warning(jobs, tmp_path):
    folder, truth = jobs["ddp"]
    for rank in range(SMALL["ranks"]):
        path = tmp_path / f"rep_{rank}.sqlite"
        path.write_bytes((folder / path.name).read_bytes())
        with sqlite3.connect(path) as db:  # every blob one byte short of what its header says
            db.execute("UPDATE NVTX_EVENTS SET binaryData = substr(binaryData, 1, length(binaryData) - 1) "
                       "WHERE binaryData IS NOT NULL")
        db.close()
    raw = _native.read_exports([str(tmp_path / "rep_0.sqlite")], 1)[0]
    assert_same_raw(raw, reference_reader.read_raw(tmp_path / "rep_0.sqlite"))
    with sqlite3.connect(folder / "rep_0.sqlite") as db:  # the communicator's init and each all-reduce
        [(blobs,)] = db.execute("SELECT count(*) FROM NVTX_EVENTS WHERE binaryData IS NOT NULL").fetchall()
    db.close()
    assert blobs == 1 + len(truth["collectives"])
    assert [w for w in raw["warnings"] if UNDECODED in w] == [
        f"NVTX_EVENTS: {blobs} {UNDECODED} (shorter than their header says, a value past their payload, an absurd "
        "size, or a schema the export does not declare): their message sizes are unknown"]
    assert (raw["nvtx"]["payload_bytes"] == -1).all()
    doc = analyze(tmp_path)
    assert {c["bytes"] for c in doc["collectives"]} == {None}
    assert any(UNDECODED in w for w in doc["warnings"])


def test_the_network_share_with_the_nic_speed(jobs):
    folder, truth = jobs["ddp"]
    without, doc = analyze(folder), analyze(folder, "--nic-gbps", "200")
    for plain, found, want in zip(without["collectives"], doc["collectives"], truth["collectives"]):
        assert plain["link"] == found["link"] == "network"
        assert plain["link_share"] is None and "link_capacity_source" not in plain
        assert (found["link_capacity_gbps"], found["link_capacity_source"]) == (25.0, "--nic-gbps")  # 200 Gb/s = 25 GB/s
        assert found["link_share"] == round(found["busbw_gbps"] / 25.0, 4)
        planted = want["bytes"] / want["transfer_ns"] * bus_factor(want["op"], len(want["ranks"]))
        assert found["link_share"] == pytest.approx(planted / 25.0, rel=0.02)
    # this generator's network runs at ~39 GB/s busbw: over 200 Gb/s, which a warning says
    assert max(c["link_share"] for c in doc["collectives"]) > 1
    [over] = [w for w in doc["warnings"] if "--nic-gbps" in w]
    assert over.startswith(f"{len(doc['collectives'])} of the collectives across hosts ran faster than --nic-gbps 200")
    assert not any("--nic-gbps" in w for w in analyze(folder, "--nic-gbps", "400")["warnings"])  # share 0.78
    doc["warnings"].remove(over)
    # only the link fields change
    for c in doc["collectives"]:
        del c["link_capacity_gbps"], c["link_share"], c["link_capacity_source"]
    for c in without["collectives"]:
        del c["link_capacity_gbps"], c["link_share"]
    assert doc == without


def test_a_nic_speed_does_not_change_a_link_inside_a_host(tmp_path):
    gen.generate(tmp_path, nvtx_payloads=True, **{**SMALL, "hosts": 1})
    without, doc = analyze(tmp_path), analyze(tmp_path, "--nic-gbps", "400")
    assert doc == without
    assert {(c["link"], c["link_capacity_gbps"]) for c in doc["collectives"]} == {("nvlink", 450.0)}


@pytest.mark.parametrize("value", ["0", "-100", "inf", "nan", "1e9"])
def test_an_impossible_nic_speed_is_refused(jobs, value):
    folder, _ = jobs["ddp"]
    result = CliRunner().invoke(app, ["analyze", str(folder), "--nic-gbps", value])
    assert result.exit_code == 2
    [line] = result.stderr.strip().splitlines()
    assert "--nic-gbps" in line and "Gb/s" in line
