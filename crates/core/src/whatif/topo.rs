//! Topological order of the graph's units, as close to measured-time order as the edges allow.
//!
//! Measured-time order is a topological order when every edge goes forward in time, which capped
//! lags make the rule but not a law: an edge may tie (a zero-length op), or go backward where the
//! trace bends causality (a transfer that ends before the last rank arrived, by clock error). So the
//! time order is checked, and only when some edge goes backward is it repaired by Kahn's algorithm,
//! taking ready units in time order (a heap). A cycle (only possible from contradictory records) is
//! broken by releasing the earliest waiting unit and dropping its edges from units not yet placed;
//! the dropped edges are reported.

use rayon::slice::ParallelSliceMut;
use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// Returns `order` (position -> unit) and, per edge, whether it was dropped to break a cycle.
/// `key[u]` is unit u's measured time; ties go by unit index.
pub(crate) fn order(key: &[i64], src: &[u32], dst: &[u32]) -> (Vec<u32>, Vec<bool>) {
    let n = key.len();
    let mut keyed: Vec<(i64, u32)> = key.iter().enumerate().map(|(u, &k)| (k, u as u32)).collect();
    keyed.par_sort_unstable();
    let by_time: Vec<u32> = keyed.into_iter().map(|(_, u)| u).collect();
    let mut rank = vec![0u32; n];
    for (p, &u) in by_time.iter().enumerate() {
        rank[u as usize] = p as u32;
    }
    let mut dropped = vec![false; src.len()];
    if src.iter().zip(dst).all(|(&s, &d)| rank[s as usize] < rank[d as usize]) {
        return (by_time, dropped);
    }

    // Kahn, taking the earliest ready unit each time. Most units become ready before time order
    // reaches them, so a cursor walks the time order and only the units that become ready after
    // the cursor passed them (behind a backward edge) wait in a heap: it stays small.
    let (out_off, out_edge) = csr(n, src);
    let mut incoming = None; // in-edges by destination, made at the first cycle
    let mut indeg = vec![0u32; n];
    for &d in dst {
        indeg[d as usize] += 1;
    }
    let mut placed = vec![false; n];
    let mut late: BinaryHeap<Reverse<u32>> = BinaryHeap::new(); // ready, behind the cursor
    let mut order = Vec::with_capacity(n);
    let mut cursor = 0usize; // in by_time: the next unit not yet passed
    let mut oldest = 0usize; // in by_time: every unit before it is placed
    while order.len() < n {
        while cursor < n && (placed[by_time[cursor] as usize] || indeg[by_time[cursor] as usize] > 0) {
            cursor += 1; // passed: placed, or waiting (it goes to `late` when ready)
        }
        let u = match late.peek() {
            Some(&Reverse(r)) if cursor >= n || (r as usize) < cursor => {
                late.pop();
                by_time[r as usize]
            }
            _ if cursor < n => by_time[cursor],
            _ => {
                // A cycle: release the earliest unit not yet placed, dropping its waiting edges.
                while placed[by_time[oldest] as usize] {
                    oldest += 1;
                }
                let u = by_time[oldest];
                let (in_off, in_edge) = incoming.get_or_insert_with(|| csr(n, dst));
                for &e in &in_edge[in_off[u as usize] as usize..in_off[u as usize + 1] as usize] {
                    if !placed[src[e as usize] as usize] {
                        dropped[e as usize] = true;
                    }
                }
                indeg[u as usize] = 0;
                u
            }
        };
        if placed[u as usize] {
            continue;
        }
        placed[u as usize] = true;
        order.push(u);
        for &e in &out_edge[out_off[u as usize] as usize..out_off[u as usize + 1] as usize] {
            let d = dst[e as usize] as usize;
            if dropped[e as usize] || placed[d] {
                continue;
            }
            indeg[d] -= 1;
            if indeg[d] == 0 && (rank[d] as usize) < cursor {
                late.push(Reverse(rank[d]));
            }
        }
    }
    (order, dropped)
}

/// Edge ids grouped by `of[e]` (offsets, ids).
fn csr(n: usize, of: &[u32]) -> (Vec<u32>, Vec<u32>) {
    let mut off = vec![0u32; n + 1];
    for &u in of {
        off[u as usize + 1] += 1;
    }
    for u in 0..n {
        off[u + 1] += off[u];
    }
    let mut fill = off.clone();
    let mut ids = vec![0u32; of.len()];
    for (e, &u) in of.iter().enumerate() {
        ids[fill[u as usize] as usize] = e as u32;
        fill[u as usize] += 1;
    }
    (off, ids)
}

#[cfg(test)]
mod tests {
    use super::*;

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
