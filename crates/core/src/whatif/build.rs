//! Building the job's graph (the rules are [`super::graph`]'s): each rank's own edges worked out on
//! its own rows ([`super::rank`]), then the units of the whole job put in topological order and
//! laid out, each unit's in-edges made as it is laid out (from the ranks' tables: no list of the
//! job's edges is ever held). The input is read where it lies where each rank's rows are one run
//! of one part (the what-if's own input); otherwise each rank's rows are gathered ([`super::by_rank`]).

use super::by_rank::{RankTimes, Rows, Split};
use super::fidelity::Fidelity;
use super::graph::{narrow, Edge, EdgeKind, Graph, Segments, Slacks, Unit, NONE, WIDE};
use super::input::Job;
use super::rank::{percentiles, End, OpLaunch, RankEdges, RankView, RowBits, END, OWN_SEGMENT, SEGMENT, START};
use super::topo;
use super::{input_error, Options, WhatIfError};
use rayon::prelude::*;
use std::sync::OnceLock;

/// An edge into a unit as made: its source slot reference (2 * source unit + 1 for the unit's
/// second slot, before units have positions), the measured time there, its nominal lag and kind.
#[derive(Clone, Copy)]
struct InEdge {
    src: u32,
    src_time: i64,
    lag: i64,
    kind: EdgeKind,
}

/// What the layout reads of one rank: its times and rows, and its own edges.
struct RankUnits<'v> {
    c_start: RankTimes<'v>,
    c_end: RankTimes<'v>,
    o_start: RankTimes<'v>,
    o_end: RankTimes<'v>,
    o_launch: OpLaunch<'v>,
    call_rows: &'v Rows<'v>,
    op_rows: &'v Rows<'v>,
    edges: &'v RankEdges,
    /// Per blocking call of the rank: its end unit (from `u_cend`).
    cend: Vec<u32>,
}

/// The job's units in creation order (origin, calls, ops, blocking call ends, transfers, member
/// ends: the order that breaks ties of time) and what makes each one's edges.
struct Units<'v> {
    u_call: usize,
    u_op: usize,
    u_cend: usize,
    u_t: usize,
    u_mend: usize,
    n_units: usize,
    calls: &'v Split<8>,
    ops: &'v Split<6>,
    ranks: Vec<RankUnits<'v>>,
    /// Per blocking call end unit: (rank, index among the rank's blocking calls), by call row.
    blocking: Vec<(u32, u32)>,
    /// A bit per op: whether it is a collective's member (about 1 op in 100); then its member row
    /// is found in `op_members`, (op, member row) by op (the graph's own table, made here).
    is_member: RowBits,
    op_members: Vec<(u32, u32)>,
    member_op: Vec<u32>,
    member_inst: Vec<u32>,
    inst_off: Vec<u32>,
    inst_member: Vec<u32>,
    /// Per instance: its measured transfer start `T` (the last arrival).
    t_meas: Vec<i64>,
    /// The origin's time: that of the earliest unit, so that it sorts first (ties go by unit).
    origin_time: i64,
    /// Edges dropped to break a cycle: (unit, index among its in-edges), sorted.
    dropped: Vec<(u32, u32)>,
}

/// Where a unit's row is: a call's or op's rank and row within it, or none (the other kinds).
#[derive(Clone, Copy)]
enum Place {
    Call(u32, u32),
    Op(u32, u32),
    Other,
}

