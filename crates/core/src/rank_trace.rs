//! One rank's trace from its export's columns (python/nsys_collective/model/trace.py): its GPU
//! work in start order with the runtime call that launched each item and the figures counted over
//! it, and its host calls in start order with where the host work before each began. One pass
//! per table with a hash map of correlation ids, where the numpy version masked, sorted and
//! searched whole columns several times per rank (tests/unit/test_rank_trace.py keeps it).

use rustc_hash::FxHashMap;

/// Columns of one table that differ in length: the caller's bug.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
#[error("rank trace columns differ in length ({0} and {1} rows)")]
pub struct LengthMismatch(pub usize, pub usize);

fn same_length(columns: &[usize]) -> Result<(), LengthMismatch> {
    match columns.iter().find(|&&n| n != columns[0]) {
        Some(&n) => Err(LengthMismatch(columns[0], n)),
        None => Ok(()),
    }
}

/// A GPU activity table (kernels, memcpy, memset): the columns every one has.
pub struct Activity<'a> {
    pub start: &'a [i64],
    pub end: &'a [i64],
    pub pid: &'a [i64],
    pub device: &'a [i64],
    pub stream: &'a [i64],
    pub correlation: &'a [i64],
}

impl Activity<'_> {
    fn check(&self) -> Result<(), LengthMismatch> {
        same_length(&[self.start.len(), self.end.len(), self.pid.len(), self.device.len(), self.stream.len(), self.correlation.len()])
    }

    /// The rows of rank (pid, device) by start (stable).
    fn rows_by_start(&self, pid: i64, device: i64) -> Vec<u32> {
        let mut rows: Vec<u32> = (0..self.start.len()).filter(|&i| self.pid[i] == pid && self.device[i] == device).map(|i| i as u32).collect();
        if !rows.windows(2).all(|w| self.start[w[0] as usize] <= self.start[w[1] as usize]) {
            rows.sort_by_key(|&i| self.start[i as usize]);
        }
        rows
    }
}

/// What only kernels have: their names (string ids), grid and whether they are NCCL's.
pub struct KernelColumns<'a> {
    pub name: &'a [i64],
    pub short_name: &'a [i64],
    pub grid_x: &'a [i64],
    pub grid_y: &'a [i64],
    pub grid_z: &'a [i64],
    pub is_nccl: &'a [bool],
}

/// The export's CUDA API calls (runtime and driver).
pub struct Runtime<'a> {
    pub pid: &'a [i64],
    pub tid: &'a [i64],
    pub start: &'a [i64],
    pub end: &'a [i64],
    pub correlation: &'a [i64],
}

impl Runtime<'_> {
    fn check(&self) -> Result<(), LengthMismatch> {
        same_length(&[self.pid.len(), self.tid.len(), self.start.len(), self.end.len(), self.correlation.len()])
    }
}

/// One rank's GPU work sorted by start (stable: kernels, then copies, then memsets, each in table
/// order on a tie), as model/trace.py's GpuItems.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct GpuItems {
    pub start: Vec<i64>,
    pub end: Vec<i64>,
    pub name: Vec<i64>,
    pub short_name: Vec<i64>,
    pub launch: Vec<i64>,
    pub launch_tid: Vec<i64>,
    pub is_nccl: Vec<bool>,
    pub is_kernel: Vec<bool>,
    pub ctas: Vec<i64>,
    pub stream: Vec<i64>,
    pub correlation: Vec<i64>,
}

/// The rank's figures over its kernels: how many, NCCL's, the time covered by NCCL kernels and
/// by NCCL and compute kernels both; and its first start and last end over all its GPU work.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct GpuCounts {
    pub kernels: i64,
    pub nccl_kernels: i64,
    pub nccl_time_ns: i64,
    pub compute_overlap_ns: i64,
    pub first_ns: Option<i64>,
    pub last_ns: Option<i64>,
}

/// A copy table and the string id its rows are named by (`[CUDA memcpy]`, `[CUDA memset]`).
pub struct Copies<'a> {
    pub table: Activity<'a>,
    pub label: i64,
}

/// The runtime call of process `pid` with each correlation id: its (thread, start); the first such
/// call in table order where several share one. Correlation ids are mostly dense and ascending:
/// a table indexed by id then, else the ids sorted and searched (a hash map of a quarter million
/// calls was 5x slower: every probe a cache miss).
enum Launches {
    Dense { lo: i64, at: Vec<u32> },
    Sorted { ids: Vec<i64>, rows: Vec<u32> },
}

