//! Replaying the graph under a change: one forward max-plus pass over the units in topological
//! order, then the outcome (arrivals, waits, step and rank ends) gathered from the times.
//!
//! A change never copies the graph: it becomes a short list of *patches* (a unit's duration or
//! slack, an edge's lag) sorted by unit position; the pass runs the plain loop between patched
//! units and a slower one at each. The time buffer lives in a [`Workspace`], reused across replays
//! (one per thread in [`Graph::replay_many`], kept by the caller between batches).

use super::graph::{Edge, EdgeKind, Graph, NONE, WIDE};
use super::{input_error, WhatIfError};
use rayon::prelude::*;
use std::sync::Mutex;

/// A cause to replay: changes of durations, host gaps, transfer times and slacks. All rows are
/// those of the job's tables; every value is in ns and must be >= 0. Empty: replay the trace.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Change {
    /// (op row, new duration). 0 removes the op's time (it still waits for its inputs). A
    /// collective member's op is refused: its end is its transfer's (change `transfers`).
    pub op_durations: Vec<(usize, i64)>,
    /// (call row, new duration). For a blocking call: its minimum duration (the time it takes when
    /// the GPU work it waits for is already done).
    pub call_durations: Vec<(usize, i64)>,
    /// (segment id, new total). The host gaps of the segment (see [`super::Calls::segment`]) are
    /// cut to sum to the new total latest first (each down to 0 before an earlier one is touched);
    /// a larger total goes on the last gap. Gaps below 0 (overlapping calls) are left alone.
    pub gaps: Vec<(i64, i64)>,
    /// (member row, new transfer time `x`): the member's op ends `x` after the transfer starts. A
    /// member whose transfer edge the build dropped (a cycle broken: the fidelity's dropped
    /// dependencies) keeps its end: its entry changes nothing.
    pub transfers: Vec<(usize, i64)>,
    /// Nodes whose slack becomes 0 (a node id stands for its unit: see [`Graph::describe`]).
    pub zero_slack: Vec<u32>,
    /// Every slack becomes 0: the replay of what the graph explains.
    pub zero_all_slack: bool,
}

/// What a replay returns besides the outcome.
#[derive(Clone, Copy, Debug, Default)]
pub struct ReplayOptions {
    /// For each instance, follow the binding chain back from its last arrival up to this many
    /// nodes ([`Outcome::chain_offsets`]); 0: none.
    pub chain_steps: usize,
}

/// The result of one replay. Times are ns on the aligned clock; `i64::MIN` marks a step or rank
/// with no events.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Outcome {
    /// Per member row: its arrival (its op's start).
    pub arrival: Vec<i64>,
    /// Per instance: the transfer start `T` (the last arrival).
    pub transfer_start: Vec<i64>,
    /// Per instance: the wait `W = sum over members (T - arrival)` (GPU time).
    pub wait: Vec<i64>,
    /// Sum of `wait`.
    pub total_wait: i64,
    /// Per step: the latest end of its ops over all ranks.
    pub step_end: Vec<i64>,
    /// Per (step, rank), row-major (`step * n_ranks + rank`): the latest end of the step's ops on
    /// that rank.
    pub step_rank_end: Vec<i64>,
    /// Per rank: its latest op or call end.
    pub rank_end: Vec<i64>,
    /// With `chain_steps > 0`: per instance `c`, `chain_nodes[chain_offsets[c]..chain_offsets[c+1]]`
    /// is the binding chain of its last arrival (the member op start that set `T`), that node first.
    pub chain_offsets: Vec<u32>,
    pub chain_nodes: Vec<u32>,
}

/// Reusable buffers of a replay: the time of every node (indexed by node id) after the last replay.
pub struct Workspace {
    pub(crate) time: Vec<i64>,
    patches: Vec<Patch>,
}

