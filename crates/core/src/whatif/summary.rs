//! Per-rank max-plus summaries of the replay, and the replay of a whole job from them over its
//! collectives only (docs/method.md section 4, "Replaying from per-rank summaries").
//!
//! The graph's only edges between ranks are a collective's: its transfer starts at the last
//! member's arrival (`T = max arrivals`: the transfer unit's slack is 0 by construction) and each
//! member's op ends at `e = max(T + x, arrival)` (slack 0 too). Everything else a rank does
//! depends only on its own events and on the ends `e` of its own earlier collectives. So a rank's
//! graph, with its member ends as inputs, condenses to a [`Summary`]: each output (its arrival at
//! each of its collectives, its end of each step, its last end) as
//!
//! ```text
//! y = max(k_y, max_m (e_m + w_ym))
//! ```
//!
//! a sparse max-plus matrix over the rank's member ends `m`, computed by [`Graph::summary`] in one
//! forward pass in topological order that carries, per node, its time as such a vector. The
//! vectors stay sparse because an entry that another always covers is dropped: in every replay
//! `e_j >= arrival_j >= e_i + L_ji`, so `e_i + w_i` never exceeds `e_j + w_j` when
//! `w_i <= L_ji + w_j` (`L_ji`: the longest path from `e_i` to `arrival_j`, kept for the
//! [`WINDOW`] member ends before `j`; one further back is only dropped less often). What is left
//! is the few paths that can each bind: the collective before (the stream), the compute the
//! collective's bucket waited for, the host's last synchronization.
//!
//! [`replay_collectives`] is the reduce: given every rank's summary it replays the job over its
//! collectives only, in O(ranks x collectives x entries), and gives the [`Outcome`] the full
//! replay gives. A change that touches one rank (a kernel, a host gap, a slack) is that rank's
//! summary recomputed on its changed graph; a transfer change is the reduce's own (`x`).
//!
//! Exact when no dependency was dropped to break a cycle ([`super::Fidelity`]'s
//! `dropped_dependencies`): the order of a cycle's break depends on the whole job's units, which
//! no rank sees; [`replay_collectives`] refuses collectives that depend on each other in a cycle.

use super::graph::{Graph, U_MEMBER_END, U_TRANSFER};
use super::input::{opt, JobData};
use super::replay::{Change, Outcome, Patched};
use super::{input_error, WhatIfError};
use rayon::prelude::*;
use std::collections::HashMap;

/// No value (a step with no op on the rank; a path that does not exist).
const NO_TIME: i64 = i64::MIN;

/// How many member ends before a collective its dominance row covers (see the module docs).
pub const WINDOW: usize = 256;

/// One rank's replay as a function of when its collectives' member ops end.
///
/// Rows (outputs) are: the arrival of each member row (`0..n_members`: the member op's start), the
/// end of each step (`n_members + step`: the latest end of the step's ops on the rank), the rank's
/// end (the last row: its latest op or call end). Row `k`'s value, given the member ends `e`, is
/// `max(konst[k], max over j in off[k]..off[k+1] of e[input[j]] + weight[j])`; a row with no
/// entry and `konst == i64::MIN` has nothing (a step without ops on the rank).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Summary {
    /// Per member row of the rank: its op's measured start and end.
    pub member_start: Vec<i64>,
    pub member_end: Vec<i64>,
    pub n_steps: usize,
    pub konst: Vec<i64>,
    pub off: Vec<u32>,
    /// The member row whose end each entry adds to.
    pub input: Vec<u32>,
    pub weight: Vec<i64>,
}

impl Summary {
    pub fn n_members(&self) -> usize {
        self.member_start.len()
    }

    /// Row k given the member ends.
    fn eval(&self, k: usize, end: impl Fn(usize) -> i64) -> i64 {
        let mut t = self.konst[k];
        for j in self.off[k] as usize..self.off[k + 1] as usize {
            t = t.max(end(self.input[j] as usize) + self.weight[j]);
        }
        t
    }

    /// Bytes held (the vectors' capacities).
    pub fn heap_bytes(&self) -> usize {
        8 * (self.member_start.capacity() + self.member_end.capacity() + self.konst.capacity() + self.weight.capacity())
            + 4 * (self.off.capacity() + self.input.capacity())
    }

