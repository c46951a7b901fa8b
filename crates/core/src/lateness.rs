//! Lateness accounting (method.md section 4): why a straggler arrived late at a collective.
//!
//! The straggler s and a reference rank q that arrived on time ran the same program. Their GPU
//! work is paired by kernel name (a diff of the two name sequences); at each paired point the
//! lateness is lambda = t_s - t_q on aligned clocks. Walking back from the collective's NCCL
//! kernel to the last point where lambda was about zero (where s was last on time), every change
//! of lambda on the way forward gets a cause: a paired kernel that ran longer on s, a kernel only
//! one rank ran, a longer gap while s's launch call came late (host launch) or with the launch on
//! time (idle). Decreases are netted in, against the smallest increases first (small changes of
//! either sign are mostly jitter, so a decrease should not eat into the large, real cause); what
//! no step explains is unexplained.

use similar::{capture_diff_slices, Algorithm, DiffOp};
use std::collections::BTreeMap;

/// One rank's GPU work, sorted by start, on aligned clocks. `launch` is the aligned start of the
/// runtime call that launched each item, -1 when unknown.
pub struct RankOps<'a> {
    pub start: &'a [i64],
    pub end: &'a [i64],
    pub name: &'a [i64],
    pub launch: &'a [i64],
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Cause {
    Kernel = 0,
    HostLaunch = 1,
    Idle = 2,
}

impl Cause {
    pub const ALL: [Cause; 3] = [Cause::Kernel, Cause::HostLaunch, Cause::Idle];

    /// The name the output contract uses (`blame[].cause`): Python maps codes to causes by it.
    pub fn name(self) -> &'static str {
        match self {
            Cause::Kernel => "kernel",
            Cause::HostLaunch => "host_launch",
            Cause::Idle => "idle",
        }
    }
}

/// One collective to explain: the NCCL operation's index on s and on q, and windows to search,
/// smallest first, as the first index on s and on q (each usually the NCCL operation of an
/// earlier instance of the same communicator).
pub struct Target {
    pub s: usize,
    pub q: usize,
    pub windows: Vec<(usize, usize)>,
}

#[derive(Debug, PartialEq)]
pub struct Blame {
    pub target: usize,
    pub cause: Cause,
    /// Kernel: its name id. HostLaunch: the index on s of the late-launched item. Idle: -1.
    pub key: i64,
    pub ns: i64,
    /// HostLaunch: when s's GPU was ready for the late item (the gap before its launch call).
    pub ready: i64,
}

#[derive(Debug, PartialEq)]
pub struct Explanation {
    /// t_s - t_q at the collective.
    pub lateness: i64,
    pub unexplained: i64,
    /// The two NCCL operations were paired by the name diff: s and q ran the same program.
    pub matched: bool,
    /// A point where s was on time was found inside the largest window.
    pub on_time_point: bool,
}

fn paired(s: &RankOps, q: &RankOps, s0: usize, s1: usize, q0: usize, q1: usize) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    for op in capture_diff_slices(Algorithm::Myers, &s.name[s0..=s1], &q.name[q0..=q1]) {
        if let DiffOp::Equal { old_index, new_index, len } = op {
            out.extend((0..len).map(|k| (s0 + old_index + k, q0 + new_index + k)));
        }
    }
    out
}

fn duration(ops: &RankOps, i: usize) -> i64 {
    ops.end[i] - ops.start[i]
}

/// How long the launch of item `next` came after the GPU was ready for it (the end of the work
/// since `prev`), 0 when the launch was on time or unknown. Also returns that ready time.
fn launch_delay(ops: &RankOps, prev: usize, next: usize) -> (i64, i64) {
    let ready = ops.end[prev..next].iter().copied().max().unwrap_or(ops.end[prev]);
    let delay = if ops.launch[next] >= 0 { (ops.launch[next] - ready).max(0) } else { 0 };
    (delay, ready)
}

