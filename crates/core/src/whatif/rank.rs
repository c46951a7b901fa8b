//! What one rank's own records say: its host threads and GPU streams in order, the cross-stream
//! dependencies and blocking waits (recorded, else inferred) and its nominal latencies (see
//! [`super::graph`] for the rules); each op's launching call is the input's own (`Ops::launch`).
//! Ranks depend on each other only through their collectives, so each rank is worked out alone, on
//! its own rows (numbered within the rank, in the job's order); the job's graph is laid out from
//! these.

use super::by_rank::{RankColumn, RankTable, RankTimes};
use crate::ids::FirstRow;
use super::graph::NONE;
use super::input::SyncType;
use super::Options;
use std::collections::BTreeMap;

/// One rank's rows of every table.
pub(crate) struct RankView<'v> {
    pub(crate) calls: RankTable<'v, 8>,
    pub(crate) ops: RankTable<'v, 6>,
    pub(crate) syncs: RankTable<'v, 7>,
    pub(crate) events: RankTable<'v, 4>,
}

// Column indices of the rank views (as `Part::NAMES`).
pub(crate) const START: usize = 2;
pub(crate) const END: usize = 3;
const THREAD: usize = 1;
const STREAM: usize = 1;
const CORRELATION: usize = 4;
const LAUNCH: usize = 4;
const BLOCKING: usize = 5;
pub(crate) const SEGMENT: usize = 6;
pub(crate) const OWN_SEGMENT: usize = 7;
const STEP: usize = 5;

impl<'v> RankView<'v> {
    pub(crate) fn call_start(&self) -> RankTimes<'_> {
        self.calls.times(START)
    }

    pub(crate) fn call_end(&self) -> RankTimes<'_> {
        self.calls.times(END)
    }

    pub(crate) fn op_start(&self) -> RankTimes<'_> {
        self.ops.times(START)
    }

    pub(crate) fn op_end(&self) -> RankTimes<'_> {
        self.ops.times(END)
    }

    pub(crate) fn op_launch(&self) -> OpLaunch<'v> {
        OpLaunch(self.ops.column(LAUNCH))
    }
}

/// The ops' launching calls, as the input names them (rows among the rank's calls; negative:
/// unknown): read where they lie, not held again.
#[derive(Clone, Copy)]
pub(crate) struct OpLaunch<'v>(RankColumn<'v>);

impl OpLaunch<'_> {
    /// The call that launched op k, if known.
    #[inline]
    pub(crate) fn call(&self, k: usize) -> Option<usize> {
        usize::try_from(self.0.get(k)).ok()
    }
}

/// An op or call whose end may be a step's or the rank's last (rows within the rank).
#[derive(Clone, Copy, Debug)]
pub(crate) enum End {
    Op(u32),
    Call(u32),
}

/// A bit per row (a flag that holds for few rows: a blocking call, an op with cross-stream edges).
#[derive(Default)]
pub(crate) struct RowBits(Vec<u64>);

impl RowBits {
    /// n rows, none set; `words` the room for them.
    pub(crate) fn with_rows(mut words: Vec<u64>, n: usize) -> RowBits {
        words.resize(n.div_ceil(64), 0);
        RowBits(words)
    }

    pub(crate) fn set(&mut self, k: usize) {
        self.0[k / 64] |= 1 << (k % 64);
    }

    #[inline]
    pub(crate) fn get(&self, k: usize) -> bool {
        self.0[k / 64] >> (k % 64) & 1 == 1
    }
}

/// Per row, the row before it in its order (a thread's calls, a stream's ops), if any. Rows come in
/// time order, so that row is mostly a few rows back: held as the distance back in a byte, the few
/// further back (or ahead: a thread's anchor comes last) listed (1 in 200 rows or fewer in the real
/// sets; none at 1.9M kernels but the anchors').
#[derive(Default)]
pub(crate) struct Prev {
    /// Per row: 0 none, [`FAR`] listed in `far`, else the distance back.
    back: Vec<u8>,
    /// (row, previous row), by row.
    far: Vec<(u32, u32)>,
}

const FAR: u8 = u8::MAX;

impl Prev {
    /// Room for n rows, none with a previous row yet.
    fn with_rows(mut back: Vec<u8>, n: usize) -> Prev {
        back.resize(n, 0);
        Prev { back, far: Vec::new() }
    }