    fn push_row(&mut self, konst: i64, entries: &[(u32, i64)], member_of: &[u32]) {
        self.konst.push(konst);
        for &(ix, w) in entries {
            self.input.push(member_of[ix as usize]);
            self.weight.push(w);
        }
        self.off.push(self.input.len() as u32);
    }
}

#[inline]
fn add(a: i64, b: i64) -> i64 {
    if a == NO_TIME {
        NO_TIME
    } else {
        a + b
    }
}

/// The vectors of the pass: per unit, its first slot's time as `max(konst, e_ix + w ...)` with
/// entries by input index (member ends numbered in topological order), and its duration.
struct Vectors {
    konst: Vec<i64>,
    span: Vec<(u32, u32)>,
    dur: Vec<i64>,
    arena: Vec<(u32, i64)>,
    /// Per input index: its dominance row (`row[d - 1]`: the longest path from input `ix - d` to
    /// this input's arrival, NO_TIME: none) and the arrival's constant lower bound.
    rows: Vec<[i64; WINDOW]>,
    floor: Vec<i64>,
}

impl Vectors {
    fn entries(&self, p: usize) -> &[(u32, i64)] {
        let (a, n) = self.span[p];
        &self.arena[a as usize..(a + n) as usize]
    }

    /// Drops the entries (sorted by input, distinct) and the constant that another entry covers.
    fn prune(&self, entries: &mut Vec<(u32, i64)>, konst: &mut i64) {
        let n = entries.len();
        let mut alive = vec![true; n];
        for j in (0..n).rev() {
            let (jx, wj) = entries[j];
            let row = &self.rows[jx as usize];
            if *konst != NO_TIME && self.floor[jx as usize] != NO_TIME && *konst <= self.floor[jx as usize] + wj {
                *konst = NO_TIME;
            }
            for i in (0..j).rev() {
                let d = (jx - entries[i].0) as usize;
                if d > WINDOW {
                    break;
                }
                if alive[i] && row[d - 1] != NO_TIME && entries[i].1 <= row[d - 1] + wj {
                    alive[i] = false;
                }
            }
        }
        let mut k = 0;
        entries.retain(|_| {
            k += 1;
            alive[k - 1]
        });
    }

    /// Sorts and merges (max per input) gathered entries, then prunes them.
    fn settle(&self, entries: &mut Vec<(u32, i64)>, konst: &mut i64, sources: usize) {
        if sources > 1 {
            entries.sort_unstable_by_key(|&(ix, w)| (ix, std::cmp::Reverse(w)));
            entries.dedup_by_key(|x| x.0);
            self.prune(entries, konst);
        } else if *konst != NO_TIME {
            let mut covered = false;
            for &(jx, wj) in entries.iter() {
                covered |= self.floor[jx as usize] != NO_TIME && *konst <= self.floor[jx as usize] + wj;
            }
            if covered {
                *konst = NO_TIME;
            }
        }
    }

    /// Adds slot `s`'s vector shifted by `lag` to (entries, konst); whether it had entries.
    fn gather(&self, s: u32, lag: i64, entries: &mut Vec<(u32, i64)>, konst: &mut i64) -> bool {
        let q = (s / 2) as usize;
        if q == 0 {
            *konst = (*konst).max(lag); // the origin, at time 0
            return false;
        }
        let shift = lag + if s & 1 == 1 { self.dur[q] } else { 0 };
        *konst = (*konst).max(add(self.konst[q], shift));
        let own = self.entries(q);
        entries.extend(own.iter().map(|&(ix, w)| (ix, w + shift)));
        !own.is_empty()
    }
}

