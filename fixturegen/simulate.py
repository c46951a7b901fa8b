"""The event-driven simulation of a job on true time.

Per rank, one *chain* for the host thread and one per GPU stream, each evaluated in order:

* host: op i starts ``gap_i`` after op i-1 ended and lasts ``dur_i``; a blocking call (stream,
  device or event synchronize, synchronous memcpy) ends no earlier than the GPU work it waits for
  has ended, plus its return latency.
* stream: op j starts at ``max(end of the stream's previous op, its call's end + launch latency,
  the end of the work a cudaStreamWaitEvent before it waits for)``. A stream wait is a zero-length
  marker on the waiting stream, so events recorded after it capture it too, as on a GPU.
* collectives: each member's NCCL kernel *arrives* (starts) when its stream lets it; the transfer
  starts at the last arrival L; every member ends at ``L + x + jitter``, x the collective's transfer
  time: its base time (latency + bytes over bus bandwidth) times the slowest member's slowdown
  (network on a host, or a contending kernel overlapping the transfer phase on that member, which
  makes progress 1/factor as fast while it overlaps). A send/recv pair is an instance of two.

Both recurrences are max-plus: with W the running sum of the op lengths, an op's end is
``W_i + max(carry, max_{j<=i}(ready_j - W_{j-1}))``, one ``np.maximum.accumulate`` per segment.
A chain advances, one vectorized segment at a time, up to the first op whose inputs are not known
yet (a stream wait on another chain, a launch the host has not made, a synchronize the GPU has
not reached, a collective other ranks have not arrived at); the chains are visited round-robin
until everything is known (a round with no progress is a deadlock in the program, reported).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .program import A_DEVICE_SYNC, A_EVENT_RECORD, A_EVENT_SYNC, A_MEMCPY, A_STREAM_SYNC, A_STREAM_WAIT, G_NCCL

NEG = -(1 << 62)
SYNC_MEMCPY_LAUNCH = 1_000  # a synchronous copy starts this long after its call's own part


@dataclass
class Static:
    """What a rank's program implies regardless of which causes are active."""
    chains: dict  # stream -> row indices of its GPU ops and wait markers, in order
    dep: dict  # stream -> per position: the row a wait marker waits for, or -1
    block_rows: np.ndarray  # blocking calls (rows)
    block_deps: list  # per blocking call: the rows whose end it waits for
    event_row: np.ndarray  # per event record row: the row it captured (-1: nothing), else -1


def prepare(prog):
    """Stream chains, the work each event record captures, each wait's and each blocking call's
    dependencies, from the host order of the calls (vectorized: per stream and per event)."""
    api, gkind, stream, event = prog.api, prog.gkind, prog.stream, prog.event
    n = len(api)
    member = gkind >= 0
    chains = {}
    for s in np.unique(stream[member]).tolist():
        chains[s] = np.flatnonzero(member & (stream == s))

    def tail_before(s, rows):
        """The last op of stream s enqueued before each row (-1: none yet)."""
        ch = chains.get(s)
        if ch is None:
            return np.full(len(rows), -1, np.int64)
        k = np.searchsorted(ch, rows, side="left") - 1
        return np.where(k >= 0, ch[np.maximum(k, 0)], -1)

    # what each event record captured
    event_row = np.full(n, -1, np.int64)
    rec = np.flatnonzero(api == A_EVENT_RECORD)
    for s in np.unique(stream[rec]).tolist():
        r = rec[stream[rec] == s]
        event_row[r] = tail_before(s, r)

    def captured(rows):
        """For waits / event syncs at rows: the work their event's latest record before them captured."""
        out = np.full(len(rows), -1, np.int64)
        ev = event[rows]
        for e in np.unique(ev).tolist():
            m = ev == e
            r_e = rec[event[rec] == e]
            k = np.searchsorted(r_e, rows[m], side="left") - 1
            out[m] = np.where(k >= 0, event_row[r_e[np.maximum(k, 0)]], -1) if len(r_e) else -1
        return out

    dep_row = np.full(n, -1, np.int64)
    waits = np.flatnonzero(api == A_STREAM_WAIT)
    dep_row[waits] = captured(waits)
    dep = {s: dep_row[rows] for s, rows in chains.items()}

    blocking = np.flatnonzero(np.isin(api, (A_MEMCPY, A_STREAM_SYNC, A_DEVICE_SYNC, A_EVENT_SYNC)))
    deps = [None] * len(blocking)
    a = api[blocking]
    for j in np.flatnonzero(a == A_MEMCPY).tolist():
        deps[j] = np.array([blocking[j]], np.int64)
    ss = np.flatnonzero(a == A_STREAM_SYNC)
    for s in np.unique(stream[blocking[ss]]).tolist():
        m = ss[stream[blocking[ss]] == s]
        t = tail_before(s, blocking[m])
        for j, x in zip(m.tolist(), t.tolist()):
            deps[j] = np.array([x] if x >= 0 else [], np.int64)
    ds = np.flatnonzero(a == A_DEVICE_SYNC)
    if len(ds):
        tails = np.stack([tail_before(s, blocking[ds]) for s in chains]) if chains else np.zeros((0, len(ds)), np.int64)
        for col, j in enumerate(ds.tolist()):
            t = tails[:, col]
            deps[j] = np.sort(t[t >= 0])
    es = np.flatnonzero(a == A_EVENT_SYNC)
    if len(es):
        c = captured(blocking[es])
        for j, x in zip(es.tolist(), c.tolist()):
            deps[j] = np.array([x] if x >= 0 else [], np.int64)
    return Static(chains, dep, blocking.astype(np.int64), deps, event_row)


