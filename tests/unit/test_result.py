"""The typed result: its JSON Schema is generated from it and checked in, every document the tool
writes conforms to it, a stored document reads back into the same typed result, and the errors
the tool raises survive pickling (Dask sends them between processes)."""

from __future__ import annotations

import json
import math
import pickle
import random
import sys
from pathlib import Path

import jsonschema
import pytest

from nsys_collective.errors import CollectiveTraceError, InputError, NsysExportError
from nsys_collective import result as result_module
from nsys_collective.result import Evidence, Observations, Result, _document_adapter, indented_json, plain

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


def random_json(rng: random.Random, depth: int = 0):
    """JSON data of every kind json.dumps writes: nested and empty containers, tuples, text that
    needs escaping (quotes, backslashes, control characters, non-ASCII), odd floats, huge ints."""
    kinds = ["int", "float", "text", "none", "bool"] + (["dict", "list", "tuple", "empty"] * 2 if depth < 4 else [])
    kind = rng.choice(kinds)
    if kind == "int":
        return rng.choice([0, -1, 7, 2**70, -(2**63)])
    if kind == "float":
        return rng.choice([0.5, -0.0, 1e-300, 1e300, 0.1 + 0.2, math.inf, -math.inf, math.nan, 12345678.9])
    if kind == "text":
        return "".join(rng.choice(['a', '"', "\\", "\n", "\x00", "é", "€", "\U0001f600", ":", ",", "{", "]", " "])
                       for _ in range(rng.randrange(6)))
    if kind == "none":
        return None
    if kind == "bool":
        return rng.random() < 0.5
    if kind == "empty":
        return rng.choice([{}, [], ()])
    items = [random_json(rng, depth + 1) for _ in range(rng.randrange(5))]
    if kind == "dict":
        return {random_json_key(rng, k): v for k, v in enumerate(items)}
    return items if kind == "list" else tuple(items)


def random_json_key(rng: random.Random, k: int) -> str:
    return str(k) + rng.choice(["", "k", chr(34), chr(92), "é", ": "])


@pytest.mark.parametrize("seed", range(200))
def test_the_indented_json_is_json_dumps_byte_for_byte(seed):
    rng = random.Random(seed)
    value = random_json(rng)
    for indent in (1, 2, 4):
        assert indented_json(value, indent) == json.dumps(value, indent=indent)


def test_the_indented_json_without_the_c_encoder_is_json_dumps(monkeypatch):
    monkeypatch.setattr(result_module, "c_make_encoder", None)
    value = {"a": [1, {"b": None}], "c": "d"}
    assert indented_json(value, 2) == json.dumps(value, indent=2)


@pytest.mark.parametrize("path", GOLDEN[:4], ids=lambda p: p.stem)
def test_a_golden_document_is_written_as_json_dumps_writes_it(path):
    doc = json.loads(path.read_text())
    assert indented_json(doc, 2) == json.dumps(doc, indent=2)