impl Graph {
    /// The summary of a one-rank graph (see the module docs) under `change` (its transfers are
    /// ignored: a transfer time is the reduce's, [`replay_collectives`]). Fails on a graph of more
    /// than one rank and on a change [`Graph::replay`] refuses.
    pub fn summary(&self, change: &Change) -> Result<Summary, WhatIfError> {
        if self.n_ranks > 1 {
            return Err(input_error(format!("a summary is of one rank's graph (this one has {} ranks)", self.n_ranks)));
        }
        let change = Change { transfers: Vec::new(), ..change.clone() };
        let mut patches = Vec::new();
        self.patches_of(&change, &mut patches)?;
        let n = self.n_units();
        let nm = self.n_members();
        let mut v = Vectors {
            konst: vec![NO_TIME; n],
            span: vec![(0, 0); n],
            dur: vec![0; n],
            arena: Vec::new(),
            rows: Vec::with_capacity(nm),
            floor: Vec::with_capacity(nm),
        };
        let mut member_of: Vec<u32> = Vec::with_capacity(nm); // input index -> member row
        let mut scratch: Vec<(u32, i64)> = Vec::new();
        let mut k = 0; // the next patch
        for p in 1..n {
            let first = k;
            while k < patches.len() && patches[k].pos as usize == p {
                k += 1;
            }
            // This unit's patches alone (as the replay's pass reads them).
            let (patched, view) = (k > first, Patched { patches: &patches[first..k], zero_all: change.zero_all_slack });
            let (kind, row) = self.kind_row(p);
            if kind == U_TRANSFER {
                continue; // read by its member ends only, which are inputs
            }
            if kind == U_MEMBER_END {
                let member = row as usize;
                let ix = member_of.len() as u32;
                member_of.push(member as u32);
                let arrival = (self.op_start[self.member_op[member] as usize] / 2) as usize;
                let mut row = [NO_TIME; WINDOW];
                let mut floor = v.konst[arrival];
                for &(i, w) in v.entries(arrival) {
                    let d = (ix - i) as usize;
                    if d <= WINDOW {
                        row[d - 1] = row[d - 1].max(w);
                    }
                    floor = floor.max(add(v.floor[i as usize], w));
                    let before = &v.rows[i as usize];
                    for dd in 1..=WINDOW - d.min(WINDOW) {
                        if before[dd - 1] != NO_TIME {
                            row[d + dd - 1] = row[d + dd - 1].max(before[dd - 1] + w);
                        }
                    }
                }
                v.rows.push(row);
                v.floor.push(floor);
                v.span[p] = (v.arena.len() as u32, 1);
                v.arena.push((ix, 0));
                continue;
            }
            scratch.clear();
            let mut konst = NO_TIME;
            let mut sources = 0;
            for e in self.edge_range(p) {
                let lag = if patched { view.lag(self, p, e) } else { self.lag(e) };
                sources += v.gather(self.edges[e].src, lag, &mut scratch, &mut konst) as usize;
            }
            let slack = if view.zero_all {
                0
            } else if patched {
                view.slack(self, p)
            } else {
                self.slack(p)
            };
            konst = add(konst, slack);
            for x in scratch.iter_mut() {
                x.1 += slack;
            }
            v.settle(&mut scratch, &mut konst, sources);
            v.konst[p] = konst;
            v.dur[p] = if patched { view.dur(self, p) } else { self.dur(p) };
            v.span[p] = (v.arena.len() as u32, scratch.len() as u32);
            v.arena.extend_from_slice(&scratch);
        }

        // The outputs: arrivals, step ends, the rank's end.
        let mut out = Summary {
            member_start: (0..nm).map(|m| self.measured_member_start(m)).collect(),
            member_end: (0..nm).map(|m| self.measured_member_end(m)).collect(),
            n_steps: self.n_steps,
            off: vec![0],
            ..Summary::default()
        };
        for m in 0..nm {
            let slot = self.op_start[self.member_op[m] as usize];
            scratch.clear();
            let mut konst = NO_TIME;
            v.gather(slot, 0, &mut scratch, &mut konst);
            out.push_row(konst, &scratch, &member_of);
        }
        let latest = |slots: &[u32], out: &mut Summary, scratch: &mut Vec<(u32, i64)>| {
            scratch.clear();
            let mut konst = NO_TIME;
            let mut sources = 0;
            for &s in slots {
                sources += v.gather(s, 0, scratch, &mut konst) as usize;
            }
            v.settle(scratch, &mut konst, sources);
            out.push_row(konst, scratch, &member_of);
        };
        for s in 0..self.n_steps {
            let slots = if self.n_ranks == 1 { &self.step_slot[self.step_off[s] as usize..self.step_off[s + 1] as usize] } else { &[][..] };
            latest(slots, &mut out, &mut scratch);
        }
        let slots = if self.n_ranks == 1 { &self.rank_slot[self.rank_off[0] as usize..self.rank_off[1] as usize] } else { &[][..] };
        latest(slots, &mut out, &mut scratch);
        Ok(out)
    }

