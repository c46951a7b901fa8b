#!/usr/bin/env python3
"""The what-if at cluster scale: a generated job of 128 to 1,024 ranks (the job of
bench_batch.py: 8 ranks per host, 4 steps, small per-rank exports, a slow kernel and a loader
stall planted) read, modelled, then through `attribution.whatif.analyze` (graph building,
candidates, every replay), timed stage by stage in this process.

Prints one row per size and the time per (collective, rank) pair of each stage: flat when the cost
grows linearly with the job. Generated sets are kept under bench-data/batch (shared with
bench_batch.py).

    python scripts/bench_whatif.py [--dir bench-data/batch] [--ranks 128,256,512,1024]
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_batch import job_root  # noqa: E402


def measure(root: Path) -> dict:
    from nsys_collective import pipeline
    from nsys_collective.attribution import contention, whatif
    from nsys_collective.attribution.blocking import tolerance

    t0 = time.perf_counter()
    traced = pipeline.map_inputs(pipeline.prepare([root / "job"]))
    t1 = time.perf_counter()
    job = pipeline.model(traced)
    t2 = time.perf_counter()
    kind = contention.attribute(job).kind
    t3 = time.perf_counter()
    w = whatif.analyze(job, whatif.graph.build_graph(job, tolerance(job)), kind, tolerance(job))
    t4 = time.perf_counter()
    pairs = int(len(job.collectives.obs_rank))
    return {"ranks": len(job.ranks), "collectives": len(job.collectives), "pairs": pairs,
            "ops": int(w.fidelity["ops"]), "causes": len(w.causes), "read": t1 - t0, "model": t2 - t1, "whatif": t4 - t3}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", type=Path, default=Path(__file__).resolve().parents[1] / "bench-data" / "batch")
    parser.add_argument("--ranks", default="128,256,512,1024")
    args = parser.parse_args()
    rows = []
    print("| ranks | collectives | (collective, rank) pairs | GPU ops | read s | model s | what-if s | what-if µs per pair | causes |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for n in (int(x) for x in args.ranks.split(",")):
        r = measure(job_root(args.dir, n))
        rows.append(r)
        print(f"| {r['ranks']:,} | {r['collectives']:,} | {r['pairs']:,} | {r['ops']:,} | {r['read']:.2f} | {r['model']:.2f} "
              f"| {r['whatif']:.2f} | {r['whatif'] / r['pairs'] * 1e6:.1f} | {r['causes']} |", flush=True)
    if len(rows) > 1:
        slope = math.log(rows[-1]["whatif"] / rows[0]["whatif"]) / math.log(rows[-1]["pairs"] / rows[0]["pairs"])
        print(f"\nwhat-if time grows as pairs^{slope:.2f} (1.00 is linear)")


if __name__ == "__main__":
    main()
