"""Format facts stay behind the format registry (ingest/formats.py) and the readers: every
format's family is named there, and when a capture started is the session's, set by its reader,
not decided downstream by the format's name."""

from __future__ import annotations

from conftest import FIXTURES, gen

from nsys_collective.ingest import formats
from nsys_collective.ingest.capture import read_exports, read_kineto


def test_every_family_is_named():
    assert {f.family for f in formats.FORMATS} == set(formats.FAMILIES)


def test_an_nsight_session_starts_its_capture_a_kineto_origin_does_not(tmp_path):
    (export,) = read_exports([sorted((FIXTURES / "balanced-2rank").glob("*.sqlite"))[0]])
    assert export.session.capture_start_ns == export.session.utc_epoch_ns is not None
    gen.generate(tmp_path / "job", ranks=2, hosts=1, steps=2, kernels_per_step=12, buckets=1, scenario="balanced",
                 seed=1, format="kineto")
    traces = read_kineto(sorted((tmp_path / "job").glob("*.json.gz")))
    assert traces and all(t.session.capture_start_ns is None and t.session.utc_epoch_ns is not None for t in traces)
