//! Grouping of rows by integer keys, for the what-if's references (a kernel run against the same
//! run on the other ranks, a range against its occurrences elsewhere): each row's group, the rows
//! in group order, each row's occurrence in its group, and the medians of a group, of the other
//! rows in it, of the rows of the other ranks in it.
//!
//! A row's keys are packed into one u64 that orders as the keys do and hashed once; only the
//! distinct keys are sorted, and the values within each group (a group is one thing run once per
//! rank, a handful of rows). No sort of all rows: that was the cost of the numpy version.

use crate::ids::Ids;
use rayon::prelude::*;
use rustc_hash::FxHashMap;

/// Why rows could not be grouped: the caller's columns do not fit together, or hold more groups
/// of runs than 32-bit numbers count.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum GroupingError {
    #[error("grouping needs at least one key column")]
    NoKeys,
    #[error("grouping columns differ in length ({0} and {1} rows)")]
    Length(usize, usize),
    #[error("more than {0} groups of runs: more than 32-bit group numbers hold")]
    Rows(usize),
}

/// How groups are numbered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Order {
    /// In the order the rows first have their keys.
    FirstAppearance,
    /// In the order of the keys, the first key first.
    Sorted,
}

/// The groups of the rows: each row's group number and how many groups there are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Groups {
    pub id: Vec<usize>,
    pub count: usize,
}

fn rows_of(keys: &[&[i64]], others: &[&[i64]]) -> Result<usize, GroupingError> {
    let n = keys.first().ok_or(GroupingError::NoKeys)?.len();
    match keys.iter().chain(others).find(|c| c.len() != n) {
        Some(c) => Err(GroupingError::Length(n, c.len())),
        None => Ok(n),
    }
}

/// An i64 as a u64 of the same order.
fn ordered(v: i64) -> u64 {
    (v as u64) ^ (1 << 63)
}

/// The keys packed into one u64 per row, each key in as many bits as its range needs, the first
/// key highest (so the codes order as the keys do); None where the ranges need more than 64 bits.
fn packed(keys: &[&[i64]], n: usize) -> Option<Vec<u64>> {
    let mut fields = Vec::with_capacity(keys.len());
    let mut bits = 0;
    for key in keys {
        let (lo, hi) = key.iter().fold((i64::MAX, i64::MIN), |(lo, hi), &v| (lo.min(v), hi.max(v)));
        let width = if n == 0 { 0 } else { 64 - (hi.wrapping_sub(lo) as u64).leading_zeros() };
        bits += width;
        if bits > 64 {
            return None;
        }
        fields.push((lo, width));
    }
    let mut code = vec![0u64; n];
    for (key, &(lo, width)) in keys.iter().zip(&fields) {
        if width > 0 {
            for (c, &v) in code.iter_mut().zip(key.iter()) {
                *c = c.checked_shl(width).unwrap_or(0) | v.wrapping_sub(lo) as u64;
            }
        }
    }
    Some(code)
}

/// Each code's number among the distinct codes: first-appearance or code order. Codes in a range
/// not much wider than the rows (dense ids, small packed keys) are looked up in a table indexed by
/// code; others are hashed.
fn number(codes: &[u64], order: Order) -> Groups {
    let span = codes.iter().max().map_or(0, |&m| m.saturating_add(1));
    if span <= 2 * codes.len() as u64 + 1024 && codes.len() < (u32::MAX / 4) as usize {
        by_table(codes, span as usize, order)
    } else {
        by_hash(codes, order)
    }
}

fn by_table(codes: &[u64], span: usize, order: Order) -> Groups {
    const NONE: u32 = u32::MAX;
    let mut at = vec![NONE; span];
    let mut count = 0;
    match order {
        Order::FirstAppearance => {
            let id = codes
                .iter()
                .map(|&c| {
                    let slot = &mut at[c as usize];
                    if *slot == NONE {
                        *slot = count as u32;
                        count += 1;
                    }
                    *slot as usize
                })
                .collect();
            Groups { id, count }
        }
        Order::Sorted => {
            codes.iter().for_each(|&c| at[c as usize] = 0);
            for slot in at.iter_mut().filter(|s| **s != NONE) {
                *slot = count as u32;
                count += 1;
            }
            Groups { id: codes.iter().map(|&c| at[c as usize] as usize).collect(), count }
        }
    }
}

