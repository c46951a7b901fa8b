#!/usr/bin/env python3
"""The `analyze --json` documents the tests hold the code to, byte for byte (tests/golden/).

A refactoring must leave every one unchanged; a change of numbers rewrites them on purpose,
with this script, in the same commit that explains why:

    python scripts/golden.py            # rewrite tests/golden/*.json from the current code
    python scripts/golden.py --check    # say which differ (what the test does)

Cases on the real exports beside the checkout (../shared/data/real) are left out when that
folder is absent.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
GOLDEN = ROOT / "tests" / "golden"
REAL = "../shared/data/real"

# name -> analyze arguments, paths relative to the repository root (as the documents name them).
CASES = {
    "balanced-2rank": ["fixtures/balanced-2rank"],
    "demo-4rank-2host": ["fixtures/demo-4rank-2host"],
    "demo-4rank-2host-steps": ["fixtures/demo-4rank-2host", "--steps", "ProfilerStep#*"],
    "demo-4rank-2host-ranks": ["fixtures/demo-4rank-2host", "--ranks", "0-2"],
    "slow-kernel-8rank-3host": ["fixtures/slow-kernel-8rank-3host"],
    "slow-kernel-8rank-3host-window": ["fixtures/slow-kernel-8rank-3host", "--window", "0.015:0.045", "--hosts", "node0,node1"],
    "real-fs24-allreduce2x-9rank-3node": [f"{REAL}/fs24-allreduce2x-9rank-3node"],
    "real-fs24-ring-6rank-2node": [f"{REAL}/fs24-ring-6rank-2node"],
    "real-nccl-net-2rank-2node": [f"{REAL}/nccl-net-2rank-2node"],
    "real-nsys-ai-2gpu": [f"{REAL}/nsys-ai-2gpu"],
    "real-kineto-hta-2rank": [f"{REAL}/kineto/hta-trace_filter-2rank"],
    "real-kineto-dlrm-8rank": [f"{REAL}/kineto/param-dlrm-8rank"],
    "real-versions": [f"{REAL}/versions/nsys-2024.5-pipit-cloverleaf.sqlite", f"{REAL}/versions/nsys-2025.1-fuser-h200.sqlite"],
}


# The analyze options the cases use -> Filters.parse's keywords.
OPTIONS = {"--ranks": "ranks", "--hosts": "hosts", "--window": "window", "--steps": "steps"}


def split_args(args: list[str]) -> tuple[list[str], dict[str, str]]:
    """A case's analyze arguments as (input paths, Filters.parse keywords), for callers that
    analyze in process instead of running the command."""
    paths, options, it = [], {}, iter(args)
    for a in it:
        if a in OPTIONS:
            options[OPTIONS[a]] = next(it)
        else:
            paths.append(a)
    return paths, options


def available() -> dict[str, list[str]]:
    real = (ROOT / REAL).is_dir()
    return {name: args for name, args in CASES.items() if real or not any(a.startswith(REAL) for a in args)}


def run(args: list[str]) -> bytes:
    """What `collectivetrace-nsys analyze ARGS --json` prints, run from the repository root."""
    cmd = [sys.executable, "-m", "nsys_collective", "analyze", *args, "--json"]
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {done.returncode}: {done.stderr.decode()}")
    return done.stdout


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare instead of rewriting")
    check = parser.parse_args().check
    GOLDEN.mkdir(parents=True, exist_ok=True)
    differ = []
    for name, args in available().items():
        out, path = run(args), GOLDEN / f"{name}.json"
        if check:
            if not path.exists() or path.read_bytes() != out:
                differ.append(name)
        else:
            path.write_bytes(out)
    for name in differ:
        print(f"differs: {name}")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