impl Units<'_> {
    fn call_start_ref(&self, r: &RankUnits, k: usize) -> u32 {
        2 * (self.u_call + r.call_rows.global(k)) as u32
    }

    fn call_end_ref(&self, r: &RankUnits, k: usize) -> u32 {
        match r.edges.blocking_index(k) {
            Some(b) => 2 * (self.u_cend + r.cend[b] as usize) as u32,
            None => self.call_start_ref(r, k) + 1,
        }
    }

    fn op_start_ref(&self, g: usize) -> u32 {
        2 * (self.u_op + g) as u32
    }

    /// The member row of op row g, if it is a member.
    #[inline]
    fn member_of(&self, g: usize) -> Option<usize> {
        if !self.is_member.get(g) {
            return None;
        }
        let k = self.op_members.partition_point(|&(op, _)| (op as usize) < g);
        Some(self.op_members[k].1 as usize)
    }

    /// The end of op row g: the op's second slot, or a member's end unit.
    fn op_end_ref(&self, g: usize) -> u32 {
        match self.member_of(g) {
            None => self.op_start_ref(g) + 1,
            Some(m) => 2 * (self.u_mend + m) as u32,
        }
    }

    fn end_ref(&self, r: usize, end: End) -> u32 {
        let r = &self.ranks[r];
        match end {
            End::Op(k) => self.op_end_ref(r.op_rows.global(k as usize)),
            End::Call(k) => self.call_end_ref(r, k as usize),
        }
    }

    /// Where unit u's row is.
    #[inline]
    fn place(&self, u: usize) -> Place {
        if u == 0 || u >= self.u_cend {
            Place::Other
        } else if u < self.u_op {
            let (r, k) = self.calls.locate(u - self.u_call);
            Place::Call(r as u32, k as u32)
        } else {
            let (r, k) = self.ops.locate(u - self.u_op);
            Place::Op(r as u32, k as u32)
        }
    }

    /// Every unit's time, in unit order, a run of units at a time.
    fn each_time(&self, f: &mut dyn FnMut(&[i64], i64)) {
        f(&[self.origin_time], 0);
        self.calls.each_run(|r, ks| self.ranks[r].c_start.runs(ks, f));
        self.ops.each_run(|r, ks| self.ranks[r].o_start.runs(ks, f));
        for &(r, b) in &self.blocking {
            let r = &self.ranks[r as usize];
            f(&[r.c_end.at(r.edges.blocking[b as usize] as usize)], 0);
        }
        f(&self.t_meas, 0);
        for &op in &self.member_op {
            let (r, k) = self.ops.locate(op as usize);
            f(&[self.ranks[r].o_end.at(k)], 0);
        }
    }

    /// The span of the units' times: the origin's (the earliest) to the latest end.
    fn span(&self) -> (i64, i64) {
        let latest = self.ranks.iter().flat_map(|r| r.c_end.max().into_iter().chain(r.o_end.max())).max();
        (self.origin_time, latest.unwrap_or(self.origin_time))
    }

    /// Unit u's measured time (of its first slot) and inline duration (its second slot's time after
    /// its first); its in-edges, in order (those dropped to break a cycle left out), into `out`.
    fn unit(&self, u: usize, out: &mut Vec<InEdge>) -> (i64, i64) {
        self.unit_at(u, self.place(u), out)
    }

    /// [`Units::unit`] of a unit whose place is known.
    fn unit_at(&self, u: usize, place: Place, out: &mut Vec<InEdge>) -> (i64, i64) {
        out.clear();
        let mut put = |src: u32, src_time: i64, lag: i64, kind: EdgeKind| out.push(InEdge { src, src_time, lag, kind });
        let time = match place {
            Place::Call(r, k) => {
                let (r, k) = (&self.ranks[r as usize], k as usize);
                let start = r.c_start.at(k);
                if let Some(prev) = r.edges.call_prev.get(k) {
                    let end = r.c_end.at(prev);
                    put(self.call_end_ref(r, prev), end, start - end, EdgeKind::HostGap);
                }
                (start, if r.edges.is_blocking.get(k) { 0 } else { r.c_end.at(k) - start })
            }
            Place::Op(r, k) => {
                let (r, k) = (&self.ranks[r as usize], k as usize);
                let e = r.edges;
                if let Some(prev) = e.op_prev.get(k) {
                    put(self.op_end_ref(r.op_rows.global(prev)), r.o_end.at(prev), 0, EdgeKind::Stream);
                }
                let start = r.o_start.at(k);
                if let Some(call) = r.o_launch.call(k) {
                    let called_end = r.c_end.at(call);
                    if start >= called_end {
                        put(self.call_end_ref(r, call), called_end, e.launch_latency, EdgeKind::Launch);
                    } else {
                        put(self.call_start_ref(r, call), r.c_start.at(call), e.launch_latency, EdgeKind::Launch);
                    }
                }
                for &(_, a, recorded) in e.cross_into(k) {
                    let kind = if recorded { EdgeKind::CrossStream } else { EdgeKind::CrossStreamInferred };
                    put(self.op_end_ref(r.op_rows.global(a as usize)), r.o_end.at(a as usize), 0, kind);
                }
                let inline = self.member_of(u - self.u_op).is_none();
                (start, if inline { r.o_end.at(k) - start } else { 0 })
            }
            Place::Other if u == 0 => (self.origin_time, 0),
            Place::Other if u < self.u_t => {
                let (r, b) = self.blocking[u - self.u_cend];
                let (r, b) = (&self.ranks[r as usize], b as usize);
                let e = r.edges;
                let k = e.blocking[b] as usize;
                put(self.call_start_ref(r, k), r.c_start.at(k), e.min_duration, EdgeKind::Duration);
                for &(op, recorded) in e.waits_of(b) {
                    let kind = if recorded { EdgeKind::Wait } else { EdgeKind::WaitInferred };
                    put(self.op_end_ref(r.op_rows.global(op as usize)), r.o_end.at(op as usize), e.return_latency, kind);
                }
                (r.c_end.at(k), 0)
            }
            Place::Other if u < self.u_mend => {
                let inst = u - self.u_t;
                for &m in &self.inst_member[self.inst_off[inst] as usize..self.inst_off[inst + 1] as usize] {
                    let g = self.member_op[m as usize] as usize;
                    let (r, k) = self.ops.locate(g);
                    put(self.op_start_ref(g), self.ranks[r].o_start.at(k), 0, EdgeKind::Arrival);
                }
                (self.t_meas[inst], 0)
            }
            Place::Other => {
                let m = u - self.u_mend;
                let (g, inst) = (self.member_op[m] as usize, self.member_inst[m] as usize);
                let (r, k) = self.ops.locate(g);
                let (t, r) = (self.t_meas[inst], &self.ranks[r]);
                put(2 * (self.u_t + inst) as u32, t, r.o_end.at(k) - t, EdgeKind::Transfer);
                put(self.op_start_ref(g), r.o_start.at(k), 0, EdgeKind::MemberStart);
                (r.o_end.at(k), 0)
            }
        };
        if !self.dropped.is_empty() {
            let a = self.dropped.partition_point(|&(d, _)| (d as usize) < u);
            let b = self.dropped.partition_point(|&(d, _)| d as usize <= u);
            if a < b {
                let gone = &self.dropped[a..b];
                let mut k = 0u32;
                out.retain(|_| {
                    k += 1;
                    gone.binary_search(&(u as u32, k - 1)).is_err()
                });
            }
        }
        time
    }

    /// The units with an edge from a unit placed later (`pos`), by unit, and how many edges each
    /// unit has to lay out (its `other` by unit). In creation order, on every core.
    fn check(&self, pos: &[u32]) -> (Vec<u32>, EdgeCounts) {
        type Found = (Vec<u32>, Vec<(u32, u32)>);
        let mut one_edge = vec![0u64; self.n_units.div_ceil(64)];
        let chunks: Vec<Found> = one_edge
            .par_chunks_mut(CHUNK / 64)
            .enumerate()
            .map(|(c, one_edge)| {
                let (mut late, mut other) = (Vec::new(), Vec::new());
                let mut buf = Vec::new();
                for u in c * CHUNK..self.n_units.min((c + 1) * CHUNK) {
                    self.unit(u, &mut buf);
                    if buf.iter().any(|e| pos[(e.src / 2) as usize] > pos[u]) {
                        late.push(u as u32);
                    }
                    EdgeCounts::note(&mut one_edge[(u - c * CHUNK) / 64], &mut other, u, edge_count(u, buf.len()));
                }
                (late, other)
            })
            .collect();
        let late = chunks.iter().flat_map(|c| c.0.iter().copied()).collect();
        (late, EdgeCounts { one_edge, other: chunks.into_iter().flat_map(|c| c.1).collect() })
    }
}

/// How many edges unit u has as laid out, with `in_edges` in-edges: the origin none, any other unit
/// its in-edges, else one anchor.
fn edge_count(u: usize, in_edges: usize) -> usize {
    if u == 0 {
        0
    } else {
        in_edges.max(1)
    }
}

/// Every unit's [`edge_count`], for the layout to place each unit's edges before it makes them:
/// most units have one edge or two, a bit per unit (by unit) says one; the others are listed.
struct EdgeCounts {
    one_edge: Vec<u64>,
    /// (unit, edge count) of the units with neither one edge nor two, sorted: the origin and the
    /// units of more than two; by position instead of unit once `by_position` has run.
    other: Vec<(u32, u32)>,
}

impl EdgeCounts {
    /// Notes that unit u has n edges; `word` is the one holding its bit, which must be clear.
    fn note(word: &mut u64, other: &mut Vec<(u32, u32)>, u: usize, n: usize) {
        match n {
            1 => *word |= 1 << (u % 64),
            2 => {}
            n => other.push((u as u32, n as u32)),
        }
    }

    /// The counts of units `us` (sorted) made again by `count`.
    fn recount(&mut self, us: &[u32], mut count: impl FnMut(usize) -> usize) {
        self.other.retain(|x| us.binary_search(&x.0).is_err());
        for &u in us {
            let (u, word) = (u as usize, &mut self.one_edge[u as usize / 64]);
            *word &= !(1 << (u % 64));
            Self::note(word, &mut self.other, u, count(u));
        }
    }

