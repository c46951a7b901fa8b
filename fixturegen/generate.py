"""generate(): build the job, run it (and its what-ifs), write the rank files and truth.json;
main(): the command line of scripts/generate_fixture.py."""

from __future__ import annotations

import argparse
import json
import sys
import uuid
from pathlib import Path

import numpy as np

from . import job as jobmod
from .catalog import MS
from .causes import SCENARIOS, STALL_KINDS, parse_scenario
from .ddl import EXPORT_VERSIONS
from .kineto import KINETO_BLOCK_NS, KINETO_PRODUCT, KINETO_SCHEMA, write_rank as write_kineto
from .nsys import GLOBAL_VID, clock, write_rank as write_nsys
from .program import (
    STREAM_AG,
    STREAM_COMPUTE,
    STREAM_DP,
    STREAM_RS,
    STREAM_SIDE,
    STREAM_TP,
    STEP_RANGE,
    STREAM_UNSHARD,
    STYLES,
    _rng,
)
from .records import RankRecords
from .truth import build_truth

SCRIPT = "scripts/generate_fixture.py"
FORMAT_VERSION = 2
FORMATS = ("nsys", "kineto")
T0_NS = 1_750_000_000_000_000_000  # true UTC of step 0 (2025-06-15T15:06:40Z), fixed
STREAMS = {"compute": STREAM_COMPUTE, "nccl": STREAM_DP, "side": STREAM_SIDE, "dp": STREAM_DP, "tp": STREAM_TP,
           "fsdp_unshard": STREAM_UNSHARD, "fsdp_all_gather": STREAM_AG, "fsdp_reduce_scatter": STREAM_RS,
           "pp_prev": 13, "pp_next": 17}
CLOCK_MODEL = "recorded_utc = true + offset_ns + round(drift_ppm * 1e-6 * (true - t0_ns)); "


def args_text(a):
    """The generating arguments as a command-line tail (no OUT_DIR: files must not depend on it)."""
    t = [f"--seed {a['seed']}", f"--style {a['style']}", f"--scenario {a['scenario']}", f"--ranks {a['ranks']}",
         f"--hosts {a['hosts']}", f"--steps {a['steps']}", f"--kernels-per-step {a['kernels_per_step']}",
         f"--buckets {a['buckets']}", f"--microbatches {a['microbatches']}", f"--stall {a['stall']}",
         f"--drift-ppm {a['drift_ppm']}", f"--nsys-version {a['nsys_version']}",
         f"--contention-ranks {a['contention_ranks']}", f"--format {a['format']}"]
    t += ["--normalized-time"] if a["normalized_time"] else []
    t += ["--shuffle-rows"] if a["shuffle_rows"] else []
    t += ["--no-sync-records"] if not a["sync_records"] else []
    t += ["--kineto-base-boundary"] if a["kineto_base_boundary"] else []
    t += [f"--report-clock-ns {a['report_clock_ns']}"] if a.get("report_clock_ns") else []
    t += [f"--capture-stop {a['capture_stop']}"] if a.get("capture_stop") is not None else []
    t += [f"--step-range {a['step_range']}"] if a.get("step_range") else []
    t += [f"--kineto-sizes {a['kineto_sizes']}"] if a.get("kineto_sizes") else []
    t += ["--nvtx-payloads"] if a.get("nvtx_payloads") else []
    return " ".join(t)


