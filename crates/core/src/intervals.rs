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

#[cfg(test)]
mod tests {
    use super::*;

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