    fn set(&mut self, row: usize, prev: usize) {
        match row.checked_sub(prev) {
            Some(d) if d > 0 && d < FAR as usize => self.back[row] = d as u8,
            _ => {
                self.back[row] = FAR;
                self.far.push((row as u32, prev as u32));
            }
        }
    }

    /// The row before row k.
    #[inline]
    pub(crate) fn get(&self, k: usize) -> Option<usize> {
        match self.back[k] {
            0 => None,
            FAR => {
                let i = self.far.partition_point(|x| (x.0 as usize) < k);
                Some(self.far[i].1 as usize)
            }
            d => Some(k - d as usize),
        }
    }
}

/// What the graph takes from one rank (rows within the rank).
#[derive(Default)]
pub(crate) struct RankEdges {
    /// Per call: the previous call on its thread (none: its first).
    pub(crate) call_prev: Prev,
    /// Per call: whether it is blocking (its end waits for GPU work: a unit of its own).
    pub(crate) is_blocking: RowBits,
    /// The blocking calls, in order, and the ops each waits for (`waits[wait_off[b]..wait_off[b+1]]`:
    /// (op, recorded), by op).
    pub(crate) blocking: Vec<u32>,
    pub(crate) wait_off: Vec<u32>,
    pub(crate) waits: Vec<(u32, bool)>,
    /// Per op: the previous op on its stream.
    pub(crate) op_prev: Prev,
    /// Per op: whether it has cross-stream dependencies; they are `cross` (dependent op, op it
    /// depends on, recorded), by dependent op (a dependent's recorded ones first, by op).
    pub(crate) has_cross: RowBits,
    pub(crate) cross: Vec<(u32, u32, bool)>,
    pub(crate) launch_latency: i64,
    pub(crate) return_latency: i64,
    pub(crate) min_duration: i64,
    /// (step, end) of the ops whose end may be their step's last on the rank; the ends that may be
    /// the rank's last.
    pub(crate) step_ends: Vec<(u32, End)>,
    pub(crate) rank_ends: Vec<End>,
    pub(crate) unresolved_syncs: usize,
    pub(crate) recorded_stream_waits: usize,
    pub(crate) inferred_stream_waits: usize,
    pub(crate) recorded_syncs: usize,
    pub(crate) inferred_syncs: usize,
}

impl RankEdges {
    /// The blocking call index (into `blocking`) of call k, if it is one.
    #[inline]
    pub(crate) fn blocking_index(&self, k: usize) -> Option<usize> {
        if self.is_blocking.get(k) {
            self.blocking.binary_search(&(k as u32)).ok()
        } else {
            None
        }
    }

    /// The ops with cross-stream dependencies into op k: (op, recorded).
    #[inline]
    pub(crate) fn cross_into(&self, k: usize) -> &[(u32, u32, bool)] {
        if !self.has_cross.get(k) {
            return &[];
        }
        let a = self.cross.partition_point(|x| (x.0 as usize) < k);
        let b = a + self.cross[a..].partition_point(|x| x.0 as usize == k);
        &self.cross[a..b]
    }

    pub(crate) fn waits_of(&self, b: usize) -> &[(u32, bool)] {
        &self.waits[self.wait_off[b] as usize..self.wait_off[b + 1] as usize]
    }
}

