#!/usr/bin/env python3
"""Matching + clock alignment + per-instance timing at cluster scale, on synthetic operations.

Builds R ranks (8 per host, hosts with offsets of a few ms and drifts of tens of ppm) that each
ran C AllReduces on one NCCL stream, then times `match`, `align` and `instance_timing` on them.
Prints one row per size, the time per (instance, rank) observation (flat when the cost grows as
n log n or better), and the worst clock error against the planted clocks.

    python scripts/bench_alignment.py [--sizes 128x250,256x500,512x1000,1024x2000]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from nsys_collective.model.alignment import align
from nsys_collective.model.matching import match
from nsys_collective.model.nccl import OPS, SYNC_OPS, NcclOps
from nsys_collective.model.timing import instance_timing

RANKS_PER_HOST = 8
T0 = 1_750_000_000_000_000_000


def synthetic_job(ranks: int, collectives: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    hosts = (ranks + RANKS_PER_HOST - 1) // RANKS_PER_HOST
    offset = np.r_[0, rng.uniform(-5e6, 5e6, hosts - 1)]
    drift = np.r_[0, rng.uniform(-40, 40, hosts - 1)]
    # One collective every 5 ms; arrivals spread over 300 us; all end together after the last.
    base = T0 + np.arange(collectives, dtype=np.int64) * 5_000_000
    arrival = base[None, :] + rng.integers(0, 300_000, (ranks, collectives))
    end = arrival.max(axis=0)[None, :] + 400_000 + rng.integers(-2_000, 2_000, (ranks, collectives))
    host = np.arange(ranks) // RANKS_PER_HOST

    def recorded(t, r):
        return t + np.rint(offset[host[r]] + drift[host[r]] * 1e-6 * (t - T0)).astype(np.int64)

    allreduce = OPS.index("AllReduce")
    ops = {r: NcclOps(start=recorded(arrival[r], r), end=recorded(end[r], r), stream=np.full(collectives, 13),
                      op=np.full(collectives, allreduce), name=np.zeros(collectives, np.int64),
                      bytes=np.full(collectives, -1), api_ranges=collectives) for r in range(ranks)}
    hosts_of = {r: f"node{host[r]}" for r in range(ranks)}
    return ops, hosts_of, (offset, drift, host), (base, end)


def run(ranks: int, collectives: int) -> dict:
    ops, hosts_of, (offset, drift, host), (base, _) = synthetic_job(ranks, collectives)
    t = time.perf_counter()
    c = match(ops)
    t_match = time.perf_counter() - t
    t = time.perf_counter()
    sync = np.array([OPS[o] in SYNC_OPS for o in c.op])
    a = align(c.obs_instance, c.obs_rank, c.obs_start, c.obs_end, sync, hosts_of)
    t_align = time.perf_counter() - t
    t = time.perf_counter()
    instance_timing(c.obs_instance, c.obs_rank, a.correct(c.obs_rank, c.obs_start), a.correct(c.obs_rank, c.obs_end))
    t_timing = time.perf_counter() - t
    # Planted clocks, relative to rank 0's host: aligned = true at the start and end of the capture.
    worst = 0
    for r in range(0, ranks, RANKS_PER_HOST):
        for t_true in (base[0], base[-1]):
            rec = t_true + int(round(offset[host[r]] + drift[host[r]] * 1e-6 * (t_true - T0)))
            worst = max(worst, abs(int(a.correct(np.array([r]), np.array([rec]))[0]) - int(t_true)))
    return dict(ranks=ranks, collectives=len(c), obs=len(c.obs_rank), match=t_match, align=t_align, timing=t_timing,
                worst_us=worst / 1e3, violations=a.violations_after, drift=a.drift_fitted)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="128x250,256x500,512x1000,1024x2000")
    args = parser.parse_args()
    print(f"{'ranks':>6} {'colls':>6} {'obs':>10} {'match s':>8} {'align s':>8} {'timing s':>8} {'total s':>8} "
          f"{'us/obs':>8} {'max err us':>10} {'viol':>5}")
    for size in args.sizes.split(","):
        r, c = map(int, size.split("x"))
        row = run(r, c)
        total = row["match"] + row["align"] + row["timing"]
        print(f"{row['ranks']:>6} {row['collectives']:>6} {row['obs']:>10,} {row['match']:>8.2f} {row['align']:>8.2f} "
              f"{row['timing']:>8.2f} {total:>8.2f} {total / row['obs'] * 1e6:>8.2f} {row['worst_us']:>10.2f} "
              f"{row['violations']:>5}")


if __name__ == "__main__":
    main()
