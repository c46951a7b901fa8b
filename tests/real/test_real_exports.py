"""Both readers on every real export: counts and session facts equal FACTS.tsv, and they agree."""

from __future__ import annotations

import numpy as np
import pytest

from conftest import REAL, assert_same_export, numbered_ranks, real_params, sha256
import reference_reader  # tests/: the pure-Python oracle of the native reader
from nsys_collective import read_exports
from nsys_collective.model.nccl import nccl_kernel_mask
from nsys_collective.ingest.capture import NVTX_PUSH_POP_RANGE, NVTX_START_END_RANGE

READERS = {"native": read_exports, "reference": reference_reader.read_exports}


@pytest.mark.parametrize("facts", real_params())
@pytest.mark.parametrize("reader", READERS)
def test_real_export_matches_facts(facts, reader):
    path = REAL / facts["file"]
    before = sha256(path)
    (export,) = READERS[reader]([path])
    assert sha256(path) == before, "the reader changed its input"

    s = export.session
    assert s.nsys_version == facts["nsys"]
    assert s.schema_version == facts["schema"]
    assert s.hostname == facts["host"]
    assert s.utc_epoch_ns == int(facts["utcEpochNs"])
    if facts["ts_normalized"] != "None":  # FACTS has no flag for exports that do not record it
        assert s.time_normalized == (facts["ts_normalized"] == "true")

    k = export.kernels
    assert len(k["start"]) == int(facts["kernels"])
    assert int(nccl_kernel_mask(export).sum()) == int(facts["nccl_kernels"])
    assert len(export.nvtx["start"]) == int(facts["nvtx_rows"])
    names = export.names(export.nvtx["domain_name"])
    ranges = np.isin(export.nvtx["type"], [NVTX_PUSH_POP_RANGE, NVTX_START_END_RANGE])
    assert int((ranges & (names == "NCCL")).sum()) == int(facts["nccl_nvtx_ranges"])
    assert (len(export.gpu_metrics["start"]) > 0) == (facts["gpu_metrics"] == "True")

    pairs = {(p, d) for p, d in zip(k["pid"].tolist(), k["device"].tolist())}
    assert len(pairs) == int(facts["pid_device_pairs"])
    # Times are absolute UTC ns, sorted, and within the session.
    if len(k["start"]):
        assert np.all(np.diff(k["start"]) >= 0)
        assert k["start"].min() >= s.utc_epoch_ns
        assert np.all(k["end"] >= k["start"])
        assert all(export.name(i) for i in k["name"].tolist()), "every kernel has a name"


@pytest.mark.parametrize("facts", real_params())
def test_readers_agree_on_real_export(facts):
    path = REAL / facts["file"]
    (native,) = read_exports([path])
    (reference,) = reference_reader.read_exports([path])
    assert_same_export(native, reference)


def test_parallel_read_equals_one_by_one(real_dir):
    paths = sorted(real_dir.rglob("*.sqlite"))
    together = read_exports(paths, threads=2)
    for path, export in zip(paths, together):
        assert_same_export(export, read_exports([path], threads=1)[0])


def test_two_gpu_report_holds_two_ranks(real_dir):
    path = real_dir / "nsys-ai-2gpu" / "mfu_2gpu_before.sqlite"
    ranks, warnings = numbered_ranks([path])
    assert [(r.device, r.kernels, r.nccl_kernels) for r in ranks] == [(0, 1993, 33), (1, 2017, 33)]
    assert len({r.pid for r in ranks}) == 2 and warnings == []


def test_export_without_kernel_table_is_a_rank_with_zero_kernels(real_dir):
    path = real_dir / "versions" / "nsys-2023.2-sgemm.sqlite"
    ranks, warnings = numbered_ranks([path])
    assert len(ranks) == 1 and ranks[0].kernels == 0 and ranks[0].host == "Haroon-PC"
    assert len(warnings) == 1 and "zero kernels" in warnings[0]