    /// `other` by position (`pos`: each unit's) from here on, as the layout reads it.
    fn by_position(&mut self, pos: &[u32]) {
        for x in self.other.iter_mut() {
            x.0 = pos[x.0 as usize];
        }
        self.other.sort_unstable();
    }

    /// The counts of positions p0..p1 in order (`order`: the unit at each position; `other` by
    /// position).
    fn each_count(&self, order: &[u32], p0: usize, p1: usize, mut f: impl FnMut(usize)) {
        let mut next = self.other.partition_point(|&(q, _)| (q as usize) < p0);
        for (p, &u) in (p0..p1).zip(&order[p0..p1]) {
            let n = if next < self.other.len() && self.other[next].0 as usize == p {
                next += 1;
                self.other[next - 1].1 as usize
            } else if self.one_edge[u as usize / 64] >> (u % 64) & 1 == 1 {
                1
            } else {
                2
            };
            f(n);
        }
    }
}

/// What a chunk of the layout returns: its wide values, its non-zero slacks and their sum, and
/// whether every position but the first has an edge (that each edge leaves from an earlier slot is
/// checked where the sources are placed, [`place_sources`]).
#[derive(Default)]
struct Laid {
    lag: Vec<(u32, i64)>,
    dur: Vec<(u32, i64)>,
    slack: Vec<(u32, i64)>,
    slack_ns: i64,
    sound: bool,
}

/// Positions per chunk of the layout.
const CHUNK: usize = 1 << 16;
// `check` gives each chunk of units its own words of `EdgeCounts::one_edge`.
const _: () = assert!(CHUNK.is_multiple_of(64));

/// The graph's units, edges and edge kinds as laid out (the edges' sources unit slots, not yet
/// placed: [`place_sources`]), their wide values, slacks and the sum of slack.
struct Layout {
    units: Vec<Unit>,
    edges: Vec<Edge>,
    edge_kind: Vec<EdgeKind>,
    wide_lag: Vec<(u32, i64)>,
    wide_dur: Vec<(u32, i64)>,
    slacks: Slacks,
    slack_ns: i64,
}

