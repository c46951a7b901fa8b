//! The dependency graph of a job: which event waits for which, with what lag (built in
//! `build.rs`).
//!
//! # Layout
//! The graph is a list of *units* in topological order, each with its incoming edges in CSR form
//! (a unit holds its first edge and its duration in 8 bytes; an edge its source slot and lag in 8;
//! the rare values beyond i32 sit in sorted side tables; the few non-zero slacks in [`Slacks`]). A unit's edges are exactly its
//! own: none for the origin, one or more for every other unit. Unit `p` owns two time *slots*,
//! `2p` and `2p + 1`: a replay sets `t[2p] = max over edges (t[src] + lag) + slack[p]` and
//! `t[2p + 1] = t[2p] + dur[p]`.
//! A non-blocking call and an op outside any collective are one unit each (start in slot `2p`, end
//! in `2p + 1`: an end needs no edge list of its own); a blocking call's end, a member op's end and
//! a collective's transfer start are units of their own (their odd slot unused). Node ids, as used
//! by [`Graph::binding_chain`], [`Graph::describe`] and slack changes, are slot ids. Unit 0 is the
//! *origin*, fixed at time 0: a unit nothing explains (the first call of a thread, an op with no
//! input) hangs from it by an [`EdgeKind::Anchor`] edge whose lag is its measured time, so it keeps
//! that time in every replay and its time is not counted as slack. Only the units and edges are
//! held per node: the rest (what a unit stands for, a row's end) follows from each unit's index in
//! creation order and a few short tables.
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

/// What the replay loop reads per unit (8 bytes): its first edge (the next unit's `first` ends
/// them) and its duration (`WIDE`: see `wide_dur`). Its slack is in [`Slacks`].
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub(crate) struct Unit {
    pub(crate) first: u32,
    pub(crate) dur: i32,
}

/// The units' non-zero slacks, by position. Most units' in-edges explain their time exactly: slack
/// is not 0 at 0.14% of the units of the generated 1.9M-kernel jobs (a field per unit would take
/// 16 MB there), 1-38% of those of the real exports (12 bytes each: a field per unit is smaller
/// only beyond a third). The replay loop walks the positions in order with a cursor; a bit per
/// position answers the common zero of a lookup at once.
#[derive(Debug, Default)]
pub(crate) struct Slacks {
    /// The positions with a non-zero slack, ascending, and each one's slack.
    pub(crate) pos: Vec<u32>,
    pub(crate) value: Vec<i64>,
    /// A bit per position, set where its slack is non-zero.
    bits: Vec<u64>,
}

impl Slacks {
    /// From (position, non-zero slack) in position order, of `n` positions.
    pub(crate) fn new(slacks: &[(u32, i64)], n: usize) -> Slacks {
        let mut bits = vec![0u64; n.div_ceil(64)];
        for &(p, _) in slacks {
            bits[p as usize / 64] |= 1 << (p % 64);
        }
        Slacks { pos: slacks.iter().map(|x| x.0).collect(), value: slacks.iter().map(|x| x.1).collect(), bits }
    }

    #[inline]
    pub(crate) fn get(&self, p: usize) -> i64 {
        if self.bits[p / 64] >> (p % 64) & 1 == 0 {
            return 0;
        }
        self.value[self.first_from(p)]
    }

    /// The index of the first non-zero slack at position p or later: a cursor for a pass from p.
    #[inline]
    pub(crate) fn first_from(&self, p: usize) -> usize {
        self.pos.partition_point(|&q| (q as usize) < p)
    }

    fn heap_bytes(&self) -> usize {
        self.pos.capacity() * 4 + self.value.capacity() * 8 + self.bits.capacity() * 8
    }
}

/// What the replay loop reads per edge (8 bytes): the source slot and the lag (`WIDE`: see
/// `wide_lag`). Anchors' lags (absolute times) and gaps over 2.1 s are the wide ones.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub(crate) struct Edge {
    pub(crate) src: u32,
    pub(crate) lag: i32,
}

