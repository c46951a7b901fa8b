"""What-if blame on the real multi-rank sets (issue 12): the replay's fidelity is reported, no finding
names an NCCL kernel or a step range, and where a whole host was late the host-wide cause is named
and beats any single rank."""

from __future__ import annotations

import json
import re

import pytest
from typer.testing import CliRunner

from conftest import REAL, no_real_data
from nsys_collective.cli import app

SETS = ["fs24-allreduce2x-9rank-3node", "fs24-ring-6rank-2node", "nccl-net-2rank-2node", "nsys-ai-2gpu",
        "kineto/param-dlrm-8rank", "kineto/hta-trace_filter-2rank"]
_docs: dict[str, dict] = {}


def analyzed(real_dir, name: str) -> dict:
    if name not in _docs:
        result = CliRunner().invoke(app, ["analyze", str(real_dir / name), "--json"])
        assert result.exit_code == 0, result.stderr
        _docs[name] = json.loads(result.stdout)
    return _docs[name]


@pytest.mark.slow
@pytest.mark.parametrize("name", SETS)
def test_fidelity_is_reported_and_no_finding_names_nccl_or_a_step(real_dir, name):
    doc = analyzed(real_dir, name)
    fidelity = doc["whatif"]["fidelity"]
    assert fidelity["ops"] > 0 and 0 < fidelity["explained_start_share"] <= 1
    assert fidelity["inferred_dependencies"] + fidelity["recorded_dependencies"] > 0
    for cause in doc["whatif"]["causes"]:
        name_ = cause["name"] or ""
        assert not re.search(r"nccl\w*Kernel", name_, re.I), cause  # a collective's own kernel is never a cause
        assert not name_.startswith("ProfilerStep"), cause
    for finding in doc["findings"]:
        assert not re.search(r"nccl(Dev)?Kernel", finding), finding
        assert "ProfilerStep#" not in finding, finding
    for entry in doc["blocking_kernels"]:
        assert not entry["kernel"].lower().startswith("nccl"), entry


def test_a_late_host_beats_any_single_rank(real_dir):
    """ault42 and ault43 both left ncclCommInitRank about 20 ms after ault44: every rank of them
    arrives late at the first collective. Making one rank punctual saves little (its host-mates
    still arrive late); fixing the hosts saves most of the wait."""
    doc = analyzed(real_dir, "fs24-allreduce2x-9rank-3node")
    causes = doc["whatif"]["causes"]
    top = causes[0]
    assert top["cause"] == "host_group" and top["name"] == "ncclCommInitRank" and top["confidence"] == "high"
    assert top["ranks"] == [0, 1, 2, 3, 4, 5]
    wait = doc["summary"]["wait_ns"]
    assert top["wait_saved_ns"] >= 0.5 * wait
    single = [c for c in causes if c["rank"] is not None]
    assert all(c["wait_saved_ns"] < 0.1 * top["wait_saved_ns"] for c in single)
    assert doc["summary"]["top_cause"]["cause"] == "host_group"
    assert any(f.startswith("ault42.cscs.ch, ault43.cscs.ch: every rank of these hosts") for f in doc["findings"])


def test_a_host_that_left_the_bootstrap_late_is_named(real_dir):
    """fs24-ring-6rank-2node: ault43 left ncclCommInitRank about 20 ms after ault44, one collective
    later its ranks arrive last. One occurrence is not systematic, but it is most of the wait."""
    doc = analyzed(real_dir, "fs24-ring-6rank-2node")
    top = doc["whatif"]["causes"][0]
    assert top["cause"] == "host_group" and top["host"] == "ault43.cscs.ch" and top["name"] == "ncclCommInitRank"
    assert top["wait_saved_ns"] >= 0.5 * doc["summary"]["wait_ns"]
    assert any(f.startswith("Likely") and "ault43.cscs.ch" in f for f in doc["findings"])


if not REAL.is_dir():  # the reason shows in the skip, not as a pass
    pytestmark = pytest.mark.skip(reason=no_real_data(REAL))
