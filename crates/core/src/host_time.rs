//! Host time inside the ranges of one rank (NVTX ranges, CPU operators), from its CUDA API calls:
//! the gap before each call is host time of the innermost range around the gap's middle (the
//! trace assigns it, `gap_range`), and, where asked, so is the call itself unless it waits for the
//! GPU. The what-if's host causes cut these pieces (attribution/whatif/host.py).

/// One rank's calls, in start order: where the host time before each began (`gap_start`), the
/// call's own span, whether it waits for the GPU, and the range its gap is in (negative: none).
pub struct Calls<'a> {
    pub start: &'a [i64],
    pub end: &'a [i64],
    pub gap_start: &'a [i64],
    pub gap_range: &'a [i64],
    pub blocking: &'a [bool],
}

/// Columns of one table that differ in length, or a range past the ranges: the caller's bug.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum HostTimeError {
    #[error("host-time columns differ in length ({0} and {1} rows)")]
    Length(usize, usize),
    #[error("a call's range {0} is past the {1} ranges")]
    Range(i64, usize),
}

/// Per range: its host time, the gaps and the calls that do not wait for the GPU apart, and where
/// its first gap began (i64::MAX: no gap in it).
#[derive(Debug, PartialEq, Eq)]
pub struct RangeTime {
    pub gaps: Vec<i64>,
    pub calls: Vec<i64>,
    pub first_gap: Vec<i64>,
}

/// The pieces of host time of the ranges kept, by row (a kept range's row), each row's pieces in
/// time order, each call's gap before the call itself.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Pieces {
    pub row: Vec<i64>,
    pub call: Vec<usize>,
    pub is_call: Vec<bool>,
    pub ns: Vec<i64>,
}

impl Calls<'_> {
    fn check(&self, ranges: usize) -> Result<(), HostTimeError> {
        let n = self.start.len();
        for len in [self.end.len(), self.gap_start.len(), self.gap_range.len(), self.blocking.len()] {
            if len != n {
                return Err(HostTimeError::Length(n, len));
            }
        }
        match self.gap_range.iter().find(|&&r| r >= ranges as i64) {
            Some(&r) => Err(HostTimeError::Range(r, ranges)),
            None => Ok(()),
        }
    }

    /// Each call in a range: (call, range, its gap's host time, its own host time).
    fn pieces(&self, with_calls: bool) -> impl Iterator<Item = (usize, usize, i64, i64)> + '_ {
        (0..self.start.len()).filter(|&c| self.gap_range[c] >= 0).map(move |c| {
            let gap = (self.start[c] - self.gap_start[c]).max(0); // overlapping calls leave no host time
            let own = if with_calls && !self.blocking[c] { self.end[c] - self.start[c] } else { 0 };
            (c, self.gap_range[c] as usize, gap, own)
        })
    }
}

/// Each range's host time: its gaps, and its calls that do not wait for the GPU (in one pass: the
/// what-if reads both, a range's own host time and the range as a whole).
pub fn range_time(calls: &Calls, ranges: usize) -> Result<RangeTime, HostTimeError> {
    calls.check(ranges)?;
    let mut out = RangeTime { gaps: vec![0; ranges], calls: vec![0; ranges], first_gap: vec![i64::MAX; ranges] };
    for (c, range, gap, own) in calls.pieces(true) {
        out.gaps[range] += gap;
        out.calls[range] += own;
        out.first_gap[range] = out.first_gap[range].min(calls.gap_start[c]);
    }
    Ok(out)
}

/// The pieces of the ranges with a row (`row_of[range]` >= 0; distinct rows), in row order. Empty
/// pieces (a gap the call before overlapped, a call not counted) are left out: a cut takes nothing
/// from them.
pub fn pieces(calls: &Calls, row_of: &[i64], with_calls: bool) -> Result<Pieces, HostTimeError> {
    calls.check(row_of.len())?;
    let kept: Vec<_> = calls
        .pieces(with_calls)
        .filter(|&(_, range, gap, own)| row_of[range] >= 0 && (gap > 0 || own != 0))
        .collect();
    let parts = |gap: i64, own: i64| [(false, gap), (true, own)].into_iter().filter(|&(_, ns)| ns != 0);
    // A stable counting sort by row: rows are distinct per range, so they span at most the ranges.
    let low = kept.iter().map(|&(_, range, ..)| row_of[range]).min().unwrap_or(0);
    let span = kept.iter().map(|&(_, range, ..)| row_of[range] - low + 1).max().unwrap_or(0) as usize;
    let mut next = vec![0usize; span + 1];
    for &(_, range, gap, own) in &kept {
        next[(row_of[range] - low) as usize + 1] += parts(gap, own).count();
    }
    for k in 0..span {
        next[k + 1] += next[k];
    }
    let n = next[span];
    let mut out = Pieces { row: vec![0; n], call: vec![0; n], is_call: vec![false; n], ns: vec![0; n] };
    for &(c, range, gap, own) in &kept {
        let slot = &mut next[(row_of[range] - low) as usize];
        for (is_call, ns) in parts(gap, own) {
            out.row[*slot] = row_of[range];
            out.call[*slot] = c;
            out.is_call[*slot] = is_call;
            out.ns[*slot] = ns;
            *slot += 1;
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gaps_and_calls_go_to_their_ranges() {
        // Calls 0-3: gaps of 5, 0 (it overlaps the call before), 7 and 2; call 2 waits for the GPU.
        let calls = Calls {
            start: &[10, 18, 40, 60],
            end: &[20, 30, 50, 61],
            gap_start: &[5, 20, 33, 58],
            gap_range: &[1, 1, -1, 0],
            blocking: &[false, false, true, false],
        };
        let time = range_time(&calls, 3).unwrap();
        assert_eq!(time, RangeTime { gaps: vec![2, 5, 0], calls: vec![1, 10 + 12, 0], first_gap: vec![58, 5, i64::MAX] });
        // Range 1 kept as row 7, range 0 as row 8: row 7's pieces first, in time order.
        let got = pieces(&calls, &[8, 7, -1], true).unwrap();
        // Call 1's gap is empty (it overlaps call 0) and left out.
        assert_eq!(got.row, vec![7, 7, 7, 8, 8]);
        assert_eq!(got.call, vec![0, 0, 1, 3, 3]);
        assert_eq!(got.is_call, vec![false, true, true, false, true]);
        assert_eq!(got.ns, vec![5, 10, 12, 2, 1]);
        let gaps = pieces(&calls, &[8, 7, -1], false).unwrap();
        assert_eq!((gaps.row, gaps.call, gaps.ns), (vec![7, 8], vec![0, 3], vec![5, 2]));
        assert_eq!(pieces(&calls, &[-1, -1, -1], true).unwrap(), Pieces::default());
    }

    #[test]
    fn columns_that_do_not_fit_are_refused() {
        let calls = Calls { start: &[1], end: &[2], gap_start: &[0], gap_range: &[3], blocking: &[false] };
        assert_eq!(range_time(&calls, 2), Err(HostTimeError::Range(3, 2)));
        let calls = Calls { start: &[1], end: &[2, 3], gap_start: &[0], gap_range: &[0], blocking: &[false] };
        assert_eq!(range_time(&calls, 2), Err(HostTimeError::Length(1, 2)));
    }
}