impl Workspace {
    /// Every node's time after the last replay, by node id.
    pub fn times(&self) -> &[i64] {
        &self.time
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum What {
    Dur(i64),
    Slack(i64),
    /// (edge index, lag)
    Lag(u32, i64),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Patch {
    pub(crate) pos: u32,
    /// Its entry's place in the change: of two patches of a unit's same edge, slack or duration,
    /// the later entry's wins (in the 4 bytes the alignment of `what` leaves free).
    seq: u32,
    pub(crate) what: What,
}

/// Effective parameters of the units a change touches: the patches, sorted by unit position.
pub(crate) struct Patched<'a> {
    pub(crate) patches: &'a [Patch],
    pub(crate) zero_all: bool,
}

impl Patched<'_> {
    fn at(&self, p: usize) -> &[Patch] {
        let a = self.patches.partition_point(|x| (x.pos as usize) < p);
        let b = a + self.patches[a..].partition_point(|x| x.pos as usize == p);
        &self.patches[a..b]
    }

    /// The lag of edge e into unit p (the last patch for it wins).
    pub(crate) fn lag(&self, g: &Graph, p: usize, e: usize) -> i64 {
        let mut lag = g.lag(e);
        for x in self.at(p) {
            if let What::Lag(k, l) = x.what {
                if k as usize == e {
                    lag = l;
                }
            }
        }
        lag
    }

    pub(crate) fn slack(&self, g: &Graph, p: usize) -> i64 {
        if self.zero_all {
            return 0;
        }
        let mut slack = g.slack(p);
        for x in self.at(p) {
            if let What::Slack(s) = x.what {
                slack = s;
            }
        }
        slack
    }

    pub(crate) fn dur(&self, g: &Graph, p: usize) -> i64 {
        let mut dur = g.dur(p);
        for x in self.at(p) {
            if let What::Dur(d) = x.what {
                dur = d;
            }
        }
        dur
    }
}

fn checked(what: &str, row: usize, value: i64) -> Result<i64, WhatIfError> {
    if !(0..=1 << 50).contains(&value) {
        return Err(input_error(format!("{what} {row}: new value {value} ns out of range (0 to 2^50)")));
    }
    Ok(value)
}

impl Graph {
    /// A workspace sized for this graph.
    pub fn workspace(&self) -> Workspace {
        Workspace { time: vec![0; self.n_nodes()], patches: Vec::new() }
    }

    /// The patches of a change, sorted by unit position; fails on unknown rows or ids.
    pub(crate) fn patches_of(&self, change: &Change, out: &mut Vec<Patch>) -> Result<(), WhatIfError> {
        out.clear();
        // One patch per entry (a segment's may be a few): grown once, not by doubling copies of a
        // change of every op of a rank (a quarter million entries at 1.9M kernels).
        out.reserve(
            change.op_durations.len() + change.call_durations.len() + change.gaps.len() + change.transfers.len() + change.zero_slack.len(),
        );
        self.each_patch(change, |pos, what| out.push(Patch { pos, seq: out.len() as u32, what }))?;
        // In place (a stable sort's buffer is the size of the patches): `seq` keeps a later entry
        // for the same unit and edge after an earlier one.
        out.sort_unstable_by_key(|x| (x.pos, x.seq));
        Ok(())
    }

    /// The unit position and what changes there of each patch of a change, in the order of its
    /// entries, to `f`; fails on unknown rows or ids.
    fn each_patch(&self, change: &Change, mut f: impl FnMut(u32, What)) -> Result<(), WhatIfError> {
        let pos = |slot: u32| slot / 2;
        for &(op, d) in &change.op_durations {
            if op >= self.n_ops() {
                return Err(input_error(format!("change: op row {op} out of range (the job has {} ops)", self.n_ops())));
            }
            if let Some(member) = self.member_of_op(op) {
                return Err(input_error(format!(
                    "change: op row {op} is a collective's member (member row {member}): change its transfer, not its duration"
                )));
            }
            f(pos(self.op_start[op]), What::Dur(checked("op row", op, d)?));
        }
        for &(call, d) in &change.call_durations {
            if call >= self.n_calls() {
                return Err(input_error(format!("change: call row {call} out of range (the job has {} calls)", self.n_calls())));
            }
            let d = checked("call row", call, d)?;
            let (start, end) = (self.call_start[call], self.call_end(call));
            if end == start + 1 {
                f(pos(start), What::Dur(d));
            } else {
                let p = pos(end) as usize;
                let e = self.edge_range(p).find(|&e| self.edge_kind[e] == EdgeKind::Duration);
                f(p as u32, What::Lag(e.expect("a blocking call's end has a duration edge") as u32, d));
            }
        }
        for &(segment, total) in &change.gaps {
            let total = checked("segment", segment as usize, total)?;
            let gaps: Vec<u32> = self.segments.calls(segment).into_iter().filter_map(|call| self.gap_edge(call as usize)).collect();
            if gaps.is_empty() {
                return Err(input_error(format!("change: segment {segment} names no host gap")));
            }
            let edges: Vec<u32> = gaps.into_iter().filter(|&e| self.lag(e as usize) >= 0).collect();
            let gaps: Vec<i64> = edges.iter().map(|&e| self.lag(e as usize)).collect();
            for (&e, lag) in edges.iter().zip(cut_latest_first(&gaps, total)) {
                f(self.edge_unit(e), What::Lag(e, lag));
            }
        }
        for &(member, x) in &change.transfers {
            if member >= self.n_members() {
                return Err(input_error(format!("change: member row {member} out of range (the job has {} members)", self.n_members())));
            }
            let x = checked("member row", member, x)?;
            let e = self.member_x_edge[member];
            if e == NONE {
                continue; // its transfer edge was dropped to break a cycle: its end does not wait on the transfer
            }
            f(self.edge_unit(e), What::Lag(e, x));
        }
        for &node in &change.zero_slack {
            if node as usize >= self.n_nodes() || node < 2 {
                return Err(input_error(format!("change: node {node} out of range (nodes 2..{})", self.n_nodes())));
            }
            f(pos(node), What::Slack(0));
        }
        Ok(())
    }

