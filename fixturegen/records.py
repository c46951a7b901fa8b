"""What a profiler records of one rank's run, on true time: the calls with their correlation ids,
the ranges, the synchronization and event records. Both writers (nsys, Kineto) start from here,
so the twins of a job hold the same events at the same times."""

from __future__ import annotations

import numpy as np

from .program import (
    A_DEVICE_SYNC,
    A_EVENT_RECORD,
    A_EVENT_SYNC,
    A_HOST,
    A_STREAM_SYNC,
    A_STREAM_WAIT,
    R_KINETO,
    R_NVTX,
    _rng,
)

FIRST_CORRELATION = 4_000
FIRST_EVENT_SYNC_ID = 16_800  # 2026.2's eventSyncId: a counter over the process's event records
INVALID = 4294967295  # CUPTI_SYNCHRONIZATION_INVALID_VALUE, as nsys stores it (unsigned)
# CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_*
SYNC_EVENT, SYNC_STREAM_WAIT, SYNC_STREAM, SYNC_CONTEXT = 1, 2, 3, 4
SYNC_OF_API = {A_STREAM_WAIT: SYNC_STREAM_WAIT, A_STREAM_SYNC: SYNC_STREAM, A_DEVICE_SYNC: SYNC_CONTEXT,
               A_EVENT_SYNC: SYNC_EVENT}
TAIL_NS = 5_000  # after a thread's last call, ranges close this much later


def pad_fraction(depth):
    """Ranges start and end this fraction of the host gap before / after their first / last call:
    outer ranges take more, so they nest; siblings never meet (2 x 0.45 < 1)."""
    return 0.45 * 0.7 ** np.asarray(depth, np.float64)


class RankRecords:
    """A rank's recorded run. Row-indexed arrays are the program's; only active rows are recorded."""

    def __init__(self, prog, static, r, seed, stop=None):
        """stop: when the profiler stopped (true time, relative to t0), None for a whole run: a
        call (or host work) not ended by then is not recorded, nor is GPU work not ended by then
        even when its call was (lost in flight), and ranges still open end at the stop."""
        rank = prog.rank
        self.prog = prog
        self.hs, self.he, self.gs, self.ge = r.hs[rank], r.he[rank], r.gs[rank], r.ge[rank]
        act = r.act[rank] if stop is None else r.act[rank] & (self.he <= stop)
        self.act = act
        self.gpu_act = act if stop is None else act & (self.ge <= stop)  # recorded GPU work (rows with some)
        api = prog.api
        self.calls = np.flatnonzero(act & (api != A_HOST))
        corr = np.full(prog.n, -1, np.int64)
        corr[self.calls] = FIRST_CORRELATION + np.arange(len(self.calls))
        self.corr = corr

        # ranges: active ones, with times
        rg = prog.ranges
        keep = (rg["owner"] < 0) | act[rg["first"]]
        self.rg = {k: v[keep] for k, v in rg.items()}
        active_rows = np.flatnonzero(act)
        gap_next = np.full(prog.n, TAIL_NS, np.int64)  # the host gap after each active row
        gap_next[active_rows[:-1]] = prog.gap[active_rows[1:]]
        f = pad_fraction(self.rg["depth"])
        first, last = self.rg["first"], self.rg["last"]
        self.rg_start = self.hs[first] - np.floor(prog.gap[first] * f).astype(np.int64)
        self.rg_end = self.he[last] + np.floor(gap_next[last] * f).astype(np.int64)
        if stop is not None:  # ranges begun before the stop end at it at the latest; later ones are not there
            opened = self.rg_start < stop
            self.rg = {k: v[opened] for k, v in self.rg.items()}
            self.rg_start, self.rg_end = self.rg_start[opened], np.minimum(self.rg_end[opened], stop)
        meta = prog.range_meta
        flags = np.array([m.flags for m in meta], np.int64)
        self.rg_nvtx = (flags[self.rg["meta"]] & R_NVTX) > 0
        self.rg_kineto = (flags[self.rg["meta"]] & R_KINETO) > 0

        # event records and what synchronizes on them
        self.records = np.flatnonzero(act & (api == A_EVENT_RECORD))
        esid = np.full(prog.n, 0, np.int64)
        esid[self.records] = FIRST_EVENT_SYNC_ID + np.arange(len(self.records))
        self.event_sync_id = esid
        cap = static.event_row[self.records]
        self.record_done = np.where(cap >= 0, self.ge[np.maximum(cap, 0)], self.he[self.records])
        self.syncs = np.flatnonzero(act & np.isin(api, list(SYNC_OF_API)))
        self.sync_type = np.array([SYNC_OF_API[a] for a in api[self.syncs].tolist()], np.int64)
        # the record each wait / event sync refers to: the latest record of its event before it
        ref = np.full(len(self.syncs), -1, np.int64)
        ev = prog.event
        for e in np.unique(ev[self.syncs][ev[self.syncs] >= 0]).tolist():
            m = ev[self.syncs] == e
            rec_e = self.records[ev[self.records] == e]
            k = np.searchsorted(rec_e, self.syncs[m]) - 1
            ref[m] = np.where(k >= 0, rec_e[np.maximum(k, 0)], -1) if len(rec_e) else -1
        self.sync_record = ref
        # CUPTI's record of a synchronization spans most of its call
        rng = _rng(seed, 11, rank)
        n = len(self.syncs)
        span = self.he[self.syncs] - self.hs[self.syncs]
        lo = np.minimum(rng.integers(100, 600, n), span // 3)
        hi = np.minimum(rng.integers(150, 500, n), span // 3)
        self.sync_start = self.hs[self.syncs] + lo
        self.sync_end = self.he[self.syncs] - hi

    def range_name(self, i):
        m = self.prog.range_meta[int(self.rg["meta"][i])]
        return m.name.format(step=int(self.rg["step"][i])) if "{step}" in m.name else m.name
