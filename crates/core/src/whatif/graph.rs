//! Building the dependency graph of a job: which event waits for which, with what lag.
//!
//! # Layout
//! The graph is a list of *units* in topological order, each with its incoming edges in CSR form
//! (a unit holds its first edge, its duration and its slack in 12 bytes; an edge its source slot and
//! lag in 8; the rare values beyond i32 sit in sorted side tables). Unit `p` owns two time *slots*,
//! `2p` and `2p + 1`: a replay sets `t[2p] = max over edges (t[src] + lag) + slack[p]` and
//! `t[2p + 1] = t[2p] + dur[p]`.
//! A non-blocking call and an op outside any collective are one unit each (start in slot `2p`, end
//! in `2p + 1`: an end needs no edge list of its own); a blocking call's end, a member op's end and
//! a collective's transfer start are units of their own (their odd slot unused). Node ids, as used
//! by [`Graph::binding_chain`], [`Graph::describe`] and slack changes, are slot ids. Unit 0 is the
//! *origin*, fixed at time 0: a unit nothing explains (the first call of a thread, an op with no
//! input) hangs from it by an [`EdgeKind::Anchor`] edge whose lag is its measured time, so it keeps
//! that time in every replay and its time is not counted as slack.
//!
//! # Edges, nominal lags and inference
//! Every lag is `min(nominal, t_v - t_u)` on measured times, so no edge is violated and the slack
//! `t_v - max(t_u + lag) >= 0`:
//! - [`EdgeKind::HostGap`]: previous call's end on the thread -> call start; lag = the measured gap.
//! - [`EdgeKind::Launch`]: launch call's start -> op start (by correlation id within the rank; one
//!   call may launch many ops, a CUDA graph); nominal lag = the rank's launch latency, the
//!   [`Options::latency_percentile`] (5th) of positive `op.start - call.start` over its ops. Where
//!   the op started only after its call returned, the edge leaves from the call's end: a call that
//!   stalled in the runtime (milliseconds in a cudaLaunchKernel) held its work back until it
//!   returned, and a replay that shortens the call must move the op.
//! - [`EdgeKind::Stream`]: stream predecessor's end -> op start; nominal lag 0 (the GPU's gap between
//!   queued kernels stays as slack, so it is kept in a replay: the conservative choice).
//! - [`EdgeKind::CrossStream`] (recorded): a `cudaStreamWaitEvent` (sync type 2) makes the first op
//!   enqueued on the waiting stream after the wait call depend on the last op enqueued on the
//!   recording stream before the matching `cudaEventRecord` (the record named by
//!   `record_correlation`, else the latest record of the event id before the wait call). "Enqueued
//!   before t": the op's launch call started before t. Lag 0.
//! - [`EdgeKind::CrossStreamInferred`]: an op whose start the edges above leave more than the
//!   tolerance unexplained (or wholly unexplained) depends on the op of another stream of its rank
//!   that ended last at or before its start, if that end lies within the tolerance. Lag 0.
//! - [`EdgeKind::Duration`] and [`EdgeKind::Wait`]: a blocking call's end waits for its start plus a
//!   nominal minimum duration (the percentile of all the rank's call durations: a sync's own cost is
//!   an API call's) and for each waited op's end plus a nominal return latency (the percentile, over
//!   the rank's blocking calls, of the time from the binding op's end to the return). The waited ops: from sync records (event sync: the event's
//!   recorded op; stream sync: the stream's last op enqueued before the call; device sync: that of
//!   every stream of the rank), else the ops the call launched itself (synchronous memcpy), else
//!   [`EdgeKind::WaitInferred`]: the rank's op that ended last before the call returned, if it
//!   ended during the call and within the tolerance of its return. A blocking call with none of
//!   these keeps its measured duration (it stays one unit) and is counted unresolved.
//! - [`EdgeKind::Arrival`] (member op start -> transfer start, lag 0), [`EdgeKind::Transfer`]
//!   (transfer start -> member op end, lag `x_r = end_r - T`), [`EdgeKind::MemberStart`] (member op
//!   start -> its end, lag 0: an end never precedes its start, even where the clocks make `x_r < 0`).
//!
//! Records that contradict the trace (a waited op that ended after the call returned, a recorded
//! dependency that ended after the dependent op started) are dropped and counted unresolved.

use super::fidelity::Fidelity;
use super::input::{opt, Job, JobData, SyncType};
use super::topo;
use super::{input_error, Options, WhatIfError};
use std::collections::BTreeMap;
use std::sync::OnceLock;

pub(crate) const NONE: u32 = u32::MAX;

/// Why one node waits for another.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum EdgeKind {
    /// From the origin: a node nothing explains keeps its measured time.
    Anchor = 0,
    /// Previous call's end on the thread -> call start: host work.
    HostGap = 1,
    /// Start -> end of the same call or op (a blocking call's minimum duration; in a binding chain
    /// also an op's or call's own duration).
    Duration = 2,
    /// Waited op's end -> blocking call's end, from a sync record or the call's own op.
    Wait = 3,
    /// Waited op's end -> blocking call's end, inferred.
    WaitInferred = 4,
    /// Stream predecessor's end -> op start.
    Stream = 5,
    /// Launch call's start -> op start.
    Launch = 6,
    /// Recorded cross-stream dependency (stream wait event): op end -> op start.
    CrossStream = 7,
    /// Inferred cross-stream dependency: op end -> op start.
    CrossStreamInferred = 8,
    /// Member op start -> the instance's transfer start.
    Arrival = 9,
    /// Transfer start -> member op end.
    Transfer = 10,
    /// Member op start -> its end.
    MemberStart = 11,
}

impl EdgeKind {
    pub const ALL: [EdgeKind; 12] = [
        EdgeKind::Anchor,
        EdgeKind::HostGap,
        EdgeKind::Duration,
        EdgeKind::Wait,
        EdgeKind::WaitInferred,
        EdgeKind::Stream,
        EdgeKind::Launch,
        EdgeKind::CrossStream,
        EdgeKind::CrossStreamInferred,
        EdgeKind::Arrival,
        EdgeKind::Transfer,
        EdgeKind::MemberStart,
    ];

    pub fn name(self) -> &'static str {
        match self {
            EdgeKind::Anchor => "anchor",
            EdgeKind::HostGap => "host_gap",
            EdgeKind::Duration => "duration",
            EdgeKind::Wait => "wait",
            EdgeKind::WaitInferred => "wait_inferred",
            EdgeKind::Stream => "stream",
            EdgeKind::Launch => "launch",
            EdgeKind::CrossStream => "cross_stream",
            EdgeKind::CrossStreamInferred => "cross_stream_inferred",
            EdgeKind::Arrival => "arrival",
            EdgeKind::Transfer => "transfer",
            EdgeKind::MemberStart => "member_start",
        }
    }
}

/// What a node (a time slot) stands for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum NodeKind {
    /// The fixed time 0 anchors hang from (node 0).
    Origin = 0,
    OpStart = 1,
    OpEnd = 2,
    CallStart = 3,
    CallEnd = 4,
    /// A collective instance's transfer start `T`.
    Transfer = 5,
}

impl NodeKind {
    pub const ALL: [NodeKind; 6] =
        [NodeKind::Origin, NodeKind::OpStart, NodeKind::OpEnd, NodeKind::CallStart, NodeKind::CallEnd, NodeKind::Transfer];

    pub fn name(self) -> &'static str {
        match self {
            NodeKind::Origin => "origin",
            NodeKind::OpStart => "op_start",
            NodeKind::OpEnd => "op_end",
            NodeKind::CallStart => "call_start",
            NodeKind::CallEnd => "call_end",
            NodeKind::Transfer => "transfer",
        }
    }
}

