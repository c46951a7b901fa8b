//! Topological order of the graph's units, as close to measured-time order as the edges allow.
//!
//! Measured-time order is a topological order when every edge goes forward in time, which capped
//! lags make the rule but not a law: an edge may tie (a zero-length op), or go backward where the
//! trace bends causality (a transfer that ends before the last rank arrived, by clock error). So the
//! graph is laid out in time order, checked edge by edge, and only when some edge goes backward is
//! the order repaired by Kahn's algorithm, taking ready units in time order (a heap). A cycle (only
//! possible from contradictory records) is broken by releasing the earliest waiting unit and
//! dropping its edges from units not yet placed; the dropped edges are reported.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// The units by time (ties by unit index), and each unit's place in that order. `times` calls its
/// argument with the units' times in unit order, a run of units at a time (each value plus the constant
/// it comes with); all lie in `span`.
pub(crate) fn time_order(n: usize, span: (i64, i64), times: impl Fn(&mut dyn FnMut(&[i64], i64))) -> (Vec<u32>, Vec<u32>) {
    // The sort merges the long runs the units come in (each rank's calls, its ops, ... in time
    // order). Where the times' span leaves room beside the unit index, the keys are one u64 each
    // (time from the earliest, then the index): half the memory of (time, index) pairs.
    let (lo, hi) = span;
    let by_time: Vec<u32> = if n > 0 && fits_packed(hi.abs_diff(lo), n) {
        let bits = usize::BITS - n.leading_zeros();
        let mut keyed: Vec<u64> = Vec::with_capacity(n);
        times(&mut |run, shift| {
            let u = keyed.len() as u64;
            keyed.extend(run.iter().enumerate().map(|(k, &t)| (t.wrapping_add(shift).abs_diff(lo) << bits) | (u + k as u64)));
        });
        keyed.sort();
        keyed.into_iter().map(|k| (k & ((1 << bits) - 1)) as u32).collect()
    } else {
        let mut keyed: Vec<(i64, u32)> = Vec::with_capacity(n);
        times(&mut |run, shift| {
            let u = keyed.len() as u32;
            keyed.extend(run.iter().enumerate().map(|(k, &t)| (t.wrapping_add(shift), u + k as u32)));
        });
        keyed.sort(); // stable: ties stay in unit order
        keyed.into_iter().map(|(_, u)| u).collect()
    };
    debug_assert_eq!(by_time.len(), n);
    let rank = positions(&by_time);
    (by_time, rank)
}

/// Each unit's place in `order` (position -> unit): its inverse.
pub(crate) fn positions(order: &[u32]) -> Vec<u32> {
    let mut pos = vec![0u32; order.len()];
    for (p, &u) in order.iter().enumerate() {
        pos[u as usize] = p as u32;
    }
    pos
}

/// Whether a span of times and the index of one of n units fit in 64 bits together.
fn fits_packed(span: u64, n: usize) -> bool {
    let bits = usize::BITS - n.leading_zeros();
    u64::BITS - span.leading_zeros() + bits <= 64
}