impl Graph {
    /// Builds the graph of a job (see the module docs for what it holds). Fails with
    /// [`WhatIfError::Input`] on inconsistent input: unequal column lengths, an end before its
    /// start, ranks, steps or instances that are not dense, an unknown or shared member op.
    pub fn build(job: &Job, options: &Options) -> Result<Graph, WhatIfError> {
        let sizes = job.check()?;
        if options.tolerance_ns < 0 {
            return Err(input_error(format!("tolerance_ns is {} (0 or more)", options.tolerance_ns)));
        }
        if !(0.0..=1.0).contains(&options.latency_percentile) {
            return Err(input_error(format!("latency_percentile is {} (0 to 1)", options.latency_percentile)));
        }
        if options.launch_latency_ns.is_some_and(|l| l < 0) {
            return Err(input_error("launch_latency_ns is negative"));
        }
        let (n_ranks, n_inst, n_steps) = (sizes.n_ranks, sizes.n_instances, sizes.n_steps);
        let (nc, no, nm) = (sizes.n_calls(), sizes.n_ops(), sizes.n_members());
        let calls = Split::new(&job.calls, &sizes.calls, n_ranks, &[START, END]);
        let ops = Split::new(&job.ops, &sizes.ops, n_ranks, &[START, END]);
        let syncs = Split::new(&job.syncs, &sizes.syncs, n_ranks, &[]);
        let events = Split::new(&job.events, &sizes.events, n_ranks, &[]);
        let views: Vec<RankView> = (0..n_ranks)
            .map(|r| RankView { calls: calls.view(&job.calls, r), ops: ops.view(&job.ops, r), syncs: syncs.view(&job.syncs, r), events: events.view(&job.events, r) })
            .collect();
        let room: Vec<RankEdges> = views.iter().map(|v| RankEdges::for_rows(v.calls.len(), v.ops.len())).collect();
        let ranks: Vec<RankEdges> = views.par_iter().zip(room).map(|(v, out)| RankEdges::new(v, options, out)).collect();

        // Units (creation index): origin, calls, ops, blocking call ends, transfers, member ends.
        let mut blocking: Vec<(u32, u32, u32)> = Vec::new(); // (call row, rank, index among the rank's)
        for (r, (v, rank)) in views.iter().zip(&ranks).enumerate() {
            blocking.extend(rank.blocking.iter().enumerate().map(|(b, &k)| (v.calls.rows.global(k as usize) as u32, r as u32, b as u32)));
        }
        blocking.sort_unstable();
        let mut cend_of: Vec<Vec<u32>> = ranks.iter().map(|r| vec![0; r.blocking.len()]).collect();
        for (j, &(_, r, b)) in blocking.iter().enumerate() {
            cend_of[r as usize][b as usize] = j as u32;
        }
        let u_call = 1usize;
        let u_op = u_call + nc;
        let u_cend = u_op + no;
        let u_t = u_cend + blocking.len();
        let u_mend = u_t + n_inst;
        let n_units = u_mend + nm;
        if 2 * n_units as u64 >= NONE as u64 {
            return Err(input_error("the job is too large for one graph (more than 2^31 nodes)"));
        }
        let members = job.member_rows(&sizes.members);
        let member_op: Vec<u32> = members.iter().map(|&(_, op)| op as u32).collect();
        let member_inst: Vec<u32> = members.iter().map(|&(inst, _)| inst as u32).collect();
        drop(members);
        let mut op_members: Vec<(u32, u32)> = member_op.iter().enumerate().map(|(m, &op)| (op, m as u32)).collect();
        op_members.sort_unstable();
        let mut is_member = RowBits::with_rows(Vec::new(), no);
        for &(op, _) in &op_members {
            is_member.set(op as usize);
        }
        let (inst_off, inst_member) = super::rows_by_key(&member_inst, n_inst);
        let op_time = |g: usize| {
            let (r, k) = ops.locate(g);
            (views[r].op_start().at(k), views[r].op_end().at(k))
        };
        let mut t_meas = vec![i64::MIN; n_inst];
        for (&op, &inst) in member_op.iter().zip(&member_inst) {
            t_meas[inst as usize] = t_meas[inst as usize].max(op_time(op as usize).0);
        }
        let transfer_violations = member_op.iter().zip(&member_inst).filter(|&(&op, &inst)| op_time(op as usize).1 < t_meas[inst as usize]).count();
        let earliest = views.iter().flat_map(|v| v.call_start().min().into_iter().chain(v.op_start().min())).min();
        let rank_units = views
            .iter()
            .zip(&ranks)
            .zip(cend_of)
            .map(|((v, edges), cend)| RankUnits {
                c_start: v.call_start(),
                c_end: v.call_end(),
                o_start: v.op_start(),
                o_end: v.op_end(),
                o_launch: v.op_launch(),
                call_rows: &v.calls.rows,
                op_rows: &v.ops.rows,
                edges,
                cend,
            })
            .collect();
        let mut units = Units {
            u_call,
            u_op,
            u_cend,
            u_t,
            u_mend,
            n_units,
            calls: &calls,
            ops: &ops,
            ranks: rank_units,
            blocking: blocking.iter().map(|&(_, r, b)| (r, b)).collect(),
            is_member,
            op_members,
            member_op,
            member_inst,
            inst_off,
            inst_member,
            t_meas,
            origin_time: earliest.unwrap_or(0),
            dropped: Vec::new(),
        };
        let blocking_call: Vec<u32> = blocking.iter().map(|b| b.0).collect();
        drop(blocking);

        // Topological order: time order, repaired only where some edge goes backward.
        let (mut order, mut pos) = topo::time_order(n_units, units.span(), |f| units.each_time(f));
        let (late, mut counts) = units.check(&pos);
        if !late.is_empty() {
            let mut buf = Vec::new();
            let (repaired, repaired_pos, dropped) = topo::repair(order, pos, &late, |u, out| {
                units.unit(u, &mut buf);
                out.extend(buf.iter().map(|e| e.src / 2));
            });
            (order, pos, units.dropped) = (repaired, repaired_pos, dropped);
            // The units that lost edges: their number again.
            let mut lost: Vec<u32> = units.dropped.iter().map(|d| d.0).collect();
            lost.dedup();
            counts.recount(&lost, |u| {
                units.unit(u, &mut buf);
                edge_count(u, buf.len())
            });
        }
        drop(late);
        counts.by_position(&pos);
        // The layout reads each position's unit and writes the edges' sources as unit slots:
        // `pos` (16 MB at 1.9M kernels) is made again after it, once the ranks' tables have gone,
        // not held beside `order` under the graph's tables, the build's largest allocation. First
        // the memory the ranks' edges and the time order freed goes back (else held under them).
        drop(pos);
        crate::memory::release();
        let mut laid = Graph::lay_out(&units, &order, &counts);
        drop(counts);

        // What is kept of the units and the ranks' edges (the end candidates as unit slots, the
        // members, what the fidelity takes); then they go, before `pos` is made again.
        let mut step_cand: Vec<(u32, u32, u32)> = Vec::new(); // (step, rank, end slot)
        let mut rank_cand: Vec<(u32, u32)> = Vec::new();
        for (r, rank) in ranks.iter().enumerate() {
            step_cand.extend(rank.step_ends.iter().map(|&(step, end)| (step, r as u32, units.end_ref(r, end))));
            rank_cand.extend(rank.rank_ends.iter().map(|&end| (r as u32, units.end_ref(r, end))));
        }
        let tol = options.tolerance_ns;
        let mut fid = Fidelity { ops: no, calls: nc, tolerance_ns: tol, ..Fidelity::default() };
        for rank in &ranks {
            fid.unresolved_syncs += rank.unresolved_syncs;
            fid.recorded_stream_waits += rank.recorded_stream_waits;
            fid.inferred_stream_waits += rank.inferred_stream_waits;
            fid.recorded_syncs += rank.recorded_syncs;
            fid.inferred_syncs += rank.inferred_syncs;
        }
        fid.launch_latency_ns = ranks.iter().map(|r| r.launch_latency).collect();
        fid.return_latency_ns = ranks.iter().map(|r| r.return_latency).collect();
        fid.blocking_min_duration_ns = ranks.iter().map(|r| r.min_duration).collect();
        fid.dropped_dependencies = units.dropped.len();
        let op_members = std::mem::take(&mut units.op_members);
        let member_op = std::mem::take(&mut units.member_op);
        let inst_off = std::mem::take(&mut units.inst_off);
        let inst_member = std::mem::take(&mut units.inst_member);
        drop(units);
        drop(ranks);

        let pos = topo::positions(&order);
        drop(order);
        // What makes the replay loop's unchecked reads sound: every edge reads an earlier slot.
        assert!(place_sources(&laid.units, &mut laid.edges, &pos), "graph not in topological order");
        let to_slot = |r: u32| 2 * pos[(r / 2) as usize] + (r & 1);
        let slot = |u: usize| 2 * pos[u];
        let mut g = Graph {
            units: laid.units,
            edges: laid.edges,
            edge_kind: laid.edge_kind,
            wide_lag: laid.wide_lag,
            wide_dur: laid.wide_dur,
            slacks: laid.slacks,
            unit: OnceLock::new(),
            starts: [u_call, u_op, u_cend, u_t, u_mend].map(|s| s as u32),
            op_start: (0..no).map(|i| slot(u_op + i)).collect(),
            call_start: (0..nc).map(|i| slot(u_call + i)).collect(),
            transfer: (0..n_inst).map(|i| slot(u_t + i)).collect(),
            blocking_end: (0..blocking_call.len()).map(|j| slot(u_cend + j)).collect(),
            blocking_call,
            member_op: Vec::new(),
            member_end: (0..nm).map(|m| slot(u_mend + m)).collect(),
            member_x_edge: Vec::new(),
            inst_off,
            inst_member,
            op_members,
            segments: Segments::CallRows(Vec::new()),
            step_off: Vec::new(),
            step_slot: Vec::new(),
            rank_off: Vec::new(),
            rank_slot: Vec::new(),
            n_ranks,
            n_steps,
            fidelity: Fidelity::default(),
            measured: OnceLock::new(),
        };
        // Each member's transfer edge; step and rank end candidates.
        g.member_x_edge = g.member_end.iter().map(|&s| g.in_edge((s / 2) as usize, EdgeKind::Transfer).unwrap_or(NONE)).collect();
        for x in step_cand.iter_mut() {
            x.2 = to_slot(x.2);
        }
        for x in rank_cand.iter_mut() {
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
        drop((pos, step_cand, rank_cand));
        g.member_op = member_op;

        // The calls whose gap has a segment: a bit per call where each names its own row, else a
        // table by segment (a segment's calls in their order).
        let segment_of = |r: usize, k: usize| {
            let calls = &views[r].calls;
            if calls.column(OWN_SEGMENT).get(k) >= 0 {
                calls.rows.global(k) as i64
            } else {
                calls.column(SEGMENT).get(k)
            }
        };
        let mut own_rows = true;
        calls.each_run(|r, ks| {
            let rows = &views[r].calls.rows;
            own_rows &= ks.into_iter().all(|k| matches!(segment_of(r, k), id if id < 0 || id == rows.global(k) as i64));
        });
        g.segments = if own_rows {
            let mut bits = vec![0u64; nc.div_ceil(64)];
            calls.each_run(|r, ks| {
                for k in ks.filter(|&k| segment_of(r, k) >= 0) {
                    let row = views[r].calls.rows.global(k);
                    bits[row / 64] |= 1 << (row % 64);
                }
            });
            Segments::CallRows(bits)
        } else {
            let (mut id, mut call) = (Vec::new(), Vec::new());
            calls.each_run(|r, ks| {
                for k in ks {
                    let segment = segment_of(r, k);
                    if segment >= 0 {
                        id.push(segment);
                        call.push(views[r].calls.rows.global(k) as u32);
                    }
                }
            });
            let mut by: Vec<u32> = (0..id.len() as u32).collect();
            by.sort_by_key(|&i| id[i as usize]); // stable: a segment's calls stay in order
            Segments::Table { id: by.iter().map(|&i| id[i as usize]).collect(), call: by.iter().map(|&i| call[i as usize]).collect() }
        };

        // Fidelity. An op start's slack counts unless it is anchored (it has no dependency). Most
        // are 0 (explained exactly): counted, not kept.
        let (mut exact, mut errors) = (0usize, Vec::new());
        for p in g.op_start.iter().map(|&s| (s / 2) as usize) {
            let e = g.units[p].first as usize;
            if !(g.edge_kind[e] == EdgeKind::Anchor && g.edges[e].src == 0) {
                match g.slack(p) {
                    0 => exact += 1,
                    s => errors.push(s),
                }
            }
        }
        fid.transfer_violations = transfer_violations;
        fid.anchored_op_starts = no - exact - errors.len();
        fid.explained_op_starts = exact + errors.iter().filter(|&&s| s <= tol).count();
        fid.explained_start_share = if no == 0 { 1.0 } else { fid.explained_op_starts as f64 / no as f64 };
        [fid.start_error_p50, fid.start_error_p99] = percentiles(exact, &mut errors, [0.5, 0.99]).unwrap_or([0, 0]);
        fid.start_error_max = errors.iter().copied().max().unwrap_or(0);
        fid.op_start_slack_ns = errors.iter().sum();
        fid.slack_ns = laid.slack_ns;
        fid.recorded_dependencies = fid.recorded_stream_waits + fid.recorded_syncs;
        fid.inferred_dependencies = fid.inferred_stream_waits + fid.inferred_syncs;
        fid.nodes = 2 * n_units;
        fid.edges = g.edges.len();
        g.fidelity = fid;
        Ok(g)
    }

    /// The units and their edges laid out in `order`, in chunks of positions on every core, the
    /// edges' sources as unit slots ([`place_sources`] puts them at their positions). Within a
    /// chunk, units are made rank by rank and kind by kind, each rank's calls and ops in their
    /// order: what they read of their rank's tables is read in order. `counts`: each unit's edges
    /// (see [`Units::check`]), `other` by position.
    fn lay_out(units: &Units, order: &[u32], counts: &EdgeCounts) -> Layout {
        let n_units = units.n_units;
        let n_ranks = units.ranks.len();
        let n_chunks = n_units.div_ceil(CHUNK);
        // The replay reads the edges of every position but the first unchecked: the origin, the
        // one unit without an edge, must come first.
        assert_eq!(order[0], 0, "the origin first");
        // Each chunk's first edge: the edges of the chunks before it.
        let mut chunk_first: Vec<usize> = (0..n_chunks)
            .into_par_iter()
            .map(|c| {
                let mut n = 0;
                counts.each_count(order, c * CHUNK, n_units.min((c + 1) * CHUNK), |k| n += k);
                n
            })
            .collect();
        let mut n_edges = 0;
        for f in chunk_first.iter_mut() {
            (*f, n_edges) = (n_edges, n_edges + *f);
        }
        chunk_first.push(n_edges);
        // Written in place by the chunks (every unit and edge once), not filled first: this memory
        // is first touched where it is written, on every core.
        let mut units_out: Vec<Unit> = Vec::with_capacity(n_units + 1);
        let mut edges_out: Vec<Edge> = Vec::with_capacity(n_edges);
        let mut kinds_out: Vec<EdgeKind> = Vec::with_capacity(n_edges);
        let mut chunks = Vec::with_capacity(n_chunks);
        {
            let mut us = &mut units_out.spare_capacity_mut()[..n_units];
            let (mut es, mut eks) = (&mut edges_out.spare_capacity_mut()[..n_edges], &mut kinds_out.spare_capacity_mut()[..n_edges]);
            for c in 0..n_chunks {
                let (p0, p1) = (c * CHUNK, n_units.min((c + 1) * CHUNK));
                let (base, n_e) = (chunk_first[c], chunk_first[c + 1] - chunk_first[c]);
                let (u_head, u_tail) = std::mem::take(&mut us).split_at_mut(p1 - p0);
                let (e_head, e_tail) = std::mem::take(&mut es).split_at_mut(n_e);
                let (ek_head, ek_tail) = std::mem::take(&mut eks).split_at_mut(n_e);
                chunks.push((p0, base, u_head, e_head, ek_head));
                (us, es, eks) = (u_tail, e_tail, ek_tail);
            }
        }
        let laid: Vec<Laid> = chunks
            .into_par_iter()
            .map(|(p0, base, us, es, eks)| {
                let mut w = Laid { sound: true, ..Laid::default() };
                let n = us.len();
                let at = &order[p0..p0 + n];
                // Each position's first edge.
                let mut firsts = Vec::with_capacity(n);
                let mut f = base;
                counts.each_count(order, p0, p0 + n, |k| {
                    firsts.push(f as u32);
                    f += k;
                });
                // The positions grouped by rank and kind (calls, then ops, of each rank; the other
                // units last), each group in position order.
                let places: Vec<Place> = at.iter().map(|&u| units.place(u as usize)).collect();
                let group = |place: &Place| match *place {
                    Place::Call(r, _) => r as usize,
                    Place::Op(r, _) => n_ranks + r as usize,
                    Place::Other => 2 * n_ranks,
                };
                let keys: Vec<u32> = places.iter().map(|place| group(place) as u32).collect();
                let (_, grouped) = super::rows_by_key(&keys, 2 * n_ranks + 1);
                let mut buf = Vec::new();
                for &i in &grouped {
                    let (i, p) = (i as usize, p0 + i as usize);
                    let u = at[i] as usize;
                    let (first, next) = (firsts[i] as usize, firsts.get(i + 1).map_or(base + es.len(), |&f| f as usize));
                    let (t, dur) = units.unit_at(u, places[i], &mut buf);
                    assert_eq!(edge_count(u, buf.len()), next - first, "unit {u}: its edges as counted");
                    w.sound &= p == 0 || next > first; // what the replay loop reads unchecked: an edge at every position but the first
                    let mut put = |j: usize, src: u32, lag: i64, kind: EdgeKind| {
                        let l = narrow(lag);
                        if l == WIDE {
                            w.lag.push(((first + j) as u32, lag));
                        }
                        es[first + j - base].write(Edge { src, lag: l });
                        eks[first + j - base].write(kind);
                    };
                    let mut reach = t;
                    if u == 0 {
                        // The origin: no edge (a replay starts at position 1).
                    } else if buf.is_empty() {
                        put(0, 0, t, EdgeKind::Anchor);
                    } else {
                        reach = i64::MIN;
                        for (j, e) in buf.iter().enumerate() {
                            let lag = e.lag.min(t - e.src_time);
                            reach = reach.max(e.src_time + lag);
                            put(j, e.src, lag, e.kind);
                        }
                    }
                    let slack = t - reach;
                    debug_assert!(slack >= 0);
                    w.slack_ns += slack;
                    let unit = Unit { first: first as u32, dur: narrow(dur) };
                    if unit.dur == WIDE {
                        w.dur.push((p as u32, dur));
                    }
                    if slack != 0 {
                        w.slack.push((p as u32, slack));
                    }
                    us[i].write(unit);
                }
                w
            })
            .collect();
        // SAFETY: each chunk wrote every one of its units (`grouped` is a permutation of them) and
        // every one of its edges (each unit its counted edges, asserted; the counts sum to the chunk's).
        unsafe {
            units_out.set_len(n_units);
            edges_out.set_len(n_edges);
            kinds_out.set_len(n_edges);
        }
        // What makes the replay loop's unchecked reads sound, checked where each unit is laid out:
        // every position but the first has an edge or more (and every edge reads an earlier slot:
        // checked where the sources are placed).
        assert!(laid.iter().all(|w| w.sound), "a unit of the graph without an edge");
        units_out.push(Unit { first: n_edges as u32, dur: 0 });
        let (mut wide_lag, mut wide_dur, mut slacks, mut slack_ns) = (Vec::new(), Vec::new(), Vec::new(), 0);
        for mut w in laid {
            // A chunk's values come by rank and kind: in position (or edge) order again.
            w.lag.sort_unstable();
            w.dur.sort_unstable();
            w.slack.sort_unstable();
            wide_lag.extend(w.lag);
            wide_dur.extend(w.dur);
            slacks.extend(w.slack);
            slack_ns += w.slack_ns;
        }
        Layout {
            units: units_out,
            edges: edges_out,
            edge_kind: kinds_out,
            wide_lag,
            wide_dur,
            slacks: Slacks::new(&slacks, n_units),
            slack_ns,
        }
    }
}

/// The edges' sources, laid out as unit slots, put at their units' positions (`pos`), in chunks
/// of positions on every core; whether every edge then reads an earlier slot than its own unit's
/// (what makes the replay loop's unchecked reads sound). `units` ends with the end marker.
fn place_sources(units: &[Unit], edges: &mut [Edge], pos: &[u32]) -> bool {
    let n_units = units.len() - 1;
    let mut chunks = Vec::with_capacity(n_units.div_ceil(CHUNK));
    let mut rest = edges;
    for p0 in (0..n_units).step_by(CHUNK) {
        let p1 = n_units.min(p0 + CHUNK);
        let (head, tail) = std::mem::take(&mut rest).split_at_mut((units[p1].first - units[p0].first) as usize);
        chunks.push((p0, p1, head));
        rest = tail;
    }
    chunks.into_par_iter().all(|(p0, p1, es)| {
        let base = units[p0].first as usize;
        let mut sound = true;
        for p in p0..p1 {
            for e in &mut es[units[p].first as usize - base..units[p + 1].first as usize - base] {
                e.src = 2 * pos[(e.src / 2) as usize] + (e.src & 1);
                sound &= (e.src as usize) < 2 * p;
            }
        }
        sound
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::whatif::input::{Calls, Column, EventRecords, JobData, Members, Ops, SyncRecords};
    use crate::whatif::synth::{self, Spec};

    /// Everything a graph holds, as plain values.
    fn held(g: &Graph) -> String {
        let units: Vec<(u32, i32)> = g.units.iter().map(|u| (u.first, u.dur)).collect();
        let edges: Vec<(u32, i32, EdgeKind)> = g.edges.iter().zip(&g.edge_kind).map(|(e, &k)| (e.src, e.lag, k)).collect();
        format!(
            "{units:?} {edges:?} {:?} {:?} {:?} {:?} {:?} {:?} {:?} {:?} {:?} {:?} {:?} {:?} {:?} {:?} {:?} {:?} {:?} {:?} {:?} {:?} {:?} {:?} {:?} {:?}",
            g.wide_lag, g.wide_dur, g.slacks, g.unit_order(), g.starts, g.op_start, g.call_start, g.transfer, g.blocking_call,
            g.blocking_end, g.member_op, g.member_end, g.member_x_edge, g.inst_off, g.inst_member, g.op_members, g.segments,
            g.step_off, g.step_slot, g.rank_off, g.rank_slot, g.n_ranks, g.n_steps, g.fidelity
        )
    }

    /// The job with its rows rank by rank (each table's rows of a rank in their order), as the
    /// what-if passes a job: member op rows renumbered.
    fn rank_major(j: &JobData, n_ranks: i64) -> JobData {
        let mut out = JobData::default();
        let mut op_row = vec![0usize; j.op_rank.len()];
        let opt = |v: &Vec<i64>, i: usize, d: i64| if v.is_empty() { d } else { v[i] };
        for r in 0..n_ranks {
            for i in (0..j.call_rank.len()).filter(|&i| j.call_rank[i] == r) {
                out.call(r, j.call_thread[i], j.call_start[i], j.call_end[i], j.call_correlation[i], opt(&j.call_blocking, i, 0) == 1, opt(&j.call_segment, i, -1));
            }
            for i in (0..j.op_rank.len()).filter(|&i| j.op_rank[i] == r) {
                op_row[i] = out.op(r, j.op_stream[i], j.op_start[i], j.op_end[i], j.op_launch[i], opt(&j.op_step, i, -1));
            }
            for i in (0..j.sync_rank.len()).filter(|&i| j.sync_rank[i] == r) {
                out.sync_rank.push(r);
                out.sync_kind.push(j.sync_kind[i]);
                out.sync_stream.push(j.sync_stream[i]);
                out.sync_event.push(j.sync_event[i]);
                out.sync_correlation.push(j.sync_correlation[i]);
                out.sync_record_correlation.push(opt(&j.sync_record_correlation, i, -1));
                out.sync_inferred.push(opt(&j.sync_inferred, i, 0));
            }
            for i in (0..j.event_rank.len()).filter(|&i| j.event_rank[i] == r) {
                out.event(r, j.event_stream[i], j.event_event[i], j.event_correlation[i]);
            }
        }
        for (&inst, &op) in j.member_instance.iter().zip(&j.member_op) {
            out.member(inst, op_row[op as usize]);
        }
        out
    }

    /// One rank's rows of a rank-major job's columns, narrowed the way traces store them.
    struct Narrow {
        thread: Vec<i32>,
        correlation: Vec<i32>,
        blocking: Vec<bool>,
        segment: Vec<i32>,
        stream: Vec<i16>,
        op_launch: Vec<i32>,
        step: Vec<i32>,
        /// Times in an unsigned width: the build reads them gathered.
        op_start: Vec<u64>,
    }

    /// Each unit holds exactly its own edges (the origin none, every other unit one or more), and
    /// the replay's unchecked loop gives what a plain max over each unit's edges gives.
    #[test]
    fn each_unit_holds_its_own_edges_and_the_replay_reads_them_all() {
        use crate::whatif::{Change, ReplayOptions};
        let mut rng = fastrand::Rng::with_seed(22);
        let mut units_of = [0usize; 4]; // units of 1, 2, 3 and more edges over all cases
        let (mut with_dropped, mut widest) = (0, 0);
        for case in 0..41 {
            let spec = Spec {
                ranks: 1 + rng.usize(0..4),
                steps: 1 + rng.usize(0..3),
                // The last case spans several chunks of the layout.
                ops_per_step: if case == 40 { 20_000 } else { 5 + rng.usize(0..40) },
                collective_every: 1 + rng.usize(0..12),
                side_every: rng.usize(0..9),
                graph_every: rng.usize(0..9),
                sync_every: rng.usize(0..20),
                threads: 1 + rng.usize(0..2),
                jitter: rng.bool(),
                record: rng.bool(),
                seed: rng.u64(..),
                ..Spec::default()
            };
            let mut job = synth::generate(&spec).job;
            if case % 3 == 0 {
                // Two of rank 0's collectives met in the other order (contradictory records): the
                // build breaks the cycles by dropping edges, and recounts those units' edges.
                let on_rank0: Vec<usize> = (0..job.member_op.len()).filter(|&m| job.op_rank[job.member_op[m] as usize] == 0).collect();
                if let [a, .., b] = on_rank0[..] {
                    job.member_instance.swap(a, b);
                }
            }
            let g = Graph::build(&job.view(), &Options::default()).unwrap();
            with_dropped += (g.fidelity.dropped_dependencies > 0) as usize;
            widest = widest.max(g.n_units());
            assert!(g.edge_range(0).is_empty(), "case {case}: the origin has no edge");
            for p in 1..g.n_units() {
                let n = g.edge_range(p).len();
                assert!(n >= 1, "case {case}: unit {p} has no edge");
                units_of[n.min(4) - 1] += 1;
            }
            assert_eq!(g.fidelity.edges, g.edges.len());
            for zero_all_slack in [false, true] {
                let mut ws = g.workspace();
                g.replay(&Change { zero_all_slack, ..Change::default() }, &mut ws, &ReplayOptions::default()).unwrap();
                let mut want = vec![0i64; g.n_nodes()];
                for p in 1..g.n_units() {
                    let reach = g.edge_range(p).map(|e| want[g.edges[e].src as usize] + g.lag(e)).max().unwrap();
                    want[2 * p] = reach + if zero_all_slack { 0 } else { g.slack(p) };
                    want[2 * p + 1] = want[2 * p] + g.dur(p);
                }
                assert_eq!(ws.times(), want, "case {case}, every slack zeroed: {zero_all_slack}");
            }
        }
        assert!(units_of.iter().all(|&n| n > 0), "units of 1, 2, 3 and more edges: {units_of:?}");
        assert!(with_dropped > 0 && widest > 2 * CHUNK, "cycles broken in {with_dropped} cases; {widest} units at most");
    }

    #[test]
    fn the_graph_is_the_same_whatever_shape_its_input_comes_in() {
        let spec = Spec { ranks: 4, steps: 3, threads: 2, jitter: true, record: true, ..Spec::default() };
        let n = spec.ranks as i64;
        let opts = Options::default();
        for record in [true, false] {
            let s = synth::generate(&Spec { record, ..spec.clone() });
            let j = rank_major(&s.job, n);
            let one_part = held(&Graph::build(&j.view(), &opts).unwrap());
            // Rows in any order: the simulator's own, ranks interleaved (rows renumbered, so only
            // the sizes and fidelity compare).
            let interleaved = Graph::build(&s.job.view(), &opts).unwrap();
            assert_eq!(interleaved.fidelity, Graph::build(&j.view(), &opts).unwrap().fidelity);

            // A part per rank, its rank one value, ids and flags in narrow widths; rank 1's op
            // starts unsigned.
            let v = j.view();
            let (calls, ops) = (&v.calls[0], &v.ops[0]);
            let rows = |ranks: &[i64], r: i64| {
                let a = ranks.partition_point(|&x| x < r);
                a..ranks.partition_point(|&x| x <= r)
            };
            let narrow: Vec<Narrow> = (0..n)
                .map(|r| {
                    let (c, o) = (rows(&j.call_rank, r), rows(&j.op_rank, r));
                    Narrow {
                        thread: j.call_thread[c.clone()].iter().map(|&x| x as i32).collect(),
                        correlation: j.call_correlation[c.clone()].iter().map(|&x| x as i32).collect(),
                        blocking: j.call_blocking[c.clone()].iter().map(|&x| x == 1).collect(),
                        segment: j.call_segment[c].iter().map(|&x| x as i32).collect(),
                        stream: j.op_stream[o.clone()].iter().map(|&x| x as i16).collect(),
                        op_launch: j.op_launch[o.clone()].iter().map(|&x| x as i32).collect(),
                        step: j.op_step[o.clone()].iter().map(|&x| x as i32).collect(),
                        op_start: j.op_start[o].iter().map(|&x| x as u64).collect(),
                    }
                })
                .collect();
            let mut parts = Job { members: v.members.clone(), ..Job::default() };
            for (r, x) in (0..n).zip(&narrow) {
                let (c, o) = (rows(&j.call_rank, r), rows(&j.op_rank, r));
                parts.calls.push(Calls {
                    rank: Column::All(r),
                    thread: Column::I32(&x.thread),
                    start: calls.start.slice(c.clone()),
                    end: calls.end.slice(c),
                    correlation: Column::I32(&x.correlation),
                    blocking: Column::Bool(&x.blocking),
                    segment: Column::I32(&x.segment),
                    own_segment: Column::All(-1),
                });
                parts.ops.push(Ops {
                    rank: Column::All(r),
                    stream: Column::I16(&x.stream),
                    start: if r == 1 { Column::U64(&x.op_start) } else { ops.start.slice(o.clone()) },
                    end: ops.end.slice(o),
                    launch: Column::I32(&x.op_launch),
                    step: Column::I32(&x.step),
                });
                let (sy, ev) = (rows(&j.sync_rank, r), rows(&j.event_rank, r));
                let s = &v.syncs[0];
                parts.syncs.push(SyncRecords {
                    rank: Column::All(r),
                    kind: s.kind.slice(sy.clone()),
                    stream: s.stream.slice(sy.clone()),
                    event: s.event.slice(sy.clone()),
                    correlation: s.correlation.slice(sy.clone()),
                    record_correlation: s.record_correlation.slice(sy.clone()),
                    inferred: s.inferred.slice(sy),
                });
                let e = &v.events[0];
                parts.events.push(EventRecords {
                    rank: Column::All(r),
                    stream: e.stream.slice(ev.clone()),
                    event: e.event.slice(ev.clone()),
                    correlation: e.correlation.slice(ev),
                });
            }
            assert_eq!(held(&Graph::build(&parts, &opts).unwrap()), one_part, "record {record}: a part per rank");

            // Each rank's calls split in two parts, and the members in two: gathered.
            let mut split = parts.clone();
            fn cut<'a>(c: &Calls<'a>, rows: std::ops::Range<usize>) -> Calls<'a> {
                Calls {
                    rank: c.rank,
                    thread: c.thread.slice(rows.clone()),
                    start: c.start.slice(rows.clone()),
                    end: c.end.slice(rows.clone()),
                    correlation: c.correlation.slice(rows.clone()),
                    blocking: c.blocking.slice(rows.clone()),
                    segment: c.segment.slice(rows.clone()),
                    own_segment: c.own_segment.slice(rows),
                }
            }
            split.calls = parts.calls.iter().flat_map(|c| {
                let n = c.start.len().unwrap();
                [cut(c, 0..n / 2), cut(c, n / 2..n)]
            }).collect();
            let m = &v.members[0];
            let half = m.op.len().unwrap() / 2;
            let all = m.op.len().unwrap();
            split.members = vec![
                Members { instance: m.instance.slice(0..half), op: m.op.slice(0..half) },
                Members { instance: m.instance.slice(half..all), op: m.op.slice(half..all) },
            ];
            assert_eq!(held(&Graph::build(&split, &opts).unwrap()), one_part, "record {record}: ranks over several parts");

            // The what-if's own form: a rank's calls on its own clock, shifted onto the job's, then
            // its last calls (its anchors) in a part of their own, rows running on; rank 2's tail
            // times unsigned (gathered), rank 3's op times shifted.
            let shift = |r: i64| 1000 * r - 1500;
            struct Local {
                start: Vec<i64>,
                end: Vec<i64>,
                op_start: Vec<i64>,
                op_end: Vec<i64>,
                unsigned_tail: Vec<u64>,
            }
            let local: Vec<Local> = (0..n)
                .map(|r| {
                    let (c, o) = (rows(&j.call_rank, r), rows(&j.op_rank, r));
                    let back = |v: &[i64]| v.iter().map(|&t| t - shift(r)).collect::<Vec<i64>>();
                    let tail = c.end - c.start.max(c.end.saturating_sub(2));
                    let unsigned = j.call_start[c.end - tail..c.end].iter().map(|&t| t as u64).collect();
                    Local { start: back(&j.call_start[c.clone()]), end: back(&j.call_end[c]), op_start: back(&j.op_start[o.clone()]), op_end: back(&j.op_end[o]), unsigned_tail: unsigned }
                })
                .collect();
            let mut shifted = Job { members: v.members.clone(), ops: parts.ops.clone(), syncs: parts.syncs.clone(), events: parts.events.clone(), ..Job::default() };
            for (r, (c, x)) in (0..n).zip(parts.calls.iter().zip(&local)) {
                let (all, tail) = (c.start.len().unwrap(), x.unsigned_tail.len());
                let head = cut(c, 0..all - tail);
                shifted.calls.push(Calls { start: Column::Shifted(&x.start[..all - tail], shift(r)), end: Column::Shifted(&x.end[..all - tail], shift(r)), ..head });
                let mut anchors = cut(c, all - tail..all);
                if r == 2 {
                    anchors.start = Column::U64(&x.unsigned_tail);
                }
                shifted.calls.push(anchors);
            }
            shifted.ops[3].start = Column::Shifted(&local[3].op_start, shift(3));
            shifted.ops[3].end = Column::Shifted(&local[3].op_end, shift(3));
            assert_eq!(held(&Graph::build(&shifted, &opts).unwrap()), one_part, "record {record}: times shifted, anchors a part of their own");
        }
    }

    /// Times out of range are refused, shifted ones whose sum overflows too (not wrapped into range).
    #[test]
    fn times_out_of_range_are_refused_shifted_or_not() {
        let s = synth::generate(&Spec { ranks: 2, steps: 2, ..Spec::default() });
        let (v, opts) = (s.job.view(), Options::default());
        let error = |job: &Job| Graph::build(job, &opts).err().map(|e| e.to_string()).unwrap_or_default();
        let mut overflowing = v.clone();
        overflowing.calls[0].start = Column::Shifted(&s.job.call_start, i64::MAX - 10);
        overflowing.calls[0].end = Column::Shifted(&s.job.call_end, i64::MAX - 10);
        assert!(error(&overflowing).contains("its clock shift overflows"), "{}", error(&overflowing));
        let mut start = s.job.call_start.clone();
        start[0] = i64::MIN;
        let mut lowest = v.clone();
        lowest.calls[0].start = Column::I64(&start);
        assert!(error(&lowest).contains("time out of range"), "{}", error(&lowest));
    }

    /// Segments named by their calls' own rows given as `own_segment` (no column of rows) make the
    /// graph that the rows in `segment` make: alone (a bit per call), and beside other segments.
    #[test]
    fn own_segments_are_segments_named_by_their_rows() {
        let spec = Spec { ranks: 3, steps: 2, threads: 2, jitter: true, record: true, ..Spec::default() };
        let mut j = rank_major(&synth::generate(&spec).job, spec.ranks as i64);
        let opts = Options::default();
        for mixed in [false, true] {
            // Every third call's gap has no segment; with `mixed`, every third another one's.
            let (mut own, mut other) = (Vec::new(), Vec::new());
            for i in 0..j.call_rank.len() {
                let (is_own, id) = match i % 3 {
                    0 => (false, -1),
                    1 => (true, i as i64),
                    _ if mixed => (false, 1_000_000 + (i % 5) as i64),
                    _ => (true, i as i64),
                };
                j.call_segment[i] = id;
                own.push(if is_own { 7 } else { -1i32 });
                other.push(if is_own { -1 } else { id });
            }
            let rows = held(&Graph::build(&j.view(), &opts).unwrap());
            assert!(rows.contains("CallRows") != mixed, "mixed {mixed}: the segments as the build holds them");
            let mut v = j.view();
            v.calls[0].segment = Column::I64(&other);
            v.calls[0].own_segment = Column::I32(&own);
            assert_eq!(held(&Graph::build(&v, &opts).unwrap()), rows, "mixed {mixed}");
        }
    }
}
