//! Grouping of rows by integer keys, for the what-if's references (a kernel run against the same
//! run on the other ranks, a range against its occurrences elsewhere): each row's group, the rows
//! in group order, each row's occurrence in its group, and the medians of a group, of the other
//! rows in it, of the rows of the other ranks in it.
//!
//! A row's keys are packed into one u64 that orders as the keys do and hashed once; only the
//! distinct keys are sorted, and the values within each group (a group is one thing run once per
//! rank, a handful of rows). No sort of all rows: that was the cost of the numpy version.

use rustc_hash::FxHashMap;

/// Why rows could not be grouped: the caller's columns do not fit together.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum GroupingError {
    #[error("grouping needs at least one key column")]
    NoKeys,
    #[error("grouping columns differ in length ({0} and {1} rows)")]
    Length(usize, usize),
    #[error("quantile {0} is not between 0 and 1")]
    Quantile(String),
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

/// For each group, its rows: `whole` gets the i-th of their values in value order and the rows
/// (in no order). For each rank in it, the rows on the other ranks: `visit` gets the i-th of
/// their values in value order (`nth`), how many there are, and the rank's own rows. Ranks with no
/// other rank in the group are skipped.
fn by_other_ranks(
    value: &[i64],
    rank: &[i64],
    keys: &[&[i64]],
    mut whole: impl FnMut(&dyn Fn(usize) -> i64, &[usize]),
    mut visit: impl FnMut(&dyn Fn(usize) -> i64, usize, &mut dyn Iterator<Item = usize>),
) -> Result<(), GroupingError> {
    rows_of(keys, &[value, rank])?;
    let groups = group_ids(keys, Order::FirstAppearance)?;
    let (mut rows, first) = by_group(&groups);
    let mut own: Vec<(i64, usize)> = Vec::new(); // (rank, position in the group's sorted values)
    let mut counted = Counted::new();
    for (k, &start) in first.iter().enumerate() {
        let members = &mut rows[start..first.get(k + 1).copied().unwrap_or(value.len())];
        if members.len() > COUNTED_GROUP && counted.visit(value, rank, members, &mut whole, &mut visit) {
            continue;
        }
        members.sort_unstable_by_key(|&r| value[r]);
        let members = &*members;
        whole(&|i| value[members[i]], members);
        own.clear();
        own.extend(members.iter().enumerate().map(|(at, &r)| (rank[r], at)));
        own.sort_unstable();
        for mine in own.chunk_by(|a, b| a.0 == b.0) {
            let count = members.len() - mine.len();
            if count == 0 {
                continue;
            }
            // The i-th of the others in value order: the i-th position once the rank's own
            // positions (ascending) before it are skipped.
            let nth = |i: usize| {
                let mut at = i;
                for &(_, p) in mine {
                    if p > at {
                        break;
                    }
                    at += 1;
                }
                value[members[at]]
            };
            visit(&nth, count, &mut mine.iter().map(|&(_, at)| members[at]));
        }
    }
    Ok(())
}

/// A group larger than this may be counted by distinct value (`Counted`) instead of sorted.
const COUNTED_GROUP: usize = 256;

/// A large group whose values repeat (an API's calls: millions, a few thousand distinct
/// durations) counted per rank and distinct value: only the distinct values are sorted. The
/// buffers are reused from group to group.
struct Counted {
    rank_id: Vec<usize>, // each row's rank as a dense number over the job (numbered at the first large group)
    slot: Vec<usize>,    // a dense rank's column in the group's counts (NONE: not in it)
    ranks: Vec<usize>,   // the group's dense ranks, by column
    distinct: FxHashMap<i64, usize>,
    values: Vec<i64>,
    cell: Vec<(usize, usize)>, // per member, its distinct value and its column
    counts: Vec<usize>, // per distinct value (row) and column
    order: Vec<usize>,  // the distinct values in value order
    total: Vec<usize>,  // per distinct value, its rows
    start: Vec<usize>,  // per column, where its rows start in `rows`
    next: Vec<usize>,
    rows: Vec<usize>,
}

impl Counted {
    const NONE: usize = usize::MAX;

