#!/usr/bin/env python3
"""End-to-end benchmark: `collectivetrace-nsys analyze --json` on the generated 8-rank set of
`bench_reader.py` (1M+ kernels), against the SQLite floor of that benchmark, in one run.

Times the command as a user runs it (a fresh process, best of --repeat, output discarded), its
peak memory, and the in-process stages, and prints the ratio to the floor. Targets (with the
what-if): at most 2.5x the floor (goal 1.5x), peak memory under 1 GB.

    python scripts/bench_analyze.py [--dir DIR] [--repeat 3]
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_reader import DEFAULT_SET, best_of, floor_seconds, generated_set  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", type=Path, default=DEFAULT_SET)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()

    from nsys_collective import pipeline

    paths = generated_set(args.dir)
    for p in paths:
        p.read_bytes()  # warm the page cache
    floor = floor_seconds(paths, args.repeat)

    command = [shutil.which("collectivetrace-nsys") or "collectivetrace-nsys", "analyze", str(args.dir), "--json"]
    wall = best_of(args.repeat, lambda: subprocess.run(command, stdout=subprocess.DEVNULL, check=True))
    peak_mib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024

    t0 = time.perf_counter()
    traced = pipeline.map_inputs(pipeline.prepare(paths))
    t1 = time.perf_counter()
    result = pipeline.reduce(traced)
    t2 = time.perf_counter()
    text = result.to_json()
    t3 = time.perf_counter()

    kernels = sum(r["kernels"] for r in result.doc["ranks"])
    print(f"set: {args.dir} - {len(paths)} exports, {kernels:,} kernels, {len(result.doc['collectives']):,} collectives")
    print(f"machine: {os.cpu_count()} cores, Python {sys.version.split()[0]}")
    print(f"floor (SQLite sums the columns, 1 thread)  {floor:7.3f} s")
    print(f"analyze --json, whole command               {wall:7.3f} s  = {wall / floor:.2f} x floor")
    print(f"  in process: read and trace {t1 - t0:.3f} s, model and attribute {t2 - t1:.3f} s, JSON {t3 - t2:.3f} s ({len(text) / 1e6:.1f} MB)")
    print(f"peak memory of the command                  {peak_mib:7.0f} MiB")
    print(f"{'PASS' if wall <= 2.5 * floor else 'MISS'}  at most 2.5x the floor ({'goal 1.5x met' if wall <= 1.5 * floor else 'goal 1.5x not met'})")
    print(f"{'PASS' if peak_mib < 1024 else 'MISS'}  peak memory under 1 GB")


if __name__ == "__main__":
    main()
