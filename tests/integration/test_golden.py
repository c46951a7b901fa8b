"""`analyze --json` stays byte-identical to the documents in tests/golden/ (scripts/golden.py).

A refactoring must not change one byte of them; a change of numbers rewrites them on purpose
(`python scripts/golden.py`) in the commit that says why.
"""

import sys
from pathlib import Path

import pytest
from conftest import no_real_data

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))
import golden  # noqa: E402

REAL_MISSING = not (ROOT / golden.REAL).is_dir()


@pytest.mark.parametrize("name", sorted(golden.CASES))
def test_analyze_json_is_byte_identical_to_the_golden_document(name):
    args = golden.CASES[name]
    if REAL_MISSING and any(a.startswith(golden.REAL) for a in args):
        pytest.skip(no_real_data(golden.REAL))
    expected = (golden.GOLDEN / f"{name}.json").read_bytes()
    got = golden.run(args)
    assert got == expected, f"analyze {' '.join(args)} --json differs from tests/golden/{name}.json"
