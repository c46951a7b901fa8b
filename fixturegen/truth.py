"""Truth as a what-if: the job run with every planted cause, with each cause removed, and with none.

Definitions (the analysis uses the same ones):

* wait of a collective instance = sum over its member ranks of (last arrival - own arrival), true
  GPU time (a send/recv pair is an instance of two). A run's wait is the sum over all instances.
* ``wait_saved_ns`` of a cause = (the run's wait with every cause) - (the same sum with that cause
  removed, everything else, random draws included, unchanged).
* step k ends at the latest end of any GPU op (kernel, copy, memset) launched inside
  ``ProfilerStep#k`` on any rank; its duration is its end minus step k-1's end (step 0: minus the
  job's start, the earliest CUDA API call of any rank). ``step_time_saved_ns`` = mean over steps of
  (duration with every cause - duration without this one).
* ``ideal``: every cause removed at once (the no-cause run); ``baseline``: that run's wait, which no
  planted cause explains (jitter, and for pipelines the fill and drain bubbles).
Single-cause savings need not add up to the ideal: causes overlap or mask each other.
"""

from __future__ import annotations

import numpy as np

from . import catalog as cat
from . import stragglers
from .causes import STALL_RANGES
from .job import run
from .overlap_causes import OVERLAP_CAUSES, TRANSFER_CAUSES, truth_fields as overlap_truth
from .program import G_KERNEL, G_MEMSET, A_HOST, STALL_NS

DEFINITIONS = {
    "wait": "per collective instance: sum over its member ranks of (last arrival - own arrival), true GPU time; "
            "a send/recv pair is an instance of two members; a run's wait sums all instances",
    "wait_saved_ns": "wait of the run with every planted cause - wait of the same run with this cause removed "
                     "(same seed, same random draws)",
    "step_end": "step k ends at the latest end of any GPU op (kernel, memcpy, memset) launched inside "
                "ProfilerStep#k on any rank",
    "step_time": "step k's end - step k-1's end; step 0: its end - the job's start (the earliest CUDA API call "
                 "of any rank)",
    "step_time_saved_ns": "mean over steps of (step time with every cause - step time with this cause removed)",
    "ideal": "every planted cause removed at once (the no-cause run)",
    "baseline": "the no-cause run's wait: jitter (and pipeline bubbles) no planted cause explains",
}


def measure(job, r, t0):
    """Wait per instance, step ends and the job start of a run (absolute true ns)."""
    waits = np.array([int((last - s).sum()) for last, s in zip(r.last, r.start)], np.int64)
    steps = job.params["steps"]
    ends = np.full(steps, np.iinfo(np.int64).min, np.int64)
    start = np.iinfo(np.int64).max
    for p, ge, hs, act in zip(job.progs, r.ge, r.hs, r.act):
        gpu = act & (p.gkind >= G_KERNEL) & (p.gkind <= G_MEMSET)
        np.maximum.at(ends, p.step[gpu], ge[gpu])
        calls = np.flatnonzero(act & (p.api != A_HOST))
        start = min(start, int(hs[calls[0]]))
    durations = np.diff(np.concatenate([[start], ends]))
    return {"waits": waits, "wait": int(waits.sum()), "step_end": t0 + ends, "job_start": t0 + start,
            "step_time": durations}


def whatif(job, t0):
    """All runs the truth needs: 'all', one per cause removed, 'none'."""
    n = len(job.causes)
    everything = set(range(n))
    runs = {"all": run(job, everything)}
    out = {"all": measure(job, runs["all"], t0)}
    for c in job.causes:
        rest = everything - {c.index}
        key = ("without", c.index)
        if not rest:
            runs[key] = runs.setdefault("none", run(job, rest))
        else:
            runs[key] = run(job, rest)
        out[key] = measure(job, runs[key], t0)
    if "none" not in runs:
        runs["none"] = run(job, set()) if n else runs["all"]
    out["none"] = measure(job, runs["none"], t0)
    return runs, out


def collectives(job, r, m_none, t0, saved):
    """The truth's collective instances of the run with every cause."""
    out = []
    x_none = m_none["x"]
    for i, (inst, info) in enumerate(zip(job.instances, job.inst_info)):
        a = r.start[i]
        last = int(r.last[i])
        wait = last - a
        ref = int(np.floor(np.median(a)))
        kern = cat.CATALOG[info["spec"]]
        c = {"id": i, "comm": info["comm"], "seq": info["seq"], "step": info["step"], "bucket": info["label"],
             "op": info["op"], "kernel": kern.short, "dtype": "bf16", "bytes": info["bytes"], "ranks": info["ranks"]}
        if info["p2p"]:
            c["roles"] = info["roles"]
        c.update({"arrival_ns": (t0 + a).tolist(), "end_ns": (t0 + r.end[i]).tolist(), "last_arrival_ns": t0 + last,
                  "straggler_rank": info["ranks"][int(np.argmax(a))], "ref_arrival_ns": t0 + ref,
                  "skew_ns": last - ref, "wait_ns": wait.tolist(), "wait_cost_ns": int(wait.sum()),
                  "base_transfer_ns": int(inst.x0), "transfer_ns": int(r.x[i]),
                  "slowed": bool(any(i in cz.instances for cz in job.causes)),
                  "slowdown_factor": round(float(r.x[i]) / float(x_none[i]), 4),
                  "saved_wait_ns": {cz.id: int(saved[cz.index][i]) for cz in job.causes if saved[cz.index][i] != 0}})
        out.append(c)
    return out


