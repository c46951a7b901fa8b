//! Interval work over whole columns: which items overlap which queries, and by how much.

/// For every query interval `[q_start, q_end)`, the items `[i_start, i_end)` it overlaps and the
/// overlap in ns. Items must be sorted by start. Returns (query index, item index, overlap ns),
/// sorted by query then item. Cost: a binary search per query plus the overlaps found, with a
/// prefix maximum of item ends to stop the backward scan early.
pub fn overlaps(q_start: &[i64], q_end: &[i64], i_start: &[i64], i_end: &[i64]) -> (Vec<i64>, Vec<i64>, Vec<i64>) {
    debug_assert!(i_start.windows(2).all(|w| w[0] <= w[1]), "items sorted by start");
    let mut reach = Vec::with_capacity(i_end.len());
    let mut furthest = i64::MIN;
    for &e in i_end {
        furthest = furthest.max(e);
        reach.push(furthest);
    }
    let (mut qs, mut is, mut ns) = (Vec::new(), Vec::new(), Vec::new());
    for (q, (&start, &end)) in q_start.iter().zip(q_end).enumerate() {
        // Items starting before the query ends; walk back while some of them may still reach it.
        let mut i = i_start.partition_point(|&s| s < end);
        let first = qs.len();
        while i > 0 && reach[i - 1] > start {
            i -= 1;
            let overlap = end.min(i_end[i]) - start.max(i_start[i]);
            if overlap > 0 {
                qs.push(q as i64);
                is.push(i as i64);
                ns.push(overlap);
            }
        }
        is[first..].reverse();
        ns[first..].reverse();
    }
    (qs, is, ns)
}

/// For every point, the innermost interval `[start, end]` that covers it (ends inclusive), as an
/// index into the intervals, -1 where none does. Intervals nest (push/pop ranges of one thread);
/// where two only overlap, the later-starting one counts as inner. A sweep in time order with a
/// stack of the open intervals: O((n + m) log(n + m)) for the sorts, then linear.
pub fn innermost_covering(start: &[i64], end: &[i64], points: &[i64]) -> Vec<i64> {
    let mut by_start: Vec<usize> = (0..start.len()).collect();
    // Outer first on a tie: the longer interval opens before the one nested in it.
    by_start.sort_by_key(|&i| (start[i], std::cmp::Reverse(end[i])));
    // Points mostly come in time order (the gaps of a thread's calls): sorted only where not.
    let by_time = (!points.windows(2).all(|w| w[0] <= w[1])).then(|| {
        let mut by_time: Vec<usize> = (0..points.len()).collect();
        by_time.sort_by_key(|&p| points[p]);
        by_time
    });
    let mut out = vec![-1; points.len()];
    let mut open: Vec<usize> = Vec::new();
    let mut next = 0;
    for q in 0..points.len() {
        let p = by_time.as_ref().map_or(q, |by_time| by_time[q]);
        let t = points[p];
        while next < by_start.len() && start[by_start[next]] <= t {
            open.push(by_start[next]);
            next += 1;
        }
        // Intervals that ended before t stay closed for every later point too; one still open
        // below a closed one is found once the closed ones above it are gone.
        while let Some(&top) = open.last() {
            if end[top] >= t {
                break;
            }
            open.pop();
        }
        out[p] = open.last().map_or(-1, |&i| i as i64);
    }
    out
}

/// Of kernels given in start order as (start, end, is NCCL): the time NCCL kernels cover, and the
/// time they share with the compute kernels (the rest). NCCL's are merged as they come, compute's
/// too, each merged compute piece overlapped with NCCL's intervals.
pub fn nccl_overlap(kernels: impl Iterator<Item = (i64, i64, bool)> + Clone) -> (i64, i64) {
    let mut nccl = Merged::default();
    for (s, e, _) in kernels.clone().filter(|k| k.2) {
        nccl.add(s, e);
    }
    let nccl = nccl.0;
    let mut overlap = Overlap { with: &nccl, next: 0, total: 0 };
    let mut compute: Option<(i64, i64)> = None; // the piece being merged
    for (s, e, _) in kernels.filter(|k| !k.2) {
        compute = match compute {
            Some((lo, hi)) if s <= hi => Some((lo, hi.max(e))),
            Some(piece) => {
                overlap.add(piece);
                Some((s, e))
            }
            None => Some((s, e)),
        };
    }
    if let Some(piece) = compute {
        overlap.add(piece);
    }
    (length(&nccl), overlap.total)
}

