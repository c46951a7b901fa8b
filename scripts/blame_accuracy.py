#!/usr/bin/env python3
"""Blame accuracy of `collectivetrace-nsys analyze` against the generator's what-if truth.

For every parallelism style x planted cause (and the balanced control), in both formats (nsys
exports, Kineto traces), generate the job (fixturegen), run ``collectivetrace-nsys analyze --json``
(the installed command), match the analysis's top cause to the planted one (same rank, kernel name
/ NVTX range name) and print a markdown table:

    style | cause | format | planted cause found first | blamed ns | truth wait_saved_ns |
    truth extra transfer | ratio | truth step_time_saved | straggler right | idle on planted rank(s)

"ratio" is blamed / truth wait_saved_ns ("-" where the truth is within 2.5% of the wait of 0: the
step time columns tell then); before the what-if (schema_version 1), for the transfer causes (contention, slow_network), whose
blame today is extra transfer time (``contention_ns``), blamed / the planted extra transfer time
summed over the ranks (truth ``contention_ns_total``). "idle" is today's ``summary.idle_wait_ns`` on
the planted rank(s): wait the analysis put down to an idle straggler.

Only documented JSON contract fields are read (docs/output-contract.md): with a
``whatif`` block (schema_version 2), ``whatif.causes[]`` and their ``wait_saved_ns`` /
``step_time_saved_ns``; otherwise today's ``blocking_kernels[].inflicted_wait_ns``,
``blocking_launches[].inflicted_wait_ns``, ``contention[].contention_ns`` and
``summary.idle_wait_ns``.

    python scripts/blame_accuracy.py [--dir DIR] [--styles ddp,fsdp,...] [--causes slow_kernel,...]
        [--formats nsys,kineto] [--json OUT.json] [--analyze collectivetrace-nsys]
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import fixturegen as gen  # noqa: E402

# The what-if cause that stands for each planted one (as tests/integration/test_whatif.py matches them).
WHATIF_KIND = {"slow_kernel": "kernel", "extra_kernel": "extra_kernel", "host_stall": "host", "host_group": "host_group",
               "contention": "transfer", "slow_network": "transfer", "slow_device": "slow_device",
               "api_stall": "api_stall", "oneoff_stall": "host", "nested_stall": "host"}
# The overlap causes (fixturegen/overlap_causes.py) are judged per kernel, by
# tests/integration/test_contention_fit.py: a share of the transfers' excess, not one what-if.
CASES = ("balanced",) + tuple(c for c in gen.CAUSES if c in WHATIF_KIND)
# the same job for every cause of a style: 4 ranks on 2 hosts, 6 steps
JOB = dict(ranks=4, hosts=2, steps=6, buckets=3, microbatches=2)
KERNELS = {"ddp": 40, "fsdp": 40, "tp": 40, "tp+ddp": 40, "pp": 80}
SEED = 7


def whatif_matches(c, cause) -> bool:
    """Is a what-if cause the planted one: its kind, and its rank and kernel, its rank and range, or
    (host-wide) the planted ranks and range? Transfers are one cause."""
    t = cause["type"]
    if c["cause"] != WHATIF_KIND[t]:
        return False
    if t in ("slow_kernel", "extra_kernel"):
        return c["rank"] == cause["rank"] and c["name"] == cause["kernel"]
    if t in ("host_stall", "oneoff_stall", "nested_stall"):
        return c["rank"] == cause["rank"] and c["name"] == cause["nvtx"]
    if t in ("slow_device", "api_stall"):
        return c["rank"] == cause["rank"]
    if t == "host_group":  # profiler traces name no hosts: the ranks sharing a clock do
        return sorted(c.get("ranks") or []) == sorted(cause["ranks"]) and c["name"] == cause["nvtx"]
    return True


def analyze(folder, command):
    proc = subprocess.run([command, "analyze", str(folder), "--json"], capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"analyze {folder}: exit {proc.returncode}: {proc.stderr.strip()[-500:]}")
    return json.loads(proc.stdout)


def matches(entry, cause, key):
    """Does an analysis entry name the planted cause (rank, and kernel or range)?"""
    t = cause["type"]
    if t in ("slow_kernel", "extra_kernel"):
        return entry.get(key) == cause["kernel"] and entry.get("rank") == cause["rank"]
    if t == "host_stall":
        return entry.get(key) == cause["nvtx"] and entry.get("rank") == cause["rank"]
    if t == "host_group":
        return entry.get(key) == cause["nvtx"] and entry.get("rank") in cause["ranks"]
    if t == "contention":
        return entry.get("kernel") == cause["kernel"]
    return False


def judge(doc, truth):
    """One table row's figures for the planted cause (or the control)."""
    s = doc["summary"]
    row = {"straggler": s.get("top_straggler_rank"), "wait_ns": s.get("wait_ns")}
    if not truth["causes"]:
        return {**row, "found": "-", "blamed": None, "truth": None, "ratio": None, "straggler_right": "-",
                "idle": None, "truth_wait_total": truth["whatif"]["actual"]["wait_ns"]}
    cause = truth["causes"][0]
    row["truth"] = cause["wait_saved_ns"]
    row["truth_step"] = cause["step_time_saved_ns"]
    idle = s.get("idle_wait_ns") or {}
    row["idle"] = sum(v for k, v in idle.items() if int(k) in cause["ranks"]) if cause["ranks"] else None
    w = doc.get("whatif")
    if w:  # schema_version 2: the what-if blame itself
        found = [c for c in w["causes"] if whatif_matches(c, cause)][:1]
        row["found"] = "yes" if found and w["causes"] and w["causes"][0] is found[0] else "no"
        row["blamed"] = found[0]["wait_saved_ns"] if found else 0
        row["blamed_step"] = found[0]["step_time_saved_ns"] if found else 0
    elif cause["type"] in ("contention", "slow_network"):
        hits = [c for c in doc["contention"] if matches(c, cause, "kernel")]
        row["found"] = "yes" if hits and doc["contention"] and matches(doc["contention"][0], cause, "kernel") else "no"
        row["blamed"] = sum(c.get("contention_ns") or 0 for c in hits)
    else:
        entries = [(e, "kernel") for e in doc["blocking_kernels"]] + [(e, "nvtx") for e in doc["blocking_launches"]]
        entries.sort(key=lambda e: -(e[0].get("inflicted_wait_ns") or 0))
        hits = [e for e, key in entries if matches(e, cause, key)]
        row["found"] = "yes" if entries and matches(entries[0][0], cause, entries[0][1]) else "no"
        row["blamed"] = sum(e.get("inflicted_wait_ns") or 0 for e in hits)
    transfer = cause["type"] in ("contention", "slow_network")
    row["straggler_right"] = "-" if transfer else ("yes" if row["straggler"] in cause["ranks"] else "no")
    # a transfer cause's blame (contention_ns) is extra transfer time: compare it with the planted one
    row["truth_transfer"] = cause.get("contention_ns_total") if transfer else None
    ref = row["truth_transfer"] if transfer else row["truth"]
    if w:  # the what-if gives what fixing saves: compare it with the truth's, where that is not about 0
        ref = row["truth"] if abs(row["truth"]) >= 0.025 * (row["wait_ns"] or 0) else None
    row["ratio"] = (row["blamed"] / ref) if ref else None
    return row