/// A node by what it stands for: `row` is the op row, call row or instance id (0 for the origin).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct NodeRef {
    pub kind: NodeKind,
    pub row: usize,
}

// Unit kinds.
pub(crate) const U_ORIGIN: u8 = 0;
pub(crate) const U_CALL: u8 = 1;
pub(crate) const U_OP: u8 = 2;
pub(crate) const U_CALL_END: u8 = 3;
pub(crate) const U_TRANSFER: u8 = 4;
pub(crate) const U_MEMBER_END: u8 = 5;

/// A value stored in 32 bits stands for itself, except `WIDE`: then it is in a wide table.
pub(crate) const WIDE: i32 = i32::MIN;
/// The origin's second slot holds this in every replay: a padding edge from it never binds.
pub(crate) const NULL_SLOT: u32 = 1;
pub(crate) const NULL_TIME: i64 = -(1 << 62);

/// What the replay loop reads per unit (12 bytes): its first edge (the next unit's `first` ends
/// them), its duration and slack (`WIDE`: see the wide tables).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub(crate) struct Unit {
    pub(crate) first: u32,
    pub(crate) dur: i32,
    pub(crate) slack: i32,
}

/// What the replay loop reads per edge (8 bytes): the source slot and the lag (`WIDE`: see
/// `wide_lag`). Anchors' lags (absolute times) and gaps over 2.1 s are the wide ones.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub(crate) struct Edge {
    pub(crate) src: u32,
    pub(crate) lag: i32,
}

fn narrow(v: i64) -> i32 {
    if v > i32::MIN as i64 && v <= i32::MAX as i64 {
        v as i32
    } else {
        WIDE
    }
}

#[cold]
fn wide(table: &[(u32, i64)], key: usize) -> i64 {
    let k = table.binary_search_by_key(&(key as u32), |x| x.0).expect("a wide value is in its table");
    table[k].1
}

/// The job's dependency graph, read-only once built; replays share it across threads.
pub struct Graph {
    // Units in topological order (plus a sentinel), edges by unit (see the module docs). Every unit
    // but the origin has at least two edges: a unit with one gets a padding edge from NULL_SLOT,
    // so the replay loop takes the max of two without a branch and loops only beyond.
    pub(crate) units: Vec<Unit>,
    pub(crate) edges: Vec<Edge>,
    pub(crate) edge_kind: Vec<EdgeKind>,
    /// (edge index or unit position, value) of the values that do not fit in 32 bits, sorted.
    pub(crate) wide_lag: Vec<(u32, i64)>,
    pub(crate) wide_dur: Vec<(u32, i64)>,
    pub(crate) wide_slack: Vec<(u32, i64)>,
    pub(crate) unit_kind: Vec<u8>,
    /// Call row, op row, instance id or member row (member end units), per unit position.
    pub(crate) unit_row: Vec<u32>,
    // Slots of the job's entities.
    pub(crate) op_start: Vec<u32>,
    pub(crate) op_end: Vec<u32>,
    pub(crate) call_start: Vec<u32>,
    pub(crate) call_end: Vec<u32>,
    pub(crate) transfer: Vec<u32>,
    /// Per op: its member row, or NONE.
    pub(crate) op_member: Vec<u32>,
    // Members, by member row; and by instance (CSR of member rows).
    pub(crate) member_op: Vec<u32>,
    pub(crate) member_x_edge: Vec<u32>,
    pub(crate) inst_off: Vec<u32>,
    pub(crate) inst_member: Vec<u32>,
    /// Host-gap edges by segment: (segment id, call row, edge index), sorted (a segment's gaps in
    /// the order of their calls).
    pub(crate) seg_edges: Vec<(i64, u32, u32)>,
    /// End slots that can be a step's (per step and rank, CSR) or a rank's last (per rank, CSR).
    pub(crate) step_off: Vec<u32>,
    pub(crate) step_slot: Vec<u32>,
    pub(crate) rank_off: Vec<u32>,
    pub(crate) rank_slot: Vec<u32>,
    pub(crate) n_ranks: usize,
    pub(crate) n_steps: usize,
    pub(crate) fidelity: Fidelity,
    pub(crate) measured: OnceLock<Vec<i64>>,
}

/// Ops grouped by (rank, stream), in stream order, with enqueue times for "enqueued before t".
struct Streams {
    /// Op rows by (rank, stream, start, end, row).
    order: Vec<u32>,
    /// Per stream: (rank, stream id), sorted.
    key: Vec<(i64, i64)>,
    /// Per stream: its range in `order` (len n_streams + 1).
    begin: Vec<u32>,
    /// Per position of `order`: when the op was enqueued (its launch call's start, else its own
    /// start), made non-decreasing within the stream.
    enq: Vec<i64>,
}

impl Streams {
    fn find(&self, rank: i64, stream: i64) -> Option<usize> {
        self.key.binary_search(&(rank, stream)).ok()
    }

    fn range(&self, s: usize) -> std::ops::Range<usize> {
        self.begin[s] as usize..self.begin[s + 1] as usize
    }

    /// The streams of a rank (indices into `key`).
    fn of_rank(&self, rank: i64) -> std::ops::Range<usize> {
        self.key.partition_point(|k| k.0 < rank)..self.key.partition_point(|k| k.0 <= rank)
    }