/// The signed parts of lambda's change from paired point `from` to the collective, by (cause, key).
fn parts(s: &RankOps, q: &RankOps, pairs: &[(usize, usize)]) -> BTreeMap<(Cause, i64), (i64, i64)> {
    let mut acc: BTreeMap<(Cause, i64), (i64, i64)> = BTreeMap::new();
    let mut add = |cause, key, ns: i64, ready| {
        let e = acc.entry((cause, key)).or_insert((0, ready));
        e.0 += ns;
    };
    for w in pairs.windows(2) {
        let ((a, b), (a2, b2)) = (w[0], w[1]);
        let change = (s.start[a2] - q.start[b2]) - (s.start[a] - q.start[b]);
        let excess = duration(s, a) - duration(q, b);
        add(Cause::Kernel, s.name[a], excess, 0);
        let mut extra = 0;
        for i in a + 1..a2 {
            add(Cause::Kernel, s.name[i], duration(s, i), 0);
            extra += duration(s, i);
        }
        for j in b + 1..b2 {
            add(Cause::Kernel, q.name[j], -duration(q, j), 0);
            extra -= duration(q, j);
        }
        let gap = change - excess - extra;
        let (late_s, ready) = launch_delay(s, a, a2);
        let (late_q, _) = launch_delay(q, b, b2);
        let host = if gap > 0 { (late_s - late_q).clamp(0, gap) } else { 0 };
        if host > 0 {
            add(Cause::HostLaunch, a2 as i64, host, ready);
        }
        add(Cause::Idle, -1, gap - host, 0);
    }
    acc
}