def ms(ns):
    return "-" if ns is None else f"{ns / 1e6:.2f} ms"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dir", type=Path, help="generate the jobs here (kept); default: a temporary folder")
    ap.add_argument("--styles", default=",".join(gen.STYLES))
    ap.add_argument("--causes", default=",".join(CASES))
    ap.add_argument("--formats", default="nsys,kineto")
    ap.add_argument("--seeds", default=str(SEED), help="comma-separated seeds (default %(default)s); several seeds add a column")
    ap.add_argument("--analyze", default=shutil.which("collectivetrace-nsys", path=str(Path(sys.executable).parent))
                    or shutil.which("collectivetrace-nsys") or "collectivetrace-nsys",
                    help="the analyze command (default: the collectivetrace-nsys installed beside this Python, "
                         "else the one on PATH)")
    ap.add_argument("--json", type=Path, help="also write the rows as JSON")
    a = ap.parse_args(argv)
    root = a.dir or Path(tempfile.mkdtemp(prefix="blame-accuracy-"))
    rows = []
    seeds = [int(x) for x in a.seeds.split(",")]
    seed_col = ("seed | ", "---:|") if len(seeds) > 1 else ("", "")
    print(f"| style | cause | format | {seed_col[0]}planted cause found first | blamed | truth wait_saved | truth extra transfer | "
          "ratio | step time saved | truth step_time_saved | straggler right | idle on planted rank(s) |")
    print(f"|---|---|---|{seed_col[1]}---|---:|---:|---:|---:|---:|---:|---|---:|")
    for style, case, fmt, seed in ((s, c, f, n) for s in a.styles.split(",") for c in a.causes.split(",")
                                   for f in a.formats.split(",") for n in seeds):
        shown_seed = f"{seed} | " if len(seeds) > 1 else ""
        folder = root / f"{style}-{case}-{fmt}-{seed}".replace("+", "_")
        try:
            truth = gen.generate(folder, style=style, scenario=case, seed=seed, format=fmt, force=True,
                                 kernels_per_step=KERNELS[style], **JOB)
        except ValueError as e:
            print(f"| {style} | {case} | {fmt} | {shown_seed}n/a: {e} | | | | | | | | |")
            continue
        try:
            r = judge(analyze(folder, a.analyze), truth)
        except RuntimeError as e:
            print(f"| {style} | {case} | {fmt} | {shown_seed}analyze failed: {e} | | | | | | | | |")
            continue
        r.update(style=style, cause=case, format=fmt, seed=seed)
        rows.append(r)
        ratio = "-" if r["ratio"] is None else f"{r['ratio']:.2f}"
        print(f"| {style} | {case} | {fmt} | {shown_seed}{r['found']} | {ms(r['blamed'])} | {ms(r['truth'])} | "
              f"{ms(r.get('truth_transfer'))} | {ratio} | {ms(r.get('blamed_step'))} | {ms(r.get('truth_step'))} | {r['straggler_right']} | "
              f"{ms(r['idle'])} |", flush=True)
    if a.json:
        a.json.write_text(json.dumps(rows, indent=1) + "\n")
    if not a.dir:
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