fn by_hash(codes: &[u64], order: Order) -> Groups {
    let mut at: FxHashMap<u64, usize> = FxHashMap::default();
    let mut distinct = Vec::new();
    let mut id: Vec<usize> = codes
        .iter()
        .map(|&c| {
            *at.entry(c).or_insert_with(|| {
                distinct.push(c);
                distinct.len() - 1
            })
        })
        .collect();
    if order == Order::Sorted {
        let mut by_code: Vec<usize> = (0..distinct.len()).collect();
        by_code.sort_unstable_by_key(|&k| distinct[k]);
        let mut rank = vec![0; distinct.len()];
        for (r, &k) in by_code.iter().enumerate() {
            rank[k] = r;
        }
        id.iter_mut().for_each(|g| *g = rank[*g]);
    }
    Groups { id, count: distinct.len() }
}

/// One u64 per row that orders as the keys do (equal exactly where the keys are): the packed keys,
/// or where they are too wide to pack, each key's rank among its distinct values, folded in pairs
/// (two ranks below the row count fit in 64 bits).
fn codes(keys: &[&[i64]], n: usize) -> Vec<u64> {
    if let Some(code) = packed(keys, n) {
        return code;
    }
    let rank = |values: Vec<u64>| -> Vec<u64> { number(&values, Order::Sorted).id.into_iter().map(|g| g as u64).collect() };
    let mut acc = rank(keys[0].iter().map(|&v| ordered(v)).collect());
    for key in &keys[1..] {
        let next = rank(key.iter().map(|&v| ordered(v)).collect());
        let width = 64 - (next.iter().copied().max().unwrap_or(0)).leading_zeros();
        acc = rank(acc.iter().zip(&next).map(|(&a, &b)| a.checked_shl(width).unwrap_or(0) | b).collect());
    }
    acc
}

/// Each row's group: rows with equal keys (every column equal) share one.
pub fn group_ids(keys: &[&[i64]], order: Order) -> Result<Groups, GroupingError> {
    let n = rows_of(keys, &[])?;
    Ok(number(&codes(keys, n), order))
}

/// The rows in group order (rows of a group in row order) and each group's first position there.
fn by_group(groups: &Groups) -> (Vec<usize>, Vec<usize>) {
    let mut first = vec![0usize; groups.count + 1];
    for &g in &groups.id {
        first[g + 1] += 1;
    }
    for g in 0..groups.count {
        first[g + 1] += first[g];
    }
    let mut next = first.clone();
    let mut rows = vec![0usize; groups.id.len()];
    for (row, &g) in groups.id.iter().enumerate() {
        rows[next[g]] = row;
        next[g] += 1;
    }
    first.pop();
    (rows, first)
}

/// The rows sorted by their keys (the first key first), rows with equal keys by `then` and then in
/// row order (a stable sort); and where each group of equal keys starts in that order.
pub fn sorted_rows(keys: &[&[i64]], then: Option<&[i64]>) -> Result<(Vec<usize>, Vec<usize>), GroupingError> {
    let n = rows_of(keys, then.as_slice())?;
    let groups = number(&codes(keys, n), Order::Sorted);
    let (mut rows, first) = by_group(&groups);
    if let Some(then) = then {
        for (k, &start) in first.iter().enumerate() {
            let end = first.get(k + 1).copied().unwrap_or(n);
            rows[start..end].sort_by_key(|&r| then[r]);
        }
    }
    Ok((rows, first))
}

/// Each row's position among the rows with the same keys, in row order.
pub fn occurrence(keys: &[&[i64]]) -> Result<Vec<i64>, GroupingError> {
    let groups = group_ids(keys, Order::FirstAppearance)?;
    let mut seen = vec![0i64; groups.count];
    Ok(groups
        .id
        .iter()
        .map(|&g| {
            seen[g] += 1;
            seen[g] - 1
        })
        .collect())
}

/// The median of sorted values: the middle one, or the mean of the two middle ones.
fn median(sorted: impl Fn(usize) -> i64, count: usize) -> f64 {
    (sorted((count - 1) / 2) as f64 + sorted(count / 2) as f64) / 2.0
}