const NONE: u32 = u32::MAX;

impl Launches {
    fn new(runtime: &Runtime, pid: i64) -> Launches {
        let mine: Vec<usize> = (0..runtime.pid.len()).filter(|&i| runtime.pid[i] == pid).collect();
        let (lo, hi) = mine.iter().fold((i64::MAX, i64::MIN), |(lo, hi), &i| (lo.min(runtime.correlation[i]), hi.max(runtime.correlation[i])));
        let span = hi.wrapping_sub(lo) as u64;
        if !mine.is_empty() && span < 4 * mine.len() as u64 + 4096 {
            let mut at = vec![NONE; span as usize + 1];
            for &i in &mine {
                let slot = &mut at[(runtime.correlation[i] - lo) as usize];
                if *slot == NONE {
                    *slot = i as u32;
                }
            }
            return Launches::Dense { lo, at };
        }
        let mut by_id = mine;
        by_id.sort_by_key(|&i| runtime.correlation[i]); // stable: the first in table order leads
        by_id.dedup_by_key(|i| runtime.correlation[*i]);
        Launches::Sorted { ids: by_id.iter().map(|&i| runtime.correlation[i]).collect(), rows: by_id.iter().map(|&i| i as u32).collect() }
    }

    /// The runtime row of a correlation id, if any.
    fn row(&self, correlation: i64) -> Option<usize> {
        let row = match self {
            Launches::Dense { lo, at } => {
                let k = correlation.wrapping_sub(*lo);
                if k < 0 || k as usize >= at.len() {
                    NONE
                } else {
                    at[k as usize]
                }
            }
            Launches::Sorted { ids, rows } => ids.binary_search(&correlation).map_or(NONE, |k| rows[k]),
        };
        (row != NONE).then_some(row as usize)
    }
}

/// The GPU work of rank (pid, device) and its counts.
pub fn gpu_items(
    kernels: &Activity,
    names: &KernelColumns,
    copies: &[Copies],
    runtime: &Runtime,
    pid: i64,
    device: i64,
) -> Result<(GpuItems, GpuCounts), LengthMismatch> {
    kernels.check()?;
    let n = kernels.start.len();
    same_length(&[n, names.name.len(), names.short_name.len(), names.grid_x.len(), names.grid_y.len(), names.grid_z.len(), names.is_nccl.len()])?;
    for c in copies {
        c.table.check()?;
    }
    runtime.check()?;

    // Each table's rows of the rank by start (stable: table order on a tie).
    let tables: Vec<&Activity> = std::iter::once(kernels).chain(copies.iter().map(|c| &c.table)).collect();
    let rows: Vec<Vec<u32>> = tables.iter().map(|t| t.rows_by_start(pid, device)).collect();
    let mut counts = GpuCounts { kernels: rows[0].len() as i64, ..GpuCounts::default() };
    counts.nccl_kernels = rows[0].iter().filter(|&&r| names.is_nccl[r as usize]).count() as i64;
    let by_start = rows[0].iter().map(|&r| (kernels.start[r as usize], kernels.end[r as usize], names.is_nccl[r as usize]));
    (counts.nccl_time_ns, counts.compute_overlap_ns) = crate::intervals::nccl_overlap(by_start);
    counts.first_ns = rows.iter().zip(&tables).filter_map(|(r, t)| r.first().map(|&i| t.start[i as usize])).min();
    counts.last_ns = rows.iter().zip(&tables).flat_map(|(r, t)| r.iter().map(|&i| t.end[i as usize])).max();
    // All items by start, ties in table order (kernels, then the copy tables): a merge of the sorted lists.
    let mut items: Vec<(u32, u32)> = Vec::with_capacity(rows.iter().map(Vec::len).sum());
    let mut at = vec![0usize; rows.len()];
    loop {
        let mut best: Option<(i64, usize)> = None;
        for (t, r) in rows.iter().enumerate() {
            if let Some(&i) = r.get(at[t]) {
                let s = tables[t].start[i as usize];
                if best.is_none_or(|(b, _)| s < b) {
                    best = Some((s, t));
                }
            }
        }
        let Some((_, t)) = best else { break };
        items.push((t as u32, rows[t][at[t]]));
        at[t] += 1;
    }
    // Column by column: one pass per output column streams through memory, where one pass over
    // all of them at once was 3x slower (too many streams for the prefetchers).
    let column = |of: for<'x, 'y> fn(&'x Activity<'y>) -> &'y [i64]| -> Vec<i64> {
        let columns: Vec<&[i64]> = tables.iter().map(|a| of(a)).collect();
        items.iter().map(|&(t, r)| columns[t as usize][r as usize]).collect()
    };
    let kernel_or = |of: &[i64], copy: &dyn Fn(u32) -> i64| -> Vec<i64> {
        items.iter().map(|&(t, r)| if t == 0 { of[r as usize] } else { copy(t) }).collect()
    };
    let label = |t: u32| copies[t as usize - 1].label;
    let correlation = column(|a| a.correlation);
    let launched = Launches::new(runtime, pid);
    let rows_launched: Vec<u32> = correlation.iter().map(|&c| launched.row(c).map_or(NONE, |i| i as u32)).collect();
    let out = GpuItems {
        start: column(|a| a.start),
        end: column(|a| a.end),
        name: kernel_or(names.name, &label),
        short_name: kernel_or(names.short_name, &label),
        launch: rows_launched.iter().map(|&i| if i == NONE { -1 } else { runtime.start[i as usize] }).collect(),
        launch_tid: rows_launched.iter().map(|&i| if i == NONE { -1 } else { runtime.tid[i as usize] }).collect(),
        is_nccl: items.iter().map(|&(t, r)| t == 0 && names.is_nccl[r as usize]).collect(),
        is_kernel: items.iter().map(|&(t, _)| t == 0).collect(),
        // Thread blocks: x * max(y, 1) * max(z, 1), wrapping as numpy's int64 does; 0 for copies.
        ctas: items
            .iter()
            .map(|&(t, r)| (t, r as usize))
            .map(|(t, r)| if t == 0 { names.grid_x[r].wrapping_mul(names.grid_y[r].max(1)).wrapping_mul(names.grid_z[r].max(1)) } else { 0 })
            .collect(),
        stream: column(|a| a.stream),
        correlation,
    };
    Ok((out, counts))
}