/// Explains each target's lateness; `tol` is how near zero lambda must come to count as on time.
pub fn explain(s: &RankOps, q: &RankOps, targets: &[Target], tol: i64) -> (Vec<Explanation>, Vec<Blame>) {
    let mut explanations = Vec::with_capacity(targets.len());
    let mut blames = Vec::new();
    for (t, target) in targets.iter().enumerate() {
        let lateness = s.start[target.s] - q.start[target.q];
        let mut explanation = Explanation { lateness, unexplained: lateness.max(0), matched: true, on_time_point: true };
        if lateness <= tol {
            explanations.push(explanation);
            continue;
        }
        let mut chosen = None;
        for (w, &(ws, wq)) in target.windows.iter().enumerate() {
            let pairs = paired(s, q, ws, target.s, wq, target.q);
            if pairs.last() != Some(&(target.s, target.q)) {
                explanation.matched = false;
                break;
            }
            let on_time = pairs.iter().rposition(|&(a, b)| (s.start[a] - q.start[b]).abs() <= tol);
            if on_time.is_some() || w + 1 == target.windows.len() {
                explanation.on_time_point = on_time.is_some();
                chosen = Some(pairs[on_time.unwrap_or(0)..].to_vec());
                break;
            }
        }
        let Some(pairs) = chosen else {
            explanations.push(explanation);
            continue;
        };
        // Net each cause; decreases cancel the smallest increases first.
        let signed = parts(s, q, &pairs);
        let mut decrease: i64 = -signed.values().map(|(ns, _)| *ns).filter(|ns| *ns < 0).sum::<i64>();
        let mut positive: Vec<((Cause, i64), (i64, i64))> = signed.into_iter().filter(|(_, (ns, _))| *ns > 0).collect();
        positive.sort_by_key(|(key, (ns, _))| (*ns, *key));
        for (_, (ns, _)) in positive.iter_mut() {
            let cancel = decrease.min(*ns);
            *ns -= cancel;
            decrease -= cancel;
        }
        positive.retain(|(_, (ns, _))| *ns > 0);
        positive.reverse();
        // What the walk explains cannot exceed the lateness (its start point may have been late).
        let total: i64 = positive.iter().map(|(_, (ns, _))| ns).sum();
        let scale = if total > lateness { lateness as f64 / total as f64 } else { 1.0 };
        let mut explained = 0;
        for ((cause, key), (ns, ready)) in positive {
            let ns = (ns as f64 * scale).round() as i64;
            explained += ns;
            blames.push(Blame { target: t, cause, key, ns, ready });
        }
        explanation.unexplained = (lateness - explained).max(0);
        explanations.push(explanation);
    }
    (explanations, blames)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two ranks on one stream: A B C N (N the NCCL kernel), every kernel 10 ns, no gaps.
    fn ops(start: &[i64], dur: &[i64], name: &[i64], launch: &[i64]) -> (Vec<i64>, Vec<i64>, Vec<i64>, Vec<i64>) {
        let end = start.iter().zip(dur).map(|(s, d)| s + d).collect();
        (start.to_vec(), end, name.to_vec(), launch.to_vec())
    }

    fn view(o: &(Vec<i64>, Vec<i64>, Vec<i64>, Vec<i64>)) -> RankOps<'_> {
        RankOps { start: &o.0, end: &o.1, name: &o.2, launch: &o.3 }
    }

    #[test]
    fn a_longer_kernel_and_an_extra_kernel_are_blamed_with_their_ns() {
        // q: A(10) B(10) C(10) N ; s: A(10) B(25) X(7) C(10) N  -> lateness 22 = 15 (B) + 7 (X).
        let q = ops(&[0, 10, 20, 30], &[10, 10, 10, 5], &[1, 2, 3, 9], &[-1; 4]);
        let s = ops(&[0, 10, 35, 42, 52], &[10, 25, 7, 10, 5], &[1, 2, 4, 3, 9], &[-1; 5]);
        let (e, b) = explain(&view(&s), &view(&q), &[Target { s: 4, q: 3, windows: vec![(0, 0)] }], 1);
        assert_eq!(e[0], Explanation { lateness: 22, unexplained: 0, matched: true, on_time_point: true });
        assert_eq!(b.iter().map(|b| (b.cause, b.key, b.ns)).collect::<Vec<_>>(), [(Cause::Kernel, 2, 15), (Cause::Kernel, 4, 7)]);
    }

    #[test]
    fn a_late_launch_is_told_from_an_idle_gap() {
        // Both run A then C; on s, C's launch call came 30 ns after A ended (GPU idle waiting);
        // then a 5 ns idle gap with an on-time launch before N.
        let q = ops(&[0, 10, 20], &[10, 10, 5], &[1, 3, 9], &[-5, 0, 5]);
        let s = ops(&[0, 40, 55], &[10, 10, 5], &[1, 3, 9], &[-5, 40, 30]);
        let (e, b) = explain(&view(&s), &view(&q), &[Target { s: 2, q: 2, windows: vec![(0, 0)] }], 1);
        assert_eq!(e[0].lateness, 35);
        let got: Vec<_> = b.iter().map(|b| (b.cause, b.key, b.ns, b.ready)).collect();
        assert_eq!(got, [(Cause::HostLaunch, 1, 30, 10), (Cause::Idle, -1, 5, 0)]);
    }

    #[test]
    fn the_walk_back_stops_where_the_straggler_was_last_on_time() {
        // s fell 50 ns behind at B early on, caught up at a sync point (P, both at 100), then
        // was 20 ns late at N because of D. Only D is blamed.
        let q = ops(&[0, 10, 100, 110, 120], &[10, 10, 10, 10, 5], &[1, 2, 7, 4, 9], &[-1; 5]);
        let s = ops(&[0, 10, 100, 110, 140], &[10, 60, 10, 30, 5], &[1, 2, 7, 4, 9], &[-1; 5]);
        let (e, b) = explain(&view(&s), &view(&q), &[Target { s: 4, q: 4, windows: vec![(0, 0)] }], 1);
        assert_eq!(e[0].unexplained, 0);
        assert_eq!(b.iter().map(|b| (b.key, b.ns)).collect::<Vec<_>>(), [(4, 20)]);
    }

    #[test]
    fn different_programs_are_not_matched() {
        let q = ops(&[0, 10], &[10, 5], &[1, 9], &[-1; 2]);
        let s = ops(&[0, 30], &[10, 5], &[2, 8], &[-1; 2]);
        let (e, b) = explain(&view(&s), &view(&q), &[Target { s: 1, q: 1, windows: vec![(0, 0)] }], 1);
        assert!(!e[0].matched && b.is_empty() && e[0].unexplained == 20);
    }

    #[test]
    fn decreases_cancel_the_smallest_increases_first() {
        // s: A +100 ns, B +5 ns, C -5 ns against q: lateness 100, all of it A's.
        let q = ops(&[0, 10, 20, 30], &[10, 10, 10, 5], &[1, 2, 3, 9], &[-1; 4]);
        let s = ops(&[0, 110, 125, 130], &[110, 15, 5, 5], &[1, 2, 3, 9], &[-1; 4]);
        let (e, b) = explain(&view(&s), &view(&q), &[Target { s: 3, q: 3, windows: vec![(0, 0)] }], 1);
        assert_eq!(e[0].lateness, 100);
        assert_eq!(b.iter().map(|b| (b.key, b.ns)).collect::<Vec<_>>(), [(1, 100)]);
    }
}