/// Each group's rows (in group order) sorted by value, with where each group starts. A large group
/// (an API's calls) sorts (value, row) pairs: sorting rows by a looked-up value misses the cache.
fn by_value(value: &[i64], groups: &Groups) -> (Vec<usize>, Vec<usize>) {
    let (mut rows, first) = by_group(groups);
    let mut pairs: Vec<(i64, usize)> = Vec::new();
    for (k, &start) in first.iter().enumerate() {
        let end = first.get(k + 1).copied().unwrap_or(rows.len());
        let group = &mut rows[start..end];
        if group.len() <= 64 {
            group.sort_unstable_by_key(|&r| value[r]);
            continue;
        }
        pairs.clear();
        pairs.extend(group.iter().map(|&r| (value[r], r)));
        pairs.sort_unstable();
        group.iter_mut().zip(&pairs).for_each(|(slot, &(_, r))| *slot = r);
    }
    (rows, first)
}

/// Per row, the median value of the other rows with the same keys (ranks running the same
/// thing); NaN where no other row has them. With two rows each one's is the other's value; with
/// three or more, the median of all of them (a single outlier never is the median).
pub fn median_of_others(value: &[i64], keys: &[&[i64]]) -> Result<Vec<f64>, GroupingError> {
    rows_of(keys, &[value])?;
    let groups = group_ids(keys, Order::FirstAppearance)?;
    let (rows, first) = by_value(value, &groups);
    let mut out = vec![f64::NAN; value.len()];
    for (k, &start) in first.iter().enumerate() {
        let members = &rows[start..first.get(k + 1).copied().unwrap_or(rows.len())];
        match members {
            [_] => {}
            [a, b] => {
                out[*a] = value[*b] as f64;
                out[*b] = value[*a] as f64;
            }
            _ => {
                let m = median(|i| value[members[i]], members.len());
                members.iter().for_each(|&r| out[r] = m);
            }
        }
    }
    Ok(out)
}

/// One rank's runs of things (its GPU ops, say) for `run_references`: the program it runs and, per
/// row, the run's step, name, start and end, in the rank's order; only rows `keep`s are runs. Steps
/// and names are read in the width the rank holds them (int32 ids), not copied wider.
pub struct RankRuns<'a> {
    pub program: i64,
    pub step: Ids<'a>,
    pub name: Ids<'a>,
    pub start: &'a [i64],
    pub end: &'a [i64],
    pub keep: &'a [bool],
}

/// Per row of a rank's runs (-1 and NaN where the row is no run): its occurrence, its position
/// among the rank's runs of the same step and name; and, among the runs of the same program, step,
/// name and occurrence (one per rank at most), `median_of_others` of their durations (end - start),
/// and the median of the durations of the other ranks' runs alone.
#[derive(Debug, Clone, PartialEq)]
pub struct RunReferences {
    pub occurrence: Vec<i32>,
    pub of_others: Vec<f64>,
    pub of_other_ranks: Vec<f64>,
}

/// The slots (program, step, name) of `run_references`, numbered as they first appear: in a table
/// indexed by the three packed, where they pack into a span not much wider than the runs (steps
/// and names are dense ids), else by hashing.
enum Slots {
    Table { low: [i64; 3], width: [u32; 2], at: Vec<u32> },
    Hash(FxHashMap<(i64, i64, i64), u32>),
}

impl Slots {
    const NONE: u32 = u32::MAX;

    fn new(ranks: &[RankRuns]) -> Slots {
        let (mut low, mut high, mut runs) = ([i64::MAX; 3], [i64::MIN; 3], 0usize);
        for r in ranks {
            for row in (0..r.step.len()).filter(|&row| r.keep[row]) {
                for (k, v) in [r.program, r.step.at(row), r.name.at(row)].into_iter().enumerate() {
                    low[k] = low[k].min(v);
                    high[k] = high[k].max(v);
                }
                runs += 1;
            }
        }
        let width = |k: usize| if runs == 0 { 0 } else { 64 - (high[k].wrapping_sub(low[k]) as u64).leading_zeros() };
        let bits = width(0) + width(1) + width(2);
        if bits < 32 && (1usize << bits) <= 2 * runs + 1024 {
            Slots::Table { low, width: [width(1), width(2)], at: vec![Self::NONE; 1 << bits] }
        } else {
            Slots::Hash(FxHashMap::default())
        }
    }

    /// The slot's number, the next one (`count`) where it is new.
    fn number(&mut self, program: i64, step: i64, name: i64, count: usize) -> usize {
        match self {
            Slots::Table { low, width, at } => {
                let code = ((((program - low[0]) as usize) << width[0] | (step - low[1]) as usize) << width[1])
                    | (name - low[2]) as usize;
                if at[code] == Self::NONE {
                    at[code] = count as u32;
                }
                at[code] as usize
            }
            Slots::Hash(map) => *map.entry((program, step, name)).or_insert(count as u32) as usize,
        }
    }
}