class _Chain:
    __slots__ = ("stream", "rows", "off", "d", "act", "dep", "dep_pos", "coll_pos", "c", "di", "ci", "e_prev",
                 "suspended", "m", "k_hsc", "k_launch", "dep_l")

    def __init__(self, stream, rows, off, d, act, dep, coll_pos):
        self.stream, self.rows, self.off, self.d, self.act, self.dep = stream, rows, off, d, act, dep
        self.dep_pos = np.flatnonzero(dep >= 0).tolist()
        self.coll_pos = coll_pos.tolist()
        self.c = self.di = self.ci = 0
        self.e_prev = NEG
        self.suspended = False
        self.m = len(rows)
        self.k_hsc, self.k_launch = -1, 0
        self.dep_l = dict(zip(self.dep_pos, dep[self.dep_pos].tolist()))


SHORT = 24  # segments up to this long are evaluated in plain Python (numpy's call overhead dominates)


class _Rank:
    def __init__(self, r, prog, st, active, hdur, gdur, start):
        self.r = r
        n = prog.n
        self.n = n
        gap = np.where(active, prog.gap, 0)
        self.hgap = gap
        self.hdur = np.where(active, hdur, 0)
        self.hw = gap + self.hdur
        self.lat = prog.lat
        self.hs = np.zeros(n, np.int64)
        self.he = np.zeros(n, np.int64)
        self.hc = self.hsc = 0
        self.e0 = start
        keep = active[st.block_rows] if len(st.block_rows) else np.zeros(0, bool)
        self.blk = st.block_rows[keep]
        self.blk_deps = [d for d, k in zip(st.block_deps, keep.tolist()) if k]
        self.bi = 0
        self.gs = np.zeros(n, np.int64)
        self.ge = np.zeros(n, np.int64)
        self.gdone = np.zeros(n, bool)
        self.chains = []
        gd = np.where(active, gdur, 0)
        for s, rows in st.chains.items():
            api = prog.api[rows]
            # when its work can start, relative to the call's start: after the call (+ launch latency)
            off = self.hdur[rows] + np.where(api == A_STREAM_WAIT, 0, self.lat[rows])
            off = np.where(api == A_MEMCPY, self.hdur[rows] + SYNC_MEMCPY_LAUNCH, off)
            act = active[rows]
            dep = np.where(act, st.dep[s], -1)
            coll_pos = np.flatnonzero((prog.gkind[rows] == G_NCCL) & act)
            self.chains.append(_Chain(s, rows, off, gd[rows], act, dep, coll_pos))


class Instance:
    """One collective instance (or send/recv pair) of the job, with its planted parameters."""
    __slots__ = ("key", "members", "x0", "eps", "jit", "net", "contenders", "arrived", "start", "end", "last",
                 "x", "done", "index")

    def __init__(self, key, members, x0, eps, jit):
        self.key, self.members, self.x0, self.eps, self.jit = key, members, x0, eps, jit
        self.net = []  # (cause, factor)
        self.contenders = []  # (cause, member index, row, factor)


