#!/usr/bin/env python3
"""Whether `scripts/test.sh` may skip `pip install -e '.[test]'` (a native build of minutes on two cores).

Exit 0 when this checkout is installed in editable mode and its native extension is newer than every
Rust source, Cargo file and pyproject.toml; the test requirements still missing are printed, one a
line, for pip. Exit 1 when a build is needed: not installed, installed from elsewhere or not
editable, no extension, or a source newer than it (a fresh CI checkout always builds).
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import sys
from pathlib import Path
from urllib.parse import unquote, urlparse

ROOT = Path(__file__).resolve().parent.parent
DIST = "collectivetrace-nsys"


def _editable_here() -> bool:
    try:
        direct = json.loads(importlib.metadata.distribution(DIST).read_text("direct_url.json") or "{}")
    except (importlib.metadata.PackageNotFoundError, json.JSONDecodeError):
        return False
    url = urlparse(direct.get("url", ""))
    return (url.scheme == "file" and direct.get("dir_info", {}).get("editable", False)
            and Path(unquote(url.path)).resolve() == ROOT)


def _extension() -> Path | None:
    try:
        spec = importlib.util.find_spec("nsys_collective._native")
    except ImportError:  # the package itself does not import: a stale or broken build
        return None
    return Path(spec.origin) if spec and spec.origin else None


def _sources() -> list[Path]:
    crates = [p for p in (ROOT / "crates").rglob("*") if p.suffix == ".rs" or p.name == "Cargo.toml"]
    return crates + [p for p in (ROOT / "Cargo.toml", ROOT / "Cargo.lock", ROOT / "pyproject.toml") if p.exists()]


def _missing_test_requirements() -> list[str] | None:
    """The `test` extra's requirements not satisfied here (None when that cannot be told)."""
    try:
        import tomllib

        from packaging.requirements import Requirement
    except ImportError:
        return None
    wanted = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["test"]
    missing = []
    for text in wanted:
        req = Requirement(text)
        try:
            if req.specifier.contains(importlib.metadata.version(req.name), prereleases=True):
                continue
        except importlib.metadata.PackageNotFoundError:
            pass
        missing.append(text)
    return missing


def main() -> int:
    extension = _extension() if _editable_here() else None
    if extension is None or not extension.is_file():
        return 1
    built = extension.stat().st_mtime
    if any(p.stat().st_mtime > built for p in _sources()):
        return 1
    missing = _missing_test_requirements()
    if missing is None:
        return 1
    print("\n".join(missing))
    return 0


if __name__ == "__main__":
    sys.exit(main())
