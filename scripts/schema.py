#!/usr/bin/env python3
"""Write docs/output.schema.json: the JSON Schema of the `analyze --json` document, generated from
the typed result (nsys_collective.result.Document). A test checks the file is up to date:

    python scripts/schema.py
"""

from __future__ import annotations

import json
from pathlib import Path

from nsys_collective.result import document_schema

PATH = Path(__file__).resolve().parent.parent / "docs" / "output.schema.json"


def text() -> str:
    return json.dumps(document_schema(), indent=2, sort_keys=True) + "\n"


if __name__ == "__main__":
    PATH.write_text(text())
    print(f"wrote {PATH}")
