//! The job's tables split by rank: each rank's rows of a table as one view, in the table's order.
//!
//! Where every rank's rows are one run of one part, or run on from the end of one part into the
//! start of the next (the what-if's own input: a part per rank, its rows as its trace holds them,
//! then a short part of the rows the what-if adds), the views borrow the parts' columns;
//! otherwise (a part of many ranks' rows, a rank in several places) each rank's rows are gathered,
//! as i64. Time columns are read at random by the build: i64 values, possibly shifted by a
//! constant ([`Column::Shifted`]) and followed by an i64 tail, else gathered.

use super::input::{Column, Part};
use std::ops::Range;

/// Where a rank's rows of a table are among the table's rows (in order).
pub(crate) enum Rows<'v> {
    Run { first: usize, len: usize },
    List(&'v [u32]),
}

impl Rows<'_> {
    pub(crate) fn len(&self) -> usize {
        match self {
            Rows::Run { len, .. } => *len,
            Rows::List(rows) => rows.len(),
        }
    }

    /// The table's row of the rank's row k.
    #[inline]
    pub(crate) fn global(&self, k: usize) -> usize {
        match self {
            Rows::Run { first, .. } => first + k,
            Rows::List(rows) => rows[k] as usize,
        }
    }
}

/// One column of a rank's rows: the first `n` in one part, the rest at the start of the next.
#[derive(Clone, Copy)]
pub(crate) struct RankColumn<'v> {
    head: Column<'v>,
    n: usize,
    tail: Column<'v>,
}

impl<'v> RankColumn<'v> {
    /// A column of n rows, all in one part.
    pub(crate) fn whole(column: Column<'v>, n: usize) -> RankColumn<'v> {
        RankColumn { head: column, n, tail: Column::All(0) }
    }

    #[inline]
    pub(crate) fn get(&self, k: usize) -> i64 {
        if k < self.n {
            self.head.get(k)
        } else {
            self.tail.get(k - self.n)
        }
    }

    /// Its value when all of its `len` rows (len > 0) have the same.
    pub(crate) fn single_value(&self, len: usize) -> Option<i64> {
        match (self.n, len - self.n.min(len)) {
            (_, 0) => self.head.single_value(self.n),
            (0, rest) => self.tail.single_value(rest),
            (n, rest) => self.head.single_value(n).filter(|&v| self.tail.single_value(rest) == Some(v)),
        }
    }
}

/// A time column of a rank's rows: its first values plus a constant, then a tail of values.
#[derive(Clone, Copy)]
pub(crate) struct RankTimes<'v> {
    head: &'v [i64],
    shift: i64,
    tail: &'v [i64],
}

impl RankTimes<'_> {
    /// Row k's time.
    #[inline]
    pub(crate) fn at(&self, k: usize) -> i64 {
        match self.head.get(k) {
            Some(&t) => t.wrapping_add(self.shift),
            None => self.tail[k - self.head.len()],
        }
    }

    /// `f(values, constant)` of rows `ks` (each value plus the constant is a row's time), a
    /// stretch at a time.
    pub(crate) fn runs(&self, ks: Range<usize>, f: &mut dyn FnMut(&[i64], i64)) {
        let n = self.head.len();
        if ks.start < n {
            f(&self.head[ks.start..ks.end.min(n)], self.shift);
        }
        if ks.end > n {
            f(&self.tail[ks.start.max(n) - n..ks.end - n], 0);
        }
    }

    pub(crate) fn max(&self) -> Option<i64> {
        let head = self.head.iter().max().map(|&t| t.wrapping_add(self.shift));
        head.into_iter().chain(self.tail.iter().copied()).max()
    }

    pub(crate) fn min(&self) -> Option<i64> {
        let head = self.head.iter().min().map(|&t| t.wrapping_add(self.shift));
        head.into_iter().chain(self.tail.iter().copied()).min()
    }
}

/// One rank's rows of a table: where they are, and its columns (rows in the table's order).
pub(crate) struct RankTable<'v, const K: usize> {
    pub(crate) rows: Rows<'v>,
    columns: [RankColumn<'v>; K],
}

impl<'v, const K: usize> RankTable<'v, K> {
    pub(crate) fn len(&self) -> usize {
        self.rows.len()
    }

