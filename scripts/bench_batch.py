#!/usr/bin/env python3
"""Scale benchmark of `batch`: one generated job of 64, 128, 256 and 512 ranks (small per-rank
exports), through both executors, into a fresh SQLite store each time.

Each measurement runs in a fresh process that times run_batch and reports its own peak RSS
(VmHWM; the Dask LocalCluster's worker runs in that process, so it is included) and the peak
before the batch (imports, cluster started), whose difference is what the batch itself used.
Prints a table and whether time grows linearly with the rank count (the log-log slope of
seconds against ranks near 1, or below it while fixed costs still weigh).

    python scripts/bench_batch.py [--dir bench-data/batch] [--ranks 64,128,256,512] [--repeat 1]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
STEPS, KERNELS_PER_STEP, BUCKETS, RANKS_PER_HOST = 4, 28, 2, 8


def _generator():
    """fixturegen (the generator behind scripts/generate_fixture.py), from the checkout."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    return importlib.import_module("fixturegen")


def job_root(data: Path, ranks: int) -> Path:
    """bench-data/batch/r512/job: generated once, reused while its truth.json is there (and made by
    the current generator: sets of the first, barrier-model one are remade)."""
    root = data / f"r{ranks}"
    truth = root / "job" / "truth.json"
    if not truth.is_file() or '"format_version": 2' not in truth.read_text()[:300]:
        _generator().generate(root / "job", ranks=ranks, hosts=max(1, ranks // RANKS_PER_HOST), steps=STEPS,
                              kernels_per_step=KERNELS_PER_STEP, buckets=BUCKETS, scenario="mixed", seed=0, force=True)
    return root


def peak_rss_mib() -> float:
    """This process's peak resident memory so far, MiB: its own (Linux's VmHWM, which exec resets),
    not ru_maxrss, which keeps the high-water mark of the process it was forked from (this
    benchmark's, after it generated the jobs)."""
    try:
        with open("/proc/self/status") as f:
            return next(int(line.split()[1]) for line in f if line.startswith("VmHWM:")) / 1024  # kB
    except (OSError, StopIteration):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # elsewhere: the best there is


def one(root: Path, executor: str) -> None:
    """Child process: the batch, timed; JSON on stdout."""
    from nsys_collective.batch import dask_client, run_batch
    from nsys_collective.pipeline import REDUCE_MODULES

    for name in REDUCE_MODULES:  # scipy above all, once per process: out of the baseline and the timing
        importlib.import_module(name)
    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite:///{tmp}/bench.db"
        if executor == "dask":
            with dask_client() as client:  # the default cluster of `batch --executor dask`, started before timing
                base = peak_rss_mib()
                start = time.perf_counter()
                summary = run_batch(root, url, executor="dask", client=client)
        else:
            base = peak_rss_mib()
            start = time.perf_counter()
            summary = run_batch(root, url)
        seconds = time.perf_counter() - start
    assert summary["analyzed"] == 1, summary
    print(json.dumps({"seconds": seconds, "peak_mib": peak_rss_mib(), "base_mib": base,
                      "collectives": summary["jobs"][0]["collectives"]}))


def measure(root: Path, executor: str, repeat: int) -> dict:
    runs = []
    for _ in range(repeat):
        out = subprocess.run([sys.executable, __file__, "--one", str(root), executor], check=True,
                             capture_output=True, text=True).stdout
        runs.append(json.loads(out.strip().splitlines()[-1]))
    return min(runs, key=lambda r: r["seconds"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", type=Path, default=ROOT / "bench-data" / "batch")
    parser.add_argument("--ranks", default="64,128,256,512")
    parser.add_argument("--repeat", type=int, default=1, help="best of this many runs")
    parser.add_argument("--one", nargs=2, metavar=("ROOT", "EXECUTOR"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        return one(Path(args.one[0]), args.one[1])

    counts = [int(n) for n in args.ranks.split(",")]
    started = time.perf_counter()
    roots = {n: job_root(args.dir, n) for n in counts}
    size = sum(p.stat().st_size for p in (roots[counts[-1]] / "job").glob("*.sqlite")) / counts[-1]
    print(f"jobs in {args.dir} ({time.perf_counter() - started:.1f} s to generate or find; "
          f"{STEPS} steps x {KERNELS_PER_STEP} kernels per rank, {size / 1024:.0f} KiB per rank export)\n")
    print(f"{'ranks':>6} {'executor':>8} {'collectives':>11} {'seconds':>8} {'ms/rank':>8} {'peak MiB':>9} {'batch MiB':>9}")
    results: dict[str, dict[int, dict]] = {}
    for n in counts:
        for executor in ("local", "dask"):
            r = results.setdefault(executor, {})[n] = measure(roots[n], executor, args.repeat)
            print(f"{n:>6} {executor:>8} {r['collectives']:>11} {r['seconds']:>8.2f} {1000 * r['seconds'] / n:>8.2f} "
                  f"{r['peak_mib']:>9.0f} {r['peak_mib'] - r['base_mib']:>9.0f}", flush=True)
    if len(counts) > 1:
        lo, hi = counts[0], counts[-1]
        print()
        for executor, by_n in results.items():
            slope = math.log(by_n[hi]["seconds"] / by_n[lo]["seconds"]) / math.log(hi / lo)
            memory = math.log(max(by_n[hi]["peak_mib"] - by_n[hi]["base_mib"], 1) /
                              max(by_n[lo]["peak_mib"] - by_n[lo]["base_mib"], 1)) / math.log(hi / lo)
            verdict = ("linear" if 0.8 <= slope <= 1.2 else
                       "below linear (fixed costs still weigh)" if slope < 0.8 else "FASTER than linear growth")
            print(f"{executor}: time ~ ranks^{slope:.2f} from {lo} to {hi} ranks: {verdict}; "
                  f"ms/rank {1000 * by_n[lo]['seconds'] / lo:.2f} -> {1000 * by_n[hi]['seconds'] / hi:.2f}; "
                  f"batch memory ~ ranks^{memory:.2f}")


if __name__ == "__main__":
    main()
