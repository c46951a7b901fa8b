"""The readers on the committed synthetic sets: counts and identity equal the planted truth."""

from __future__ import annotations

import json

import numpy as np
import pytest

from conftest import FIXTURES, numbered_ranks, tree_hashes
import reference_reader  # tests/: the pure-Python oracle of the native reader
from nsys_collective import read_exports
from nsys_collective.model.nccl import nccl_kernel_mask
from conftest import assert_same_export

SETS = sorted(p.name for p in FIXTURES.iterdir() if (p / "truth.json").is_file())


@pytest.mark.parametrize("name", SETS)
def test_fixture_counts_and_identity_equal_truth(name):
    folder = FIXTURES / name
    truth = json.loads((folder / "truth.json").read_text())
    before = tree_hashes(folder)
    paths = [folder / r["file"] for r in truth["ranks"]]
    exports = read_exports(paths)
    assert tree_hashes(folder) == before
    for planted, export in zip(truth["ranks"], exports):
        assert export.session.hostname == planted["host"]
        assert export.session.utc_epoch_ns == planted["utc_epoch_ns"]
        assert export.session.time_normalized == truth["time_normalized"]
        assert len(export.kernels["start"]) == planted["kernels"]
        assert int(nccl_kernel_mask(export).sum()) == planted["nccl_kernels"]
        assert len(export.memcpy["start"]) == planted["memcpys"]
        assert len(export.runtime["start"]) == planted["runtime_calls"]
        assert len(export.nvtx["start"]) == planted["nvtx_events"]
        assert np.all(np.diff(export.kernels["start"]) >= 0), "sorted even when stored shuffled"
        assert set(export.names(export.nvtx["domain_name"][export.nvtx["type"] == 59])) <= {"NCCL", None}
    ranks, warnings = numbered_ranks(paths)
    assert warnings == []
    assert sorted((r.host, r.pid, r.device) for r in ranks) == sorted((p["host"], p["pid"], p["device"]) for p in truth["ranks"])


@pytest.mark.parametrize("name", SETS)
def test_readers_agree_on_fixture(name):
    for path in sorted((FIXTURES / name).glob("*.sqlite")):
        assert_same_export(read_exports([path])[0], reference_reader.read_exports([path])[0])


def test_kernel_launch_correlation_survives_reading():
    """Every kernel's correlation id finds its launch call in the same process, launched before it."""
    (export,) = read_exports([FIXTURES / "demo-4rank-2host" / "rep_0.sqlite"])
    k, rt = export.kernels, export.runtime
    order = np.argsort(rt["correlation"])
    at = np.searchsorted(rt["correlation"][order], k["correlation"])
    launch = order[np.minimum(at, len(order) - 1)]
    assert np.all(rt["correlation"][launch] == k["correlation"])
    assert np.all(rt["pid"][launch] == k["pid"]) and np.all(rt["start"][launch] < k["start"])