    /// The last op of stream s enqueued before t.
    fn last_before(&self, s: usize, t: i64) -> Option<u32> {
        let r = self.range(s);
        let k = r.start + self.enq[r.clone()].partition_point(|&e| e < t);
        (k > r.start).then(|| self.order[k - 1])
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

/// Calls by (rank, correlation id): per rank a table indexed by correlation id where the ids are
/// dense (the runtime numbers its calls in order), else the sorted (id, row) pairs.
struct CorrIndex(Vec<CorrTable>);

enum CorrTable {
    Dense { base: i64, row: Vec<u32> },
    Sorted(Vec<(i64, u32)>),
}

impl CorrIndex {
    fn new(rank: &[i64], corr: &[i64], n_ranks: usize) -> CorrIndex {
        let (mut lo, mut hi, mut count) = (vec![i64::MAX; n_ranks], vec![i64::MIN; n_ranks], vec![0usize; n_ranks]);
        for (&r, &k) in rank.iter().zip(corr).filter(|(_, &k)| k >= 0) {
            let r = r as usize;
            (lo[r], hi[r], count[r]) = (lo[r].min(k), hi[r].max(k), count[r] + 1);
        }
        let mut tables: Vec<CorrTable> = (0..n_ranks)
            .map(|r| match count[r] {
                0 => CorrTable::Sorted(Vec::new()),
                n if ((hi[r] - lo[r]) as u64) < 4 * n as u64 + 1024 => {
                    CorrTable::Dense { base: lo[r], row: vec![NONE; (hi[r] - lo[r] + 1) as usize] }
                }
                n => CorrTable::Sorted(Vec::with_capacity(n)),
            })
            .collect();
        for (i, (&r, &k)) in rank.iter().zip(corr).enumerate().filter(|(_, (_, &k))| k >= 0) {
            match &mut tables[r as usize] {
                CorrTable::Dense { base, row } => {
                    let slot = &mut row[(k - *base) as usize];
                    if *slot == NONE {
                        *slot = i as u32; // the first row with this id
                    }
                }
                CorrTable::Sorted(v) => v.push((k, i as u32)),
            }
        }
        for t in &mut tables {
            if let CorrTable::Sorted(v) = t {
                v.sort_unstable();
            }
        }
        CorrIndex(tables)
    }

    /// The first row with this (rank, correlation).
    fn find(&self, rank: i64, corr: i64) -> Option<u32> {
        if corr < 0 {
            return None;
        }
        match self.0.get(rank as usize)? {
            CorrTable::Dense { base, row } => {
                let k = usize::try_from(corr - base).ok()?;
                row.get(k).copied().filter(|&i| i != NONE)
            }
            CorrTable::Sorted(v) => {
                let k = v.partition_point(|&(c, _)| c < corr);
                v.get(k).filter(|&&(c, _)| c == corr).map(|&(_, i)| i)
            }
        }
    }
}

/// Row numbers `0..n` sorted by (group key, key within the group, row). Rows are counted into
/// their groups (a few threads or streams per rank) in row order, and only a group whose rows
/// are not already in order is sorted: the traces come in time order, so this is mostly linear.
fn sorted_rows(n: usize, group: impl Fn(usize) -> (i64, i64), within: impl Fn(usize) -> (i64, i64) + Sync) -> Vec<u32> {
    let mut id_of: rustc_hash::FxHashMap<(i64, i64), u32> = rustc_hash::FxHashMap::default();
    let mut keys: Vec<(i64, i64)> = Vec::new();
    let mut row_group = Vec::with_capacity(n);
    let mut last: Option<((i64, i64), u32)> = None;
    for i in 0..n {
        let k = group(i);
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
    let mut off = vec![0usize; keys.len() + 1];
    for &g in &row_group {
        off[g as usize + 1] += 1;
    }
    let mut place = vec![0usize; keys.len()]; // per group id: its next place
    let mut total = 0;
    for &g in &by_key {
        place[g as usize] = total;
        total += off[g as usize + 1];
    }
    let mut rows = vec![0u32; n];
    let mut bounds = Vec::with_capacity(keys.len() + 1);
    bounds.extend(by_key.iter().map(|&g| place[g as usize]));
    bounds.push(n);
    for (i, &g) in row_group.iter().enumerate() {
        rows[place[g as usize]] = i as u32;
        place[g as usize] += 1;
    }
    drop(row_group);
    // Each group's slice, sorted by (within, row) where it is not already.
    let mut slices = Vec::with_capacity(keys.len());
    let mut rest: &mut [u32] = &mut rows;
    for w in bounds.windows(2) {
        let (head, tail) = rest.split_at_mut(w[1] - w[0]);
        slices.push(head);
        rest = tail;
    }
    // Checked on every core; the few unsorted groups sorted here, in place: what a rayon worker
    // allocates stays in its malloc arena after the build.
    use rayon::prelude::*;
    let sorted: Vec<bool> = slices.par_iter().map(|rows| rows.is_sorted_by_key(|&i| within(i as usize))).collect();
    for (rows, _) in slices.into_iter().zip(sorted).filter(|(_, sorted)| !sorted) {
        // Ties in row order (the row ends the key). Stable, to merge the long runs the rows come in.
        rows.sort_by_key(|&i| (within(i as usize), i));
    }
    rows
}

/// Nearest-rank percentile (p in 0..=1) of v, reordering it; None when empty.
pub(crate) fn percentile(v: &mut [i64], p: f64) -> Option<i64> {
    if v.is_empty() {
        return None;
    }
    let k = ((p * v.len() as f64).ceil() as usize).clamp(1, v.len()) - 1;
    Some(*v.select_nth_unstable(k).1)
}

/// Edges under construction, grouped by destination unit (the offsets beside them): source slot
/// reference (2 * unit + end flag, before units have positions), lag, kind.
#[derive(Default)]
struct InEdges {
    src: Vec<u32>,
    lag: Vec<i64>,
    kind: Vec<EdgeKind>,
}

/// Where each kind of unit starts in creation order (origin, calls, ops, blocking call ends,
/// transfers, member ends), and which unit holds each end.
struct UnitIds {
    u_call: usize,
    u_op: usize,
    u_cend: usize,
    u_t: usize,
    u_mend: usize,
    /// Per op: its member row, or NONE.
    op_member: Vec<u32>,
    /// Per call: its blocking call end unit (from u_cend), or NONE.
    call_end_unit_of: Vec<u32>,
    /// Per blocking call end unit: its call row.
    blocking: Vec<u32>,
}

impl UnitIds {
    /// A unit's kind and row.
    fn kind_row(&self, u: usize) -> (u8, u32) {
        match u {
            0 => (U_ORIGIN, 0),
            u if u < self.u_op => (U_CALL, (u - self.u_call) as u32),
            u if u < self.u_cend => (U_OP, (u - self.u_op) as u32),
            u if u < self.u_t => (U_CALL_END, self.blocking[u - self.u_cend]),
            u if u < self.u_mend => (U_TRANSFER, (u - self.u_t) as u32),
            u => (U_MEMBER_END, (u - self.u_mend) as u32),
        }
    }

    /// The slot reference (2 * unit + end flag) of an op's end.
    fn op_end_ref(&self, op: usize) -> u32 {
        match self.op_member[op] {
            NONE => 2 * (self.u_op + op) as u32 + 1,
            row => 2 * (self.u_mend + row as usize) as u32,
        }
    }

    /// The slot reference of a call's end.
    fn call_end_ref(&self, call: usize) -> u32 {
        match self.call_end_unit_of[call] {
            NONE => 2 * (self.u_call + call) as u32 + 1,
            b => 2 * (self.u_cend + b as usize) as u32,
        }
    }
}

/// The measured time of a slot reference.
fn slot_time(ut: &[i64], udur: &[i64], r: u32) -> i64 {
    ut[(r / 2) as usize] + if r & 1 == 1 { udur[(r / 2) as usize] } else { 0 }
}

impl Graph {
    /// Builds the graph of a job (see the module docs for what it holds). Fails with
    /// [`WhatIfError::Input`] on inconsistent input: unequal column lengths, an end before its
    /// start, ranks, steps or instances that are not dense, an unknown or shared member op.
    pub fn build(job: &Job, options: &Options) -> Result<Graph, WhatIfError> {
        Ok(Graph::plan(job, options)?())
    }

    /// [`Graph::build`] from an owned job, freed as soon as every edge is made: before the graph
    /// is laid out, so that the job and the graph are never held at once.
    pub fn build_owned(job: JobData, options: &Options) -> Result<Graph, WhatIfError> {
        let finish = Graph::plan(&job.view(), options)?;
        drop(job);
        Ok(finish())
    }

    /// The build in two halves: what reads the job (every edge with its lag, the candidates for
    /// step and rank ends), then, in the closure returned, what needs only those: the topological
    /// order and the layout.
    #[allow(clippy::needless_range_loop)] // rows index several parallel columns at once
    fn plan(job: &Job, options: &Options) -> Result<impl FnOnce() -> Graph, WhatIfError> {
        let (n_ranks, n_inst, n_steps) = job.check()?;
        if options.tolerance_ns < 0 {
            return Err(input_error(format!("tolerance_ns is {} (0 or more)", options.tolerance_ns)));
        }
        if !(0.0..=1.0).contains(&options.latency_percentile) {
            return Err(input_error(format!("latency_percentile is {} (0 to 1)", options.latency_percentile)));
        }
        if options.launch_latency_ns.is_some_and(|l| l < 0) {
            return Err(input_error("launch_latency_ns is negative"));
        }
        let tol = options.tolerance_ns;
        let (c, o, m) = (&job.calls, &job.ops, &job.members);
        let (nc, no, nm) = (job.n_calls(), job.n_ops(), m.op.len());
        let mut fid = Fidelity { ops: no, calls: nc, tolerance_ns: tol, ..Fidelity::default() };

        // Host threads: calls in order, each with its predecessor.
        // (Sorting keys gathered once, not columns indexed at random in every comparison.)
        let call_order = sorted_rows(nc, |i| (c.rank[i], c.thread[i]), |i| (c.start[i], c.end[i]));
        let mut call_prev = vec![NONE; nc];
        let mut call_next = vec![NONE; nc];
        for w in call_order.windows(2) {
            let (a, b) = (w[0] as usize, w[1] as usize);
            if c.rank[a] == c.rank[b] && c.thread[a] == c.thread[b] {
                call_prev[b] = a as u32;
                call_next[a] = b as u32;
            }
        }
        drop(call_order);
        let corr = CorrIndex::new(c.rank, c.correlation, n_ranks);

        // Launches.
        let op_launch: Vec<u32> = (0..no).map(|i| corr.find(o.rank[i], o.correlation[i]).unwrap_or(NONE)).collect();

        // GPU streams.
        let streams = {
            let order = sorted_rows(no, |i| (o.rank[i], o.stream[i]), |i| (o.start[i], o.end[i]));
            let (mut key, mut begin, mut enq) = (Vec::new(), Vec::new(), Vec::with_capacity(no));
            for (p, &op) in order.iter().enumerate() {
                let i = op as usize;
                let k = (o.rank[i], o.stream[i]);
                let queued = if op_launch[i] != NONE { c.start[op_launch[i] as usize] } else { o.start[i] };
                if key.last() != Some(&k) {
                    key.push(k);
                    begin.push(p as u32);
                    enq.push(queued);
                } else {
                    enq.push(queued.max(enq[p - 1]));
                }
            }
            begin.push(no as u32);
            Streams { order, key, begin, enq }
        };
        let mut op_prev = vec![NONE; no];
        for s in 0..streams.key.len() {
            for p in streams.range(s).skip(1) {
                op_prev[streams.order[p] as usize] = streams.order[p - 1];
            }
        }

        // Each rank's nominal launch latency: from the ops whose stream was idle when they were
        // launched (its previous op had ended by the launch call's start). Queued ops start when
        // their predecessor ends, however late: a rank whose host runs far ahead of a GPU waiting
        // on receives (a later pipeline stage) would otherwise get a latency of milliseconds.
        let mut samples = vec![Vec::new(); n_ranks];
        for (i, &call) in op_launch.iter().enumerate() {
            if call == NONE {
                continue;
            }
            let called = c.start[call as usize];
            let idle = op_prev[i] == NONE || o.end[op_prev[i] as usize] <= called;
            if idle && o.start[i] > called {
                samples[o.rank[i] as usize].push(o.start[i] - called);
            }
        }
        let launch_latency: Vec<i64> = samples
            .iter_mut()
            .map(|s| options.launch_latency_ns.unwrap_or_else(|| percentile(s, options.latency_percentile).unwrap_or(0)))
            .collect();
        drop(samples);

        // Event records by (rank, event, record call start).
        let mut records: Vec<(i64, i64, i64, i64, i64)> = Vec::new(); // (rank, event, start, stream, corr)
        for i in 0..job.events.rank.len() {
            let e = &job.events;
            match corr.find(e.rank[i], e.correlation[i]) {
                Some(call) => records.push((e.rank[i], e.event[i], c.start[call as usize], e.stream[i], e.correlation[i])),
                None => fid.unresolved_syncs += 1,
            }
        }
        records.sort_unstable();
        let mut record_by_corr: Vec<(i64, i64, u32)> =
            records.iter().enumerate().map(|(k, r)| (r.0, r.4, k as u32)).collect();
        record_by_corr.sort_unstable();
        // Per (rank, stream): the stream waits made on it so far (their call's start) and the op
        // each waited for. An event completes once everything before its record on its stream has,
        // the stream's earlier waits included: FSDP records on its unshard stream, which runs no
        // op, an event that only carries that stream's wait for the compute stream. Without them
        // the all-gather waiting on it depends on nothing, and a host-bound rank's fixed replay
        // starts it before the compute it waits for.
        let mut stream_waits: BTreeMap<(i64, i64), Vec<(i64, u32)>> = BTreeMap::new();
        // The ops an event's record stands for, for a waiter that started at `before`: Err when no
        // record matches, Ok(empty) when the record found had no work before it on its stream.
        let recorded_ops = |stream_waits: &BTreeMap<(i64, i64), Vec<(i64, u32)>>,
                            rank: i64,
                            event: i64,
                            record_corr: i64,
                            before: i64|
         -> Result<Vec<u32>, ()> {
            let k = if record_corr >= 0 {
                let k = record_by_corr.partition_point(|&(r, c, _)| (r, c) < (rank, record_corr));
                match record_by_corr.get(k) {
                    Some(&(r, c, k)) if (r, c) == (rank, record_corr) => k as usize,
                    _ => return Err(()),
                }
            } else {
                let k = records.partition_point(|r| (r.0, r.1, r.2) < (rank, event, before));
                if k == 0 || (records[k - 1].0, records[k - 1].1) != (rank, event) {
                    return Err(());
                }
                k - 1
            };
            let (_, _, start, stream, _) = records[k];
            let last = streams.find(rank, stream).and_then(|s| streams.last_enqueued_before(s, start));
            // The waits made after that op was enqueued (all of them when none was) and before the record.
            let since = last.map_or(i64::MIN, |(_, enq)| enq);
            let mut ops: Vec<u32> = last.map(|(op, _)| op).into_iter().collect();
            if let Some(waits) = stream_waits.get(&(rank, stream)) {
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
        let s = &job.syncs;
        // In the order they were made, so that a record sees the waits made on its stream before it.
        let mut by_time: Vec<(i64, i64, usize, u32)> = Vec::with_capacity(s.rank.len());
        for i in 0..s.rank.len() {
            match corr.find(s.rank[i], s.correlation[i]) {
                Some(call) => by_time.push((s.rank[i], c.start[call as usize], i, call)),
                None => fid.unresolved_syncs += 1,
            }
        }
        by_time.sort_unstable();
        for &(rank, at, i, call) in &by_time {
            let record_corr = opt(s.record_correlation, i, -1);
            let recorded = opt(s.inferred, i, 0) == 0;
            // A record that matches but has no op before it (an empty stream) or none after it (the
            // waiting stream's last work) constrains nothing: not unresolved.
            match s.kind[i] {
                k if k == SyncType::StreamWaitEvent as i64 => {
                    let Ok(src) = recorded_ops(&stream_waits, rank, s.event[i], record_corr, at) else {
                        fid.unresolved_syncs += 1;
                        continue;
                    };
                    if let Some(dst) = streams.find(rank, s.stream[i]).and_then(|w| streams.first_after(w, at)) {
                        cross.extend(src.iter().map(|&op| (op, dst, recorded)));
                    }
                    stream_waits.entry((rank, s.stream[i])).or_default().extend(src.iter().map(|&op| (at, op)));
                }
                k if k == SyncType::EventSync as i64 => match recorded_ops(&stream_waits, rank, s.event[i], record_corr, at) {
                    Ok(ops) => waits.extend(ops.iter().map(|&op| (call, op, recorded))),
                    Err(()) => fid.unresolved_syncs += 1,
                },
                k if k == SyncType::StreamSync as i64 => {
                    if let Some(op) = streams.find(rank, s.stream[i]).and_then(|w| streams.last_before(w, at)) {
                        waits.push((call, op, recorded));
                    }
                }
                k if k == SyncType::DeviceSync as i64 => {
                    for w in streams.of_rank(rank) {
                        if let Some(op) = streams.last_before(w, at) {
                            waits.push((call, op, recorded));
                        }
                    }
                }
                _ => fid.unresolved_syncs += 1,
            }
        }

        drop((corr, records, record_by_corr, stream_waits, by_time));
        let mut streams = streams;
        streams.enq = Vec::new(); // enqueue times: only the records needed them

        // Ops of each rank by end, for inference.
        // A stream's ops end in order (all but a few), so in stream order the keys come in a run per
        // stream, which the stable sort merges.
        // (Rows sorted by a key read from the columns, not a table of keys: a third of the memory.)
        let by_end: Vec<u32> = {
            let mut rows = streams.order.clone();
            rows.sort_by_key(|&i| (o.rank[i as usize], o.end[i as usize], i));
            rows
        };
        let by_end_rank: Vec<usize> = (0..=n_ranks).map(|r| by_end.partition_point(|&i| o.rank[i as usize] < r as i64)).collect();
        // The op of rank r that ended last at or before t, skipping ops for which `skip` holds.
        let last_ended = |r: usize, t: i64, skip: &dyn Fn(u32) -> bool| -> Option<u32> {
            let range = &by_end[by_end_rank[r]..by_end_rank[r + 1]];
            let k = range.partition_point(|&i| o.end[i as usize] <= t);
            range[..k].iter().rev().take_while(|&&i| o.end[i as usize] >= t - tol).find(|&&i| !skip(i)).copied()
        };

        // Blocking calls without a usable record: their own ops, else inferred.
        let mut has_wait = vec![false; nc];
        for &(call, _, _) in &waits {
            has_wait[call as usize] = true;
        }
        let mut own_off = vec![0u32; nc + 1];
        for &call in &op_launch {
            if call != NONE {
                own_off[call as usize + 1] += 1;
            }
        }
        for i in 0..nc {
            own_off[i + 1] += own_off[i];
        }
        let mut own_ops = vec![0u32; own_off[nc] as usize];
        {
            let mut fill = own_off.clone();
            for (op, &call) in op_launch.iter().enumerate() {
                if call != NONE {
                    own_ops[fill[call as usize] as usize] = op as u32;
                    fill[call as usize] += 1;
                }
            }
        }
        for call in 0..nc {
            if opt(c.blocking, call, 0) == 0 || has_wait[call] {
                continue;
            }
            let own = &own_ops[own_off[call] as usize..own_off[call + 1] as usize];
            if !own.is_empty() {
                waits.extend(own.iter().map(|&op| (call as u32, op, true)));
            } else if let Some(op) =
                last_ended(c.rank[call] as usize, c.end[call], &|_| false).filter(|&op| o.end[op as usize] >= c.start[call])
            {
                waits.push((call as u32, op, false));
            } else {
                fid.unresolved_syncs += 1;
            }
        }
        // Contradicted records out; one edge per (call, op).
        waits.sort_unstable();
        waits.dedup_by_key(|w| (w.0, w.1));
        let before = waits.len();
        waits.retain(|&(call, op, _)| o.end[op as usize] <= c.end[call as usize]);
        fid.unresolved_syncs += before - waits.len();
        cross.sort_unstable();
        cross.dedup_by_key(|x| (x.0, x.1));
        let before = cross.len();
        cross.retain(|&(a, b, _)| a != b && o.end[a as usize] <= o.start[b as usize]);
        fid.unresolved_syncs += before - cross.len();

        // Inferred cross-stream edges, for op starts the edges so far leave unexplained.
        let mut explained_at = vec![i64::MIN; no];
        for i in 0..no {
            let mut at = i64::MIN;
            if op_prev[i] != NONE {
                at = o.end[op_prev[i] as usize];
            }
            if op_launch[i] != NONE {
                let l = launch_latency[o.rank[i] as usize];
                let call = op_launch[i] as usize;
                let from = if o.start[i] >= c.end[call] { c.end[call] } else { c.start[call] };
                at = at.max((from.saturating_add(l)).min(o.start[i]));
            }
            explained_at[i] = at;
        }
        for &(a, b, _) in &cross {
            explained_at[b as usize] = explained_at[b as usize].max(o.end[a as usize]);
        }
        for i in 0..no {
            if explained_at[i] != i64::MIN && o.start[i] - explained_at[i] <= tol {
                continue;
            }
            let skip = |j: u32| o.stream[j as usize] == o.stream[i] || j as usize == i;
            if let Some(j) = last_ended(o.rank[i] as usize, o.start[i], &skip) {
                cross.push((j, i as u32, false));
            }
        }
        drop((explained_at, by_end, by_end_rank, own_off, own_ops, has_wait));
        fid.recorded_stream_waits = cross.iter().filter(|x| x.2).count();
        fid.inferred_stream_waits = cross.len() - fid.recorded_stream_waits;
        fid.recorded_syncs = waits.iter().filter(|w| w.2).count();
        fid.inferred_syncs = waits.len() - fid.recorded_syncs;

        // Blocking calls: those with waits. Their nominal minimum duration and return latency.
        let mut blocking: Vec<u32> = waits.iter().map(|w| w.0).collect();
        blocking.dedup();
        let mut call_end_unit_of = vec![NONE; nc];
        let (mut dur_samples, mut ret_samples) = (vec![Vec::new(); n_ranks], vec![Vec::new(); n_ranks]);
        {
            let mut k = 0;
            for (b, &call) in blocking.iter().enumerate() {
                let i = call as usize;
                call_end_unit_of[i] = b as u32;
                let mut ret = i64::MAX;
                while k < waits.len() && waits[k].0 == call {
                    ret = ret.min(c.end[i] - o.end[waits[k].1 as usize]);
                    k += 1;
                }
                ret_samples[c.rank[i] as usize].push(ret);
            }
        }
        // A blocking call's own cost is that of any API call: the percentile of all the rank's call
        // durations (blocking calls' own durations are mostly waiting: with few of them, their
        // percentile would hold a call at its measured length whatever the GPU does).
        for i in 0..nc {
            dur_samples[c.rank[i] as usize].push(c.end[i] - c.start[i]);
        }
        let p = options.latency_percentile;
        let min_duration: Vec<i64> = dur_samples.iter_mut().map(|v| percentile(v, p).unwrap_or(0)).collect();
        let return_latency: Vec<i64> = ret_samples.iter_mut().map(|v| percentile(v, p).unwrap_or(0)).collect();
        drop((dur_samples, ret_samples));

        // Units (creation index): origin, calls, ops, blocking call ends, transfers, member ends.
        let u_call = 1usize;
        let u_op = u_call + nc;
        let u_cend = u_op + no;
        let u_t = u_cend + blocking.len();
        let u_mend = u_t + n_inst;
        let n_units = u_mend + nm;
        if 2 * n_units as u64 >= NONE as u64 {
            return Err(input_error("the job is too large for one graph (more than 2^31 nodes)"));
        }
        let mut op_member = vec![NONE; no];
        for (row, &op) in m.op.iter().enumerate() {
            op_member[op as usize] = row as u32;
        }
        let mut ids = UnitIds { u_call, u_op, u_cend, u_t, u_mend, op_member, call_end_unit_of, blocking };
        let mut t_meas = vec![i64::MIN; n_inst];
        for row in 0..nm {
            let inst = m.instance[row] as usize;
            t_meas[inst] = t_meas[inst].max(o.start[m.op[row] as usize]);
        }
        let mut ut = vec![0i64; n_units]; // measured time of the unit's first slot
        let mut udur = vec![0i64; n_units]; // measured inline duration (second slot = first + it)
        for i in 0..nc {
            let u = u_call + i;
            ut[u] = c.start[i];
            udur[u] = if ids.call_end_unit_of[i] == NONE { c.end[i] - c.start[i] } else { 0 };
        }
        for i in 0..no {
            let u = u_op + i;
            ut[u] = o.start[i];
            udur[u] = if ids.op_member[i] == NONE { o.end[i] - o.start[i] } else { 0 };
        }
        for (b, &call) in ids.blocking.iter().enumerate() {
            ut[u_cend + b] = c.end[call as usize];
        }
        for (inst, &t) in t_meas.iter().enumerate() {
            ut[u_t + inst] = t;
        }
        for row in 0..nm {
            ut[u_mend + row] = o.end[m.op[row] as usize];
        }
        // The origin's time ties the earliest, so that it sorts first (ties go by unit). No edge
        // reads it: an anchor's lag is its unit's time.
        ut[0] = ut[1..].iter().copied().min().unwrap_or(0);
        let time_of = |r: u32| slot_time(&ut, &udur, r);
        // Every edge, in creation order, with its nominal lag; run twice: to count each unit's
        // in-edges, then to place them.
        let each_edge = |put: &mut dyn FnMut(usize, u32, i64, EdgeKind)| {
            for i in 0..nc {
                if call_prev[i] != NONE {
                    let prev = call_prev[i] as usize;
                    put(u_call + i, ids.call_end_ref(prev), c.start[i] - c.end[prev], EdgeKind::HostGap);
                }
            }
            for i in 0..no {
                if op_prev[i] != NONE {
                    put(u_op + i, ids.op_end_ref(op_prev[i] as usize), 0, EdgeKind::Stream);
                }
                if op_launch[i] != NONE {
                    let l = launch_latency[o.rank[i] as usize];
                    let call = op_launch[i] as usize;
                    let from = if o.start[i] >= c.end[call] { ids.call_end_ref(call) } else { 2 * (u_call + call) as u32 };
                    put(u_op + i, from, l, EdgeKind::Launch);
                }
            }
            for &(a, b, recorded) in &cross {
                let kind = if recorded { EdgeKind::CrossStream } else { EdgeKind::CrossStreamInferred };
                put(u_op + b as usize, ids.op_end_ref(a as usize), 0, kind);
            }
            let mut k = 0;
            for (b, &call) in ids.blocking.iter().enumerate() {
                let i = call as usize;
                let r = c.rank[i] as usize;
                put(u_cend + b, 2 * (u_call + i) as u32, min_duration[r], EdgeKind::Duration);
                while k < waits.len() && waits[k].0 == call {
                    let (_, op, recorded) = waits[k];
                    let kind = if recorded { EdgeKind::Wait } else { EdgeKind::WaitInferred };
                    put(u_cend + b, ids.op_end_ref(op as usize), return_latency[r], kind);
                    k += 1;
                }
            }
            for row in 0..nm {
                let (inst, op) = (m.instance[row] as usize, m.op[row] as usize);
                put(u_t + inst, 2 * (u_op + op) as u32, 0, EdgeKind::Arrival);
                put(u_mend + row, 2 * (u_t + inst) as u32, o.end[op] - t_meas[inst], EdgeKind::Transfer);
                put(u_mend + row, 2 * (u_op + op) as u32, 0, EdgeKind::MemberStart);
            }
        };
        fid.transfer_violations = (0..nm).filter(|&row| o.end[m.op[row] as usize] < t_meas[m.instance[row] as usize]).count();
        // The edges grouped by destination unit (CSR; a unit's in creation order), their lags
        // capped: no edge is violated by the measurement. `by_dst_off[u + 2]` counts unit u's
        // edges, then (summed) `by_dst_off[u + 1]` is where its next edge goes, and in the end
        // `by_dst_off[u]..by_dst_off[u + 1]` are its edges.
        let mut by_dst_off = vec![0u32; n_units + 2];
        each_edge(&mut |dst, _, _, _| by_dst_off[dst + 2] += 1);
        for u in 2..n_units + 2 {
            by_dst_off[u] += by_dst_off[u - 1];
        }
        let n_in = by_dst_off[n_units + 1] as usize;
        let mut edges = InEdges { src: vec![0; n_in], lag: vec![0; n_in], kind: vec![EdgeKind::Anchor; n_in] };
        each_edge(&mut |dst, src, lag, kind| {
            let e = by_dst_off[dst + 1] as usize;
            by_dst_off[dst + 1] += 1;
            (edges.src[e], edges.lag[e], edges.kind[e]) = (src, lag.min(ut[dst] - time_of(src)), kind);
        });
        by_dst_off.truncate(n_units + 1);
        drop((call_prev, op_prev, op_launch, cross, waits));

        // What the layout needs of the job. Ends are non-decreasing along a stream and a thread
        // (lags >= 0 on those edges), so only the last op of each run of a step on a stream, and
        // the last op and call of each stream and thread, can be latest; where the trace overlaps
        // two neighbours, both are kept. (By end slot reference: the slots come with the order.)
        let mut step_cand: Vec<(u32, u32, u32)> = Vec::new(); // (step, rank, slot)
        let mut rank_cand: Vec<(u32, u32)> = Vec::new();
        for si in 0..streams.key.len() {
            let range = streams.range(si);
            for p in range.clone() {
                let i = streams.order[p] as usize;
                let next = (p + 1 < range.end).then(|| streams.order[p + 1] as usize);
                let overlapped = next.is_some_and(|j| o.start[j] < o.end[i]);
                let step = opt(o.step, i, -1);
                if step >= 0 && (overlapped || next.is_none_or(|j| opt(o.step, j, -1) != step)) {
                    step_cand.push((step as u32, o.rank[i] as u32, ids.op_end_ref(i)));
                }
                if overlapped || next.is_none() {
                    rank_cand.push((o.rank[i] as u32, ids.op_end_ref(i)));
                }
            }
        }
        for i in 0..nc {
            let next = call_next[i];
            if next == NONE || c.start[next as usize] < c.end[i] {
                rank_cand.push((c.rank[i] as u32, ids.call_end_ref(i)));
            }
        }
        drop((streams, call_next));
        // Host-gap segments (their edges come with the layout).
        let mut seg_edges: Vec<(i64, u32, u32)> =
            (0..nc).filter(|&i| opt(c.segment, i, -1) >= 0).map(|i| (c.segment[i], i as u32, NONE)).collect();
        // Instances' members.
        let member_op: Vec<u32> = m.op.iter().map(|&op| op as u32).collect();
        let mut inst_off = vec![0u32; n_inst + 1];
        for &inst in m.instance {
            inst_off[inst as usize + 1] += 1;
        }
        for i in 0..n_inst {
            inst_off[i + 1] += inst_off[i];
        }
        let mut inst_member = vec![0u32; nm];
        {
            let mut fill = inst_off.clone();
            for (row, &inst) in m.instance.iter().enumerate() {
                inst_member[fill[inst as usize] as usize] = row as u32;
                fill[inst as usize] += 1;
            }
        }

        Ok(move || {
            // Topological order; edges of a broken cycle dropped.
            // The units in time order, once the job is freed. (Not beside other work on another
            // core: what a rayon worker allocates stays in its malloc arena after the build, about
            // 90 MiB at 1.9M kernels that malloc_trim does not return.)
            let (by_time, time_rank) = topo::time_order(&ut);
            let (order, pos, dropped) = topo::order(by_time, time_rank, &by_dst_off, |e| edges.src[e] / 2);
            fid.dropped_dependencies = dropped.len();
            if !dropped.is_empty() {
                let mut kept_off = vec![0u32; n_units + 1];
                let mut kept = InEdges::default();
                for u in 0..n_units {
                    for e in by_dst_off[u] as usize..by_dst_off[u + 1] as usize {
                        if dropped.binary_search(&(e as u32)).is_err() {
                            kept.src.push(edges.src[e]);
                            kept.lag.push(edges.lag[e]);
                            kept.kind.push(edges.kind[e]);
                        }
                    }
                    kept_off[u + 1] = kept.src.len() as u32;
                }
                (by_dst_off, edges) = (kept_off, kept);
            }
            let to_slot = |r: u32| 2 * pos[(r / 2) as usize] + (r & 1);
            // Each unit's edges: its in-edges, at least two (an anchor where there is none, padding
            // where there is one).
            let in_degree = |u: usize| (by_dst_off[u + 1] - by_dst_off[u]) as usize;
            let mut first = Vec::with_capacity(n_units + 1);
            let mut n_edges = 0u32;
            for &u in &order {
                first.push(n_edges);
                n_edges += in_degree(u as usize).max(2) as u32;
            }
            first.push(n_edges);
            let mut g = Graph {
                units: vec![Unit { first: 0, dur: 0, slack: 0 }; n_units + 1],
                edges: vec![Edge { src: NULL_SLOT, lag: 0 }; n_edges as usize],
                edge_kind: vec![EdgeKind::Anchor; n_edges as usize],
                wide_lag: Vec::new(),
                wide_dur: Vec::new(),
                wide_slack: Vec::new(),
                unit_kind: vec![U_ORIGIN; n_units],
                unit_row: vec![0; n_units],
                op_start: (0..no).map(|i| 2 * pos[u_op + i]).collect(),
                op_end: (0..no).map(|i| to_slot(ids.op_end_ref(i))).collect(),
                call_start: (0..nc).map(|i| 2 * pos[u_call + i]).collect(),
                call_end: (0..nc).map(|i| to_slot(ids.call_end_ref(i))).collect(),
                transfer: (0..n_inst).map(|i| 2 * pos[u_t + i]).collect(),
                op_member: std::mem::take(&mut ids.op_member),
                member_op,
                member_x_edge: Vec::new(),
                inst_off,
                inst_member,
                seg_edges: Vec::new(),
                step_off: Vec::new(),
                step_slot: Vec::new(),
                rank_off: Vec::new(),
                rank_slot: Vec::new(),
                n_ranks,
                n_steps,
                fidelity: Fidelity::default(),
                measured: OnceLock::new(),
            };
            // The layout, in chunks of positions on every core: a chunk writes its units and their
            // edges, and returns its wide values (in position order) and its slack.
            #[derive(Default)]
            struct Wide {
                lag: Vec<(u32, i64)>,
                dur: Vec<(u32, i64)>,
                slack: Vec<(u32, i64)>,
                slack_ns: i64,
            }
            const CHUNK: usize = 1 << 16;
            let mut chunks = Vec::with_capacity(n_units / CHUNK + 1);
            {
                let (mut units, mut kinds, mut rows) = (&mut g.units[..n_units], &mut g.unit_kind[..], &mut g.unit_row[..]);
                let (mut es, mut eks) = (&mut g.edges[..], &mut g.edge_kind[..]);
                for p0 in (0..n_units).step_by(CHUNK) {
                    let p1 = (p0 + CHUNK).min(n_units);
                    let n_e = (first[p1] - first[p0]) as usize;
                    let (u_head, u_tail) = std::mem::take(&mut units).split_at_mut(p1 - p0);
                    let (k_head, k_tail) = std::mem::take(&mut kinds).split_at_mut(p1 - p0);
                    let (r_head, r_tail) = std::mem::take(&mut rows).split_at_mut(p1 - p0);
                    let (e_head, e_tail) = std::mem::take(&mut es).split_at_mut(n_e);
                    let (ek_head, ek_tail) = std::mem::take(&mut eks).split_at_mut(n_e);
                    chunks.push((p0, u_head, k_head, r_head, e_head, ek_head));
                    (units, kinds, rows, es, eks) = (u_tail, k_tail, r_tail, e_tail, ek_tail);
                }
            }
            use rayon::prelude::*;
            let wides: Vec<Wide> = chunks
                .into_par_iter()
                .map(|(p0, units, kinds, rows, es, eks)| {
                    let mut w = Wide::default();
                    let base = first[p0] as usize;
                    for (k, unit) in units.iter_mut().enumerate() {
                        let (p, u) = (p0 + k, order[p0 + k] as usize);
                        let f = first[p] as usize;
                        (kinds[k], rows[k]) = ids.kind_row(u);
                        *unit = Unit { first: f as u32, dur: 0, slack: 0 };
                        if u == 0 {
                            continue; // the origin: two padding edges, never read (a replay starts at position 1)
                        }
                        let mut put = |j: usize, src: u32, lag: i64, kind: EdgeKind| {
                            let l = narrow(lag);
                            if l == WIDE {
                                w.lag.push(((f + j) as u32, lag));
                            }
                            es[f + j - base] = Edge { src, lag: l };
                            eks[f + j - base] = kind;
                        };
                        let ins = by_dst_off[u] as usize..by_dst_off[u + 1] as usize;
                        let mut reach = i64::MIN;
                        for (j, e) in ins.clone().enumerate() {
                            let (r, lag) = (edges.src[e], edges.lag[e]);
                            reach = reach.max(slot_time(&ut, &udur, r) + lag);
                            put(j, to_slot(r), lag, edges.kind[e]);
                        }
                        if ins.is_empty() {
                            put(0, 0, ut[u], EdgeKind::Anchor);
                            reach = ut[u];
                        }
                        let slack = ut[u] - reach;
                        debug_assert!(slack >= 0);
                        w.slack_ns += slack;
                        *unit = Unit { first: f as u32, dur: narrow(udur[u]), slack: narrow(slack) };
                        if unit.dur == WIDE {
                            w.dur.push((p as u32, udur[u]));
                        }
                        if unit.slack == WIDE {
                            w.slack.push((p as u32, slack));
                        }
                    }
                    w
                })
                .collect();
            g.units[n_units] = Unit { first: n_edges, dur: 0, slack: 0 };
            let mut slack_ns = 0i64;
            for w in wides {
                g.wide_lag.extend(w.lag);
                g.wide_dur.extend(w.dur);
                g.wide_slack.extend(w.slack);
                slack_ns += w.slack_ns;
            }
            // Each call's host-gap edge, each member's transfer edge, each op's slack (MIN: anchored).
            let edge_of = |p: u32, kind: EdgeKind| g.edge_range(p as usize).find(|&e| g.edge_kind[e] == kind).map_or(NONE, |e| e as u32);
            let call_gap_edge: Vec<u32> = (0..nc).into_par_iter().map(|i| edge_of(pos[u_call + i], EdgeKind::HostGap)).collect();
            let member_x_edge: Vec<u32> = (0..nm).into_par_iter().map(|r| edge_of(pos[u_mend + r], EdgeKind::Transfer)).collect();
            let op_slack: Vec<i64> = (0..no)
                .into_par_iter()
                .map(|i| {
                    let p = pos[u_op + i] as usize;
                    let e = g.units[p].first as usize;
                    if g.edge_kind[e] == EdgeKind::Anchor && g.edges[e].src == 0 {
                        i64::MIN
                    } else {
                        g.slack(p)
                    }
                })
                .collect();
            g.member_x_edge = member_x_edge;
            // What makes the replay loop's unchecked reads sound: every unit has two edges or more, and
            // every edge reads an earlier unit's slot.
            let sound = (1..n_units).into_par_iter().all(|p| {
                let r = g.edge_range(p);
                r.len() >= 2 && g.edges[r].iter().all(|e| (e.src as usize) < 2 * p)
            });
            assert!(sound, "graph not in topological order");
            drop((edges, by_dst_off, order, first, ut, udur, ids));

            // Host-gap segments, step and rank end candidates.
            for s in &mut seg_edges {
                s.2 = call_gap_edge[s.1 as usize];
            }
            seg_edges.retain(|s| s.2 != NONE);
            seg_edges.sort_unstable();
            g.seg_edges = seg_edges;
            for x in &mut step_cand {
                x.2 = to_slot(x.2);
            }
            for x in &mut rank_cand {
                x.1 = to_slot(x.1);
            }
            step_cand.sort_unstable();
            rank_cand.sort_unstable();
            g.step_off = (0..=n_steps * n_ranks)
                .map(|k| step_cand.partition_point(|&(s, r, _)| (s as usize * n_ranks + r as usize) < k) as u32)
                .collect();
            g.step_slot = step_cand.iter().map(|x| x.2).collect();
            g.rank_off = (0..=n_ranks).map(|k| rank_cand.partition_point(|&(r, _)| (r as usize) < k) as u32).collect();
            g.rank_slot = rank_cand.iter().map(|x| x.1).collect();

            // Fidelity.
            let mut errors: Vec<i64> = op_slack.iter().copied().filter(|&s| s != i64::MIN).collect();
            fid.anchored_op_starts = no - errors.len();
            fid.explained_op_starts = errors.iter().filter(|&&s| s <= tol).count();
            fid.explained_start_share = if no == 0 { 1.0 } else { fid.explained_op_starts as f64 / no as f64 };
            fid.start_error_p50 = percentile(&mut errors, 0.5).unwrap_or(0);
            fid.start_error_p99 = percentile(&mut errors, 0.99).unwrap_or(0);
            fid.start_error_max = errors.iter().copied().max().unwrap_or(0);
            fid.op_start_slack_ns = errors.iter().sum();
            fid.slack_ns = slack_ns;
            fid.recorded_dependencies = fid.recorded_stream_waits + fid.recorded_syncs;
            fid.inferred_dependencies = fid.inferred_stream_waits + fid.inferred_syncs;
            fid.launch_latency_ns = launch_latency;
            fid.return_latency_ns = return_latency;
            fid.blocking_min_duration_ns = min_duration;
            fid.nodes = 2 * n_units;
            fid.edges = g.edge_kind.iter().zip(&g.edges).filter(|(&k, e)| !(k == EdgeKind::Anchor && e.src == NULL_SLOT)).count();
            g.fidelity = fid;
            g
        })
    }

    pub(crate) fn n_units(&self) -> usize {
        self.units.len() - 1
    }

    /// The edges into unit p (indices).
    #[inline]
    pub(crate) fn edge_range(&self, p: usize) -> std::ops::Range<usize> {
        self.units[p].first as usize..self.units[p + 1].first as usize
    }

    #[inline]
    pub(crate) fn lag(&self, e: usize) -> i64 {
        match self.edges[e].lag {
            WIDE => wide(&self.wide_lag, e),
            l => l as i64,
        }
    }

    #[inline]
    pub(crate) fn dur(&self, p: usize) -> i64 {
        match self.units[p].dur {
            WIDE => wide(&self.wide_dur, p),
            d => d as i64,
        }
    }

    #[inline]
    pub(crate) fn slack(&self, p: usize) -> i64 {
        match self.units[p].slack {
            WIDE => wide(&self.wide_slack, p),
            s => s as i64,
        }
    }

    /// How far to trust the replays: see [`Fidelity`].
    pub fn fidelity(&self) -> &Fidelity {
        &self.fidelity
    }

    pub fn n_ops(&self) -> usize {
        self.op_start.len()
    }

    pub fn n_calls(&self) -> usize {
        self.call_start.len()
    }

    pub fn n_instances(&self) -> usize {
        self.transfer.len()
    }

    pub fn n_members(&self) -> usize {
        self.member_op.len()
    }

    pub fn n_ranks(&self) -> usize {
        self.n_ranks
    }

    pub fn n_steps(&self) -> usize {
        self.n_steps
    }

    /// Number of nodes (time slots); node ids are `0..n_nodes`.
    pub fn n_nodes(&self) -> usize {
        2 * self.n_units()
    }

    /// The node standing for `what`, or None when the row is out of range.
    pub fn node(&self, what: NodeRef) -> Option<u32> {
        let table = match what.kind {
            NodeKind::Origin => return (what.row == 0).then_some(0),
            NodeKind::OpStart => &self.op_start,
            NodeKind::OpEnd => &self.op_end,
            NodeKind::CallStart => &self.call_start,
            NodeKind::CallEnd => &self.call_end,
            NodeKind::Transfer => &self.transfer,
        };
        table.get(what.row).copied()
    }

    /// What node `node` stands for, or None when out of range. The unused second slot of a unit
    /// without an own end (a blocking call's start, a member op's start, ...) describes that unit.
    pub fn describe(&self, node: u32) -> Option<NodeRef> {
        let p = (node / 2) as usize;
        let kind = *self.unit_kind.get(p)?;
        let row = self.unit_row[p] as usize;
        let end = node & 1 == 1;
        let r = match kind {
            U_CALL if end && self.call_end[row] == node => NodeRef { kind: NodeKind::CallEnd, row },
            U_CALL => NodeRef { kind: NodeKind::CallStart, row },
            U_OP if end && self.op_end[row] == node => NodeRef { kind: NodeKind::OpEnd, row },
            U_OP => NodeRef { kind: NodeKind::OpStart, row },
            U_CALL_END => NodeRef { kind: NodeKind::CallEnd, row },
            U_TRANSFER => NodeRef { kind: NodeKind::Transfer, row },
            U_MEMBER_END => NodeRef { kind: NodeKind::OpEnd, row: self.member_op[row] as usize },
            _ => NodeRef { kind: NodeKind::Origin, row: 0 },
        };
        Some(r)
    }

    /// The slack of a node's unit (0 for the second slot of a unit, which has none of its own).
    pub fn slack_of(&self, node: u32) -> Option<i64> {
        let p = (node / 2) as usize;
        if p >= self.n_units() {
            return None;
        }
        Some(if node & 1 == 1 { 0 } else { self.slack(p) })
    }

    /// Bytes held by the graph (its vectors' capacities), for the memory figures.
    pub fn heap_bytes(&self) -> usize {
        fn b<T>(v: &Vec<T>) -> usize {
            v.capacity() * std::mem::size_of::<T>()
        }
        b(&self.units)
            + b(&self.edges)
            + b(&self.edge_kind)
            + b(&self.wide_lag)
            + b(&self.wide_dur)
            + b(&self.wide_slack)
            + b(&self.unit_kind)
            + b(&self.unit_row)
            + b(&self.op_start)
            + b(&self.op_end)
            + b(&self.call_start)
            + b(&self.call_end)
            + b(&self.transfer)
            + b(&self.op_member)
            + b(&self.member_op)
            + b(&self.member_x_edge)
            + b(&self.inst_off)
            + b(&self.inst_member)
            + b(&self.seg_edges)
            + b(&self.step_off)
            + b(&self.step_slot)
            + b(&self.rank_off)
            + b(&self.rank_slot)
            + self.measured.get().map_or(0, b)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentile_is_nearest_rank() {
        let mut v = vec![5, 1, 4, 2, 3];
        assert_eq!(percentile(&mut v, 0.0), Some(1));
        assert_eq!(percentile(&mut v, 0.05), Some(1));
        assert_eq!(percentile(&mut v, 0.5), Some(3));
        assert_eq!(percentile(&mut v, 1.0), Some(5));
        assert_eq!(percentile(&mut [], 0.5), None);
    }

    #[test]
    fn enqueue_order_answers_before_and_after() {
        let s = Streams { order: vec![7, 8, 9], key: vec![(0, 1)], begin: vec![0, 3], enq: vec![10, 20, 20] };
        assert_eq!(s.last_before(0, 10), None);
        assert_eq!(s.last_before(0, 11), Some(7));
        assert_eq!(s.last_before(0, 25), Some(9));
        assert_eq!(s.first_after(0, 10), Some(8));
        assert_eq!(s.first_after(0, 20), None);
    }
}
