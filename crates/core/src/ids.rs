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
    /// calls, say).
    pub(crate) fn rows_by_id(&self, keep: impl Fn(usize) -> bool) -> Vec<(i64, Vec<usize>)> {
        let mut rows: FxHashMap<i64, Vec<usize>> = FxHashMap::default();
        for row in (0..self.len()).filter(|&row| keep(row)) {
            rows.entry(self.at(row)).or_default().push(row);
        }
        let mut out: Vec<_> = rows.into_iter().collect();
        out.sort_unstable_by_key(|(id, _)| *id);
        out
    }
}