/// The order repaired where some edge goes backward in time: `order` (position -> unit), `pos`
/// (unit -> position) and the edges dropped to break a cycle, as (unit, index among its in-edges),
/// sorted; from the units in time order ([`time_order`]) and the units with an in-edge from a later
/// one (`late`). `sources(u, out)` appends to `out` the units unit u's in-edges leave from, in order.
pub(crate) fn repair(by_time: Vec<u32>, mut rank: Vec<u32>, late: &[u32], mut sources: impl FnMut(usize, &mut Vec<u32>)) -> (Vec<u32>, Vec<u32>, Vec<(u32, u32)>) {
    // Kahn, taking the earliest ready unit each time. A cursor walks the time order and places
    // each unit whose sources are placed; the few that are not wait, counting their unplaced
    // sources, and join a heap (by time) when the count reaches 0, to be placed before the cursor
    // moves on. A unit is placed once the cursor has passed it, unless it waits: only a late unit,
    // or one passed while some wait, can have a source not placed.
    let n = by_time.len();
    let mut late_at: Vec<u32> = late.iter().map(|&u| rank[u as usize]).collect();
    late_at.sort_unstable();
    let mut late_at = late_at.into_iter().peekable();
    let mut waiting: rustc_hash::FxHashMap<u32, u32> = rustc_hash::FxHashMap::default(); // unit -> its sources not placed
    let mut waiters: rustc_hash::FxHashMap<u32, Vec<u32>> = rustc_hash::FxHashMap::default(); // source -> waiting units
    let mut ready: BinaryHeap<Reverse<u32>> = BinaryHeap::new(); // waited, now ready (by time)
    let mut order = Vec::with_capacity(n);
    let mut dropped = Vec::new();
    let mut src = Vec::new();
    let mut cursor = 0usize; // in by_time: the next unit to pass
    while order.len() < n {
        if waiting.is_empty() && cursor < n {
            // Nothing waits: every unit up to the next late one is placed as it comes.
            let to = late_at.peek().map_or(n, |&p| p as usize);
            order.extend_from_slice(&by_time[cursor..to]);
            cursor = to;
            if cursor == n {
                continue;
            }
        }
        let placed = |s: u32, waiting: &rustc_hash::FxHashMap<u32, u32>| (rank[s as usize] as usize) < cursor && !waiting.contains_key(&s);
        let u = if let Some(Reverse(r)) = ready.pop() {
            by_time[r as usize]
        } else if cursor < n {
            let u = by_time[cursor];
            let is_late = late_at.next_if_eq(&(cursor as u32)).is_some();
            if is_late || !waiting.is_empty() {
                src.clear();
                sources(u as usize, &mut src);
                let unplaced = src.iter().filter(|&&s| !placed(s, &waiting)).count() as u32;
                if unplaced > 0 {
                    for &s in &src {
                        if !placed(s, &waiting) {
                            waiters.entry(s).or_default().push(u);
                        }
                    }
                    waiting.insert(u, unplaced);
                    cursor += 1;
                    continue;
                }
            }
            cursor += 1;
            u
        } else {
            // A cycle: release the earliest waiting unit, dropping its edges from units not placed.
            let u = *waiting.keys().min_by_key(|&&w| rank[w as usize]).expect("a unit waits");
            src.clear();
            sources(u as usize, &mut src);
            dropped.extend(src.iter().enumerate().filter(|&(_, &s)| !placed(s, &waiting)).map(|(k, _)| (u, k as u32)));
            u
        };
        waiting.remove(&u);
        order.push(u);
        if let Some(ds) = waiters.remove(&u) {
            for d in ds {
                if let Some(count) = waiting.get_mut(&d) {
                    *count -= 1;
                    if *count == 0 {
                        ready.push(Reverse(rank[d as usize]));
                    }
                }
            }
        }
    }
    // Only the units placed out of time order move.
    for (p, (&u, &was)) in order.iter().zip(&by_time).enumerate() {
        if u != was {
            rank[u as usize] = p as u32;
        }
    }
    dropped.sort_unstable();
    (order, rank, dropped)
}

#[cfg(test)]
mod tests {
    /// (order, dropped per edge) for edges src[e] -> dst[e].
    fn order(key: &[i64], src: &[u32], dst: &[u32]) -> (Vec<u32>, Vec<bool>) {
        let n = key.len();
        let (off, ids) = super::super::rows_by_key(dst, n);
        let span = (*key.iter().min().unwrap(), *key.iter().max().unwrap());
        let (by_time, rank) = super::time_order(n, span, |f| f(key, 0));
        let edges = |u: usize| off[u] as usize..off[u + 1] as usize;
        let late: Vec<u32> = (0..n as u32).filter(|&u| edges(u as usize).any(|p| rank[src[ids[p] as usize] as usize] > rank[u as usize])).collect();
        let (order, pos, dropped) = super::repair(by_time, rank, &late, |u, out| out.extend(edges(u).map(|p| src[ids[p] as usize])));
        assert_eq!(positions(&order), pos);
        let mut d = vec![false; src.len()];
        for (u, k) in dropped {
            d[ids[off[u as usize] as usize + k as usize] as usize] = true;
        }
        (order, d)
    }

    fn positions(order: &[u32]) -> Vec<u32> {
        let mut pos = vec![0; order.len()];
        for (p, &u) in order.iter().enumerate() {
            pos[u as usize] = p as u32;
        }
        pos
    }

    #[test]
    fn time_order_is_kept_when_every_edge_goes_forward() {
        let (order, dropped) = order(&[30, 10, 20], &[1, 2], &[2, 0]);
        assert_eq!(order, [1, 2, 0]);
        assert!(dropped.iter().all(|d| !d));
    }

    #[test]
    fn a_backward_edge_is_repaired_keeping_time_order_elsewhere() {
        // Unit 2 (t=15) depends on unit 3 (t=20): 3 must come first; 0 and 1 keep their places.
        let (order, dropped) = order(&[0, 10, 15, 20, 30], &[3, 0], &[2, 1]);
        let pos = positions(&order);
        assert!(pos[3] < pos[2] && pos[0] < pos[1]);
        assert_eq!(order, [0, 1, 3, 2, 4]);
        assert!(dropped.iter().all(|d| !d));
    }

    #[test]
    fn a_cycle_is_broken_at_its_earliest_unit() {
        // 1 -> 2 -> 1: unit 1 (earlier) is released, its edge from 2 dropped.
        let (order, dropped) = order(&[0, 10, 20], &[1, 2], &[2, 1]);
        assert_eq!(order, [0, 1, 2]);
        assert_eq!(dropped, [false, true]);
    }

