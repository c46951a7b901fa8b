#!/usr/bin/env python3
"""End-to-end benchmark: `collectivetrace-nsys analyze --json` (with the what-if) against the
floor, stage by stage, on two generated 8-rank sets in one run: one whose exports hold
SYNCHRONIZATION/CUDA_EVENT rows and one without them (as exports made without those tables, and
every profiler trace: the stream waits are then inferred from the calls).

Per set, page cache warm:
  floor          SQLite itself (the bundled build the reader uses) summing, in SQL, every column
                 the reader reads (kernels, runtime calls, NVTX, copies, sync and event records);
                 no rows leave SQLite. One thread, best of --repeat (crates/core/examples/floor.rs).
  native reader  the Rust readers into numpy columns, 1 thread and all cores, best of --repeat.
  whole command  `analyze --json` as a user runs it, a fresh process, output discarded, best of
                 --repeat; its peak RSS (the largest of the runs).
  stages         one in-process run of the same pipeline, each stage's own time (nested stages
                 are not counted twice), which add up to the in-process total.
Ratios are to the floor. Targets (issue 22): the whole command at most 1.5x the floor on both
sets; peak memory under 400 MiB at 1.9M kernels.

    python scripts/bench_analyze.py [--kernels 260000] [--repeat 3] [--markdown]

--kernels sets the size (total kernels over the 8 ranks, 320 compute kernels per step and rank
plus NCCL's); --kernels 1900000 is the held-out jobs' size (about 50 s to generate per set here).
"""

from __future__ import annotations

import argparse
import functools
import os
import platform
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_reader import best_of, floor_seconds  # noqa: E402

RANKS, HOSTS, KERNELS_PER_STEP = 8, 2, 320
# Each step of a rank runs KERNELS_PER_STEP compute kernels and 4 NCCL ones (the generator's buckets).
KERNELS_PER_RANK_STEP = KERNELS_PER_STEP + 4


def set_dir(kernels: int, sync: bool) -> Path:
    return ROOT / "bench-data" / f"analyze-8rank-{kernels // 1000}k-{'sync' if sync else 'nosync'}"


def generated(kernels: int, sync: bool) -> list[Path]:
    directory = set_dir(kernels, sync)
    if not (directory / "truth.json").is_file():
        sys.path.insert(0, str(ROOT))
        import fixturegen as gen

        steps = max(2, round(kernels / (RANKS * KERNELS_PER_RANK_STEP)))
        print(f"generating {directory.name} ({steps} steps) ...", file=sys.stderr)
        gen.generate(directory, ranks=RANKS, hosts=HOSTS, steps=steps, kernels_per_step=KERNELS_PER_STEP, seed=1,
                     sync_records=sync, force=True)
    return sorted(directory.glob("*.sqlite"))


# Runs a command and prints its (seconds, CPU seconds, peak RSS in KiB, exit status). A child's ru_maxrss
# counts the memory of the process it was forked from (Linux keeps the high-water mark across
# fork and exec): started from this benchmark, which has read the exports itself, the command's
# peak would be this process's. Forked from a bare interpreter instead, it is the command's own.
_SPAWN = ("import os, subprocess, sys, time; t0 = time.perf_counter(); p = subprocess.Popen(sys.argv[1:], stdout=subprocess.DEVNULL); "
          "_, status, u = os.wait4(p.pid, 0); "
          "print(time.perf_counter() - t0, u.ru_utime + u.ru_stime, u.ru_maxrss, os.waitstatus_to_exitcode(status))")


def run_command(command: list[str]) -> tuple[float, float, float]:
    """(seconds, CPU seconds, peak RSS in MiB) of one fresh process, its output discarded."""
    done = subprocess.run([sys.executable, "-c", _SPAWN, *command], capture_output=True, text=True, check=True)
    seconds, cpu, kib, status = done.stdout.split()
    if int(status):
        raise SystemExit(f"{' '.join(command)}: exit status {status}")
    return float(seconds), float(cpu), int(kib) / 1024