    /// The summaries of many changes, in parallel (rayon's global pool), in the order of `changes`.
    pub fn summaries(&self, changes: &[Change]) -> Result<Vec<Summary>, WhatIfError> {
        changes.par_iter().map(|c| self.summary(c)).collect()
    }

    /// A member's measured start and end (its op's, from the units' measured times).
    fn measured_member_start(&self, m: usize) -> i64 {
        self.measured_times()[self.op_start[self.member_op[m] as usize] as usize]
    }

    fn measured_member_end(&self, m: usize) -> i64 {
        self.measured_times()[self.member_end[m] as usize]
    }
}

/// One rank's part of the reduce: its summary and, per member row of it, the job's member row.
#[derive(Clone, Copy)]
pub struct RankPart<'a> {
    pub summary: &'a Summary,
    pub member_row: &'a [u32],
}

/// The replay of a job from its ranks' summaries (rank `r` is `parts[r]`): the [`Outcome`] the
/// full replay gives (without binding chains). `member_instance`: per member row of the job, its
/// instance (dense `0..n_instances`); `transfers`: (member row, new transfer time `x`) as in
/// [`Change::transfers`]. A member's `x` is otherwise its measured one: its op's end minus the
/// instance's measured transfer start (the last measured arrival).
pub fn replay_collectives(
    parts: &[RankPart],
    member_instance: &[u32],
    n_steps: usize,
    transfers: &[(usize, i64)],
) -> Result<Outcome, WhatIfError> {
    let nm = member_instance.len();
    let n_inst = member_instance.iter().map(|&c| c as usize + 1).max().unwrap_or(0);
    let n_ranks = parts.len();
    // Where each member row lives: (rank, its row there).
    let mut home = vec![(u32::MAX, 0u32); nm];
    for (r, part) in parts.iter().enumerate() {
        let s = part.summary;
        if part.member_row.len() != s.n_members() || s.off.len() != s.n_members() + s.n_steps + 2 {
            return Err(input_error(format!("rank {r}: its member rows do not match its summary")));
        }
        for (local, &row) in part.member_row.iter().enumerate() {
            let slot = home.get_mut(row as usize).ok_or_else(|| input_error(format!("rank {r}: member row {row} out of range ({nm} members)")))?;
            if slot.0 != u32::MAX {
                return Err(input_error(format!("member row {row} is in two ranks' summaries")));
            }
            *slot = (r as u32, local as u32);
        }
    }
    if let Some(row) = home.iter().position(|h| h.0 == u32::MAX) {
        return Err(input_error(format!("member row {row} is in no rank's summary")));
    }
    let measured_start = |g: usize| parts[home[g].0 as usize].summary.member_start[home[g].1 as usize];
    let measured_end = |g: usize| parts[home[g].0 as usize].summary.member_end[home[g].1 as usize];
    let (inst_off, inst_member) = super::rows_by_key(member_instance, n_inst);
    let members = |c: usize| &inst_member[inst_off[c] as usize..inst_off[c + 1] as usize];
    let mut x: Vec<i64> = (0..nm)
        .map(|g| {
            let c = member_instance[g] as usize;
            measured_end(g) - members(c).iter().map(|&h| measured_start(h as usize)).max().expect("a member")
        })
        .collect();
    for &(g, value) in transfers {
        if g >= nm {
            return Err(input_error(format!("change: member row {g} out of range (the job has {nm} members)")));
        }
        if !(0..=1 << 50).contains(&value) {
            return Err(input_error(format!("member row {g}: new value {value} ns out of range (0 to 2^50)")));
        }
        x[g] = value;
    }

    // The order of the instances: each after those whose member ends its arrivals read.
    let mut indeg = vec![0u32; n_inst];
    let mut after: Vec<(u32, u32)> = Vec::new(); // (earlier instance, later)
    for part in parts {
        let s = part.summary;
        for local in 0..s.n_members() {
            let c = member_instance[part.member_row[local] as usize];
            for j in s.off[local] as usize..s.off[local + 1] as usize {
                let before = member_instance[part.member_row[s.input[j] as usize] as usize];
                after.push((before, c));
            }
        }
    }
    after.sort_unstable();
    after.dedup();
    for &(_, c) in &after {
        indeg[c as usize] += 1;
    }
    let mut ready: Vec<u32> = (0..n_inst as u32).filter(|&c| indeg[c as usize] == 0).collect();
    let (mut arrival, mut end) = (vec![0i64; nm], vec![NO_TIME; nm]);
    let mut transfer_start = vec![0i64; n_inst];
    let mut done = 0;
    while let Some(c) = ready.pop() {
        let c = c as usize;
        let mut t = NO_TIME;
        for &g in members(c) {
            let (r, local) = home[g as usize];
            let part = &parts[r as usize];
            let a = part.summary.eval(local as usize, |m| end[part.member_row[m] as usize]);
            arrival[g as usize] = a;
            t = t.max(a);
        }
        transfer_start[c] = t;
        for &g in members(c) {
            end[g as usize] = (t + x[g as usize]).max(arrival[g as usize]);
        }
        done += 1;
        let k = after.partition_point(|&(b, _)| (b as usize) < c);
        for &(_, later) in after[k..].iter().take_while(|&&(b, _)| b as usize == c) {
            indeg[later as usize] -= 1;
            if indeg[later as usize] == 0 {
                ready.push(later);
            }
        }
    }
    if done < n_inst {
        return Err(input_error(format!(
            "{} collectives wait for each other in a cycle: the job cannot be replayed from summaries",
            n_inst - done
        )));
    }
    let wait: Vec<i64> = (0..n_inst).map(|c| members(c).iter().map(|&g| transfer_start[c] - arrival[g as usize]).sum()).collect();
    let mut step_rank_end = vec![NO_TIME; n_steps * n_ranks];
    let mut rank_end = vec![NO_TIME; n_ranks];
    for (r, part) in parts.iter().enumerate() {
        let s = part.summary;
        let e = |m: usize| end[part.member_row[m] as usize];
        for step in 0..s.n_steps.min(n_steps) {
            step_rank_end[step * n_ranks + r] = s.eval(s.n_members() + step, e);
        }
        rank_end[r] = s.eval(s.n_members() + s.n_steps, e);
    }
    let step_end = (0..n_steps).map(|s| step_rank_end[s * n_ranks..(s + 1) * n_ranks].iter().copied().max().unwrap_or(NO_TIME)).collect();
    Ok(Outcome {
        total_wait: wait.iter().sum(),
        arrival,
        transfer_start,
        wait,
        step_end,
        step_rank_end,
        rank_end,
        chain_offsets: Vec::new(),
        chain_nodes: Vec::new(),
    })
}