def cause_entries(job, runs, m, colls):
    """One entry per planted cause: where, what, and what removing it saves."""
    out = []
    steps = job.params["steps"]
    all_ = m["all"]
    for c in job.causes:
        w = m[("without", c.index)]
        d = {"id": c.id, "type": c.type, "rank": c.rank, "host": None if c.host is None else f"node{c.host}",
             "ranks": c.ranks, "steps": np.flatnonzero(c.steps).tolist()}
        if c.type in ("slow_kernel", "extra_kernel"):
            k = cat.SLOW_KERNEL if c.type == "slow_kernel" else cat.EXTRA_KERNEL
            d.update({"kernel": k.short, "kernel_demangled": k.demangled, "stream": 7})
            if c.factor:
                d["factor"] = c.factor
        elif c.type in ("host_stall", "host_group"):
            d.update({"kind": c.kind, "nvtx": STALL_RANGES[c.kind], "stall_ns": STALL_NS})
        elif c.type == "contention":
            d.update({"kernel": cat.CONTEND.short, "kernel_demangled": cat.CONTEND.demangled, "stream": 21,
                      "factor": c.factor})
        elif c.type == "slow_network":
            d["factor"] = c.factor
        elif c.type in stragglers.RANK_CAUSES:
            d.update(stragglers.truth_fields(c))
        elif c.type in OVERLAP_CAUSES:
            d.update(overlap_truth(c))
        per_step = np.zeros(steps, np.int64)
        for e in c.extra.values():
            per_step += e
        d["extra_ns_per_step"] = per_step.tolist()
        d["extra_ns_total"] = int(per_step.sum())
        saved = all_["waits"] - w["waits"]
        d["collectives"] = np.flatnonzero(saved != 0).tolist()
        d["wait_saved_ns"] = int(all_["wait"] - w["wait"])
        d["step_time_saved_ns"] = int(round(float(np.mean(all_["step_time"] - w["step_time"]))))
        d["step_end_ns_without"] = w["step_end"].tolist()
        if c.type in ("contention", "slow_network") or c.type in TRANSFER_CAUSES:
            js = sorted(c.instances)
            x_all = runs["all"].x
            x_wo = runs[("without", c.index)].x
            extra = [int(x_all[j] - x_wo[j]) for j in js]
            d["collectives_slowed"] = js
            d["extra_transfer_ns"] = extra
            d["contention_ns_total"] = int(sum(e * len(colls[j]["ranks"]) for e, j in zip(extra, js)))
            d["expected"] = {"collectives_slowed": len(js), "extra_transfer_ns": int(sum(extra))}
        else:
            hit = [x for x in colls if c.steps[x["step"]] and x["straggler_rank"] in c.ranks]
            d["expected"] = {"collectives_delayed": len(hit), "skew_ns": int(sum(x["skew_ns"] for x in hit)),
                             "inflicted_wait_ns": int(sum(x["wait_cost_ns"] for x in hit))}
        out.append(d)
    return out


def build_truth(job, t0):
    runs, m = whatif(job, t0)
    r = runs["all"]
    m["none"]["x"] = runs["none"].x
    saved = {c.index: m["all"]["waits"] - m[("without", c.index)]["waits"] for c in job.causes}
    colls = collectives(job, r, m["none"], t0, saved)
    causes = cause_entries(job, runs, m, colls)
    a, none = m["all"], m["none"]
    block = {
        "definitions": DEFINITIONS,
        "actual": {"wait_ns": a["wait"], "job_start_ns": a["job_start"], "step_end_ns": a["step_end"].tolist(),
                   "step_time_ns": a["step_time"].tolist()},
        "baseline": {"wait_ns": none["wait"], "job_start_ns": none["job_start"],
                     "step_end_ns": none["step_end"].tolist(), "step_time_ns": none["step_time"].tolist()},
        "ideal": {"wait_saved_ns": int(a["wait"] - none["wait"]),
                  "step_time_saved_ns": int(round(float(np.mean(a["step_time"] - none["step_time"])))),
                  "step_end_ns": none["step_end"].tolist()},
    }
    return runs, colls, causes, block