def rss_mib() -> float | None:
    """This process's resident memory now (Linux), MiB."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    except OSError:
        return None


class Stages:
    """Each patched function's own time: a stage's time less the stages called inside it; and the
    peak resident memory sampled (every 5 ms) while it was the innermost stage running."""

    def __init__(self):
        self.own: dict[str, list[float]] = {}  # label: [wall seconds, CPU seconds (all threads)]
        self.stack: list[list[float]] = []  # per open stage: [wall, CPU at its start, wall, CPU of stages inside]
        self.labels: list[str] = []  # the open stages, innermost last
        self.peak: dict[str, float] = {}  # label: MiB
        threading.Thread(target=self._sample, daemon=True).start()

    def _sample(self):
        while (mib := rss_mib()) is not None:
            label = self.labels[-1] if self.labels else "between stages"
            self.peak[label] = max(self.peak.get(label, 0.0), mib)
            time.sleep(0.005)

    def wrap(self, label: str, fn):
        @functools.wraps(fn)
        def timed(*args, **kwargs):
            self.stack.append([time.perf_counter(), time.process_time(), 0.0, 0.0])
            self.labels.append(label)
            try:
                return fn(*args, **kwargs)
            finally:
                self.labels.pop()
                wall0, cpu0, inner_wall, inner_cpu = self.stack.pop()
                wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
                own = self.own.setdefault(label, [0.0, 0.0])
                own[0] += wall - inner_wall
                own[1] += cpu - inner_cpu
                if self.stack:
                    self.stack[-1][2] += wall
                    self.stack[-1][3] += cpu
        return timed

    def patch(self, module, name: str, label: str):
        setattr(module, name, self.wrap(label, getattr(module, name)))


def staged_run(paths: list[Path]) -> tuple[dict[str, list[float]], list[float]]:
    """The pipeline of `analyze --json`, in process, with each stage timed; ({stage: [own wall
    seconds, own CPU seconds, peak MiB while it ran]}, [total wall, total CPU])."""
    from nsys_collective import attribution, pipeline, result
    from nsys_collective.attribution import build, contention, whatif
    from nsys_collective.attribution.whatif import replay
    from nsys_collective.model import job

    s = Stages()
    # The map reads and traces each input in its own thread (one's trace beside another's read):
    # one stage, as the stack of own times is one thread's.
    s.patch(pipeline, "map_inputs", "map: read + trace, inputs in parallel")
    s.patch(pipeline, "build_job", "model: numbering, steps, timing")
    s.patch(job, "match", "model: matching")
    s.patch(job, "align", "model: alignment")
    s.patch(job, "assess", "model: alignment")
    s.patch(attribution, "attribute", "attribution: blocking, idle, steps, findings")
    s.patch(contention, "attribute", "attribution: contention fit")
    s.patch(whatif, "analyze", "what-if: replays")
    s.patch(whatif.graph, "build_graph", "what-if: graph")
    s.patch(replay, "compute_changes", "what-if: candidates")
    picker = replay.candidate_function
    replay.candidate_function = lambda kind: s.wrap("what-if: candidates", picker(kind))
    s.patch(build, "build_result", "result")
    s.patch(result.Result, "to_json", "JSON")
    t0, c0 = time.perf_counter(), time.process_time()
    traced = pipeline.map_inputs(pipeline.prepare([str(p) for p in paths]))
    text = pipeline.reduce(traced).to_json()
    total = [time.perf_counter() - t0, time.process_time() - c0]
    assert text
    return {label: [*own, s.peak.get(label, 0.0)] for label, own in s.own.items()}, total


def bench_set(paths: list[Path], repeat: int) -> dict:
    from nsys_collective import read_exports

    for p in paths:
        p.read_bytes()  # warm the page cache
    exports = read_exports(paths)
    kernels = sum(len(e.kernels["start"]) for e in exports)
    sync_rows = sum(len(next(iter(t.values()), ())) for e in exports for t in (e.sync, e.cuda_event))
    del exports
    floor = floor_seconds(paths, repeat)
    reader1 = best_of(repeat, lambda: read_exports(paths, threads=1))
    reader = best_of(repeat, lambda: read_exports(paths))
    command = [sys.executable, "-m", "nsys_collective", "analyze", str(paths[0].parent), "--json"]
    runs = [run_command(command) for _ in range(repeat)]
    # Each stage in a fresh interpreter, so the modules it loads count as the command's do.
    code = ("import json, sys; sys.path.insert(0, sys.argv[1]); import bench_analyze as b; "
            "print(json.dumps(b.staged_run([__import__('pathlib').Path(p) for p in sys.argv[2:]])))")
    done = subprocess.run([sys.executable, "-c", code, str(Path(__file__).parent), *map(str, paths)],
                          check=True, capture_output=True, text=True)
    import json

    stages, in_process = json.loads(done.stdout.strip().splitlines()[-1])
    best = min(runs)
    return dict(kernels=kernels, sync_rows=sync_rows, size_mib=sum(p.stat().st_size for p in paths) / 2**20, floor=floor,
                reader1=reader1, reader=reader, whole=best[0], whole_cpu=best[1], peak_mib=max(m for *_, m in runs),
                stages=stages, in_process=in_process)


def print_set(name: str, r: dict) -> None:
    floor = r["floor"]
    print(f"\n{name}: {r['kernels']:,} kernels, {r['sync_rows']:,} sync and event rows, {r['size_mib']:,.0f} MiB")
    print(f"  {'':<50} {'wall s':>8} {'x floor':>8} {'CPU s':>8} {'peak MiB':>9}")
    rows = [("floor: SQLite sums the columns, 1 thread", floor, None), ("native reader, 1 thread", r["reader1"], None),
            (f"native reader, {os.cpu_count()} threads", r["reader"], None),
            ("analyze --json, whole command", r["whole"], r["whole_cpu"])]
    for label, t, cpu in rows:
        print(f"  {label:<50} {t:8.3f} {t / floor:8.2f} {'' if cpu is None else f'{cpu:8.3f}'}")
    wall, cpu = r["in_process"]
    print(f"  in process, by stage ({wall:.3f} s, {cpu:.3f} s CPU in all):")
    for label, (t, c, peak) in r["stages"].items():
        print(f"    {label:<48} {t:8.3f} {t / floor:8.2f} {c:8.3f} {peak:9,.0f}")
    rest, rest_cpu = r["whole"] - wall, r["whole_cpu"] - cpu
    print(f"    {'start-up: imports, arguments (whole - in process)':<48} {rest:8.3f} {rest / floor:8.2f} {rest_cpu:8.3f}")
    print(f"  peak memory of the command {r['peak_mib']:,.0f} MiB")


def markdown(results: dict[str, dict]) -> None:
    names = list(results)
    print("\n| stage | " + " | ".join(f"{n}: s | x floor | CPU s" for n in names) + " |")
    print("|---|" + "---:|---:|---:|" * len(names))

    def row(label, values):
        cells = [f"{t:.3f} | {t / results[n]['floor']:.2f} | {'' if c is None else f'{c:.3f}'}" for n, (t, c) in zip(names, values)]
        print(f"| {label} | " + " | ".join(cells) + " |")

    row("floor: SQLite sums the columns, 1 thread", [(results[n]["floor"], None) for n in names])
    row("native reader, 1 thread", [(results[n]["reader1"], None) for n in names])
    row(f"native reader, {os.cpu_count()} threads", [(results[n]["reader"], None) for n in names])
    row("**analyze --json, whole command**", [(results[n]["whole"], results[n]["whole_cpu"]) for n in names])
    labels = list(dict.fromkeys(label for n in names for label in results[n]["stages"]))
    for label in labels:
        row(f"&nbsp;&nbsp;{label}", [tuple(results[n]["stages"].get(label, (0.0, 0.0, 0.0))[:2]) for n in names])
    row("&nbsp;&nbsp;start-up: imports, arguments", [(results[n]["whole"] - results[n]["in_process"][0],
                                                      results[n]["whole_cpu"] - results[n]["in_process"][1]) for n in names])
    print("| peak memory, MiB | " + " | ".join(f"{results[n]['peak_mib']:,.0f} | | " for n in names) + "|")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kernels", type=int, default=260_000, help="kernels over the 8 ranks (default 260,000)")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--markdown", action="store_true", help="also print the README's table")
    args = parser.parse_args()

    results = {}
    for sync in (True, False):
        name = "with sync rows" if sync else "without sync rows"
        results[name] = bench_set(generated(args.kernels, sync), args.repeat)
    load = os.getloadavg()
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}; "
          f"load average at the end {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    for name, r in results.items():
        print_set(name, r)
    print()
    for name, r in results.items():
        ratio = r["whole"] / r["floor"]
        print(f"{'PASS' if ratio <= 1.5 else 'MISS'}  {name}: whole command {ratio:.2f}x the floor (target 1.5x)")
        if r["kernels"] >= 1_800_000:
            print(f"{'PASS' if r['peak_mib'] < 400 else 'MISS'}  {name}: peak memory {r['peak_mib']:,.0f} MiB (target under 400 MiB)")
    if args.markdown:
        markdown(results)


if __name__ == "__main__":
    main()
