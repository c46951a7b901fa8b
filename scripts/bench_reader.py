#!/usr/bin/env python3
"""Reader benchmark: the native reader against SQLite's own scan and the pure-Python reader.

On one generated 8-rank set (1M+ kernels; made on first use under bench-data/, reused after),
in one run, best of --repeat:
  floor        SQLite itself (the bundled build the reader uses) summing, in SQL, every column the
               reader reads; no rows leave SQLite. One thread, file after file.
  native x1    the Rust reader on one thread, file after file.
  native x2    the Rust reader on two threads (files in parallel).
  python       the pure-Python reference reader (standard sqlite3), once.
Prints each time and its ratio to the floor, and whether the targets hold:
native x1 <= 1.2x floor, native x2 < floor, python >= 10x native x1.

    python scripts/bench_reader.py [--dir DIR] [--repeat 5]
"""

from __future__ import annotations

import argparse
import os
import platform
import sqlite3
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_SET = ROOT / "bench-data" / "reader-8rank-1m"
SET_ARGS = dict(ranks=8, hosts=2, steps=400, kernels_per_step=320, seed=1)


def current(directory: Path) -> bool:
    """A set made by the current generator (sets of the first, barrier-model generator are remade)."""
    truth = directory / "truth.json"
    if not truth.is_file():
        return False
    with truth.open() as f:
        head = f.read(300)
    return '"format_version": 2' in head


def generated_set(directory: Path) -> list[Path]:
    if not current(directory):
        sys.path.insert(0, str(ROOT))
        import fixturegen as gen
        print(f"generating {directory} ({SET_ARGS}) ...", file=sys.stderr)
        gen.generate(directory, force=True, **SET_ARGS)
    return sorted(directory.glob("*.sqlite"))


def floor_seconds(paths: list[Path], repeat: int) -> float:
    """The floor, best of `repeat`: the core crate's `floor` example (SQLite, the build bundled in
    the reader, summing every column the reader reads, one thread), built in release mode."""
    import subprocess

    command = ["cargo", "run", "--quiet", "--release", "--locked", "-p", "collectivetrace-bench", "--example", "floor", "--", str(repeat), *map(str, paths)]
    done = subprocess.run(command, cwd=ROOT, check=True, capture_output=True, text=True)
    return float(done.stdout.strip())


def best_of(repeat: int, fn) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", type=Path, default=DEFAULT_SET, help="a set of exports (generated here when absent)")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--prepare", action="store_true", help="only make the set (if needed) and print its folder")
    args = parser.parse_args()
    if args.prepare:  # used by `cargo bench`, so both benchmarks read the same set
        generated_set(args.dir)
        print(args.dir)
        return

    sys.path.insert(0, str(ROOT / "tests"))
    import reference_reader  # the pure-Python oracle, a test tool
    from nsys_collective import read_exports

    paths = generated_set(args.dir)
    for p in paths:  # warm the page cache so every contender reads from memory
        p.read_bytes()
    exports = read_exports(paths)
    kernels = sum(len(e.kernels["start"]) for e in exports)
    rows = sum(len(getattr(e, t)["start"]) for e in exports for t in ("kernels", "memcpy", "memset", "runtime", "nvtx"))
    size = sum(p.stat().st_size for p in paths)
    del exports

    floor = floor_seconds(paths, args.repeat)
    native1 = best_of(args.repeat, lambda: read_exports(paths, threads=1))
    native2 = best_of(args.repeat, lambda: read_exports(paths, threads=2))
    python = best_of(1, lambda: reference_reader.read_exports(paths))

    print(f"set: {args.dir} - {len(paths)} exports, {kernels:,} kernels, {rows:,} event rows, {size / 2**20:,.0f} MiB")
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
          f"SQLite {sqlite3.sqlite_version} (python), bundled in the reader for floor and native")
    print(f"{'contender':<12} {'seconds':>9} {'x floor':>8}")
    for name, t in [("floor", floor), ("native x1", native1), ("native x2", native2), ("python", python)]:
        print(f"{name:<12} {t:>9.3f} {t / floor:>8.2f}")
    checks = [
        ("native x1 <= 1.2x floor", native1 <= 1.2 * floor),
        ("native x2 faster than floor", native2 < floor),
        (f"native x1 >= 10x faster than python ({python / native1:.1f}x)", python >= 10 * native1),
    ]
    for label, ok in checks:
        print(f"{'PASS' if ok else 'MISS'}  {label}")


if __name__ == "__main__":
    main()
