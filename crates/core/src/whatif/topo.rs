//! Topological order of the graph's units, as close to measured-time order as the edges allow.
//!
//! Measured-time order is a topological order when every edge goes forward in time, which capped
//! lags make the rule but not a law: an edge may tie (a zero-length op), or go backward where the
//! trace bends causality (a transfer that ends before the last rank arrived, by clock error). So the
//! time order is checked, and only when some edge goes backward is it repaired by Kahn's algorithm,
//! taking ready units in time order (a heap). A cycle (only possible from contradictory records) is
//! broken by releasing the earliest waiting unit and dropping its edges from units not yet placed;
//! the dropped edges are reported.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// The units by time (`time[u]`, ties by unit index), and each unit's place in that order.
pub(crate) fn time_order(time: &[i64]) -> (Vec<u32>, Vec<u32>) {
    // The sort merges the long runs the units come in (each rank's calls, its ops, ... in time
    // order). Where the times' span leaves room beside the unit index, the keys are one u64 each
    // (time from the earliest, then the index): half the memory of (time, index) pairs.
    let n = time.len();
    let by_time: Vec<u32> = match (time.iter().min(), time.iter().max()) {
        (Some(&lo), Some(&hi)) if fits_packed(hi.abs_diff(lo), n) => {
            let bits = usize::BITS - n.leading_zeros();
            let mut keyed: Vec<u64> = time.iter().enumerate().map(|(u, &t)| (t.abs_diff(lo) << bits) | u as u64).collect();
            keyed.sort();
            keyed.into_iter().map(|k| (k & ((1 << bits) - 1)) as u32).collect()
        }
        _ => {
            let mut keyed: Vec<(i64, u32)> = time.iter().enumerate().map(|(u, &t)| (t, u as u32)).collect();
            keyed.sort(); // stable: ties stay in unit order
            keyed.into_iter().map(|(_, u)| u).collect()
        }
    };
    let mut rank = vec![0u32; n];
    for (p, &u) in by_time.iter().enumerate() {
        rank[u as usize] = p as u32;
    }
    (by_time, rank)
}

/// Whether a span of times and the index of one of n units fit in 64 bits together.
fn fits_packed(span: u64, n: usize) -> bool {
    let bits = usize::BITS - n.leading_zeros();
    u64::BITS - span.leading_zeros() + bits <= 64
}

/// Returns `order` (position -> unit), `pos` (unit -> position) and the edges dropped to break a
/// cycle, from the units in time order ([`time_order`]). Edges are numbered by destination:
/// `in_off[u]..in_off[u + 1]` are the edges into unit u, `src(e)` the unit edge e leaves from.
pub(crate) fn order(by_time: Vec<u32>, mut rank: Vec<u32>, in_off: &[u32], src: impl Fn(usize) -> u32) -> (Vec<u32>, Vec<u32>, Vec<u32>) {
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
    let mut late: BinaryHeap<Reverse<u32>> = BinaryHeap::new(); // ready, behind the cursor
    let mut order = Vec::with_capacity(n);
    let mut dropped = Vec::new();
    let mut cursor = 0usize; // in by_time: the next unit not yet passed
    let mut oldest = 0usize; // in by_time: every unit before it is placed
    while order.len() < n {
        let u = if let Some(Reverse(r)) = late.pop() {
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
                        late.push(Reverse(rank[d]));
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

#[cfg(test)]
mod tests {
    use super::*;

    /// (order, dropped per edge) for edges src[e] -> dst[e].
    fn order(key: &[i64], src: &[u32], dst: &[u32]) -> (Vec<u32>, Vec<bool>) {
        let n = key.len();
        let mut off = vec![0u32; n + 1];
        for &d in dst {
            off[d as usize + 1] += 1;
        }
        for u in 0..n {
            off[u + 1] += off[u];
        }
        let mut fill = off.clone();
        let mut ids = vec![0u32; dst.len()];
        for (e, &d) in dst.iter().enumerate() {
            ids[fill[d as usize] as usize] = e as u32;
            fill[d as usize] += 1;
        }
        let (by_time, rank) = super::time_order(key);
        let (order, pos, dropped) = super::order(by_time, rank, &off, |p| src[ids[p] as usize]);
        assert_eq!(positions(&order), pos);
        let mut d = vec![false; src.len()];
        for p in dropped {
            d[ids[p as usize] as usize] = true;
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
}
