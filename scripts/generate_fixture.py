#!/usr/bin/env python3
"""Write a synthetic multi-rank job with a planted, what-if truth: the command line of `fixturegen/`.

One ``rep_<RANK>.sqlite`` per rank (as ``nsys profile -o rep_%q{RANK}`` on every rank followed by
``nsys export --type sqlite``), or with ``--format kineto`` one PyTorch profiler trace
``rank_<RANK>.json.gz`` per rank, and ``truth.json`` beside them. Deterministic: the same arguments
give byte-identical files.

    python scripts/generate_fixture.py OUT_DIR [--style ddp|fsdp|tp|pp|tp+ddp] [--ranks 8] [--hosts 2]
        [--steps 10] [--kernels-per-step 64] [--buckets 4] [--microbatches 4]
        [--scenario balanced|mixed|CAUSE[+CAUSE...]] [--stall dataloader|gc|item] [--seed 0]
        [--normalized-time] [--shuffle-rows] [--drift-ppm 0.0] [--nsys-version 2024.5|2026.2]
        [--contention-ranks one|all] [--no-sync-records] [--format nsys|kineto]
        [--kineto-base-boundary] [--force]

CAUSE is slow_kernel, extra_kernel, host_stall (late_launch is accepted for it), host_group,
contention or slow_network. The model, the causes, the formats and truth.json are documented in
the modules of ``fixturegen/`` (see fixturegen/README.md); from Python, ``fixturegen.generate()``.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fixturegen import *  # noqa: E402,F401,F403  (scripts and tests load this file as a module)
from fixturegen import generate, main  # noqa: E402,F401

if __name__ == "__main__":
    sys.exit(main())