    fn new() -> Counted {
        Counted {
            rank_id: Vec::new(),
            slot: Vec::new(),
            ranks: Vec::new(),
            distinct: FxHashMap::default(),
            values: Vec::new(),
            cell: Vec::new(),
            counts: Vec::new(),
            order: Vec::new(),
            total: Vec::new(),
            start: Vec::new(),
            next: Vec::new(),
            rows: Vec::new(),
        }
    }

    /// Visits the group as `by_other_ranks` does; false (nothing visited) where its distinct
    /// values times its ranks would not be much smaller than a sort of its rows.
    fn visit(
        &mut self,
        value: &[i64],
        rank: &[i64],
        members: &[usize],
        whole: &mut impl FnMut(&dyn Fn(usize) -> i64, &[usize]),
        visit: &mut impl FnMut(&dyn Fn(usize) -> i64, usize, &mut dyn Iterator<Item = usize>),
    ) -> bool {
        if self.rank_id.len() != rank.len() {
            // Most groupings have no large group (a kernel run once per rank): no ranks to number.
            let ids = number(&rank.iter().map(|&r| ordered(r)).collect::<Vec<_>>(), Order::FirstAppearance);
            self.rank_id = ids.id;
            self.slot = vec![Self::NONE; ids.count];
        }
        self.ranks.clear();
        self.distinct.clear();
        self.values.clear();
        self.cell.clear();
        for &r in members {
            let id = self.rank_id[r];
            if self.slot[id] == Self::NONE {
                self.slot[id] = self.ranks.len();
                self.ranks.push(id);
            }
            let next = self.values.len();
            let d = *self.distinct.entry(value[r]).or_insert(next);
            if d == next {
                self.values.push(value[r]);
            }
            self.cell.push((d, self.slot[id]));
        }
        let (width, rows) = (self.ranks.len(), self.values.len());
        let fits = rows.saturating_mul(width) <= members.len() / 4;
        if fits {
            self.counts.clear();
            self.counts.resize(rows * width, 0);
            for &(d, j) in &self.cell {
                self.counts[d * width + j] += 1;
            }
            self.order.clear();
            self.order.extend(0..rows);
            let values = &self.values;
            self.order.sort_unstable_by_key(|&d| values[d]);
            // Each distinct value's rows over the group, and each column's own rows.
            self.total.clear();
            self.total.extend(self.counts.chunks(width).map(|row| row.iter().sum::<usize>()));
            self.start.clear();
            self.start.resize(width + 1, 0);
            self.counts.chunks(width).for_each(|row| row.iter().zip(&mut self.start[1..]).for_each(|(c, s)| *s += c));
            for j in 0..width {
                self.start[j + 1] += self.start[j];
            }
            // The members by column (a counting sort: row order within each).
            self.next.clear();
            self.next.extend_from_slice(&self.start[..width]);
            self.rows.resize(members.len(), 0);
            for (&r, &(_, j)) in members.iter().zip(&self.cell) {
                let at = &mut self.next[j];
                self.rows[*at] = r;
                *at += 1;
            }
            let (order, total) = (&self.order, &self.total);
            whole(
                &|i| {
                    let mut seen = 0;
                    for &d in order {
                        seen += total[d];
                        if seen > i {
                            return values[d];
                        }
                    }
                    unreachable!("fewer rows than counted")
                },
                members,
            );
            for j in 0..width {
                let count = members.len() - (self.start[j + 1] - self.start[j]);
                if count == 0 {
                    continue;
                }
                let (counts, order, total) = (&self.counts, &self.order, &self.total);
                // The i-th of the others: walk the distinct values up, counting the others' rows.
                let nth = |i: usize| {
                    let mut seen = 0;
                    for &d in order {
                        seen += total[d] - counts[d * width + j];
                        if seen > i {
                            return values[d];
                        }
                    }
                    unreachable!("fewer others than counted")
                };
                visit(&nth, count, &mut self.rows[self.start[j]..self.start[j + 1]].iter().copied());
            }
        }
        self.ranks.iter().for_each(|&id| self.slot[id] = Self::NONE);
        fits
    }
}