    pub(crate) fn column(&self, j: usize) -> RankColumn<'v> {
        self.columns[j]
    }

    /// A time column (gathered as i64 where the part's could not be read where it lies).
    pub(crate) fn times(&self, j: usize) -> RankTimes<'v> {
        let c = self.columns[j];
        let tail = match (c.tail, self.len() - c.n) {
            (_, 0) => &[][..],
            (Column::I64(s), _) => s,
            _ => unreachable!("a time column's tail is i64 in a rank's view"),
        };
        match c.head {
            Column::I64(head) => RankTimes { head, shift: 0, tail },
            Column::Shifted(head, shift) => RankTimes { head, shift, tail },
            _ => unreachable!("time columns are i64 in a rank's view"),
        }
    }
}

/// A table split by rank: where each rank's rows are, what had to be gathered, and how to find a
/// row's rank.
pub(crate) struct Split<const K: usize> {
    by: By,
    /// Per rank and column: the rank's rows gathered as i64 (empty where borrowed).
    gathered: Vec<Vec<Vec<i64>>>,
    part_first: Vec<usize>,
}

/// A rank's rows as one run: a part and its rows, and how many of the next part's first rows
/// continue them (where the part's rows end the part).
#[derive(Clone)]
struct Run {
    part: usize,
    rows: Range<usize>,
    tail: usize,
}

impl Run {
    fn len(&self) -> usize {
        self.rows.len() + self.tail
    }
}

enum By {
    /// Every rank's rows one run of one part: per rank its run (part, the part's rows); the runs by
    /// first row; per block of rows, the run its first row is in (a row's run is its block's, or
    /// one of the next few).
    Runs { run: Vec<Option<Run>>, starts: Vec<(usize, u32)>, block: Vec<u32> },
    /// Per row, its rank and row within the rank; per rank, its rows.
    Rows { of_row: Vec<(u32, u32)>, rows: Vec<Vec<u32>> },
}

/// Rows per block of [`By::Runs`].
const BLOCK_BITS: u32 = 10;

/// Each rank's run (part, the part's rows), or None where some rank's rows are not one run.
fn one_run_each<'a, const K: usize, P: Part<'a, K>>(parts: &[P], rows: &[usize], n_ranks: usize) -> Option<Vec<Option<Run>>> {
    let mut run: Vec<Option<Run>> = vec![None; n_ranks];
    for (p, (part, &n)) in parts.iter().zip(rows).enumerate() {
        let mut i = 0;
        while i < n {
            let (r, j) = match part.columns()[0] {
                Column::All(r) => (r as usize, n),
                rank => {
                    let r = rank.get(i);
                    (r as usize, (i..n).find(|&j| rank.get(j) != r).unwrap_or(n))
                }
            };
            match &mut run[r] {
                None => run[r] = Some(Run { part: p, rows: i..j, tail: 0 }),
                // The rank's rows run on from the end of the previous part.
                Some(x) if i == 0 && x.part + 1 == p && x.rows.end == rows[x.part] && x.tail == 0 => x.tail = j,
                Some(_) => return None,
            }
            i = j;
        }
    }
    Some(run)
}