def contended_end(t, work, a, b, f):
    """End of a transfer of `work` ns starting at t, progressing 1/f as fast during [a, b)."""
    if b <= t or a >= t + work:
        return t + work
    if a > t:
        work -= a - t
        t = a
    cap = (b - t) / f
    if work <= cap:
        return t + work * f
    return b + (work - cap)


@dataclass
class Run:
    """Every time of one simulated run: per rank host start/end and GPU start/end (row-indexed),
    per instance member arrivals and ends, last arrival and transfer."""
    active: frozenset
    hs: list
    he: list
    gs: list
    ge: list
    act: list
    start: list  # per instance: its members' arrivals
    end: list  # per instance: its members' ends
    last: np.ndarray
    x: np.ndarray


def simulate(progs, statics, instances, active, causes, starts):
    """One run of the job with the causes in `active` (a set of cause indices) planted."""
    ranks = []
    for r, (prog, st) in enumerate(zip(progs, statics)):
        act = (prog.owner < 0) | np.isin(prog.owner, list(active))
        hdur, gdur = prog.dur.copy(), prog.gdur.copy()
        for c, rows, extra in prog.extra_host:
            if c in active:
                hdur[rows] += extra
        for c, rows, extra in prog.extra_gpu:
            if c in active:
                gdur[rows] += extra
        ranks.append(_Rank(r, prog, st, act, hdur, gdur, starts[r]))
    # members: (rank, row) -> (instance, slot)
    member_of = {}
    for inst in instances:
        inst.arrived = 0
        inst.start = np.zeros(len(inst.members), np.int64)
        inst.end = np.zeros(len(inst.members), np.int64)
        inst.done = False
        for m, (r, row) in enumerate(inst.members):
            member_of[(r, row)] = (inst, m)
    pending = []

    def resolve(inst):
        for c, m, row, f in inst.contenders:
            if c in active and not ranks[inst.members[m][0]].gdone[row]:
                return False
        last = int(inst.start.max())
        net = 1.0
        for c, f in inst.net:
            if c in active:
                net *= f
        work = inst.x0 * (1.0 + inst.eps) * net
        for c, m, row, f in inst.contenders:
            if c in active:
                rk = ranks[inst.members[m][0]]
                work[m] = contended_end(last, work[m], int(rk.gs[row]), int(rk.ge[row]), f) - last
        x = int(round(float(work.max())))
        inst.last, inst.x = last, x
        inst.end = last + x + inst.jit
        inst.done = True
        for m, (r, row) in enumerate(inst.members):
            rk = ranks[r]
            rk.ge[row] = inst.end[m]
            rk.gdone[row] = True
            for ch in rk.chains:
                if ch.suspended and ch.rows[ch.c] == row:
                    ch.suspended = False
                    ch.e_prev = int(inst.end[m])
                    ch.c += 1
                    ch.ci += 1
                    break
        return True

    def advance_host(rk):
        c, n = rk.hc, rk.n
        if c >= n:
            return False
        blocked = False
        k = n
        blocks = []
        while rk.bi < len(rk.blk):
            b = int(rk.blk[rk.bi])
            deps = rk.blk_deps[rk.bi]
            if len(deps) == 0 or rk.gdone[deps].all():
                blocks.append((b, int(rk.ge[deps].max()) + int(rk.lat[b]) if len(deps) else NEG))
                rk.bi += 1
                continue
            k, blocked = b, True
            break
        e_prev = int(rk.he[c - 1]) if c > 0 else rk.e0
        progressed = False
        if k > c:
            w = rk.hw[c:k]
            W = np.cumsum(w)
            T = np.full(k - c, NEG, np.int64)
            for b, R in blocks:
                T[b - c] = R - W[b - c]
            T[0] = max(T[0], e_prev)
            he = W + np.maximum.accumulate(T)
            rk.he[c:k] = he
            prev = np.empty(k - c, np.int64)
            prev[0] = e_prev
            prev[1:] = he[:-1]
            rk.hs[c:k] = prev + rk.hgap[c:k]
            rk.hc = k
            progressed = True
        if blocked and rk.hsc <= k:
            rk.hs[k] = (int(rk.he[k - 1]) if k > 0 else rk.e0) + int(rk.hgap[k])
            rk.hsc = k + 1
            progressed = True
        elif not blocked:
            rk.hsc = n
        return progressed

    def advance_chain(rk, ch):
        if ch.suspended:
            return False
        c = ch.c
        if c >= ch.m:
            return False
        if ch.k_hsc != rk.hsc:  # calls whose start is known
            ch.k_launch = int(np.searchsorted(ch.rows, rk.hsc, side="left"))
            ch.k_hsc = rk.hsc
        k = ch.k_launch
        dp, gdone = ch.dep_pos, rk.gdone
        while ch.di < len(dp) and dp[ch.di] < k:
            p = dp[ch.di]
            if p < c or gdone[ch.dep_l[p]]:
                ch.di += 1
                continue
            k = p
            break
        coll = False
        if ch.ci < len(ch.coll_pos) and ch.coll_pos[ch.ci] < k:
            k = ch.coll_pos[ch.ci] + 1
            coll = True
        if k <= c:
            return False
        hs, gs, ge = rk.hs, rk.gs, rk.ge
        if k - c <= SHORT:
            e_prev = ch.e_prev
            rows_l, off_l, d_l = ch.rows[c:k].tolist(), ch.off[c:k].tolist(), ch.d[c:k].tolist()
            act_l, dep_l = ch.act[c:k].tolist(), ch.dep[c:k].tolist()
            last = k - c - 1
            st = e_prev
            for q in range(k - c):
                row = rows_l[q]
                ready = int(hs[row]) + off_l[q] if act_l[q] else NEG
                dq = dep_l[q]
                if dq >= 0:
                    g = int(ge[dq])
                    if g > ready:
                        ready = g
                st = e_prev if e_prev > ready else ready
                gs[row] = st
                if coll and q == last:
                    break
                e_prev = st + d_l[q]
                ge[row] = e_prev
                gdone[row] = True
            s_last = st
            ch.e_prev = e_prev
        else:
            idx = ch.rows[c:k]
            ready = hs[idx] + ch.off[c:k]
            ready[~ch.act[c:k]] = NEG
            dep = ch.dep[c:k]
            md = dep >= 0
            if md.any():
                ready[md] = np.maximum(ready[md], ge[dep[md]])
            d = ch.d[c:k].copy()
            if coll:
                d[-1] = 0
            D = np.cumsum(d)
            T = ready - (D - d)
            T[0] = max(T[0], ch.e_prev)
            e = D + np.maximum.accumulate(T)
            s_ = e - d
            gs[idx] = s_
            if coll:
                ge[idx[:-1]] = e[:-1]
                gdone[idx[:-1]] = True
                if k - 1 > c:
                    ch.e_prev = int(e[-2])
            else:
                ge[idx] = e
                gdone[idx] = True
                ch.e_prev = int(e[-1])
            s_last = int(s_[-1])
        if coll:
            ch.c = k - 1
            ch.suspended = True
            inst, slot = member_of[(rk.r, int(ch.rows[k - 1]))]
            inst.start[slot] = s_last
            inst.arrived += 1
            if inst.arrived == len(inst.members) and not resolve(inst):
                pending.append(inst)
        else:
            ch.c = k
        return True

    while True:
        progress = False
        for rk in ranks:
            progress |= advance_host(rk)
            for ch in rk.chains:
                progress |= advance_chain(rk, ch)
        if pending:
            still = [inst for inst in pending if not resolve(inst)]
            progress |= len(still) < len(pending)
            pending = still
        if all(rk.hc >= rk.n and all(ch.c >= len(ch.rows) for ch in rk.chains) for rk in ranks):
            break
        if not progress:
            stuck = [(rk.r, rk.hc, rk.n, [(ch.stream, ch.c, len(ch.rows), ch.suspended) for ch in rk.chains])
                     for rk in ranks]
            raise RuntimeError(f"the job's program deadlocks (rank, host cursor, ops, chains): {stuck}")
    return Run(frozenset(active), [rk.hs for rk in ranks], [rk.he for rk in ranks], [rk.gs for rk in ranks],
               [rk.ge for rk in ranks], [((p.owner < 0) | np.isin(p.owner, list(active))) for p in progs],
               [inst.start.copy() for inst in instances], [inst.end.copy() for inst in instances],
               np.array([inst.last for inst in instances], np.int64), np.array([inst.x for inst in instances], np.int64))