/// Per row, the median value of the rows with the same keys on the other ranks (NaN where no other
/// rank has them): a rank's own rows never pull its reference towards it.
pub fn median_of_other_ranks(value: &[i64], rank: &[i64], keys: &[&[i64]]) -> Result<Vec<f64>, GroupingError> {
    let mut out = vec![f64::NAN; value.len()];
    by_other_ranks(value, rank, keys, |_, _| {}, |nth, count, rows| {
        let m = median(nth, count);
        rows.for_each(|r| out[r] = m);
    })?;
    Ok(out)
}

/// `median_of_others` and `median_of_other_ranks` of the same rows from one grouping (a kernel's
/// reference among its peers, a device's among the other ranks).
pub fn medians_of_others_and_other_ranks(
    value: &[i64],
    rank: &[i64],
    keys: &[&[i64]],
) -> Result<(Vec<f64>, Vec<f64>), GroupingError> {
    let mut others = vec![f64::NAN; value.len()];
    let mut other_ranks = vec![f64::NAN; value.len()];
    let whole = |nth: &dyn Fn(usize) -> i64, members: &[usize]| match members {
        [_] => {}
        [a, b] => {
            others[*a] = value[*b] as f64;
            others[*b] = value[*a] as f64;
        }
        _ => {
            let m = median(nth, members.len());
            members.iter().for_each(|&r| others[r] = m);
        }
    };
    by_other_ranks(value, rank, keys, whole, |nth, count, rows| {
        let m = median(nth, count);
        rows.for_each(|r| other_ranks[r] = m);
    })?;
    Ok((others, other_ranks))
}