    /// The unit position an edge leads into.
    fn edge_unit(&self, e: u32) -> u32 {
        (self.units.partition_point(|u| u.first <= e) - 1) as u32
    }

    /// Replays one change into `ws` and returns its outcome. Fails with [`WhatIfError::Input`] on
    /// an unknown row, segment or node, or a value out of range.
    pub fn replay(&self, change: &Change, ws: &mut Workspace, options: &ReplayOptions) -> Result<Outcome, WhatIfError> {
        let mut patches = std::mem::take(&mut ws.patches);
        let result = self.patches_of(change, &mut patches).map(|()| {
            let view = Patched { patches: &patches, zero_all: change.zero_all_slack };
            if change.zero_all_slack {
                self.pass::<true>(&mut ws.time, &view);
            } else {
                self.pass::<false>(&mut ws.time, &view);
            }
            self.outcome(&ws.time, &view, options)
        });
        ws.patches = patches;
        result
    }

    /// Replays many changes in parallel (rayon; `threads`: a pool of that size, else the global
    /// one), the graph shared read-only; outcomes in the order of `changes`. Every change is
    /// checked first: one bad change fails the batch. Each thread takes a workspace from `spare`
    /// (a new one where none is left) and gives it back: kept there, the caller's next replays
    /// reuse them, where new ones (the size of the graph) cost their memory's first touch again.
    pub fn replay_many(
        &self,
        changes: &[Change],
        options: &ReplayOptions,
        threads: Option<usize>,
        spare: &Mutex<Vec<Workspace>>,
    ) -> Result<Vec<Outcome>, WhatIfError> {
        // Checked without keeping the patches: a buffer of the largest change's, held beside the
        // replays' own, would add to the peak.
        for change in changes {
            self.each_patch(change, |_, _| ())?;
        }
        let run = || -> Result<Vec<Outcome>, WhatIfError> {
            changes
                .par_iter()
                .map(|change| {
                    let ws = spare.lock().unwrap().pop();
                    let mut ws = ws.unwrap_or_else(|| self.workspace());
                    let outcome = self.replay(change, &mut ws, options);
                    spare.lock().unwrap().push(ws);
                    outcome
                })
                .collect()
        };
        match threads {
            None => run(),
            Some(n) => rayon::ThreadPoolBuilder::new()
                .num_threads(n)
                .build()
                .map_err(|e| WhatIfError::Threads(e.to_string()))?
                .install(run),
        }
    }

