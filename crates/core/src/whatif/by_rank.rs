//! The job's tables split by rank: each rank's rows of a table as one view, in the table's order.
//!
//! Where a rank's rows are one run of one part (the what-if's own input: a part per rank), the view
//! borrows the part's columns; otherwise (a part of many ranks' rows, a rank in several parts) its
//! rows are gathered, as i64. Time columns are always i64 slices, read at random by the build.

use super::input::{Column, Part};
use std::ops::Range;

/// Where a rank's rows of a table are among the table's rows (in order).
pub(crate) enum Rows {
    Run { first: usize, len: usize },
    List(Vec<u32>),
}

impl Rows {
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

/// One rank's rows of a table: where they are, and its columns (rows in the table's order).
pub(crate) struct RankTable<'v, const K: usize> {
    pub(crate) rows: Rows,
    columns: [Column<'v>; K],
}

impl<'v, const K: usize> RankTable<'v, K> {
    pub(crate) fn len(&self) -> usize {
        self.rows.len()
    }

    pub(crate) fn column(&self, j: usize) -> Column<'v> {
        self.columns[j]
    }

    /// A time column (gathered as i64 where the part's is not).
    pub(crate) fn times(&self, j: usize) -> &'v [i64] {
        match self.columns[j] {
            Column::I64(s) => s,
            _ => unreachable!("time columns are i64 in a rank's view"),
        }
    }
}

/// A table split by rank: each rank's runs of rows, what had to be gathered, and how to find a
/// row's rank.
pub(crate) struct Split<const K: usize> {
    /// Per rank: its runs (part, the part's rows), in the table's order.
    runs: Vec<Vec<(usize, Range<usize>)>>,
    /// Per rank: its columns gathered as i64 (empty where borrowed).
    gathered: Vec<Vec<Vec<i64>>>,
    part_first: Vec<usize>,
    /// The table's rows by rank: a run per rank (first row, rank), sorted; or per row its (rank, row
    /// within the rank) where some rank's rows are not one run.
    index: Index,
}

enum Index {
    /// The runs, by first row; and per block of rows, the run its first row is in.
    Runs { starts: Vec<(usize, u32)>, block: Vec<u32> },
    Rows(Vec<(u32, u32)>),
}

/// Rows per block of [`Index::Runs`]: a row's run is its block's, or one of the next few.
const BLOCK_BITS: u32 = 10;

impl<const K: usize> Split<K> {
    /// `rows`: each part's number of rows; `times`: the columns that must be i64 slices.
    pub(crate) fn new<'a, P: Part<'a, K>>(parts: &[P], rows: &[usize], n_ranks: usize, times: &[usize]) -> Split<K> {
        let mut runs: Vec<Vec<(usize, Range<usize>)>> = vec![Vec::new(); n_ranks];
        let mut part_first = Vec::with_capacity(parts.len());
        let mut first = 0;
        for (p, (part, &n)) in parts.iter().zip(rows).enumerate() {
            part_first.push(first);
            first += n;
            match part.columns()[0] {
                Column::All(r) if n > 0 => runs[r as usize].push((p, 0..n)),
                Column::All(_) => {}
                rank => {
                    let mut i = 0;
                    while i < n {
                        let r = rank.get(i);
                        let j = (i..n).find(|&j| rank.get(j) != r).unwrap_or(n);
                        runs[r as usize].push((p, i..j));
                        i = j;
                    }
                }
            }
        }
        let one_run = runs.iter().all(|r| r.len() <= 1);
        let gathered = runs
            .iter()
            .map(|rank_runs| {
                let whole = rank_runs.len() == 1;
                (0..K)
                    .map(|j| {
                        let borrowed = whole && match parts[rank_runs[0].0].columns()[j] {
                            Column::I64(_) => true,
                            _ => !times.contains(&j),
                        };
                        let mut out = Vec::new();
                        if !borrowed && !rank_runs.is_empty() {
                            out.reserve_exact(rank_runs.iter().map(|(_, r)| r.len()).sum());
                            for (p, range) in rank_runs {
                                parts[*p].columns()[j].extend_into(range.clone(), &mut out);
                            }
                        }
                        out
                    })
                    .collect()
            })
            .collect();
        let index = if one_run {
            let mut starts: Vec<(usize, u32)> =
                runs.iter().enumerate().filter_map(|(r, x)| x.first().map(|(p, range)| (part_first[*p] + range.start, r as u32))).collect();
            starts.sort_unstable();
            let mut block = Vec::with_capacity((first >> BLOCK_BITS) + 1);
            let mut run = 0;
            for b in 0..=first >> BLOCK_BITS {
                while run + 1 < starts.len() && starts[run + 1].0 <= b << BLOCK_BITS {
                    run += 1;
                }
                block.push(run as u32);
            }
            Index::Runs { starts, block }
        } else {
            let mut of_row = vec![(0u32, 0u32); first];
            for (r, rank_runs) in runs.iter().enumerate() {
                let mut k = 0;
                for (p, range) in rank_runs {
                    for i in range.clone() {
                        of_row[part_first[*p] + i] = (r as u32, k);
                        k += 1;
                    }
                }
            }
            Index::Rows(of_row)
        };
        Split { runs, gathered, part_first, index }
    }

    /// Rank r's view of the table.
    pub(crate) fn view<'v, 'a: 'v, P: Part<'a, K>>(&'v self, parts: &'v [P], r: usize) -> RankTable<'v, K> {
        let runs = &self.runs[r];
        let rows = match runs.as_slice() {
            [] => Rows::Run { first: 0, len: 0 },
            [(p, range)] => Rows::Run { first: self.part_first[*p] + range.start, len: range.len() },
            _ => Rows::List(runs.iter().flat_map(|(p, range)| range.clone().map(|i| (self.part_first[*p] + i) as u32)).collect()),
        };
        let columns = std::array::from_fn(|j| {
            let gathered = &self.gathered[r][j];
            match runs.as_slice() {
                [] => Column::I64(&[]),
                [(p, range)] if gathered.is_empty() => parts[*p].columns()[j].slice(range.clone()),
                _ => Column::I64(gathered),
            }
        });
        RankTable { rows, columns }
    }

    /// `f(rank, rows within the rank)` of every row of the table, in order, a run of the rank's
    /// rows at a time.
    pub(crate) fn each_run(&self, mut f: impl FnMut(usize, Range<usize>)) {
        match &self.index {
            Index::Runs { starts, .. } => {
                for &(_, r) in starts {
                    f(r as usize, 0..self.runs[r as usize][0].1.len());
                }
            }
            Index::Rows(of_row) => of_row.iter().for_each(|&(r, k)| f(r as usize, k as usize..k as usize + 1)),
        }
    }

    /// The rank of the table's row g, and its row within the rank.
    #[inline]
    pub(crate) fn locate(&self, g: usize) -> (usize, usize) {
        match &self.index {
            Index::Runs { starts, block } => {
                let mut run = block[g >> BLOCK_BITS] as usize;
                while run + 1 < starts.len() && starts[run + 1].0 <= g {
                    run += 1;
                }
                let (first, r) = starts[run];
                (r as usize, g - first)
            }
            Index::Rows(of_row) => {
                let (r, k) = of_row[g];
                (r as usize, k as usize)
            }
        }
    }
}