def boundary_t0(session_rel, host_of, offsets, drifts):
    """--kineto-base-boundary: the t0 that puts a Kineto base-time block boundary inside the largest gap
    between the ranks' program starts (each on its own clock), so ranks on either side of it get
    baseTimeNanoseconds one block apart. The boundary is the first one after T0_NS."""
    rel = np.sort([int(clock(session_rel[r], offsets[h], drifts[h], 0)) for r, h in enumerate(host_of)])
    gaps = np.diff(rel)
    at = int(np.argmax(gaps))
    if gaps[at] < 2:
        raise ValueError("the ranks' program starts coincide: no block boundary fits between them (change --seed)")
    boundary = (T0_NS // KINETO_BLOCK_NS + 1) * KINETO_BLOCK_NS
    return int(boundary - (rel[at] + gaps[at] // 2))


def generate(out_dir, ranks=8, hosts=2, steps=10, kernels_per_step=64, buckets=4, scenario="mixed", seed=0,
             normalized_time=False, shuffle_rows=False, drift_ppm=0.0, nsys_version="2024.5",
             contention_ranks="one", force=False, format="nsys", kineto_base_boundary=False,  # noqa: A002
             style="ddp", microbatches=4, stall="dataloader", sync_records=True, report_clock_ns=0,
             capture_stop=None, step_range=STEP_RANGE, kineto_sizes="nelems", nvtx_payloads=False):
    """Write rep_<rank>.sqlite (format "nsys") or rank_<rank>.json.gz (format "kineto") for every
    rank and truth.json into out_dir; return the truth.

    report_clock_ns: each report's own clock error, on top of its host's offset: rank r's recorded
    times are shifted by +-report_clock_ns x U(0.5, 1) (its own random stream), as when each
    process's profiler converts its timestamps to UTC on its own (the real FS24 sets: ranks of one
    host end a collective milliseconds apart). 0: the ranks of a host share its clock exactly.

    capture_stop: a fraction f in (0, 1): every rank's profiler stops f of the way through the last
    step (from the previous step's end to the last one's, true time), as a capture limited in time
    does: calls not returned by then are not recorded, GPU work still running or queued is lost
    although its launch call was recorded, and the step's range ends at the stop. The truth
    (`capture_stop_ns`, `steps_cut`) still describes the whole run. None: the whole run.

    kineto_sizes: how record_param_comms records a message's size in a Kineto trace: "nelems"
    (PyTorch 2.5's In/Out msg nelems and dtype) or "input_dims" (only the input's shape, "Input
    Dims", the element type left to the NCCL kernel's name, as Megatron's traces have it).

    nvtx_payloads: nsys exports as `nsys export --include-blobs=true` makes them: NCCL's API ranges
    carry their NVTX payload blobs (message size, communicator), with the schema tables
    (fixturegen/payloads.py)."""
    if format not in FORMATS:
        raise ValueError(f"unknown format {format!r}; one of {', '.join(FORMATS)}")
    if format == "kineto" and (normalized_time or nsys_version != "2024.5"):
        raise ValueError("--normalized-time and --nsys-version apply to nsys exports only "
                         "(Kineto writes ts relative to baseTimeNanoseconds)")
    if style not in STYLES:
        raise ValueError(f"unknown style {style!r}; one of {', '.join(STYLES)}")
    parse_scenario(scenario)  # refuses unknown causes early
    if nsys_version not in EXPORT_VERSIONS:
        raise ValueError(f"unknown nsys version {nsys_version!r}; one of {', '.join(EXPORT_VERSIONS)}")
    if contention_ranks not in ("one", "all"):
        raise ValueError("contention_ranks must be 'one' or 'all'")
    if stall not in STALL_KINDS:
        raise ValueError(f"unknown stall kind {stall!r}; one of {', '.join(STALL_KINDS)}")
    if ranks < 2 or not 1 <= hosts <= ranks:
        raise ValueError("need ranks >= 2 and 1 <= hosts <= ranks")
    if kineto_sizes not in ("nelems", "input_dims") or (kineto_sizes != "nelems" and format != "kineto"):
        raise ValueError("kineto_sizes is 'nelems' or 'input_dims', and applies to --format kineto only")
    if nvtx_payloads and format != "nsys":
        raise ValueError("nvtx_payloads applies to --format nsys only")
    if report_clock_ns < 0:
        raise ValueError("report_clock_ns must be >= 0")
    if capture_stop is not None and not (0 < capture_stop < 1 and steps >= 2):
        raise ValueError("capture_stop must be a fraction strictly between 0 and 1, with 2 or more steps")
    if steps < 1 or kernels_per_step < 12 or buckets < 1 or microbatches < 1:
        raise ValueError("need steps >= 1, kernels_per_step >= 12, buckets >= 1, microbatches >= 1")
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise FileExistsError(f"{out} exists and is not a directory")
    if out.exists() and any(out.iterdir()) and not force:
        raise FileExistsError(f"{out} is not empty (use --force to overwrite)")
    if not step_range:
        raise ValueError("step_range must name the step's range")
    job = jobmod.build(style, ranks, hosts, steps, kernels_per_step, buckets, microbatches, scenario, seed,
                       contention_ranks, stall, step_range)
    out.mkdir(parents=True, exist_ok=True)
    # --force: no leftovers of an older set, of either format
    for stale in [*out.glob("rep_*.sqlite"), *out.glob("rank_*.json.gz"), out / "truth.json"]:
        stale.unlink(missing_ok=True)
    args = {"style": style, "ranks": ranks, "hosts": hosts, "steps": steps, "kernels_per_step": kernels_per_step,
            "buckets": buckets, "microbatches": microbatches, "scenario": scenario, "stall": stall, "seed": seed,
            "normalized_time": normalized_time, "shuffle_rows": shuffle_rows, "drift_ppm": float(drift_ppm),
            "nsys_version": nsys_version, "contention_ranks": contention_ranks, "format": format,
            "kineto_base_boundary": bool(kineto_base_boundary), "sync_records": bool(sync_records)}
    if report_clock_ns:  # only when used: the committed sets' truth and files stay as they were
        args["report_clock_ns"] = int(report_clock_ns)
    if capture_stop is not None:
        args["capture_stop"] = float(capture_stop)
    if step_range != STEP_RANGE:  # only when used, as above
        args["step_range"] = step_range
    if kineto_sizes != "nelems":
        args["kineto_sizes"] = kineto_sizes
    if nvtx_payloads:  # only when used, as above
        args["nvtx_payloads"] = True
    lay = job.lay

    # clocks, identities
    rng = _rng(seed, 3)
    offsets = [0] + [int(rng.choice([-1, 1]) * rng.integers(500_000, 8 * MS)) for _ in range(1, hosts)]
    drifts = [0.0] + [float(drift_ppm) * (1 if h % 2 else -1) + 0.0 for h in range(1, hosts)]  # + 0.0: no -0.0
    session_rel = -1_800 * MS + rng.integers(0, 6 * MS, ranks)  # each rank's nsys starts a few ms apart
    t0 = boundary_t0(session_rel, lay.host_of, offsets, drifts) if kineto_base_boundary else T0_NS
    misc = _rng(seed, 6)
    pid_base = int(misc.integers(100, 400))
    host_uuids = [[str(uuid.UUID(bytes=misc.bytes(16), version=4)) for _ in range(n)] for n in lay.sizes]
    session_uuids = [str(uuid.UUID(bytes=misc.bytes(16), version=4)) for _ in range(ranks)]

    runs, colls, causes, whatif = build_truth(job, t0)
    r_all = runs["all"]
    stop = None
    if capture_stop is not None:
        ends = whatif["actual"]["step_end_ns"]
        stop = int(ends[-2] + capture_stop * (ends[-1] - ends[-2])) - t0  # true time, relative to t0
    generated_by = f"{SCRIPT} {args_text(args)}"
    rank_truth = []
    for r in range(ranks):
        h = lay.host_of[r]
        pid = pid_base + lay.local_of[r]
        gpid = GLOBAL_VID | (pid << 24)
        irng = _rng(seed, 9, r)
        n_comms = sum(1 for c in lay.comms if r in c.ranks)
        report_error = 0
        if report_clock_ns:
            crng = _rng(seed, 12, r)
            report_error = int(crng.choice([-1, 1]) * crng.uniform(0.5, 1.0) * report_clock_ns)
        offset = offsets[h] + report_error
        info = {"rank": r, "host": f"node{h}", "host_index": h, "local_rank": lay.local_of[r],
                "device": lay.local_of[r], "gpus_on_host": lay.sizes[h], "pid": pid, "global_pid": gpid,
                "global_tid": gpid | pid, "offset_ns": offset, "drift_ppm": drifts[h], "t0_ns": t0,
                "utc_epoch_ns": int(clock(session_rel[r], offset, drifts[h], t0)),
                "system_clock_ns": 28_254_349_605 + int(session_rel[r] % 10**9),
                "gpu_uuids": host_uuids[h], "session_uuid": session_uuids[r],
                "nccl_channels": 16 if hosts > 1 else 32,
                "init_ns": -600 * MS - n_comms * 360 * MS + int(irng.integers(0, 2 * MS)),
                "init_durations": (350 * MS + irng.integers(0, MS, n_comms)).tolist()}
        rec = RankRecords(job.progs[r], job.statics[r], r_all, seed, stop)
        shuffle = _rng(seed, 5, r) if shuffle_rows else None
        ident = {"rank": r, "host": info["host"], "local_rank": lay.local_of[r], "pid": pid}
        if report_clock_ns:
            ident["report_clock_error_ns"] = report_error
        if format == "kineto":
            # Kineto's base: the wall clock at program load (this rank's own clock), floored to a block
            info["base_time_ns"] = info["utc_epoch_ns"] - info["utc_epoch_ns"] % KINETO_BLOCK_NS
            name = f"rank_{r}.json.gz"
            counts = write_kineto(out / name, rec, info, lay, args, generated_by, seed)
            rank_truth.append({**ident, "tid": pid, "device": info["device"], "file": name,
                               "utc_epoch_ns": info["utc_epoch_ns"], "base_time_ns": info["base_time_ns"], **counts})
            continue
        counts = write_nsys(out / f"rep_{r}.sqlite", rec, info, args, generated_by, shuffle,
                            [len(c.ranks) for c in lay.comms])
        rank_truth.append({**ident, "device": info["device"], "global_pid": gpid, "global_tid": info["global_tid"],
                           "file": f"rep_{r}.sqlite", "utc_epoch_ns": info["utc_epoch_ns"], **counts})

    kineto = format == "kineto"
    if kineto:
        bases = sorted({r["base_time_ns"] for r in rank_truth})
        kineto_block = {"block_ns": KINETO_BLOCK_NS, "base_boundary": bool(kineto_base_boundary),
                        "boundary_ns": bases[-1] if len(bases) > 1 else None, "base_time_ns": bases,
                        "dtype": "BFloat16", "cuda_sync": bool(sync_records)}
    stored = ("stored ts (us, 3 decimals) = (recorded_utc - base_time_ns) / 1000, base_time_ns = utc_epoch_ns "
              f"floored to a {KINETO_BLOCK_NS // 10**9}-second block" if kineto else
              "stored = recorded_utc - utc_epoch_ns (or recorded_utc when time_normalized)")
    straggler = [c["straggler_rank"] for c in colls]
    counts = np.bincount(straggler, minlength=ranks) if colls else np.zeros(ranks, np.int64)
    top = max(causes, key=lambda c: c["wait_saved_ns"], default=None)
    truth = {
        "generator": SCRIPT, "format_version": FORMAT_VERSION, "format": format, "seed": seed, "style": style,
        "scenario": scenario, "params": args, "size": {"buckets" if style in ("ddp", "tp+ddp") else
                                                       "microbatches" if style == "pp" else "layers": job.size},
        "export": ({"product_version": KINETO_PRODUCT, "schema_version": KINETO_SCHEMA} if kineto else
                   {"product_version": EXPORT_VERSIONS[nsys_version]["product"],
                    "schema_version": EXPORT_VERSIONS[nsys_version]["schema"]}),
        "t0_ns": t0, "time_normalized": normalized_time, "clock_model": CLOCK_MODEL + stored,
        **({"kineto": kineto_block} if kineto else {}),
        "streams": STREAMS,
        "communicators": [{"name": c.name, "index": c.index, "ranks": c.ranks, "p2p": c.p2p, "desc": c.desc,
                           "stream": {str(r): s for r, s in c.stream.items()}} for c in lay.comms],
        "hosts": {f"node{h}": {"offset_ns": offsets[h], "drift_ppm": drifts[h],
                               "ranks": [r for r in range(ranks) if lay.host_of[r] == h]} for h in range(hosts)},
        "ranks": rank_truth,
        **({"capture_stop_ns": stop + t0, "steps_cut": [steps - 1]} if stop is not None else {}),
        "whatif": whatif,
        "causes": causes,
        "collectives": colls,
        "expected": {"straggler_counts": counts.tolist(), "top_straggler_rank": int(counts.argmax()),
                     "wait_cost_ns_total": int(sum(c["wait_cost_ns"] for c in colls)),
                     "skew_ns_total": int(sum(c["skew_ns"] for c in colls)),
                     "top_cause": None if top is None else
                     {k: top.get(k) for k in ("id", "type", "rank", "host", "kernel", "nvtx")}},
    }
    (out / "truth.json").write_text(json.dumps(truth, indent=1) + "\n")
    return truth


def main(argv=None):
    ap = argparse.ArgumentParser(prog="generate_fixture.py",
                                 description="Write a synthetic multi-rank job (Nsight Systems exports or PyTorch "
                                             "profiler traces) with its planted truth.")
    ap.add_argument("out_dir")
    ap.add_argument("--style", choices=STYLES, default="ddp", help="parallelism: stream layout and collectives")
    ap.add_argument("--ranks", type=int, default=8)
    ap.add_argument("--hosts", type=int, default=2)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--kernels-per-step", type=int, default=64, help="compute kernels per step and rank")
    ap.add_argument("--buckets", type=int, default=4, help="gradient buckets (DDP all-reduces) per step")
    ap.add_argument("--microbatches", type=int, default=4, help="pp: microbatches per step")
    ap.add_argument("--scenario", default="mixed",
                    help=f"{', '.join(SCENARIOS)}, or causes joined with '+' (e.g. slow_kernel+host_stall)")
    ap.add_argument("--stall", choices=STALL_KINDS, default="dataloader", help="where host_stall loses time")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--normalized-time", action="store_true", help="store absolute UTC ns (--ts-normalize=true)")
    ap.add_argument("--shuffle-rows", action="store_true", help="write event rows in random order (nsys 2025.6+)")
    ap.add_argument("--drift-ppm", type=float, default=0.0, help="clock drift of hosts other than node0")
    ap.add_argument("--nsys-version", choices=sorted(EXPORT_VERSIONS), default="2024.5")
    ap.add_argument("--contention-ranks", choices=("one", "all"), default="one")
    ap.add_argument("--no-sync-records", action="store_true",
                    help="leave out CUDA synchronization and event records (nsys SYNCHRONIZATION / CUDA_EVENT, "
                         "Kineto cuda_sync), as many real captures do")
    ap.add_argument("--format", choices=FORMATS, default="nsys",
                    help="nsys: rep_<rank>.sqlite exports; kineto: PyTorch profiler traces rank_<rank>.json.gz")
    ap.add_argument("--kineto-base-boundary", action="store_true",
                    help="start the ranks' programs on either side of a Kineto base-time block boundary, so "
                         "their baseTimeNanoseconds differ by one block (~91 days)")
    ap.add_argument("--report-clock-ns", type=int, default=0,
                    help="each report's own clock error (ns, up to this much either way) on top of its host's offset")
    ap.add_argument("--capture-stop", type=float, default=None,
                    help="stop every profiler this fraction of the way through the last step (GPU work in flight is lost)")
    ap.add_argument("--step-range", default=STEP_RANGE,
                    help="the step range's name ('{step}': its number; without it every step has the same name, "
                         "as range_push('train_step') gives)")
    ap.add_argument("--kineto-sizes", choices=("nelems", "input_dims"), default="nelems",
                    help="Kineto: message sizes as In/Out msg nelems and dtype, or only as the input's Input Dims")
    ap.add_argument("--nvtx-payloads", action="store_true",
                    help="nsys: NCCL's API ranges carry their NVTX payload blobs (as nsys export --include-blobs=true)")
    ap.add_argument("--force", action="store_true", help="write into a non-empty OUT_DIR")
    a = ap.parse_args(argv)
    try:
        truth = generate(a.out_dir, ranks=a.ranks, hosts=a.hosts, steps=a.steps, kernels_per_step=a.kernels_per_step,
                         buckets=a.buckets, scenario=a.scenario, seed=a.seed, normalized_time=a.normalized_time,
                         shuffle_rows=a.shuffle_rows, drift_ppm=a.drift_ppm, nsys_version=a.nsys_version,
                         contention_ranks=a.contention_ranks, force=a.force, format=a.format,
                         kineto_base_boundary=a.kineto_base_boundary, style=a.style, microbatches=a.microbatches,
                         stall=a.stall, sync_records=not a.no_sync_records, report_clock_ns=a.report_clock_ns,
                         capture_stop=a.capture_stop, step_range=a.step_range, kineto_sizes=a.kineto_sizes,
                         nvtx_payloads=a.nvtx_payloads)
    except (ValueError, FileExistsError) as e:
        print(f"generate_fixture: {e}", file=sys.stderr)
        return 2
    n = sum(r["kernels"] for r in truth["ranks"])
    what = "Kineto traces" if a.format == "kineto" else "exports"
    print(f"wrote {len(truth['ranks'])} {what} ({n} kernels, {len(truth['collectives'])} collectives) "
          f"and truth.json to {a.out_dir}")
    return 0