/// Host ranges of one process: (start, end, thread), in capture order.
pub struct Ranges<'a> {
    pub start: &'a [i64],
    pub end: &'a [i64],
    pub tid: &'a [i64],
}

/// A process's calls in start order, as model/trace.py's HostCalls takes them.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct HostCalls {
    /// The runtime table's rows of the process, by start (stable).
    pub rows: Vec<i64>,
    /// Where the host work before each call began: the previous call's end on its thread; for a
    /// thread's first call, the start of the outermost range around it (else its own start).
    pub gap_start: Vec<i64>,
    /// The innermost range (index into `Ranges`) on the call's thread that covers the middle of the
    /// gap before the call; -1 where none does.
    pub gap_range: Vec<i64>,
}

/// The calls of process `pid` and the gap before each.
pub fn host_calls(runtime: &Runtime, pid: i64, ranges: &Ranges) -> Result<HostCalls, LengthMismatch> {
    runtime.check()?;
    same_length(&[ranges.start.len(), ranges.end.len(), ranges.tid.len()])?;
    let mut rows: Vec<usize> = (0..runtime.pid.len()).filter(|&i| runtime.pid[i] == pid).collect();
    rows.sort_by_key(|&i| runtime.start[i]);
    let mut by_thread: FxHashMap<i64, Vec<usize>> = FxHashMap::default(); // positions in `rows`
    for (k, &r) in rows.iter().enumerate() {
        by_thread.entry(runtime.tid[r]).or_default().push(k);
    }
    let mut own: FxHashMap<i64, Vec<usize>> = FxHashMap::default();
    for (j, &t) in ranges.tid.iter().enumerate() {
        own.entry(t).or_default().push(j);
    }
    let mut gap_start = vec![0i64; rows.len()];
    let mut gap_range = vec![-1i64; rows.len()];
    let empty = Vec::new();
    for (tid, mine) in &by_thread {
        let own = own.get(tid).unwrap_or(&empty);
        let first_start = runtime.start[rows[mine[0]]];
        // A thread's work before its first call (a data loader in the first step) counts too.
        gap_start[mine[0]] = own
            .iter()
            .filter(|&&j| ranges.start[j] <= first_start && ranges.end[j] >= first_start)
            .map(|&j| ranges.start[j])
            .min()
            .unwrap_or(first_start);
        for w in mine.windows(2) {
            gap_start[w[1]] = runtime.end[rows[w[0]]];
        }
        if own.is_empty() {
            continue;
        }
        // The middle of each gap, rounded down (numpy's floor division).
        let middle: Vec<i64> = mine
            .iter()
            .map(|&k| gap_start[k] + (runtime.start[rows[k]] - gap_start[k]).div_euclid(2))
            .collect();
        let s: Vec<i64> = own.iter().map(|&j| ranges.start[j]).collect();
        let e: Vec<i64> = own.iter().map(|&j| ranges.end[j]).collect();
        let found = crate::intervals::innermost_covering(&s, &e, &middle);
        for (&k, f) in mine.iter().zip(found) {
            gap_range[k] = if f >= 0 { own[f as usize] as i64 } else { -1 };
        }
    }
    Ok(HostCalls { rows: rows.into_iter().map(|r| r as i64).collect(), gap_start, gap_range })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn launches_found_densely_or_by_search() {
        // Correlation ids 0..3 (dense) and ids far apart (searched): the first call of an id wins.
        for ids in [[2, 0, 2, 1], [2_000_000_000, 0, 2_000_000_000, -7]] {
            let runtime = Runtime { pid: &[1, 1, 1, 1], tid: &[1, 2, 3, 4], start: &[0; 4], end: &[0; 4], correlation: &ids };
            let found = Launches::new(&runtime, 1);
            assert_eq!([ids[0], ids[1], ids[3], 5, i64::MIN].map(|c| found.row(c)), [Some(0), Some(1), Some(3), None, None]);
            assert_eq!(Launches::new(&runtime, 2).row(ids[0]), None);
        }
    }

    #[test]
    fn gpu_items_sorted_with_their_launches_and_counts() {
        // Kernels: an NCCL one [0,10] and compute [5,15] on rank (1, 0); one of another rank.
        let kernels = Activity {
            start: &[5, 0, 3],
            end: &[15, 10, 4],
            pid: &[1, 1, 2],
            device: &[0, 0, 0],
            stream: &[7, 8, 7],
            correlation: &[11, 10, 12],
        };
        let names = KernelColumns {
            name: &[3, 4, 5],
            short_name: &[6, 7, 8],
            grid_x: &[2, 4, 1],
            grid_y: &[0, 2, 1],
            grid_z: &[3, 1, 1],
            is_nccl: &[false, true, false],
        };
        let memcpy = Activity { start: &[5], end: &[20], pid: &[1], device: &[0], stream: &[9], correlation: &[13] };
        let runtime = Runtime {
            pid: &[1, 1, 1, 2],
            tid: &[100, 100, 101, 100],
            start: &[-5, -3, -2, -4],
            end: &[-4, -2, -1, -3],
            correlation: &[10, 11, 11, 12],
        };
        let (items, counts) = gpu_items(&kernels, &names, &[Copies { table: memcpy, label: 99 }], &runtime, 1, 0).unwrap();
        assert_eq!(items.start, [0, 5, 5]);
        assert_eq!(items.name, [4, 3, 99]);
        assert_eq!(items.is_kernel, [true, true, false]);
        assert_eq!(items.is_nccl, [true, false, false]);
        assert_eq!(items.ctas, [8, 6, 0]);
        assert_eq!(items.launch, [-5, -3, -1]); // the first call of correlation 11 wins; 13 has none
        assert_eq!(items.launch_tid, [100, 100, -1]);
        assert_eq!(
            counts,
            GpuCounts { kernels: 2, nccl_kernels: 1, nccl_time_ns: 10, compute_overlap_ns: 5, first_ns: Some(0), last_ns: Some(20) }
        );
    }

    #[test]
    fn host_calls_gaps_from_the_previous_call_or_the_outer_range() {
        let runtime = Runtime { pid: &[1, 1, 1, 2], tid: &[7, 7, 8, 7], start: &[50, 20, 30, 0], end: &[60, 25, 40, 5], correlation: &[0, 1, 2, 3] };
        // Thread 7: step [10, 100] around loader [26, 48]; thread 8 has no range.
        let ranges = Ranges { start: &[10, 26], end: &[100, 48], tid: &[7, 7] };
        let got = host_calls(&runtime, 1, &ranges).unwrap();
        assert_eq!(got.rows, [1, 2, 0]);
        assert_eq!(got.gap_start, [10, 30, 25]);
        assert_eq!(got.gap_range, [0, -1, 1]);
        let short = Ranges { tid: &[7], ..ranges };
        assert_eq!(host_calls(&runtime, 1, &short), Err(LengthMismatch(2, 1)));
    }
}