    /// The forward pass: plain between patched units, through [`Patched`] at each.
    fn pass<const ZERO_ALL: bool>(&self, time: &mut [i64], view: &Patched) {
        assert_eq!(time.len(), self.n_nodes());
        time[..2].fill(0); // the origin: time 0, no duration
        let mut p = 1;
        let patches = view.patches;
        let mut k = 0;
        while k < patches.len() {
            let q = patches[k].pos as usize;
            self.plain::<ZERO_ALL>(time, p, q);
            // This unit's patches alone: each lookup below reads a few, where a search over all of
            // them (one per edge, slack and duration) made a change of every op of a rank slow.
            let n = patches[k..].partition_point(|x| x.pos as usize == q);
            let here = Patched { patches: &patches[k..k + n], zero_all: view.zero_all };
            let mut t = i64::MIN;
            for e in self.edge_range(q) {
                t = t.max(time[self.edges[e].src as usize] + here.lag(self, q, e));
            }
            t += here.slack(self, q);
            time[2 * q] = t;
            time[2 * q + 1] = t + here.dur(self, q);
            k += n;
            p = q + 1;
        }
        self.plain::<ZERO_ALL>(time, p, self.n_units());
    }

    /// Units `from..to` with the graph's own lags, slacks and durations: the hot loop. A unit's
    /// first and last edges (the same one for a unit of one edge, as most have one or two) are read
    /// without a branch; a loop takes those between. The few non-zero slacks are met in position
    /// order: a cursor walks them.
    #[inline]
    fn plain<const ZERO_ALL: bool>(&self, time: &mut [i64], from: usize, to: usize) {
        let (units, edges) = (&self.units[..], &self.edges[..]);
        assert!(from >= 1 && to < units.len() && time.len() >= 2 * to && units[units.len() - 1].first as usize == edges.len());
        let (slack_pos, slack) = (&self.slacks.pos[..], &self.slacks.value[..]);
        let mut k = if ZERO_ALL { slack_pos.len() } else { self.slacks.first_from(from) };
        let mut next_slack = slack_pos.get(k).map_or(usize::MAX, |&q| q as usize);
        for p in from..to {
            // SAFETY: `first` is non-decreasing and the sentinel unit's is `edges.len()` (asserted
            // above), p + 1 < units.len(), every position p >= 1 has an edge or more (so a < b, and
            // a <= b - 1 < edges.len()) and every edge's source slot is below 2p (both asserted
            // when the graph was built), so below time.len() >= 2 * to.
            unsafe {
                let u = *units.get_unchecked(p);
                let (a, b) = (u.first as usize, units.get_unchecked(p + 1).first as usize);
                let (e0, e1) = (*edges.get_unchecked(a), *edges.get_unchecked(b - 1));
                let v0 = *time.get_unchecked(e0.src as usize) + self.edge_lag(e0, a);
                let v1 = *time.get_unchecked(e1.src as usize) + self.edge_lag(e1, b - 1);
                let mut t = if v1 > v0 { v1 } else { v0 };
                for e in a + 1..b - 1 {
                    let edge = *edges.get_unchecked(e);
                    let v = *time.get_unchecked(edge.src as usize) + self.edge_lag(edge, e);
                    t = if v > t { v } else { t };
                }
                if p == next_slack {
                    t += slack[k];
                    k += 1;
                    next_slack = slack_pos.get(k).map_or(usize::MAX, |&q| q as usize);
                }
                *time.get_unchecked_mut(2 * p) = t;
                *time.get_unchecked_mut(2 * p + 1) = t + if u.dur != WIDE { u.dur as i64 } else { self.dur(p) };
            }
        }
    }

    #[inline(always)]
    fn edge_lag(&self, edge: Edge, e: usize) -> i64 {
        if edge.lag != WIDE {
            edge.lag as i64
        } else {
            self.lag(e)
        }
    }

