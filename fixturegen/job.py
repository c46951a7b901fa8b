"""A whole job: every rank's program (base and planted causes merged), its collective instances
with their transfer parameters, and the runs the truth needs (all causes, each cause removed,
none)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .causes import CAUSES, plant, plan
from .catalog import US
from .program import (
    FIELDS,
    STEP_RANGE,
    G_NCCL,
    Program,
    base_program,
    draw,
    layout,
    _rng,
)
from .overlap_causes import OVERLAP_CAUSES, TRANSFER_CAUSES, victim_extra
from .simulate import Instance, prepare, simulate

# Transfers: NCCL latency plus bytes over the bus bandwidth (nccl-tests' busbw convention: an
# all-reduce moves 2(n-1)/n of its bytes per rank, all-gather and reduce-scatter (n-1)/n, a
# send/recv pair its bytes once). 40 GB/s when the traffic crosses hosts, 180 GB/s inside one.
BUSBW_INTER, BUSBW_INTRA = 40e9, 180e9
COLL_LATENCY, P2P_LATENCY = 20 * US, 15 * US
TRANSFER_NOISE = 0.004  # each member's own transfer: x0 (1 + U(0, 0.4%)); the ring runs at the slowest
END_JITTER = 2 * US  # each member ends U(-2, 2) us around last arrival + transfer
RANK_START_SPREAD = 20 * US  # ranks enter step 0 this far apart


def base_transfer(op, nbytes, n, inter):
    bw = BUSBW_INTER if inter else BUSBW_INTRA
    factor = {"AllReduce": 2 * (n - 1) / n, "AllGather": (n - 1) / n, "ReduceScatter": (n - 1) / n}.get(op, 1.0)
    lat = P2P_LATENCY if op in ("Send", "Recv") else COLL_LATENCY
    return int(round(lat + nbytes * factor / bw * 1e9))


@dataclass
class Job:
    params: dict
    lay: object
    progs: list
    statics: list
    instances: list
    inst_info: list  # per instance: dict(comm, seq, step, label, op, bytes, ranks, kernel spec)
    causes: list
    starts: np.ndarray
    size: int  # buckets / layers / microbatches per step (rank 0's template)
    template_len: list


def build(style, ranks, hosts, steps, kernels_per_step, buckets, microbatches, scenario, seed,
          contention_ranks="one", stall="dataloader", step_range=STEP_RANGE):
    lay = layout(style, ranks, hosts)
    if style == "pp" and ranks < 2:
        raise ValueError("pp needs at least 2 ranks (stages)")
    causes = plan(scenario, lay, steps, seed, contention_ranks, stall)
    bases = [base_program(lay, r, steps, kernels_per_step, buckets, microbatches, seed, step_range)
             for r in range(ranks)]

    # collective instances: the k-th op of a communicator on each member
    keys = {}
    for r, (b, cols, op_name, size) in enumerate(bases):
        for i in np.flatnonzero(cols["gkind"] == G_NCCL).tolist():
            key = (int(cols["comm"][i]), int(cols["seq"][i]))
            info = keys.setdefault(key, {"comm": key[0], "seq": key[1], "step": int(cols["step"][i]),
                                         "label": int(cols["label"][i]), "ops": [], "bytes": int(cols["bytes"][i]),
                                         "spec": int(cols["spec"][i]), "members": []})
            info["members"].append((r, i))
            info["ops"].append(op_name[i])
    x0 = {}
    for key, info in keys.items():
        comm = lay.comms[key[0]]
        members = [m[0] for m in info["members"]]
        if sorted(members) != sorted(comm.ranks):
            raise RuntimeError(f"collective {key} of {comm.name}: members {members}, expected {comm.ranks}")
        inter = len({lay.host_of[r] for r in members}) > 1
        op = "Send" if comm.p2p else info["ops"][0]
        x0[key] = base_transfer(op, info["bytes"], len(members), inter)

    # plant the causes, then merge their rows into each rank's program
    progs = []
    member_row = {}
    contenders = []
    for r, (b, cols, op_name, size) in enumerate(bases):
        p = plant(causes, lay, r, b, cols, b.events, seed, x0.__getitem__)
        prog, inv = merge(r, b, cols, op_name, p, causes, seed, steps)
        progs.append(prog)
        for key, info in keys.items():
            for rr, i in info["members"]:
                if rr == r:
                    member_row[(key, r)] = int(inv[i])
        nb = len(cols["api"])
        for c, key, row, f in p.contenders:
            contenders.append((c, key, r, int(inv[nb + row]), f))

    order = sorted(keys, key=lambda k: (keys[k]["step"], k[0], k[1]))
    rng = _rng(seed, 2)
    n_members = sum(len(keys[k]["members"]) for k in order)
    eps_all = rng.uniform(0.0, TRANSFER_NOISE, n_members)
    jit_all = rng.integers(-END_JITTER, END_JITTER + 1, n_members)
    instances, inst_info = [], []
    pos = 0
    for key in order:
        info = keys[key]
        members = sorted(r for r, _ in info["members"])
        n = len(members)
        inst = Instance(key, [(r, member_row[(key, r)]) for r in members], x0[key],
                        eps_all[pos:pos + n].copy(), jit_all[pos:pos + n].astype(np.int64))
        inst.index = len(instances)
        pos += n
        instances.append(inst)
        comm = lay.comms[key[0]]
        roles = {r: op for (r, _), op in zip(info["members"], info["ops"])}
        inst_info.append({"comm": comm.name, "comm_index": comm.index, "seq": key[1], "step": info["step"],
                          "label": info["label"], "op": "SendRecv" if comm.p2p else info["ops"][0],
                          "roles": [roles[r] for r in members], "bytes": info["bytes"], "spec": info["spec"],
                          "ranks": members, "p2p": comm.p2p})
    by_key = {inst.key: inst for inst in instances}
    for c, key, r, row, f in contenders:
        inst = by_key[key]
        slot = [m[0] for m in inst.members].index(r)
        inst.contenders.append((c, slot, row, f))
    for c in causes:
        if c.type == "slow_network":
            for inst, info in zip(instances, inst_info):
                hosts = {lay.host_of[r] for r in info["ranks"]}
                if c.steps[info["step"]] and c.host in hosts and len(hosts) > 1:
                    inst.net.append((c.index, c.factor))
                    c.instances.append(inst.index)
        if c.type == "contention" or c.type in TRANSFER_CAUSES:
            c.instances = sorted({by_key[key].index for cc, key, r, row, f in contenders if cc == c.index})
    statics = [prepare(p) for p in progs]
    starts = _rng(seed, 2, 1).integers(0, RANK_START_SPREAD, ranks).astype(np.int64)
    params = dict(style=style, ranks=ranks, hosts=hosts, steps=steps, kernels_per_step=kernels_per_step,
                  buckets=buckets, microbatches=microbatches, scenario=scenario, seed=seed)
    return Job(params, lay, progs, statics, instances, inst_info, causes, starts, bases[0][3],
               [len(b.rows) for b, *_ in bases])


def merge(rank, b, cols, op_name, planter, causes, seed, steps):
    """Rank's program: base rows and the causes' rows in host order. Returns it and the new index
    of every old row (base rows first, then cause rows)."""
    t = len(b.rows)
    nb = len(cols["api"])
    crow = planter.b.rows
    nc = len(crow)
    ccols = {f: np.array([r[f] for r in crow], np.int64) if nc else np.zeros(0, np.int64) for f in FIELDS}
    meta = np.array(planter.meta, np.int64).reshape(nc, 4)
    ccols["step"], ccols["slot"] = meta[:, 0], meta[:, 1]
    owner = meta[:, 2]
    ccols["depth"] = ccols["depth"] + meta[:, 3]
    gap = np.zeros(nc, np.int64)
    dur, lat, gdur = gap.copy(), gap.copy(), gap.copy()
    for ci in np.unique(owner).tolist():  # each cause draws from its own stream
        m = owner == ci
        sub = {f: v[m] for f, v in ccols.items()}
        g, d, la, gd = draw(sub, _rng(seed, 40 + CAUSES.index(causes[ci].type), rank))
        gap[m], dur[m], lat[m], gdur[m] = g, d, la, gd
    for i, ns in planter.host_durations:
        dur[i] = ns
    for i, ns in planter.gpu_durations:
        gdur[i] = ns
    for ci, i in planter.slowed_by_nccl:  # the extra an overlap cause adds, only while it is active
        planter.extra_gpu.append((ci, np.array([nb + i]), victim_extra(np.array([i]), gdur)))
    ccols.update(gap=gap, dur=dur, lat=lat, gdur=gdur)
    names = list(FIELDS) + ["step", "slot", "gap", "dur", "lat", "gdur"]
    allc = {f: np.concatenate([cols[f], ccols[f]]) for f in names}
    # the overlap causes' kernels run in every run (removing the cause removes the slowdown only)
    kept = np.isin(owner, [c.index for c in causes if c.type in OVERLAP_CAUSES])
    owner_all = np.concatenate([np.full(nb, -1, np.int64), np.where(kept, -1, owner)])
    sub = np.concatenate([np.zeros(nb, np.int64), np.arange(1, nc + 1, dtype=np.int64)])
    order = np.lexsort((sub, allc["slot"], allc["step"]))
    inv = np.empty_like(order)
    inv[order] = np.arange(len(order))
    merged = {f: v[order] for f, v in allc.items()}
    merged["owner"] = owner_all[order]
    names_all = np.concatenate([op_name, np.array([r["op"] for r in crow], dtype=object)])[order]
    # ranges as arrays: (first row, last row, meta, step, owner, depth); meta indexes range_meta
    metas = list(b.ranges) + list(planter.b.ranges)
    nt = len(b.ranges)
    tf = np.array([rg.first for rg in b.ranges], np.int64)
    tl = np.array([rg.last for rg in b.ranges], np.int64)
    td = np.array([rg.depth for rg in b.ranges], np.int64)
    st = np.repeat(np.arange(steps, dtype=np.int64), nt)
    first = [inv[st * t + np.tile(tf, steps)]]
    last = [inv[st * t + np.tile(tl, steps)]]
    meta_i = [np.tile(np.arange(nt, dtype=np.int64), steps)]
    step_i, owner_i, depth_i = [st], [np.full(nt * steps, -1, np.int64)], [np.tile(td, steps)]
    cr = planter.b.ranges
    if cr:
        cf = np.array([rg.first for rg in cr], np.int64)
        first.append(inv[nb + cf])
        last.append(inv[nb + np.array([rg.last for rg in cr], np.int64)])
        meta_i.append(nt + np.arange(len(cr), dtype=np.int64))
        step_i.append(np.array([rg.step for rg in cr], np.int64))
        owner_i.append(np.array([rg.owner for rg in cr], np.int64))
        depth_i.append(np.array([rg.depth for rg in cr], np.int64) + meta[cf, 3])
    ranges = {"first": np.concatenate(first), "last": np.concatenate(last), "meta": np.concatenate(meta_i),
              "step": np.concatenate(step_i), "owner": np.concatenate(owner_i), "depth": np.concatenate(depth_i)}
    prog = Program(rank, nb + nc, merged, ranges, metas, dict(planter.b.events), names_all)
    prog.extra_host = [(c, inv[rows], extra) for c, rows, extra in planter.extra_host]
    prog.extra_gpu = [(c, inv[rows], extra) for c, rows, extra in planter.extra_gpu]
    for c in causes:
        owned = np.flatnonzero(merged["owner"] == c.index)
        lengthened = [rows for ci, rows, _ in prog.extra_host + prog.extra_gpu if ci == c.index]
        rows = np.unique(np.concatenate([owned] + lengthened)) if (len(owned) or lengthened) else owned
        if len(rows):
            c.rows[rank] = rows
        per_step = np.zeros(steps, np.int64)
        for ci, r_, extra in prog.extra_host + prog.extra_gpu:
            if ci == c.index:
                np.add.at(per_step, merged["step"][r_], extra)
        if c.type == "extra_kernel" and len(owned):
            k = owned[merged["gdur"][owned] > 0]
            np.add.at(per_step, merged["step"][k], merged["gdur"][k])
        if c.type in ("host_stall", "host_group", "oneoff_stall", "nested_stall") and len(owned):
            h = owned[merged["api"][owned] == 0]
            np.add.at(per_step, merged["step"][h], merged["dur"][h])
        if per_step.any():
            c.extra[rank] = per_step
    return prog, inv


def run(job, active):
    return simulate(job.progs, job.statics, job.instances, frozenset(active), job.causes, job.starts)