/// One rank's part of a job: its rows of every table (rank renumbered 0, member instances dense
/// in order of first appearance) and where they came from.
#[derive(Clone, Debug, Default)]
pub struct RankJob {
    pub job: JobData,
    /// Per row of the rank's tables: the job's row.
    pub ops: Vec<usize>,
    pub calls: Vec<usize>,
    pub members: Vec<usize>,
}

impl JobData {
    /// The job split by rank (`n_ranks` parts, ranks with no rows included), for summaries.
    pub fn by_rank(&self, n_ranks: usize) -> Vec<RankJob> {
        let mut out: Vec<RankJob> = (0..n_ranks).map(|_| RankJob::default()).collect();
        let mut op_local = vec![0usize; self.op_rank.len()];
        for i in 0..self.call_rank.len() {
            let part = &mut out[self.call_rank[i] as usize];
            part.calls.push(i);
            part.job.call(
                0,
                self.call_thread[i],
                self.call_start[i],
                self.call_end[i],
                self.call_correlation[i],
                opt(&self.call_blocking, i, 0) == 1,
                opt(&self.call_segment, i, -1),
            );
        }
        for i in 0..self.op_rank.len() {
            let part = &mut out[self.op_rank[i] as usize];
            op_local[i] = part.ops.len();
            part.ops.push(i);
            part.job.op(0, self.op_stream[i], self.op_start[i], self.op_end[i], self.op_launch[i], opt(&self.op_step, i, -1)); // rows among the rank's calls: its own
        }
        for i in 0..self.sync_rank.len() {
            let j = &mut out[self.sync_rank[i] as usize].job;
            j.sync_rank.push(0);
            j.sync_kind.push(self.sync_kind[i]);
            j.sync_stream.push(self.sync_stream[i]);
            j.sync_event.push(self.sync_event[i]);
            j.sync_correlation.push(self.sync_correlation[i]);
            j.sync_record_correlation.push(opt(&self.sync_record_correlation, i, -1));
            j.sync_inferred.push(opt(&self.sync_inferred, i, 0));
        }
        for i in 0..self.event_rank.len() {
            out[self.event_rank[i] as usize].job.event(0, self.event_stream[i], self.event_event[i], self.event_correlation[i]);
        }
        let mut local_inst: Vec<HashMap<i64, i64>> = vec![HashMap::new(); n_ranks]; // instance -> local id
        for (row, (&inst, &op)) in self.member_instance.iter().zip(&self.member_op).enumerate() {
            let r = self.op_rank[op as usize] as usize;
            let next = local_inst[r].len() as i64;
            let id = *local_inst[r].entry(inst).or_insert(next);
            out[r].members.push(row);
            out[r].job.member(id, op_local[op as usize]);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::whatif::graph::{NodeKind, NodeRef};
    use crate::whatif::synth::{self, Plant, Spec};
    use crate::whatif::{Options, ReplayOptions};

    fn full(g: &Graph, change: &Change) -> Outcome {
        let mut ws = g.workspace();
        g.replay(change, &mut ws, &ReplayOptions::default()).unwrap()
    }

    /// The job replayed from its ranks' summaries, rank r's under `change_of(r, its part, its graph)`.
    fn from_summaries(job: &JobData, g: &Graph, opts: &Options, change_of: &dyn Fn(usize, &RankJob, &Graph) -> Change, transfers: &[(usize, i64)]) -> (Outcome, usize) {
        let parts = job.by_rank(g.n_ranks());
        let graphs: Vec<Graph> = parts.iter().map(|p| Graph::build(&p.job.view(), opts).unwrap()).collect();
        let summaries: Vec<Summary> = graphs.iter().enumerate().map(|(r, h)| h.summary(&change_of(r, &parts[r], h)).unwrap()).collect();
        let rows: Vec<Vec<u32>> = parts.iter().map(|p| p.members.iter().map(|&m| m as u32).collect()).collect();
        let rank_parts: Vec<RankPart> = summaries.iter().zip(&rows).map(|(summary, member_row)| RankPart { summary, member_row }).collect();
        let instance: Vec<u32> = job.member_instance.iter().map(|&c| c as u32).collect();
        let entries = summaries.iter().map(|s| s.input.len()).sum();
        (replay_collectives(&rank_parts, &instance, g.n_steps(), transfers).unwrap(), entries)
    }

    fn unchanged(_: usize, _: &RankJob, _: &Graph) -> Change {
        Change::default()
    }

    #[test]
    fn the_replay_over_collectives_equals_the_full_replay() {
        for (seed, jitter, record, threads) in [(1, false, true, 1), (2, true, true, 2), (3, true, false, 2), (4, false, false, 1)] {
            let spec = Spec { seed, jitter, record, threads, steps: 3, ranks: 4, ..Spec::default() };
            let s = synth::generate(&spec);
            let opts = Options::default();
            let g = Graph::build(&s.job.view(), &opts).unwrap();
            assert_eq!(g.fidelity().dropped_dependencies, 0);
            let (got, _) = from_summaries(&s.job, &g, &opts, &unchanged, &[]);
            let want = full(&g, &Change::default());
            assert!(want.total_wait > 0);
            assert_eq!(got, want, "seed {seed}");
            let all = |_: usize, _: &RankJob, _: &Graph| Change { zero_all_slack: true, ..Change::default() };
            let (got, _) = from_summaries(&s.job, &g, &opts, &all, &[]);
            assert_eq!(got, full(&g, &Change { zero_all_slack: true, ..Change::default() }), "seed {seed}, no slack");
        }
    }

    #[test]
    fn a_change_on_one_rank_is_that_ranks_summary_swapped() {
        // Rank 1's kernel, launch call, loader gap and op slack changed; a transfer of rank 2's.
        let plants = vec![Plant::Loader { rank: 1, step: 1, extra_ns: 200_000 }, Plant::Kernel { rank: 1, step: 0, index: 5, extra_ns: 300_000 }];
        let spec = Spec { ranks: 3, steps: 3, threads: 2, jitter: true, record: true, plants, ..Spec::default() };
        let s = synth::generate(&spec);
        let j = &s.job;
        let opts = Options::default();
        let g = Graph::build(&j.view(), &opts).unwrap();
        let (op, extra) = s.planted_ops[0];
        let (_, segment, gap_extra) = s.planted_gaps[0];
        let call = (0..j.call_rank.len()).find(|&i| j.call_rank[i] == 1 && j.call_blocking[i] == 0).unwrap();
        let slow = (0..j.op_rank.len()).filter(|&i| j.op_rank[i] == 1 && g.member_of_op(i).is_none()).nth(30).unwrap();
        let node = g.node(NodeRef { kind: NodeKind::OpStart, row: slow }).unwrap();
        let member = (0..j.member_op.len()).find(|&m| j.op_rank[j.member_op[m] as usize] == 2).unwrap();
        let change = Change {
            op_durations: vec![(op, j.op_end[op] - j.op_start[op] - extra)],
            call_durations: vec![(call, 0)],
            gaps: vec![(segment, 1_000 + gap_extra / 100)],
            zero_slack: vec![node],
            transfers: vec![(member, 1_000)],
            zero_all_slack: false,
        };
        let want = full(&g, &change);
        assert_ne!(want, full(&g, &Change::default()));
        let local = |rows: &[usize], row: usize| rows.binary_search(&row).unwrap();
        let change_of = |r: usize, part: &RankJob, h: &Graph| {
            if r != 1 {
                return Change::default();
            }
            Change {
                op_durations: change.op_durations.iter().map(|&(o, d)| (local(&part.ops, o), d)).collect(),
                call_durations: change.call_durations.iter().map(|&(c, d)| (local(&part.calls, c), d)).collect(),
                gaps: change.gaps.clone(),
                zero_slack: vec![h.node(NodeRef { kind: NodeKind::OpStart, row: local(&part.ops, slow) }).unwrap()],
                ..Change::default()
            }
        };
        let (got, _) = from_summaries(j, &g, &opts, &change_of, &change.transfers);
        assert_eq!(got, want);
    }

    #[test]
    fn summaries_hold_per_collective_not_per_op() {
        // The same collectives with 10x the kernels between them: the summaries hold no more.
        let small = Spec { ranks: 4, steps: 3, jitter: true, ops_per_step: 60, collective_every: 10, side_every: 7, graph_every: 9, sync_every: 25, ..Spec::default() };
        let large = Spec { ops_per_step: 600, collective_every: 100, side_every: 70, graph_every: 90, sync_every: 250, ..small.clone() };
        let opts = Options::default();
        let mut sizes = Vec::new();
        for spec in [small, large] {
            let s = synth::generate(&spec);
            let g = Graph::build(&s.job.view(), &opts).unwrap();
            let (got, entries) = from_summaries(&s.job, &g, &opts, &unchanged, &[]);
            assert_eq!(got, full(&g, &Change::default()));
            sizes.push((g.n_members(), entries));
        }
        assert_eq!(sizes[0].0, sizes[1].0);
        assert!(sizes[1].1 <= 2 * sizes[0].1 && sizes[0].1 <= 8 * sizes[0].0, "{sizes:?}");
    }
}