pub(crate) fn narrow(v: i64) -> i32 {
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

/// The calls whose gap has a segment: a segment's gaps are the host-gap edges of its calls, in
/// their order.
#[derive(Debug)]
pub(crate) enum Segments {
    /// Every segment is the row of its one call (a gap named by its call, as the pipeline names
    /// them): a bit per call row, set where the call's gap has a segment. A table would take 12
    /// bytes per call.
    CallRows(Vec<u64>),
    /// Any other naming: (segment id, call row), by segment id (a segment's calls in their order).
    Table { id: Vec<i64>, call: Vec<u32> },
}

impl Segments {
    /// The calls of `segment`, in their order.
    pub(crate) fn calls(&self, segment: i64) -> Vec<u32> {
        match self {
            Segments::CallRows(bits) => {
                let has = usize::try_from(segment).ok().is_some_and(|s| bits.get(s / 64).is_some_and(|w| w >> (s % 64) & 1 == 1));
                if has {
                    vec![segment as u32]
                } else {
                    Vec::new()
                }
            }
            Segments::Table { id, call } => {
                let (a, b) = (id.partition_point(|&s| s < segment), id.partition_point(|&s| s <= segment));
                call[a..b].to_vec()
            }
        }
    }

    fn heap_bytes(&self) -> usize {
        match self {
            Segments::CallRows(bits) => bits.capacity() * 8,
            Segments::Table { id, call } => id.capacity() * 8 + call.capacity() * 4,
        }
    }
}

/// The job's dependency graph, read-only once built; replays share it across threads.
pub struct Graph {
    // Units in topological order (plus a sentinel), edges by unit (see the module docs): each unit
    // exactly its own, so every unit but the origin (at position 0, none) has at least one.
    pub(crate) units: Vec<Unit>,
    pub(crate) edges: Vec<Edge>,
    pub(crate) edge_kind: Vec<EdgeKind>,
    /// (edge index or unit position, value) of the values that do not fit in 32 bits, sorted.
    pub(crate) wide_lag: Vec<(u32, i64)>,
    pub(crate) wide_dur: Vec<(u32, i64)>,
    pub(crate) slacks: Slacks,
    /// Per position: the unit's index in creation order (see `starts`), which tells its kind and row.
    /// Describing a node and a rank's summary need it (not a replay): made from the slot tables on
    /// first use.
    pub(crate) unit: OnceLock<Vec<u32>>,
    /// Where calls, ops, blocking call ends, transfers and member ends start in creation order (the
    /// origin is unit 0).
    pub(crate) starts: [u32; 5],
    // Slots of the job's entities. An end is its start's second slot but for a blocking call and
    // a collective member's op, whose ends are units of their own.
    pub(crate) op_start: Vec<u32>,
    pub(crate) call_start: Vec<u32>,
    pub(crate) transfer: Vec<u32>,
    /// The blocking calls (by call row: in the order of their end units), and each one's end slot.
    pub(crate) blocking_call: Vec<u32>,
    pub(crate) blocking_end: Vec<u32>,
    // Members, by member row: its op, its end slot, its transfer edge; by instance (CSR of member
    // rows); and (op row, member row), by op.
    pub(crate) member_op: Vec<u32>,
    pub(crate) member_end: Vec<u32>,
    pub(crate) member_x_edge: Vec<u32>,
    pub(crate) inst_off: Vec<u32>,
    pub(crate) inst_member: Vec<u32>,
    pub(crate) op_members: Vec<(u32, u32)>,
    /// The calls whose gap has a segment, by segment.
    pub(crate) segments: Segments,
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

impl Graph {
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
        self.slacks.get(p)
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
        let row = what.row;
        match what.kind {
            NodeKind::Origin => (row == 0).then_some(0),
            NodeKind::OpStart => self.op_start.get(row).copied(),
            NodeKind::OpEnd => (row < self.n_ops()).then(|| self.op_end(row)),
            NodeKind::CallStart => self.call_start.get(row).copied(),
            NodeKind::CallEnd => (row < self.n_calls()).then(|| self.call_end(row)),
            NodeKind::Transfer => self.transfer.get(row).copied(),
        }
    }

    /// Op row `op`'s member row, if it is a collective's member.
    pub(crate) fn member_of_op(&self, op: usize) -> Option<u32> {
        let k = self.op_members.binary_search_by_key(&(op as u32), |x| x.0).ok()?;
        Some(self.op_members[k].1)
    }

    /// The end slot of op row `op`.
    pub(crate) fn op_end(&self, op: usize) -> u32 {
        match self.member_of_op(op) {
            Some(m) => self.member_end[m as usize],
            None => self.op_start[op] + 1,
        }
    }

    /// The end slot of call row `call`.
    pub(crate) fn call_end(&self, call: usize) -> u32 {
        match self.blocking_call.binary_search(&(call as u32)) {
            Ok(b) => self.blocking_end[b],
            Err(_) => self.call_start[call] + 1,
        }
    }

    /// The host-gap edge before call row `call` (none for a thread's first call).
    pub(crate) fn gap_edge(&self, call: usize) -> Option<u32> {
        self.in_edge((self.call_start[call] / 2) as usize, EdgeKind::HostGap)
    }

    /// The first edge into the unit at position p of this kind.
    pub(crate) fn in_edge(&self, p: usize, kind: EdgeKind) -> Option<u32> {
        self.edge_range(p).find(|&e| self.edge_kind[e] == kind).map(|e| e as u32)
    }

    /// The unit at position p: its kind (`U_*`) and row (call row, op row, instance or member row).
    pub(crate) fn kind_row(&self, p: usize) -> (u8, u32) {
        let u = self.unit_order()[p];
        let [call, op, cend, transfer, mend] = self.starts;
        match u {
            0 => (U_ORIGIN, 0),
            u if u < op => (U_CALL, u - call),
            u if u < cend => (U_OP, u - op),
            u if u < transfer => (U_CALL_END, self.blocking_call[(u - cend) as usize]),
            u if u < mend => (U_TRANSFER, u - transfer),
            u => (U_MEMBER_END, u - mend),
        }
    }

    /// Per position, the unit's index in creation order: the inverse of the slot tables.
    pub(crate) fn unit_order(&self) -> &[u32] {
        self.unit.get_or_init(|| {
            let mut unit = vec![0u32; self.n_units()];
            let [call, op, cend, transfer, mend] = self.starts;
            for (first, slots) in [
                (call, &self.call_start),
                (op, &self.op_start),
                (cend, &self.blocking_end),
                (transfer, &self.transfer),
                (mend, &self.member_end),
            ] {
                for (i, &s) in slots.iter().enumerate() {
                    unit[(s / 2) as usize] = first + i as u32;
                }
            }
            unit
        })
    }

    /// What node `node` stands for, or None when out of range. The unused second slot of a unit
    /// without an own end (a blocking call's start, a member op's start, ...) describes that unit.
    pub fn describe(&self, node: u32) -> Option<NodeRef> {
        let p = (node / 2) as usize;
        if p >= self.n_units() {
            return None;
        }
        let (kind, row) = self.kind_row(p);
        let row = row as usize;
        let end = node & 1 == 1;
        let r = match kind {
            U_CALL if end && self.call_end(row) == node => NodeRef { kind: NodeKind::CallEnd, row },
            U_CALL => NodeRef { kind: NodeKind::CallStart, row },
            U_OP if end && self.op_end(row) == node => NodeRef { kind: NodeKind::OpEnd, row },
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
            + self.slacks.heap_bytes()
            + self.unit.get().map_or(0, b)
            + b(&self.op_start)
            + b(&self.call_start)
            + b(&self.transfer)
            + b(&self.blocking_call)
            + b(&self.blocking_end)
            + b(&self.member_op)
            + b(&self.member_end)
            + b(&self.member_x_edge)
            + b(&self.inst_off)
            + b(&self.inst_member)
            + b(&self.op_members)
            + self.segments.heap_bytes()
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
    use crate::whatif::synth::Rng;

    #[test]
    fn sparse_slacks_answer_as_a_slack_per_unit() {
        let mut rng = Rng::new(7);
        for case in 0..200 {
            let n = rng.below(300);
            // Sparse, dense, all zero; positions at word edges and the last one included.
            let share = [0, 1, 10, 50, 100][case % 5];
            let dense: Vec<i64> = (0..n).map(|_| if rng.below(100) < share { rng.range(1, 1 << 40) } else { 0 }).collect();
            let nonzero: Vec<(u32, i64)> = dense.iter().enumerate().filter(|x| *x.1 != 0).map(|(p, &s)| (p as u32, s)).collect();
            let slacks = Slacks::new(&nonzero, n);
            for (p, &want) in dense.iter().enumerate() {
                assert_eq!(slacks.get(p), want, "case {case}, position {p}");
                // The cursor from p: the first non-zero slack at p or later.
                let k = slacks.first_from(p);
                assert_eq!(slacks.pos.get(k).map(|&q| q as usize), (p..n).find(|&q| dense[q] != 0), "case {case}, from {p}");
            }
            assert_eq!(slacks.first_from(n), nonzero.len());
        }
    }
}