/// Per quantile q and row, the value of the rows with the same keys on the other ranks at position
/// floor((n - 1) q) of the n of them in value order: a value that occurred, not interpolated (an
/// API's p90 among its calls on the peers). NaN where no other rank has the keys.
pub fn quantiles_of_other_ranks(
    value: &[i64],
    rank: &[i64],
    keys: &[&[i64]],
    quantiles: &[f64],
) -> Result<Vec<Vec<f64>>, GroupingError> {
    if let Some(q) = quantiles.iter().find(|q| !(0.0..=1.0).contains(*q)) {
        return Err(GroupingError::Quantile(q.to_string()));
    }
    let mut out = vec![vec![f64::NAN; value.len()]; quantiles.len()];
    let mut at: Vec<f64> = vec![0.0; quantiles.len()];
    by_other_ranks(value, rank, keys, |_, _| {}, |nth, count, rows| {
        for (v, &q) in at.iter_mut().zip(quantiles) {
            // As numpy truncates `(n - 1) * q` to an index: the same float product.
            *v = nth((((count - 1) as f64) * q) as usize) as f64;
        }
        rows.for_each(|r| out.iter_mut().zip(&at).for_each(|(o, &v)| o[r] = v));
    })?;
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

    const QUANTILES: [f64; 4] = [0.0, 0.5, 0.9, 1.0];

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
            let rank: Vec<i64> = (0..n).map(|_| rng.i64(0..3)).collect();

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
            let other_ranks = median_of_other_ranks(&value, &rank, &keys).unwrap();
            let both = medians_of_others_and_other_ranks(&value, &rank, &keys).unwrap();
            assert!(same_f64(&both.0, &others) && same_f64(&both.1, &other_ranks), "case {case}");
            let quantiles = quantiles_of_other_ranks(&value, &rank, &keys, &QUANTILES).unwrap();
            for a in 0..n {
                let peers: Vec<usize> = (0..n).filter(|&b| same_keys(&keys, a, b)).collect();
                assert_eq!(occ[a], peers.iter().filter(|&&b| b < a).count() as i64);
                let expect = match peers.len() {
                    1 => f64::NAN,
                    2 => value[*peers.iter().find(|&&b| b != a).unwrap()] as f64,
                    _ => naive_median(peers.iter().map(|&b| value[b]).collect()),
                };
                assert!(same_f64(&[others[a]], &[expect]), "case {case} row {a}");
                let expect = naive_median(peers.iter().filter(|&&b| rank[b] != rank[a]).map(|&b| value[b]).collect());
                assert!(same_f64(&[other_ranks[a]], &[expect]), "case {case} row {a}");
                let mut theirs: Vec<i64> = peers.iter().filter(|&&b| rank[b] != rank[a]).map(|&b| value[b]).collect();
                theirs.sort();
                for (k, &q) in QUANTILES.iter().enumerate() {
                    let expect = if theirs.is_empty() { f64::NAN } else { theirs[((theirs.len() - 1) as f64 * q) as usize] as f64 };
                    assert!(same_f64(&[quantiles[k][a]], &[expect]), "case {case} row {a} q {q}");
                }
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
    fn large_groups_counted_by_value_equal_the_definitions() {
        // Groups of thousands of rows with few distinct values (counted) and with many (sorted),
        // a rank alone in a group, a rank missing from one.
        let mut rng = fastrand::Rng::with_seed(3);
        let n = 3000;
        let key: Vec<i64> = (0..n).map(|_| rng.i64(0..4)).collect();
        let rank: Vec<i64> = (0..n).map(|r| if key[r] == 3 { 9 } else { rng.i64(0..5) }).collect();
        let rank: Vec<i64> = rank.iter().zip(&key).map(|(&r, &k)| if k == 2 && r == 4 { 1 } else { r }).collect();
        let value: Vec<i64> =
            key.iter().map(|&k| if k == 1 { rng.i64(0..1_000_000) } else { rng.i64(0..12) * 100 }).collect();
        let quantiles = quantiles_of_other_ranks(&value, &rank, &[&key], &QUANTILES).unwrap();
        let medians = median_of_other_ranks(&value, &rank, &[&key]).unwrap();
        let both = medians_of_others_and_other_ranks(&value, &rank, &[&key]).unwrap();
        assert!(same_f64(&both.0, &median_of_others(&value, &[&key]).unwrap()) && same_f64(&both.1, &medians));
        for a in 0..n {
            let mut theirs: Vec<i64> = (0..n).filter(|&b| key[b] == key[a] && rank[b] != rank[a]).map(|b| value[b]).collect();
            theirs.sort();
            assert!(same_f64(&[medians[a]], &[naive_median(theirs.clone())]), "row {a}");
            for (k, &q) in QUANTILES.iter().enumerate() {
                let expect = if theirs.is_empty() { f64::NAN } else { theirs[((theirs.len() - 1) as f64 * q) as usize] as f64 };
                assert!(same_f64(&[quantiles[k][a]], &[expect]), "row {a} q {q}");
            }
        }
        assert!(quantiles[0].iter().zip(&key).all(|(q, &k)| q.is_nan() == (k == 3)));
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
        let refs = median_of_other_ranks(&duration, &rank, &[&name, &occ]).unwrap();
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
        assert!(median_of_other_ranks(&empty, &empty, &[&empty]).unwrap().is_empty());
        assert_eq!(quantiles_of_other_ranks(&empty, &empty, &[&empty], &[0.5, 0.9]).unwrap(), vec![Vec::<f64>::new(); 2]);
        assert_eq!(quantiles_of_other_ranks(&[1], &[0, 1], &[&[1]], &[0.5]), Err(GroupingError::Length(1, 2)));
        assert_eq!(quantiles_of_other_ranks(&[1], &[0], &[&[1]], &[f64::NAN]), Err(GroupingError::Quantile("NaN".into())));
        assert_eq!(group_ids(&[], Order::Sorted), Err(GroupingError::NoKeys));
        assert_eq!(occurrence(&[&[1, 2], &[1]]), Err(GroupingError::Length(2, 1)));
        assert_eq!(median_of_others(&[1], &[&[1, 2]]), Err(GroupingError::Length(2, 1)));
        // The full i64 range in one key, and keys too wide to pack together.
        let wide = [i64::MIN, i64::MAX, 0, i64::MIN];
        assert_eq!(group_ids(&[&wide], Order::Sorted).unwrap().id, vec![0, 2, 1, 0]);
        assert_eq!(group_ids(&[&wide, &[1, 1, 1, 2]], Order::Sorted).unwrap().id, vec![0, 3, 2, 1]);
    }
}