/// How many groups `run_references` sorts as one task: a few thousand runs.
const SORT_CHUNK_GROUPS: usize = 1024;

/// Each rank's runs numbered by occurrence and grouped with the same runs of the other ranks: the
/// same figures as `occurrence` and `median_of_others` of the ranks' runs concatenated give, and
/// the other ranks' median, without a job-wide copy of them. A group holds a run of each rank at most, so its
/// values are sorted once and each run's figures read from them: the others' median is the
/// group's with one copy of the run's own value left out.
pub fn run_references(ranks: &[RankRuns]) -> Result<Vec<RunReferences>, GroupingError> {
    for r in ranks {
        let n = r.step.len();
        if let Some(other) = [r.name.len(), r.start.len(), r.end.len(), r.keep.len()].into_iter().find(|&m| m != n) {
            return Err(GroupingError::Length(n, other));
        }
    }
    // Each (program, step, name) a slot; its runs' groups by occurrence, numbered as they first
    // appear (so that each rank reads and writes the groups nearly in order).
    let mut slots = Slots::new(ranks);
    let (mut groups_of_slot, mut seen): (Vec<Vec<u32>>, Vec<usize>) = (Vec::new(), Vec::new());
    let mut size: Vec<usize> = Vec::new(); // per group, its runs
    let mut occurrence_of: Vec<u32> = Vec::new(); // per group, its runs' occurrence
    let mut out = Vec::with_capacity(ranks.len());
    let mut group: Vec<Vec<u32>> = Vec::with_capacity(ranks.len()); // per rank, each run's group
    for r in ranks {
        seen.iter_mut().for_each(|c| *c = 0);
        let mut groups = Vec::with_capacity(r.keep.iter().filter(|&&k| k).count());
        for row in (0..r.step.len()).filter(|&row| r.keep[row]) {
            let slot = slots.number(r.program, r.step.at(row), r.name.at(row), seen.len());
            if slot == seen.len() {
                groups_of_slot.push(Vec::new());
                seen.push(0);
            }
            let occ = seen[slot];
            seen[slot] += 1;
            if occ == groups_of_slot[slot].len() {
                groups_of_slot[slot].push(u32::try_from(size.len()).map_err(|_| GroupingError::Rows(size.len()))?);
                size.push(0);
                occurrence_of.push(occ as u32);
            }
            let g = groups_of_slot[slot][occ];
            size[g as usize] += 1;
            groups.push(g);
        }
        // The rows' figures are filled in the last pass, on all cores (their pages first touched there).
        out.push(RunReferences {
            occurrence: Vec::with_capacity(r.step.len()),
            of_others: Vec::with_capacity(r.step.len()),
            of_other_ranks: Vec::with_capacity(r.step.len()),
        });
        group.push(groups);
    }
    drop((slots, groups_of_slot, seen));
    // Each group's values, sorted: placed group by group (a counting sort), then each sorted.
    let count = size.len();
    let mut start = Vec::with_capacity(count + 1);
    start.push(0);
    for g in 0..count {
        start.push(start[g] + size[g]);
    }
    let mut next = size;
    next.copy_from_slice(&start[..count]);
    let mut values = vec![0i64; start[count]];
    for (r, groups) in ranks.iter().zip(&group) {
        let runs = (0..r.step.len()).filter(|&row| r.keep[row]);
        for (&g, row) in groups.iter().zip(runs) {
            values[next[g as usize]] = r.end[row] - r.start[row];
            next[g as usize] += 1;
        }
    }
    drop(next);
    // The groups are independent from here on: sorted on all cores, a task per SORT_CHUNK_GROUPS.
    let mut tasks = Vec::new();
    let mut rest = values.as_mut_slice();
    for first in (0..count).step_by(SORT_CHUNK_GROUPS) {
        let bounds = &start[first..=(first + SORT_CHUNK_GROUPS).min(count)];
        let (task, tail) = std::mem::take(&mut rest).split_at_mut(bounds[bounds.len() - 1] - bounds[0]);
        tasks.push((task, bounds));
        rest = tail;
    }
    tasks.into_par_iter().for_each(|(task, bounds)| {
        bounds.windows(2).for_each(|b| task[b[0] - bounds[0]..b[1] - bounds[0]].sort_unstable());
    });
    // Each rank's runs' figures, ranks on all cores.
    out.par_iter_mut().zip(ranks.par_iter().zip(&group)).for_each(|(o, (r, groups))| {
        o.occurrence.resize(r.step.len(), -1);
        o.of_others.resize(r.step.len(), f64::NAN);
        o.of_other_ranks.resize(r.step.len(), f64::NAN);
        let runs = (0..r.step.len()).filter(|&row| r.keep[row]);
        for (&g, row) in groups.iter().zip(runs) {
            let sorted = &values[start[g as usize]..start[g as usize + 1]];
            let (n, own) = (sorted.len(), r.end[row] - r.start[row]);
            o.occurrence[row] = occurrence_of[g as usize] as i32;
            if n < 2 {
                continue;
            }
            // The others in value order: the sorted values with the first copy of its own skipped.
            let at = sorted.partition_point(|&v| v < own);
            o.of_other_ranks[row] = median(|i| sorted[if i < at { i } else { i + 1 }], n - 1);
            // Of two runs each one's reference is the other's; from three on, the median of all.
            o.of_others[row] = if n == 2 { o.of_other_ranks[row] } else { median(|i| sorted[i], n) };
        }
    });
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The straightforward definitions, row by row, that the grouping must equal.
    fn same_keys(keys: &[&[i64]], a: usize, b: usize) -> bool {
        keys.iter().all(|k| k[a] == k[b])
    }

    fn naive_median(mut v: Vec<i64>) -> f64 {
        v.sort();
        if v.is_empty() {
            f64::NAN
        } else {
            median(|i| v[i], v.len())
        }
    }

    fn random_keys(rng: &mut fastrand::Rng, n: usize, columns: usize, span: i64) -> Vec<Vec<i64>> {
        (0..columns).map(|_| (0..n).map(|_| rng.i64(-span..=span)).collect()).collect()
    }

    fn same_f64(a: &[f64], b: &[f64]) -> bool {
        a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x == y || (x.is_nan() && y.is_nan()))
    }

    #[test]
    fn equals_the_row_by_row_definitions_on_random_rows() {
        let mut rng = fastrand::Rng::with_seed(7);
        for case in 0..300 {
            let n = if case % 10 == 9 { rng.usize(100..400) } else { rng.usize(0..60) };
            let columns = rng.usize(1..4);
            // Narrow ranges make ties and shared groups; huge ones force the folded codes.
            let span = [1, 3, 1000, i64::MAX / 2][case % 4];
            let cols = random_keys(&mut rng, n, columns, span);
            let keys: Vec<&[i64]> = cols.iter().map(|c| c.as_slice()).collect();
            let value: Vec<i64> = (0..n).map(|_| rng.i64(0..5)).collect();

            let first = group_ids(&keys, Order::FirstAppearance).unwrap();
            let sorted = group_ids(&keys, Order::Sorted).unwrap();
            for a in 0..n {
                for b in 0..n {
                    assert_eq!(first.id[a] == first.id[b], same_keys(&keys, a, b));
                    let key_a: Vec<i64> = keys.iter().map(|k| k[a]).collect();
                    let key_b: Vec<i64> = keys.iter().map(|k| k[b]).collect();
                    assert_eq!(sorted.id[a].cmp(&sorted.id[b]), key_a.cmp(&key_b));
                }
                // First appearance: a new group number is the next one.
                assert!(first.id[a] <= first.id[..a].iter().max().map_or(0, |m| m + 1));
            }

            let occ = occurrence(&keys).unwrap();
            let others = median_of_others(&value, &keys).unwrap();
            for a in 0..n {
                let peers: Vec<usize> = (0..n).filter(|&b| same_keys(&keys, a, b)).collect();
                assert_eq!(occ[a], peers.iter().filter(|&&b| b < a).count() as i64);
                let expect = match peers.len() {
                    1 => f64::NAN,
                    2 => value[*peers.iter().find(|&&b| b != a).unwrap()] as f64,
                    _ => naive_median(peers.iter().map(|&b| value[b]).collect()),
                };
                assert!(same_f64(&[others[a]], &[expect]), "case {case} row {a}");
            }

            let (rows, starts) = sorted_rows(&keys, Some(&value)).unwrap();
            let mut expect: Vec<usize> = (0..n).collect();
            expect.sort_by_key(|&r| (keys.iter().map(|k| k[r]).collect::<Vec<_>>(), value[r]));
            assert_eq!(rows, expect, "case {case}");
            let expect_starts: Vec<usize> =
                (0..n).filter(|&i| i == 0 || !same_keys(&keys, rows[i], rows[i - 1])).collect();
            assert_eq!(starts, expect_starts);
            let (rows, _) = sorted_rows(&keys, None).unwrap();
            let mut expect: Vec<usize> = (0..n).collect();
            expect.sort_by_key(|&r| keys.iter().map(|k| k[r]).collect::<Vec<_>>());
            assert_eq!(rows, expect);
        }
    }

    #[test]
    fn run_references_equal_the_row_by_row_definitions() {
        // Ranks of two programs, runs repeated within a step, rows that are no runs, ties, empty
        // ranks, groups of one run; a few cases of more groups than one sorting task takes.
        let mut rng = fastrand::Rng::with_seed(5);
        for case in 0..300 {
            let n_ranks = rng.usize(0..5);
            let cols: Vec<[Vec<i64>; 3]> = (0..n_ranks)
                .map(|_| {
                    let n = match case % 100 {
                        99 => rng.usize(2 * SORT_CHUNK_GROUPS..3 * SORT_CHUNK_GROUPS),
                        _ if case % 10 == 9 => rng.usize(100..300),
                        _ => rng.usize(0..25),
                    };
                    // Narrow keys: a table of slots; wide ones: hashed.
                    let span = [1, 3, 50, i64::MAX / 4][case % 4];
                    [0, 1, 2].map(|c| (0..n).map(|_| if c == 2 { rng.i64(0..4) * 10 } else { rng.i64(-1..span) }).collect())
                })
                .collect();
            let keep: Vec<Vec<bool>> = cols.iter().map(|c| c[0].iter().map(|_| rng.u8(0..5) > 0).collect()).collect();
            let program: Vec<i64> = (0..n_ranks).map(|_| rng.i64(0..2)).collect();
            // Steps and names as int32 where they fit (as the trace holds names), on half the cases.
            let narrow: Vec<[Vec<i32>; 2]> = cols.iter().map(|c| [0, 1].map(|j| c[j].iter().map(|&v| v as i32).collect())).collect();
            let ids = |k: usize, j: usize| -> Ids {
                if case % 4 != 3 && case % 8 >= 4 { Ids::I32(&narrow[k][j]) } else { Ids::I64(&cols[k][j]) }
            };
            let ranks: Vec<RankRuns> = (0..n_ranks)
                .map(|k| RankRuns { program: program[k], step: ids(k, 0), name: ids(k, 1), start: &cols[k][0], end: &cols[k][2], keep: &keep[k] })
                .collect();
            let got = run_references(&ranks).unwrap();
            // Every run of the job, as (rank, program, step, name, occurrence, value).
            let mut runs = Vec::new();
            for (k, r) in ranks.iter().enumerate() {
                let (step, name) = (&cols[k][0], &cols[k][1]);
                for row in (0..r.step.len()).filter(|&row| r.keep[row]) {
                    let occ = (0..row).filter(|&b| r.keep[b] && step[b] == step[row] && name[b] == name[row]).count();
                    runs.push((k, row, [r.program, step[row], name[row], occ as i64], r.end[row] - r.start[row]));
                }
            }
            for (k, r) in ranks.iter().enumerate() {
                assert_eq!(got[k].occurrence.len(), r.step.len());
                for row in (0..r.step.len()).filter(|&row| !r.keep[row]) {
                    assert!(got[k].occurrence[row] == -1 && got[k].of_others[row].is_nan() && got[k].of_other_ranks[row].is_nan());
                }
            }
            for &(k, row, key, _) in &runs {
                let group: Vec<&(usize, usize, [i64; 4], i64)> = runs.iter().filter(|o| o.2 == key).collect();
                assert_eq!(got[k].occurrence[row] as i64, key[3], "case {case}");
                let others: Vec<i64> = group.iter().filter(|o| (o.0, o.1) != (k, row)).map(|o| o.3).collect();
                let expect = match group.len() {
                    1 => f64::NAN,
                    2 => others[0] as f64,
                    _ => naive_median(group.iter().map(|o| o.3).collect()),
                };
                assert!(same_f64(&[got[k].of_others[row]], &[expect]), "case {case}");
                let theirs = group.iter().filter(|o| o.0 != k).map(|o| o.3).collect();
                assert!(same_f64(&[got[k].of_other_ranks[row]], &[naive_median(theirs)]), "case {case}");
            }
        }
        let short = RankRuns { program: 0, step: Ids::I32(&[1, 2]), name: Ids::I64(&[1, 2]), start: &[1, 2], end: &[1, 2], keep: &[true] };
        assert_eq!(run_references(&[short]), Err(GroupingError::Length(2, 1)));
    }

    #[test]
    fn the_table_and_the_hash_number_alike() {
        let mut rng = fastrand::Rng::with_seed(11);
        for _ in 0..200 {
            let n = rng.usize(0..200);
            let span = rng.u64(1..500);
            let codes: Vec<u64> = (0..n).map(|_| rng.u64(0..span)).collect();
            for order in [Order::FirstAppearance, Order::Sorted] {
                assert_eq!(by_table(&codes, span as usize, order), by_hash(&codes, order));
            }
        }
    }

    #[test]
    fn a_small_job_by_hand() {
        // Two ranks run kernel 5 twice and kernel 7 once; rank 2 runs kernel 5 once.
        let rank = [0, 0, 0, 1, 1, 1, 2];
        let name = [5, 5, 7, 5, 7, 5, 5];
        let duration = [10, 12, 30, 14, 31, 90, 11];
        assert_eq!(occurrence(&[&rank, &name]).unwrap(), vec![0, 1, 0, 0, 0, 1, 0]);
        let occ = occurrence(&[&rank, &name]).unwrap();
        // The same runs rank by rank, as the what-if hands them to `run_references` (one step).
        let (step, start, keep) = ([0i64; 3], [0i64; 3], [true; 3]);
        let runs = |rows: std::ops::Range<usize>| RankRuns {
            program: 0,
            step: Ids::I64(&step[..rows.len()]),
            name: Ids::I64(&name[rows.clone()]),
            start: &start[..rows.len()],
            end: &duration[rows.clone()],
            keep: &keep[..rows.len()],
        };
        let got = run_references(&[runs(0..3), runs(3..6), runs(6..7)]).unwrap();
        assert_eq!(got.iter().flat_map(|r| r.occurrence.iter().map(|&o| o as i64)).collect::<Vec<_>>(), occ);
        let refs: Vec<f64> = got.iter().flat_map(|r| r.of_other_ranks.clone()).collect();
        // Kernel 5's first run: 10, 14, 11 on ranks 0, 1, 2.
        assert_eq!(refs[0], 12.5);
        assert_eq!(refs[3], 10.5);
        assert_eq!(refs[6], 12.0);
        // Its second run: 12 and 90, each the other's; kernel 7: 30 and 31.
        assert_eq!((refs[1], refs[5], refs[2], refs[4]), (90.0, 12.0, 31.0, 30.0));
        let peers = median_of_others(&duration, &[&name, &occ]).unwrap();
        assert_eq!((peers[0], peers[3], peers[6]), (11.0, 11.0, 11.0));
        assert_eq!((peers[1], peers[5]), (90.0, 12.0));
        let (rows, first) = sorted_rows(&[&name], Some(&duration)).unwrap();
        assert_eq!((rows, first), (vec![0, 6, 1, 3, 5, 2, 4], vec![0, 5]));
    }

    #[test]
    fn empty_and_wrong_columns() {
        let empty: [i64; 0] = [];
        assert_eq!(group_ids(&[&empty], Order::Sorted).unwrap(), Groups { id: vec![], count: 0 });
        assert_eq!(sorted_rows(&[&empty], Some(&empty)).unwrap(), (vec![], vec![]));
        assert_eq!(group_ids(&[], Order::Sorted), Err(GroupingError::NoKeys));
        assert_eq!(occurrence(&[&[1, 2], &[1]]), Err(GroupingError::Length(2, 1)));
        assert_eq!(median_of_others(&[1], &[&[1, 2]]), Err(GroupingError::Length(2, 1)));
        // The full i64 range in one key, and keys too wide to pack together.
        let wide = [i64::MIN, i64::MAX, 0, i64::MIN];
        assert_eq!(group_ids(&[&wide], Order::Sorted).unwrap().id, vec![0, 2, 1, 0]);
        assert_eq!(group_ids(&[&wide, &[1, 1, 1, 2]], Order::Sorted).unwrap().id, vec![0, 3, 2, 1]);
    }
}
