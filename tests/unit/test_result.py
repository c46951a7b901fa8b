"""The typed result: its JSON Schema is generated from it and checked in, every document the tool
writes conforms to it, a stored document reads back into the same typed result, and the errors
the tool raises survive pickling (Dask sends them between processes)."""

from __future__ import annotations

import json
import pickle
import sys
from pathlib import Path

import jsonschema
import pytest

from nsys_collective.errors import CollectiveTraceError, InputError, NsysExportError
from nsys_collective.result import Evidence, Observations, Result, _document_adapter, plain

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))
import golden  # noqa: E402
import schema  # noqa: E402

GOLDEN = sorted(golden.GOLDEN.glob("*.json"))


def test_the_checked_in_schema_is_generated_from_the_result():
    assert schema.PATH.read_text() == schema.text(), "docs/output.schema.json is stale: run python scripts/schema.py"


@pytest.mark.parametrize("path", GOLDEN, ids=lambda p: p.stem)
def test_every_golden_document_conforms_and_reads_back_unchanged(path):
    text = path.read_text()
    doc = json.loads(text)
    jsonschema.validate(doc, json.loads(schema.PATH.read_text()))
    typed = _document_adapter().validate_json(text)
    assert json.dumps(plain(typed), indent=2) + "\n" == text


def test_the_schema_refuses_a_broken_document():
    doc = json.loads(GOLDEN[0].read_text())
    doc["summary"]["wait_ns"] = "soon"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(doc, json.loads(schema.PATH.read_text()))
    doc = json.loads(GOLDEN[0].read_text())
    doc["collectives"][0]["blame"] = [{"cause": "kernel", "rank": 0, "ns": 1}]  # a kernel blame names its kernel
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(doc, json.loads(schema.PATH.read_text()))


def test_a_stored_result_equals_the_fresh_one():
    text = (golden.GOLDEN / "demo-4rank-2host.json").read_text()
    observations = Observations(*([__import__("numpy").arange(3)] * 5))
    evidence = Evidence(verdict=("a", "b"), clocks=("node0",), tolerance_ns=10_000, observations=observations, panels=({"i": 0},))
    stored = Result.from_stored(text, evidence.to_json(), source="run 1")
    assert stored.to_json() + "\n" == text and stored.source == "run 1" and stored.timeline is None
    assert stored.evidence.to_json() == evidence.to_json()


@pytest.mark.parametrize("error", [InputError("x.sqlite: empty file"), NsysExportError("nsys not found"),
                                   CollectiveTraceError("threads")])
def test_errors_pickle_with_their_class_and_message(error):
    back = pickle.loads(pickle.dumps(error))
    assert type(back) is type(error) and str(back) == str(error)
    assert type(error).__module__ == "nsys_collective.errors"