impl<const K: usize> Split<K> {
    /// `rows`: each part's number of rows; `times`: the time columns ([`RankTable::times`]).
    pub(crate) fn new<'a, P: Part<'a, K>>(parts: &[P], rows: &[usize], n_ranks: usize, times: &[usize]) -> Split<K> {
        let part_first: Vec<usize> = rows.iter().scan(0, |first, &n| Some(std::mem::replace(first, *first + n))).collect();
        let n_rows: usize = rows.iter().sum();
        if let Some(run) = one_run_each(parts, rows, n_ranks) {
            // Borrowed, but a time column not in a form the views read.
            let readable = |x: &Run, j: usize| {
                let (head, tail) = (parts[x.part].columns()[j], (x.tail > 0).then(|| parts[x.part + 1].columns()[j]));
                matches!(head, Column::I64(_) | Column::Shifted(..)) && tail.is_none_or(|t| matches!(t, Column::I64(_)))
            };
            let gathered: Vec<Vec<Vec<i64>>> = run
                .iter()
                .map(|x| {
                    (0..K)
                        .map(|j| match x {
                            Some(x) if times.contains(&j) && !readable(x, j) => {
                                let mut out = Vec::with_capacity(x.len());
                                parts[x.part].columns()[j].extend_into(x.rows.clone(), &mut out);
                                if x.tail > 0 {
                                    parts[x.part + 1].columns()[j].extend_into(0..x.tail, &mut out);
                                }
                                out
                            }
                            _ => Vec::new(),
                        })
                        .collect()
                })
                .collect();
            let mut starts: Vec<(usize, u32)> =
                run.iter().enumerate().filter_map(|(r, x)| x.as_ref().map(|x| (part_first[x.part] + x.rows.start, r as u32))).collect();
            starts.sort_unstable();
            let mut block = Vec::with_capacity((n_rows >> BLOCK_BITS) + 1);
            let mut k = 0;
            for b in 0..=n_rows >> BLOCK_BITS {
                while k + 1 < starts.len() && starts[k + 1].0 <= b << BLOCK_BITS {
                    k += 1;
                }
                block.push(k as u32);
            }
            return Split { by: By::Runs { run, starts, block }, gathered, part_first };
        }
        // Each row's rank and place among the rank's rows, then every column gathered by rank in
        // one pass over the rows each.
        let mut of_row = Vec::with_capacity(n_rows);
        let mut rank_rows: Vec<Vec<u32>> = vec![Vec::new(); n_ranks];
        for (part, &n) in parts.iter().zip(rows) {
            let rank = part.columns()[0];
            for i in 0..n {
                let r = rank.get(i) as usize;
                of_row.push((r as u32, rank_rows[r].len() as u32));
                rank_rows[r].push(of_row.len() as u32 - 1);
            }
        }
        // (The rank column stays behind: a rank's view knows its rank.)
        let mut gathered: Vec<Vec<Vec<i64>>> =
            rank_rows.iter().map(|x| (0..K).map(|j| if j == 0 { Vec::new() } else { vec![0; x.len()] }).collect()).collect();
        #[allow(clippy::needless_range_loop)] // a column at a time, into every rank's
        for j in 1..K {
            for (p, (part, &n)) in parts.iter().zip(rows).enumerate() {
                let column = part.columns()[j];
                for (i, &(r, k)) in of_row[part_first[p]..part_first[p] + n].iter().enumerate() {
                    gathered[r as usize][j][k as usize] = column.get(i);
                }
            }
        }
        Split { by: By::Rows { of_row, rows: rank_rows }, gathered, part_first }
    }

    /// Rank r's view of the table.
    pub(crate) fn view<'v, 'a: 'v, P: Part<'a, K>>(&'v self, parts: &'v [P], r: usize) -> RankTable<'v, K> {
        let gathered = &self.gathered[r];
        match &self.by {
            By::Runs { run, .. } => match &run[r] {
                None => RankTable { rows: Rows::Run { first: 0, len: 0 }, columns: [RankColumn::whole(Column::I64(&[]), 0); K] },
                Some(x) => RankTable {
                    rows: Rows::Run { first: self.part_first[x.part] + x.rows.start, len: x.len() },
                    columns: std::array::from_fn(|j| match gathered[j].is_empty() {
                        true => RankColumn {
                            head: parts[x.part].columns()[j].slice(x.rows.clone()),
                            n: x.rows.len(),
                            tail: if x.tail > 0 { parts[x.part + 1].columns()[j].slice(0..x.tail) } else { Column::All(0) },
                        },
                        false => RankColumn::whole(Column::I64(&gathered[j]), x.len()),
                    }),
                },
            },
            By::Rows { rows, .. } => RankTable {
                rows: Rows::List(&rows[r]),
                columns: std::array::from_fn(|j| RankColumn::whole(if j == 0 { Column::All(r as i64) } else { Column::I64(&gathered[j]) }, rows[r].len())),
            },
        }
    }

    /// `f(rank, rows within the rank)` of every row of the table, in order, a run of the rank's
    /// rows at a time.
    pub(crate) fn each_run(&self, mut f: impl FnMut(usize, Range<usize>)) {
        match &self.by {
            By::Runs { starts, run, .. } => {
                for &(_, r) in starts {
                    f(r as usize, 0..run[r as usize].as_ref().map_or(0, Run::len));
                }
            }
            By::Rows { of_row, .. } => {
                let mut i = 0;
                while i < of_row.len() {
                    let (r, k) = of_row[i];
                    let mut j = i + 1;
                    while j < of_row.len() && of_row[j] == (r, k + (j - i) as u32) {
                        j += 1;
                    }
                    f(r as usize, k as usize..k as usize + (j - i));
                    i = j;
                }
            }
        }
    }

    /// The rank of the table's row g, and its row within the rank.
    #[inline]
    pub(crate) fn locate(&self, g: usize) -> (usize, usize) {
        match &self.by {
            By::Runs { starts, block, .. } => {
                let mut k = block[g >> BLOCK_BITS] as usize;
                while k + 1 < starts.len() && starts[k + 1].0 <= g {
                    k += 1;
                }
                let (first, r) = starts[k];
                (r as usize, g - first)
            }
            By::Rows { of_row, .. } => {
                let (r, k) = of_row[g];
                (r as usize, k as usize)
            }
        }
    }
}