    fn outcome(&self, time: &[i64], view: &Patched, options: &ReplayOptions) -> Outcome {
        let n_inst = self.n_instances();
        let arrival: Vec<i64> = self.member_op.iter().map(|&op| time[self.op_start[op as usize] as usize]).collect();
        let transfer_start: Vec<i64> = self.transfer.iter().map(|&s| time[s as usize]).collect();
        let wait: Vec<i64> = (0..n_inst)
            .map(|c| {
                let t = transfer_start[c];
                self.inst_members(c).iter().map(|&m| t - arrival[m as usize]).sum()
            })
            .collect();
        let latest = |slots: &[u32]| slots.iter().map(|&s| time[s as usize]).max().unwrap_or(i64::MIN);
        let step_rank_end: Vec<i64> = (0..self.n_steps * self.n_ranks)
            .map(|k| latest(&self.step_slot[self.step_off[k] as usize..self.step_off[k + 1] as usize]))
            .collect();
        let step_end = (0..self.n_steps)
            .map(|s| step_rank_end[s * self.n_ranks..(s + 1) * self.n_ranks].iter().copied().max().unwrap_or(i64::MIN))
            .collect();
        let rank_end =
            (0..self.n_ranks).map(|r| latest(&self.rank_slot[self.rank_off[r] as usize..self.rank_off[r + 1] as usize])).collect();
        let (mut chain_offsets, mut chain_nodes) = (Vec::new(), Vec::new());
        if options.chain_steps > 0 {
            chain_offsets.push(0);
            for (c, &t) in transfer_start.iter().enumerate() {
                let members = self.inst_members(c);
                let last = members.iter().copied().find(|&m| arrival[m as usize] == t).unwrap_or(members[0]);
                let start = self.op_start[self.member_op[last as usize] as usize];
                chain_nodes.extend(self.chain_with(time, view, start, options.chain_steps).iter().map(|l| l.node));
                chain_offsets.push(chain_nodes.len() as u32);
            }
        }
        Outcome {
            total_wait: wait.iter().sum(),
            arrival,
            transfer_start,
            wait,
            step_end,
            step_rank_end,
            rank_end,
            chain_offsets,
            chain_nodes,
        }
    }

    /// The member rows of instance c.
    pub fn inst_members(&self, c: usize) -> &[u32] {
        &self.inst_member[self.inst_off[c] as usize..self.inst_off[c + 1] as usize]
    }

    /// The measured time of every node (the replay of no change, computed once and kept).
    pub fn measured_times(&self) -> &[i64] {
        self.measured.get_or_init(|| {
            let mut ws = self.workspace();
            self.pass::<false>(&mut ws.time, &Patched { patches: &[], zero_all: false });
            ws.time
        })
    }

    /// Per op row and call row, the start and end in `times` (a workspace's, or the measured ones):
    /// (op start, op end, call start, call end).
    pub fn entity_times(&self, times: &[i64]) -> (Vec<i64>, Vec<i64>, Vec<i64>, Vec<i64>) {
        let get = |slots: &[u32], end: bool| slots.iter().map(|&s| times[(s + end as u32) as usize]).collect::<Vec<i64>>();
        let (mut op_end, mut call_end) = (get(&self.op_start, true), get(&self.call_start, true));
        for &(op, m) in &self.op_members {
            op_end[op as usize] = times[self.member_end[m as usize] as usize];
        }
        for (&call, &end) in self.blocking_call.iter().zip(&self.blocking_end) {
            call_end[call as usize] = times[end as usize];
        }
        (get(&self.op_start, false), op_end, get(&self.call_start, false), call_end)
    }
}

/// Gaps `g` (all >= 0, in time order) changed to sum to `total`: a cut is taken from the latest
/// gaps first, each down to 0; what is added goes on the last gap. Latest first because the host
/// time that makes a range end late is the time just before its end: a cut from an early gap would
/// often be absorbed by a later wait in the range (a synchronize, a blocking copy) and move nothing,
/// and the causes that ask for a cut size it by how late the range ended.
pub(crate) fn cut_latest_first(g: &[i64], total: i64) -> Vec<i64> {
    let mut out = g.to_vec();
    let mut rest = g.iter().sum::<i64>() - total.max(0);
    if rest < 0 {
        if let Some(last) = out.last_mut() {
            *last -= rest;
        }
        return out;
    }
    for x in out.iter_mut().rev() {
        let take = rest.min(*x);
        *x -= take;
        rest -= take;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cut_takes_the_latest_gaps_first_and_an_addition_goes_last() {
        assert_eq!(cut_latest_first(&[10, 30], 20), [10, 10]);
        assert_eq!(cut_latest_first(&[10, 30], 5), [5, 0]);
        assert_eq!(cut_latest_first(&[1, 1, 1], 0), [0, 0, 0]);
        assert_eq!(cut_latest_first(&[0, 0], 7), [0, 7]);
        assert_eq!(cut_latest_first(&[10, 30], 80), [10, 70]);
        for total in 0..=9 {
            let g = [3, 1, 5];
            let s = cut_latest_first(&g, total);
            assert_eq!(s.iter().sum::<i64>(), total);
            assert!(s.iter().zip(&g).all(|(a, b)| a <= b));
        }
    }
}
