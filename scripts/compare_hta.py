#!/usr/bin/env python3
"""Side by side with Holistic Trace Analysis (HTA) on PyTorch profiler traces.

Computes HTA's communication/computation overlap per rank and ours with HTA's filters (GPU kernels
launched before the last ProfilerStep started; memcpy/memset neither communication nor
computation), checks they agree within 0.1 percentage points, and times both readers on the same
traces, printing the ratio.

HTA (HolisticTraceAnalysis 0.5.0 from PyPI) is installed only for this script, into its own
virtual environment under ~/.cache/collectivetrace-nsys/hta-venv, and run there in a subprocess.

    python scripts/compare_hta.py [TRACE_DIR]   (default: ../shared/data/real/kineto/hta-trace_filter-2rank)
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import venv
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_TRACES = ROOT.parent / "shared" / "data" / "real" / "kineto" / "hta-trace_filter-2rank"
HTA_VENV = Path(os.environ.get("COLLECTIVETRACE_HTA_VENV", Path.home() / ".cache" / "collectivetrace-nsys" / "hta-venv"))
HTA_VERSION = "0.5.0"
TOLERANCE_PP = 0.1

# Run inside HTA's environment: load the traces, time it, compute HTA's overlap.
HTA_SNIPPET = """
import json, sys, time, logging
logging.disable(logging.WARNING)
from hta.trace_analysis import TraceAnalysis
t0 = time.perf_counter()
analysis = TraceAnalysis(trace_dir=sys.argv[1])
load = time.perf_counter() - t0
df = analysis.get_comm_comp_overlap(visualize=False)
print(json.dumps({"load_seconds": load, "overlap_pct": {str(int(r)): float(v) for r, v in zip(df["rank"], df["comp_comm_overlap_pctg"])}}))
"""


def hta_python() -> Path:
    python = HTA_VENV / "bin" / "python"
    if not python.exists() or subprocess.run([python, "-c", "import hta"], capture_output=True).returncode:
        print(f"installing HolisticTraceAnalysis {HTA_VERSION} into {HTA_VENV} (once) ...", file=sys.stderr)
        venv.create(HTA_VENV, with_pip=True, clear=True)
        subprocess.run([python, "-m", "pip", "install", "-q", f"HolisticTraceAnalysis=={HTA_VERSION}"], check=True)
    return python


def ours(traces: Path) -> tuple[dict[int, float], float]:
    """Our overlap per rank with HTA's filters, and our reading time."""
    from nsys_collective.ingest.capture import NVTX_PUSH_POP_RANGE, read_kineto
    from nsys_collective.ingest.discover import discover
    from nsys_collective.model.intervals import covered_ns, overlap_ns
    from nsys_collective.model.nccl import launches, nccl_kernel_mask

    paths = discover([traces])
    t0 = time.perf_counter()
    exports = read_kineto(paths)
    load = time.perf_counter() - t0
    result = {}
    for export in exports:
        k, nvtx = export.kernels, export.nvtx
        rank = int(export.metadata["distributedInfo.rank"])
        pid = int(np.bincount(k["pid"][k["pid"] >= 0]).argmax())
        steps = (nvtx["type"] == NVTX_PUSH_POP_RANGE) & np.array([bool(n) and n.startswith("ProfilerStep") for n in export.names(nvtx["name"])])
        last_step_start = nvtx["start"][steps].max()
        # HTA keeps the GPU kernels whose launching CPU call started before the last step began.
        _, launched = launches(export, pid, k["correlation"])
        kept = (launched >= 0) & (launched < last_step_start)
        comm = kept & nccl_kernel_mask(export)
        comp = kept & ~nccl_kernel_mask(export)
        comm_iv, comp_iv = (k["start"][comm], k["end"][comm]), (k["start"][comp], k["end"][comp])
        result[rank] = 100 * overlap_ns(comm_iv, comp_iv) / covered_ns(*comm_iv)
    return result, load


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("traces", nargs="?", type=Path, default=DEFAULT_TRACES)
    args = parser.parse_args()
    if not args.traces.is_dir():
        sys.exit(f"compare_hta: {args.traces}: no such folder of traces")
    mine, our_load = ours(args.traces)
    run = subprocess.run([hta_python(), "-c", HTA_SNIPPET, str(args.traces)], capture_output=True, text=True)
    if run.returncode:
        sys.exit(f"compare_hta: HTA failed: {run.stderr.strip().splitlines()[-1] if run.stderr.strip() else run.returncode}")
    hta = json.loads(run.stdout.strip().splitlines()[-1])
    print(f"traces: {args.traces}")
    print(f"{'rank':>4} {'HTA %':>8} {'ours %':>8} {'diff pp':>8}")
    worst = 0.0
    for rank in sorted(mine):
        theirs = hta["overlap_pct"][str(rank)]
        diff = mine[rank] - theirs
        worst = max(worst, abs(diff))
        print(f"{rank:>4} {theirs:>8.2f} {mine[rank]:>8.2f} {diff:>+8.3f}")
    print(f"reading the traces: HTA {hta['load_seconds']:.3f} s, ours {our_load:.3f} s "
          f"({hta['load_seconds'] / our_load:.1f}x faster)")
    print(f"{'PASS' if worst <= TOLERANCE_PP else 'MISS'}  overlap agrees within {TOLERANCE_PP} percentage points (worst {worst:.3f})")
    sys.exit(0 if worst <= TOLERANCE_PP else 1)


if __name__ == "__main__":
    main()