/// Rows `0..n` grouped by `key` (groups in key order) and, within a group, sorted by (`within`,
/// row); returns the rows and each group's range in them. The traces come in time order, so rows
/// are counted into their groups (a few threads or streams) and only a group not already in order
/// is sorted: mostly linear.
fn grouped(n: usize, key: RankColumn, within: impl Fn(usize) -> (i64, i64)) -> (Vec<u32>, Vec<i64>, Vec<u32>) {
    if n == 0 {
        return (Vec::new(), Vec::new(), vec![0]);
    }
    if let Some(k) = key.single_value(n) {
        // One thread or stream: the rows as they come, sorted if they are not.
        let mut rows: Vec<u32> = (0..n as u32).collect();
        if !rows.is_sorted_by_key(|&i| within(i as usize)) {
            rows.sort_by_key(|&i| (within(i as usize), i));
        }
        return (rows, vec![k], vec![0, n as u32]);
    }
    let mut id_of: rustc_hash::FxHashMap<i64, u32> = rustc_hash::FxHashMap::default();
    let mut keys: Vec<i64> = Vec::new();
    let mut row_group = Vec::with_capacity(n);
    let mut last: Option<(i64, u32)> = None;
    for i in 0..n {
        let k = key.get(i);
        let g = match last {
            Some((lk, g)) if lk == k => g,
            _ => *id_of.entry(k).or_insert_with(|| {
                keys.push(k);
                keys.len() as u32 - 1
            }),
        };
        last = Some((k, g));
        row_group.push(g);
    }
    let mut by_key: Vec<u32> = (0..keys.len() as u32).collect();
    by_key.sort_unstable_by_key(|&g| keys[g as usize]);
    // Groups renumbered in key order, then the rows bucketed by group (row order within each).
    let mut in_key_order = vec![0u32; keys.len()];
    for (k, &g) in by_key.iter().enumerate() {
        in_key_order[g as usize] = k as u32;
    }
    row_group.iter_mut().for_each(|g| *g = in_key_order[*g as usize]);
    let (bounds, mut rows) = super::rows_by_key(&row_group, keys.len());
    for w in bounds.windows(2) {
        let group = &mut rows[w[0] as usize..w[1] as usize];
        if !group.is_sorted_by_key(|&i| within(i as usize)) {
            // Ties in row order (the row ends the key). Stable, to merge the long runs the rows come in.
            group.sort_by_key(|&i| (within(i as usize), i));
        }
    }
    let sorted_keys = by_key.iter().map(|&g| keys[g as usize]).collect();
    (rows, sorted_keys, bounds)
}

/// Nearest-rank percentile (p in 0..=1) of v, reordering it; None when empty.
pub(crate) fn percentile(v: &mut [i64], p: f64) -> Option<i64> {
    percentiles(0, v, [p]).map(|[x]| x)
}

/// Nearest-rank percentiles (`ps` ascending, in 0..=1) of `zeros` zeros and the values `rest` (all
/// above 0 where there are zeros), reordering `rest`; None when there is no value. Each is selected among the values at
/// or above the one before.
pub(crate) fn percentiles<const N: usize>(zeros: usize, rest: &mut [i64], ps: [f64; N]) -> Option<[i64; N]> {
    let n = zeros + rest.len();
    if n == 0 {
        return None;
    }
    let mut from = 0;
    Some(ps.map(|p| {
        let k = ((p * n as f64).ceil() as usize).clamp(1, n) - 1;
        if k < zeros {
            return 0;
        }
        let k = k - zeros;
        debug_assert!(k >= from, "percentiles ascending");
        let x = *rest[from..].select_nth_unstable(k - from).1;
        from = k;
        x
    }))
}

/// The rank's ops by stream, in stream order, with enqueue times for "enqueued before t".
struct Streams {
    /// Ops by (stream, start, end, op).
    order: Vec<u32>,
    /// Per stream: its id, sorted.
    key: Vec<i64>,
    /// Per stream: its range in `order` (len n_streams + 1).
    begin: Vec<u32>,
    /// Per position of `order`: when the op was enqueued (its launch call's start, else its own
    /// start), made non-decreasing within the stream.
    enq: Vec<i64>,
}

impl Streams {
    fn find(&self, stream: i64) -> Option<usize> {
        self.key.binary_search(&stream).ok()
    }

    fn range(&self, s: usize) -> std::ops::Range<usize> {
        self.begin[s] as usize..self.begin[s + 1] as usize
    }

    /// The last op of stream s enqueued before t.
    fn last_before(&self, s: usize, t: i64) -> Option<u32> {
        self.last_enqueued_before(s, t).map(|(op, _)| op)
    }

    /// The last op of stream s enqueued before t, and when it was enqueued.
    fn last_enqueued_before(&self, s: usize, t: i64) -> Option<(u32, i64)> {
        let r = self.range(s);
        let k = r.start + self.enq[r.clone()].partition_point(|&e| e < t);
        (k > r.start).then(|| (self.order[k - 1], self.enq[k - 1]))
    }