/// Intervals merged as they come in start order (touching ones merged).
#[derive(Default)]
struct Merged(Vec<(i64, i64)>);

impl Merged {
    fn add(&mut self, s: i64, e: i64) {
        match self.0.last_mut() {
            Some((_, hi)) if s <= *hi => *hi = (*hi).max(e),
            _ => self.0.push((s, e)),
        }
    }
}

/// The time disjoint pieces, given in start order, share with disjoint sorted intervals.
struct Overlap<'a> {
    with: &'a [(i64, i64)],
    next: usize, // the first interval that may reach a later piece
    total: i64,
}

impl Overlap<'_> {
    fn add(&mut self, (lo, hi): (i64, i64)) {
        while self.next < self.with.len() && self.with[self.next].1 <= lo {
            self.next += 1;
        }
        for &(s, e) in self.with[self.next..].iter().take_while(|&&(s, _)| s < hi) {
            self.total = self.total.wrapping_add(hi.min(e) - lo.max(s));
        }
    }
}

fn length(intervals: &[(i64, i64)]) -> i64 {
    intervals.iter().fold(0i64, |total, (lo, hi)| total.wrapping_add(hi - lo))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn intervals_merged_and_overlapped_in_start_order() {
        let mut m = Merged::default();
        for (s, e) in [(0, 5), (5, 8), (10, 20), (12, 14), (30, 40), (31, 35)] {
            m.add(s, e);
        }
        let m = m.0;
        assert_eq!((m.clone(), length(&m)), (vec![(0, 8), (10, 20), (30, 40)], 8 + 10 + 10));
        let mut o = Overlap { with: &m, next: 0, total: 0 };
        for piece in [(-5, 0), (4, 11), (15, 16), (25, 45)] {
            o.add(piece);
        }
        assert_eq!(o.total, 4 + 1 + 1 + 10);
    }

    #[test]
    fn nccl_time_and_its_overlap_with_compute() {
        // NCCL [0,8] (two touching) and [30,40]; compute [4,11] and [12,14] (apart), [25,35] [33,45].
        let kernels = [(0, 5, true), (4, 11, false), (5, 8, true), (12, 14, false), (25, 35, false), (30, 40, true), (33, 45, false)];
        assert_eq!(nccl_overlap(kernels.into_iter()), (8 + 10, 4 + 10));
        assert_eq!(nccl_overlap(std::iter::empty()), (0, 0));
        assert_eq!(nccl_overlap([(0, 10, false)].into_iter()), (0, 0));
    }

    #[test]
    fn the_innermost_covering_interval_of_each_point() {
        // step [0,100] > loader [10,30] > read [12,14]; optimizer [60,90]; an open gap at 200.
        let (s, e) = ([0, 10, 12, 60], [100, 30, 14, 90]);
        let points = [13, 5, 20, 200, 75, 95, 30, 100];
        let want = [2, 0, 1, -1, 3, 0, 1, 0];
        assert_eq!(innermost_covering(&s, &e, &points), want);
        // The same points in time order, which are not sorted again.
        let mut order: Vec<usize> = (0..points.len()).collect();
        order.sort_by_key(|&p| points[p]);
        let in_order: Vec<i64> = order.iter().map(|&p| points[p]).collect();
        assert_eq!(innermost_covering(&s, &e, &in_order), order.iter().map(|&p| want[p]).collect::<Vec<_>>());
    }

    #[test]
    fn overlaps_found_with_their_lengths() {
        // Items: [0,10) [2,4) [5,30) [40,50)
        let (q, i, ns) = overlaps(&[3, 20, 35, 100], &[8, 45, 38, 110], &[0, 2, 5, 40], &[10, 4, 30, 50]);
        assert_eq!(q, [0, 0, 0, 1, 1]);
        assert_eq!(i, [0, 1, 2, 2, 3]);
        assert_eq!(ns, [5, 1, 3, 10, 5]);
    }

    #[test]
    fn a_long_early_item_is_not_missed() {
        // The first item spans everything; the later short ones end before the query.
        let (q, i, ns) = overlaps(&[50], &[60], &[0, 10, 20], &[100, 12, 22]);
        assert_eq!((q, i, ns), (vec![0], vec![0], vec![10]));
    }
}
