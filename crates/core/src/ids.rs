//! Id columns as a rank's trace holds them: int32 where their values fit, else int64, read as
//! they are (not copied wider); and their rows grouped by id.

use rustc_hash::FxHashMap;

/// An id column (thread ids, stream ids, name ids, steps): int32 or int64.
#[derive(Clone, Copy)]
pub enum Ids<'a> {
    I32(&'a [i32]),
    I64(&'a [i64]),
}

impl Ids<'_> {
    pub fn len(&self) -> usize {
        match self {
            Ids::I32(v) => v.len(),
            Ids::I64(v) => v.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    #[inline]
    pub fn at(&self, i: usize) -> i64 {
        match self {
            Ids::I32(v) => v[i] as i64,
            Ids::I64(v) => v[i],
        }
    }

    /// The rows `keep` keeps, grouped by id: each id's rows in row order, ids ascending (a thread's
    /// calls, say). Rows of one id mostly come in runs: the id is looked up where a run starts.
    pub(crate) fn rows_by_id(&self, keep: impl Fn(usize) -> bool) -> Vec<(i64, Vec<usize>)> {
        let mut place: FxHashMap<i64, usize> = FxHashMap::default(); // an id's place in `out`
        let mut out: Vec<(i64, Vec<usize>)> = Vec::new();
        let mut run: Option<(i64, usize)> = None;
        for row in (0..self.len()).filter(|&row| keep(row)) {
            let id = self.at(row);
            let k = match run {
                Some((last, k)) if last == id => k,
                _ => *place.entry(id).or_insert_with(|| {
                    out.push((id, Vec::new()));
                    out.len() - 1
                }),
            };
            out[k].1.push(row);
            run = Some((id, k));
        }
        out.sort_unstable_by_key(|(id, _)| *id);
        out
    }
}

/// The first row with each id, a negative id unknown: a process's calls by correlation id (what an
/// op's launch and the sync and event records name a call by). The ids are mostly dense (the
/// runtime numbers its calls in order): a table indexed by id then, else the sorted (id, row) pairs
/// searched (a hash map of a quarter million calls was 5x slower: every probe a cache miss).
pub(crate) enum FirstRow {
    Dense { base: i64, row: Vec<u32> },
    Sorted(Vec<(i64, u32)>),
}

impl FirstRow {
    const NONE: u32 = u32::MAX;

    /// The index of rows `0..n`, row `i`'s id `id(i)`.
    pub(crate) fn new(n: usize, id: impl Fn(usize) -> i64) -> FirstRow {
        let (mut lo, mut hi, mut count) = (i64::MAX, i64::MIN, 0usize);
        for k in (0..n).map(&id).filter(|&k| k >= 0) {
            (lo, hi, count) = (lo.min(k), hi.max(k), count + 1);
        }
        let mut index = match count {
            0 => FirstRow::Sorted(Vec::new()),
            n if ((hi - lo) as u64) < 4 * n as u64 + 1024 => FirstRow::Dense { base: lo, row: vec![Self::NONE; (hi - lo + 1) as usize] },
            n => FirstRow::Sorted(Vec::with_capacity(n)),
        };
        for i in 0..n {
            let k = id(i);
            if k < 0 {
                continue;
            }
            match &mut index {
                FirstRow::Dense { base, row } => {
                    let slot = &mut row[(k - *base) as usize];
                    if *slot == Self::NONE {
                        *slot = i as u32; // the first row with this id
                    }
                }
                FirstRow::Sorted(v) => v.push((k, i as u32)),
            }
        }
        if let FirstRow::Sorted(v) = &mut index {
            v.sort_unstable();
        }
        index
    }

    /// The first row with this id.
    pub(crate) fn find(&self, id: i64) -> Option<u32> {
        if id < 0 {
            return None;
        }
        match self {
            FirstRow::Dense { base, row } => {
                let k = usize::try_from(id - base).ok()?;
                row.get(k).copied().filter(|&i| i != Self::NONE)
            }
            FirstRow::Sorted(v) => {
                let k = v.partition_point(|&(c, _)| c < id);
                v.get(k).filter(|&&(c, _)| c == id).map(|&(_, i)| i)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_grouped_by_id_in_row_order_ids_ascending() {
        // Ids in runs and scattered, a kept subset: as a map of id -> rows filled in row order.
        let mut rng = fastrand::Rng::with_seed(3);
        for case in 0..200 {
            let n = rng.usize(0..60);
            let mut ids: Vec<i64> = Vec::with_capacity(n);
            while ids.len() < n {
                let (id, run) = (rng.i64(-3..4) * 1_000_000_007, if case % 2 == 0 { rng.usize(1..8) } else { 1 });
                ids.extend(std::iter::repeat_n(id, run.min(n - ids.len())));
            }
            let keep: Vec<bool> = (0..n).map(|_| rng.u8(0..4) > 0).collect();
            let mut want: std::collections::BTreeMap<i64, Vec<usize>> = Default::default();
            (0..n).filter(|&r| keep[r]).for_each(|r| want.entry(ids[r]).or_default().push(r));
            assert_eq!(Ids::I64(&ids).rows_by_id(|r| keep[r]), want.into_iter().collect::<Vec<_>>(), "case {case}");
        }
    }
}