    /// The dense Kahn the repair replaced (checking every unit's sources as the cursor passes it),
    /// as it was: the reference.
    fn dense_kahn(by_time: Vec<u32>, mut rank: Vec<u32>, in_off: &[u32], src: impl Fn(usize) -> u32) -> (Vec<u32>, Vec<u32>, Vec<u32>) {
        let n = by_time.len();
        let ins = |u: usize| in_off[u] as usize..in_off[u + 1] as usize;
        if (0..n).all(|u| ins(u).all(|e| rank[src(e) as usize] < rank[u])) {
            return (by_time, rank, Vec::new());
        }

        // Kahn, taking the earliest ready unit each time. A cursor walks the time order and places
        // each unit whose sources are placed; the few that are not wait, counting their unplaced
        // sources, and join a heap (by time) when the count reaches 0, to be placed before the cursor
        // moves on.
        let mut placed = vec![false; n];
        let mut pending = vec![0u32; n];
        let mut waiters: rustc_hash::FxHashMap<u32, Vec<u32>> = rustc_hash::FxHashMap::default(); // source -> waiting units
        let mut late: std::collections::BinaryHeap<std::cmp::Reverse<u32>> = std::collections::BinaryHeap::new(); // ready, behind the cursor
        let mut order = Vec::with_capacity(n);
        let mut dropped = Vec::new();
        let mut cursor = 0usize; // in by_time: the next unit not yet passed
        let mut oldest = 0usize; // in by_time: every unit before it is placed
        while order.len() < n {
            let u = if let Some(std::cmp::Reverse(r)) = late.pop() {
                by_time[r as usize] as usize
            } else if cursor < n {
                let u = by_time[cursor] as usize;
                cursor += 1;
                let waiting = ins(u).filter(|&e| !placed[src(e) as usize]).count();
                if waiting > 0 {
                    pending[u] = waiting as u32;
                    for e in ins(u) {
                        if !placed[src(e) as usize] {
                            waiters.entry(src(e)).or_default().push(u as u32);
                        }
                    }
                    continue;
                }
                u
            } else {
                // A cycle: release the earliest unit not yet placed, dropping its waiting edges.
                while placed[by_time[oldest] as usize] {
                    oldest += 1;
                }
                let u = by_time[oldest] as usize;
                dropped.extend(ins(u).filter(|&e| !placed[src(e) as usize]).map(|e| e as u32));
                u
            };
            if placed[u] {
                continue;
            }
            placed[u] = true;
            order.push(u as u32);
            if !waiters.is_empty() {
                for d in waiters.remove(&(u as u32)).unwrap_or_default() {
                    let d = d as usize;
                    if !placed[d] {
                        pending[d] -= 1;
                        if pending[d] == 0 {
                            late.push(std::cmp::Reverse(rank[d]));
                        }
                    }
                }
            }
        }
        for (p, &u) in order.iter().enumerate() {
            rank[u as usize] = p as u32;
        }
        dropped.sort_unstable();
        (order, rank, dropped)
    }

    #[test]
    fn the_repair_is_the_dense_kahn_it_replaced() {
        // Random graphs: times with many ties, edges forward, backward, repeated and in cycles.
        let mut rng = fastrand::Rng::with_seed(7);
        for case in 0..3000 {
            let n = rng.usize(1..40);
            let key: Vec<i64> = (0..n).map(|_| rng.i64(0..(n as i64 / 2 + 1))).collect();
            let n_edges = rng.usize(0..3 * n);
            let (mut src, mut dst) = (Vec::new(), Vec::new());
            for _ in 0..n_edges {
                let (a, b) = (rng.u32(0..n as u32), rng.u32(0..n as u32));
                // Mostly forward in time, as capped lags make them; some backward.
                if a != b && (key[a as usize] <= key[b as usize] || rng.u8(0..4) == 0) {
                    src.push(a);
                    dst.push(b);
                }
            }
            let (got, got_dropped) = order(&key, &src, &dst);
            // The reference, on the same CSR.
            let (off, ids) = super::super::rows_by_key(&dst, n);
            let span = (*key.iter().min().unwrap(), *key.iter().max().unwrap());
            let (by_time, rank) = super::time_order(n, span, |f| f(&key, 0));
            let (want, want_pos, want_dropped) = dense_kahn(by_time, rank, &off, |p| src[ids[p] as usize]);
            assert_eq!(positions(&want), want_pos);
            let mut d = vec![false; src.len()];
            for p in want_dropped {
                d[ids[p as usize] as usize] = true;
            }
            assert_eq!((got, got_dropped), (want, d), "case {case}: keys {key:?}, edges {src:?} -> {dst:?}");
        }
    }

}