    /// The first op of stream s enqueued after t.
    fn first_after(&self, s: usize, t: i64) -> Option<u32> {
        let r = self.range(s);
        let k = r.start + self.enq[r.clone()].partition_point(|&e| e <= t);
        (k < r.end).then(|| self.order[k])
    }
}

impl RankEdges {
    /// Room for the tables of a rank of `n_calls` calls and `n_ops` ops: made by the thread that
    /// keeps them, while a worker fills them ([`RankEdges::new`]), so that they are not left in a
    /// worker's heap when freed (where the threads have heaps of their own: a library caller's;
    /// the commands share one, python/nsys_collective/memory.py).
    pub(crate) fn for_rows(n_calls: usize, n_ops: usize) -> RankEdges {
        RankEdges {
            call_prev: Prev { back: Vec::with_capacity(n_calls), far: Vec::new() },
            is_blocking: RowBits(Vec::with_capacity(n_calls.div_ceil(64))),
            op_prev: Prev { back: Vec::with_capacity(n_ops), far: Vec::new() },
            has_cross: RowBits(Vec::with_capacity(n_ops.div_ceil(64))),
            ..RankEdges::default()
        }
    }

    /// Works out one rank's part of the graph, in `out` ([`RankEdges::for_rows`]).
    #[allow(clippy::needless_range_loop)] // rows index several parallel columns at once
    pub(crate) fn new(v: &RankView, options: &Options, mut out: RankEdges) -> RankEdges {
        let tol = options.tolerance_ns;
        let (nc, no) = (v.calls.len(), v.ops.len());
        let (c_start, c_end, o_start, o_end) = (v.call_start(), v.call_end(), v.op_start(), v.op_end());

        // Host threads: calls in order, each with its predecessor.
        let (thread, within) = (v.calls.column(THREAD), |i: usize| (c_start.at(i), c_end.at(i)));
        let (call_order, _, bounds) = grouped(nc, thread, within);
        let mut call_prev = Prev::with_rows(std::mem::take(&mut out.call_prev.back), nc);
        let mut call_next = vec![NONE; nc];
        for w in bounds.windows(2) {
            for p in w[0] as usize + 1..w[1] as usize {
                let (a, b) = (call_order[p - 1], call_order[p]);
                call_prev.set(b as usize, a as usize);
                call_next[a as usize] = b;
            }
        }
        call_prev.far.sort_unstable();
        drop(call_order);
        let corr = FirstRow::new(nc, |i| v.calls.column(CORRELATION).get(i)); // the rank's calls by correlation id

        let launch = v.op_launch();

        // GPU streams.
        let stream = v.ops.column(STREAM);
        let streams = {
            let (order, key, begin) = grouped(no, stream, |i| (o_start.at(i), o_end.at(i)));
            let mut enq = Vec::with_capacity(no);
            for s in 0..key.len() {
                for p in begin[s] as usize..begin[s + 1] as usize {
                    let i = order[p] as usize;
                    let queued = launch.call(i).map_or(o_start.at(i), |call| c_start.at(call));
                    enq.push(if p == begin[s] as usize { queued } else { queued.max(enq[p - 1]) });
                }
            }
            Streams { order, key, begin, enq }
        };
        let mut op_prev = Prev::with_rows(std::mem::take(&mut out.op_prev.back), no);
        for s in 0..streams.key.len() {
            for p in streams.range(s).skip(1) {
                op_prev.set(streams.order[p] as usize, streams.order[p - 1] as usize);
            }
        }
        op_prev.far.sort_unstable();

        // The nominal launch latency: from the ops whose stream was idle when they were launched
        // (its previous op had ended by the launch call's start). Queued ops start when their
        // predecessor ends, however late: a rank whose host runs far ahead of a GPU waiting on
        // receives (a later pipeline stage) would otherwise get a latency of milliseconds.
        let mut samples = Vec::new();
        for i in 0..no {
            let Some(call) = launch.call(i) else { continue };
            let called = c_start.at(call);
            let idle = op_prev.get(i).is_none_or(|prev| o_end.at(prev) <= called);
            if idle && o_start.at(i) > called {
                samples.push(o_start.at(i) - called);
            }
        }
        out.launch_latency =
            options.launch_latency_ns.unwrap_or_else(|| percentile(&mut samples, options.latency_percentile).unwrap_or(0));
        drop(samples);

        // Event records by (event, record call start).
        let e = &v.events;
        let mut records: Vec<(i64, i64, i64, i64)> = Vec::new(); // (event, start, stream, corr)
        for i in 0..e.len() {
            let (event, stream, corr_id) = (e.column(2).get(i), e.column(1).get(i), e.column(3).get(i));
            match corr.find(corr_id) {
                Some(call) => records.push((event, c_start.at(call as usize), stream, corr_id)),
                None => out.unresolved_syncs += 1,
            }
        }
        records.sort_unstable();
        let mut record_by_corr: Vec<(i64, u32)> = records.iter().enumerate().map(|(k, r)| (r.3, k as u32)).collect();
        record_by_corr.sort_unstable();
        // Per stream: the stream waits made on it so far (their call's start) and the op each
        // waited for. An event completes once everything before its record on its stream has, the
        // stream's earlier waits included: FSDP records on its unshard stream, which runs no op,
        // an event that only carries that stream's wait for the compute stream. Without them the
        // all-gather waiting on it depends on nothing, and a host-bound rank's fixed replay starts
        // it before the compute it waits for.
        let mut stream_waits: BTreeMap<i64, Vec<(i64, u32)>> = BTreeMap::new();
        // The ops an event's record stands for, for a waiter that started at `before`: Err when no
        // record matches, Ok(empty) when the record found had no work before it on its stream.
        let recorded_ops = |stream_waits: &BTreeMap<i64, Vec<(i64, u32)>>, event: i64, record_corr: i64, before: i64| -> Result<Vec<u32>, ()> {
            let k = if record_corr >= 0 {
                let k = record_by_corr.partition_point(|&(c, _)| c < record_corr);
                match record_by_corr.get(k) {
                    Some(&(c, k)) if c == record_corr => k as usize,
                    _ => return Err(()),
                }
            } else {
                let k = records.partition_point(|r| (r.0, r.1) < (event, before));
                if k == 0 || records[k - 1].0 != event {
                    return Err(());
                }
                k - 1
            };
            let (_, start, stream, _) = records[k];
            let last = streams.find(stream).and_then(|s| streams.last_enqueued_before(s, start));
            // The waits made after that op was enqueued (all of them when none was) and before the record.
            let since = last.map_or(i64::MIN, |(_, enq)| enq);
            let mut ops: Vec<u32> = last.map(|(op, _)| op).into_iter().collect();
            if let Some(waits) = stream_waits.get(&stream) {
                // Made in time order: the waits between two times are a range.
                let (from, to) = (waits.partition_point(|w| w.0 <= since), waits.partition_point(|w| w.0 < start));
                ops.extend(waits[from..to.max(from)].iter().map(|&(_, op)| op));
            }
            ops.sort_unstable();
            ops.dedup();
            Ok(ops)
        };

        // Sync records: cross-stream edges (src op, dst op) and waits (call, op).
        let mut cross: Vec<(u32, u32, bool)> = Vec::new();
        let mut waits: Vec<(u32, u32, bool)> = Vec::new();
        let s = &v.syncs;
        let (kind, s_stream, s_event, s_corr, s_record, s_inferred) =
            (s.column(1), s.column(2), s.column(3), s.column(4), s.column(5), s.column(6));
        // In the order they were made, so that a record sees the waits made on its stream before it.
        let mut by_time: Vec<(i64, usize, u32)> = Vec::with_capacity(s.len());
        for i in 0..s.len() {
            match corr.find(s_corr.get(i)) {
                Some(call) => by_time.push((c_start.at(call as usize), i, call)),
                None => out.unresolved_syncs += 1,
            }
        }
        by_time.sort_unstable();
        for &(at, i, call) in &by_time {
            let record_corr = s_record.get(i);
            let recorded = s_inferred.get(i) == 0;
            // A record that matches but has no op before it (an empty stream) or none after it (the
            // waiting stream's last work) constrains nothing: not unresolved.
            match kind.get(i) {
                k if k == SyncType::StreamWaitEvent as i64 => {
                    let Ok(src) = recorded_ops(&stream_waits, s_event.get(i), record_corr, at) else {
                        out.unresolved_syncs += 1;
                        continue;
                    };
                    if let Some(dst) = streams.find(s_stream.get(i)).and_then(|w| streams.first_after(w, at)) {
                        cross.extend(src.iter().map(|&op| (op, dst, recorded)));
                    }
                    stream_waits.entry(s_stream.get(i)).or_default().extend(src.iter().map(|&op| (at, op)));
                }
                k if k == SyncType::EventSync as i64 => match recorded_ops(&stream_waits, s_event.get(i), record_corr, at) {
                    Ok(ops) => waits.extend(ops.iter().map(|&op| (call, op, recorded))),
                    Err(()) => out.unresolved_syncs += 1,
                },
                k if k == SyncType::StreamSync as i64 => {
                    if let Some(op) = streams.find(s_stream.get(i)).and_then(|w| streams.last_before(w, at)) {
                        waits.push((call, op, recorded));
                    }
                }
                k if k == SyncType::DeviceSync as i64 => {
                    for w in 0..streams.key.len() {
                        if let Some(op) = streams.last_before(w, at) {
                            waits.push((call, op, recorded));
                        }
                    }
                }
                _ => out.unresolved_syncs += 1,
            }
        }
        drop((corr, records, record_by_corr, stream_waits, by_time));
        let Streams { order: stream_order, key: stream_key, begin: stream_begin, .. } = streams;

        // The rank's ops by end, for inference (made when first needed). A stream's ops end in
        // order (all but a few), so in stream order the keys come in a run per stream, which the
        // stable sort merges.
        let by_end = std::cell::OnceCell::new();
        let by_end = || {
            by_end.get_or_init(|| {
                let mut keyed: Vec<(i64, u32)> = stream_order.iter().map(|&i| (o_end.at(i as usize), i)).collect();
                keyed.sort();
                keyed
            })
        };
        // The op that ended last at or before t, skipping ops for which `skip` holds.
        let last_ended = |t: i64, skip: &dyn Fn(u32) -> bool| -> Option<u32> {
            let by_end = by_end();
            let k = by_end.partition_point(|&(end, _)| end <= t);
            by_end[..k].iter().rev().take_while(|&&(end, _)| end >= t - tol).map(|&(_, i)| i).find(|&i| !skip(i))
        };

        // Blocking calls without a usable record: their own ops, else inferred.
        let blocking_col = v.calls.column(BLOCKING);
        let mut needs_own = vec![false; nc];
        for i in 0..nc {
            needs_own[i] = blocking_col.get(i) != 0;
        }
        for &(call, _, _) in &waits {
            needs_own[call as usize] = false;
        }
        let mut own: Vec<(u32, u32)> =
            (0..no).filter_map(|op| launch.call(op).filter(|&call| needs_own[call]).map(|call| (call as u32, op as u32))).collect();
        own.sort_unstable();
        for call in 0..nc {
            if !needs_own[call] {
                continue;
            }
            let a = own.partition_point(|x| (x.0 as usize) < call);
            let b = own.partition_point(|x| x.0 as usize <= call);
            if a < b {
                waits.extend(own[a..b].iter().map(|&(_, op)| (call as u32, op, true)));
            } else if let Some(op) = last_ended(c_end.at(call), &|_| false).filter(|&op| o_end.at(op as usize) >= c_start.at(call)) {
                waits.push((call as u32, op, false));
            } else {
                out.unresolved_syncs += 1;
            }
        }
        drop((needs_own, own));
        // Contradicted records out; one edge per (call, op).
        waits.sort_unstable();
        waits.dedup_by_key(|w| (w.0, w.1));
        let before = waits.len();
        waits.retain(|&(call, op, _)| o_end.at(op as usize) <= c_end.at(call as usize));
        out.unresolved_syncs += before - waits.len();
        cross.sort_unstable();
        cross.dedup_by_key(|x| (x.0, x.1));
        let before = cross.len();
        cross.retain(|&(a, b, _)| a != b && o_end.at(a as usize) <= o_start.at(b as usize));
        out.unresolved_syncs += before - cross.len();

        // Inferred cross-stream edges, for op starts the edges so far leave unexplained.
        let mut explained_at = vec![i64::MIN; no];
        for i in 0..no {
            let mut at = i64::MIN;
            if let Some(prev) = op_prev.get(i) {
                at = o_end.at(prev);
            }
            if let Some(call) = launch.call(i) {
                let from = if o_start.at(i) >= c_end.at(call) { c_end.at(call) } else { c_start.at(call) };
                at = at.max((from.saturating_add(out.launch_latency)).min(o_start.at(i)));
            }
            explained_at[i] = at;
        }
        for &(a, b, _) in &cross {
            explained_at[b as usize] = explained_at[b as usize].max(o_end.at(a as usize));
        }
        for i in 0..no {
            if explained_at[i] != i64::MIN && o_start.at(i) - explained_at[i] <= tol {
                continue;
            }
            let skip = |j: u32| stream.get(j as usize) == stream.get(i) || j as usize == i;
            if let Some(j) = last_ended(o_start.at(i), &skip) {
                cross.push((j, i as u32, false));
            }
        }
        drop(explained_at);
        out.recorded_stream_waits = cross.iter().filter(|x| x.2).count();
        out.inferred_stream_waits = cross.len() - out.recorded_stream_waits;
        out.recorded_syncs = waits.iter().filter(|w| w.2).count();
        out.inferred_syncs = waits.len() - out.recorded_syncs;
        // By dependent op (stable: each one's recorded dependencies, by op, then the inferred one).
        let mut cross: Vec<(u32, u32, bool)> = cross.into_iter().map(|(a, b, recorded)| (b, a, recorded)).collect();
        cross.sort_by_key(|x| x.0);
        let mut has_cross = RowBits::with_rows(std::mem::take(&mut out.has_cross.0), no);
        for x in &cross {
            has_cross.set(x.0 as usize);
        }

        // Blocking calls: those with waits. Their nominal minimum duration and return latency.
        let mut blocking: Vec<u32> = waits.iter().map(|w| w.0).collect();
        blocking.dedup();
        let mut is_blocking = RowBits::with_rows(std::mem::take(&mut out.is_blocking.0), nc);
        let mut wait_off = Vec::with_capacity(blocking.len() + 1);
        let mut ret_samples = Vec::with_capacity(blocking.len());
        {
            let mut k = 0;
            for &call in &blocking {
                let i = call as usize;
                is_blocking.set(i);
                wait_off.push(k as u32);
                let mut ret = i64::MAX;
                while k < waits.len() && waits[k].0 == call {
                    ret = ret.min(c_end.at(i) - o_end.at(waits[k].1 as usize));
                    k += 1;
                }
                ret_samples.push(ret);
            }
            wait_off.push(k as u32);
        }
        // A blocking call's own cost is that of any API call: the percentile of all the rank's call
        // durations (blocking calls' own durations are mostly waiting: with few of them, their
        // percentile would hold a call at its measured length whatever the GPU does).
        let mut dur_samples: Vec<i64> = (0..nc).map(|i| c_end.at(i) - c_start.at(i)).collect();
        let p = options.latency_percentile;
        out.min_duration = percentile(&mut dur_samples, p).unwrap_or(0);
        out.return_latency = percentile(&mut ret_samples, p).unwrap_or(0);
        drop((dur_samples, ret_samples));

        // What may be a step's or the rank's last end. Ends are non-decreasing along a stream and a
        // thread (lags >= 0 on those edges), so only the last op of each run of a step on a stream,
        // and the last op and call of each stream and thread, can be latest; where the trace
        // overlaps two neighbours, both are kept.
        let step = v.ops.column(STEP);
        for s in 0..stream_key.len() {
            let range = stream_begin[s] as usize..stream_begin[s + 1] as usize;
            for p in range.clone() {
                let i = stream_order[p] as usize;
                let next = (p + 1 < range.end).then(|| stream_order[p + 1] as usize);
                let overlapped = next.is_some_and(|j| o_start.at(j) < o_end.at(i));
                let st = step.get(i);
                if st >= 0 && (overlapped || next.is_none_or(|j| step.get(j) != st)) {
                    out.step_ends.push((st as u32, End::Op(i as u32)));
                }
                if overlapped || next.is_none() {
                    out.rank_ends.push(End::Op(i as u32));
                }
            }
        }
        for i in 0..nc {
            let next = call_next[i];
            if next == NONE || c_start.at(next as usize) < c_end.at(i) {
                out.rank_ends.push(End::Call(i as u32));
            }
        }

        out.call_prev = call_prev;
        out.is_blocking = is_blocking;
        out.blocking = blocking;
        out.wait_off = wait_off;
        out.waits = waits.into_iter().map(|(_, op, recorded)| (op, recorded)).collect();
        out.op_prev = op_prev;
        out.has_cross = has_cross;
        out.cross = cross;
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::whatif::input::Column;

    #[test]
    fn percentile_is_nearest_rank() {
        let mut v = vec![5, 1, 4, 2, 3];
        assert_eq!(percentile(&mut v, 0.0), Some(1));
        assert_eq!(percentile(&mut v, 0.05), Some(1));
        assert_eq!(percentile(&mut v, 0.5), Some(3));
        assert_eq!(percentile(&mut v, 1.0), Some(5));
        assert_eq!(percentile(&mut [], 0.5), None);
        // Several at once: each as if alone.
        let mut w: Vec<i64> = (0..1000).map(|i| (i * 7919) % 1000).collect();
        assert_eq!(percentiles(0, &mut w, [0.05, 0.5, 0.99, 1.0]), Some([49, 499, 989, 999]));
        // Zeros counted, not listed: the same as listed.
        let mut above: Vec<i64> = w.iter().copied().filter(|&x| x > 0).collect();
        assert_eq!(percentiles(1, &mut above, [0.0, 0.001, 0.002, 0.5]), Some([0, 0, 1, 499]));
        assert_eq!(percentiles(5, &mut [], [0.5]), Some([0]));
    }

    #[test]
    fn previous_rows_near_far_ahead_and_none_read_back_as_set() {
        let mut rng = fastrand::Rng::with_seed(3);
        for n in [0usize, 1, 300, 20_000] {
            // Each row's previous row: none, a few back, up to FAR back and beyond, or ahead.
            let want: Vec<Option<usize>> = (0..n)
                .map(|k| match rng.u8(0..5) {
                    0 => None,
                    1 => k.checked_sub(1 + rng.usize(0..4)),
                    2 => k.checked_sub(FAR as usize - 1 + rng.usize(0..3)),
                    3 => k.checked_sub(1 + rng.usize(0..3 * FAR as usize)),
                    _ => Some(k + 1 + rng.usize(0..5)).filter(|&j| j < n),
                })
                .collect();
            let mut prev = Prev::with_rows(Vec::new(), n);
            // Set in any order, as a thread's or stream's rows come.
            let mut rows: Vec<usize> = (0..n).collect();
            rng.shuffle(&mut rows);
            for &k in &rows {
                if let Some(p) = want[k] {
                    prev.set(k, p);
                }
            }
            prev.far.sort_unstable();
            assert_eq!((0..n).map(|k| prev.get(k)).collect::<Vec<_>>(), want, "{n} rows");
            assert!(n < FAR as usize || !prev.far.is_empty());
        }
    }

    #[test]
    fn enqueue_order_answers_before_and_after() {
        let s = Streams { order: vec![7, 8, 9], key: vec![1], begin: vec![0, 3], enq: vec![10, 20, 20] };
        assert_eq!(s.last_before(0, 10), None);
        assert_eq!(s.last_before(0, 11), Some(7));
        assert_eq!(s.last_before(0, 25), Some(9));
        assert_eq!(s.first_after(0, 10), Some(8));
        assert_eq!(s.first_after(0, 20), None);
    }

    #[test]
    fn rows_are_grouped_by_key_and_ordered_within() {
        // Keys 5, 3, 5, 3 (groups 3 then 5); within group 5 the rows come out of order.
        let key = [5, 3, 5, 3];
        let within = [(20, 0), (1, 0), (10, 0), (2, 0)];
        let (rows, keys, bounds) = grouped(4, RankColumn::whole(Column::I64(&key), 4), |i| within[i]);
        assert_eq!((rows, keys, bounds), (vec![1, 3, 2, 0], vec![3, 5], vec![0, 2, 4]));
        // One key: the rows in order of `within`; none: no group.
        assert_eq!(grouped(4, RankColumn::whole(Column::All(7), 4), |i| within[i]), (vec![1, 3, 2, 0], vec![7], vec![0, 4]));
        assert_eq!(grouped(0, RankColumn::whole(Column::All(7), 0), |i| within[i]), (vec![], vec![], vec![0]));
    }
}
