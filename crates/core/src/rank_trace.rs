//! The ranks' traces from their export's columns (python/nsys_collective/model/trace.py): which
//! GPU work can be right and which ranks it belongs to (`screen`); per rank its GPU work in start
//! order with the call that launched each item (a row of its calls) and the figures counted over
//! it, and its host calls in start order with where the host work before each began; their names as ids
//! into a string table of only the names the export's ranks use (`trace_ranks`). Each column is
//! made once in the type it is held in (ids as int32 where they fit), where the numpy version
//! masked, sorted, searched, narrowed and remapped whole columns several times per rank
//! (tests/unit/test_rank_trace.py keeps it).

use crate::ids::{FirstRow, Ids};
use rustc_hash::{FxHashMap, FxHashSet};

/// Why the columns given cannot be traced: the caller's bug.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum TraceError {
    #[error("rank trace columns differ in length ({0} and {1} rows)")]
    LengthMismatch(usize, usize),
    #[error("string id {0} outside the export's table of {1} strings")]
    StringId(i64, usize),
    #[error("{0} strings: more than int32 ids can name")]
    TooManyStrings(usize),
    #[error("the calls have {0} threads, {1} thread origins given")]
    ThreadOrigins(usize, usize),
}

fn same_length(columns: &[usize]) -> Result<(), TraceError> {
    match columns.iter().find(|&&n| n != columns[0]) {
        Some(&n) => Err(TraceError::LengthMismatch(columns[0], n)),
        None => Ok(()),
    }
}

/// An integer column as int32 where every value fits, else int64: ids and counts held for every
/// rank until the analysis ends, which their consumers only compare, search, index or divide.
#[derive(Debug, PartialEq, Eq)]
pub enum Ints {
    I32(Vec<i32>),
    I64(Vec<i64>),
}

impl Ints {
    /// value(i) for i in 0..n, each computed twice (checked, then written) rather than held twice.
    fn of(n: usize, value: impl Fn(usize) -> i64) -> Ints {
        if (0..n).all(|i| i32::try_from(value(i)).is_ok()) {
            Ints::I32((0..n).map(|i| value(i) as i32).collect())
        } else {
            Ints::I64((0..n).map(value).collect())
        }
    }

    fn ids(&self) -> Ids<'_> {
        match self {
            Ints::I32(v) => Ids::I32(v),
            Ints::I64(v) => Ids::I64(v),
        }
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
    fn check(&self) -> Result<(), TraceError> {
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
    pub name: &'a [i64],
}

impl Runtime<'_> {
    fn check(&self) -> Result<(), TraceError> {
        same_length(&[self.pid.len(), self.tid.len(), self.start.len(), self.end.len(), self.correlation.len(), self.name.len()])
    }
}

/// What a GPU activity row must keep to for its times and ids to be right (model/trace.py says
/// why): start >= lo, start <= end <= hi, end - start <= max_duration; device in 0..max_device,
/// pid in 1..=max_pid, stream in -1..=max_stream.
pub struct Limits {
    pub lo: i64,
    pub hi: i64,
    pub max_duration: i64,
    pub max_device: i64,
    pub max_pid: i64,
    pub max_stream: i64,
}

/// A GPU activity table checked: how many rows have impossible times, how many of the rest
/// impossible ids, which rows are kept (None: all), and the ranks (pid, device) of those, sorted.
#[derive(Debug, PartialEq, Eq)]
pub struct Screened {
    pub bad_times: usize,
    pub bad_ids: usize,
    pub good: Option<Vec<bool>>,
    pub ranks: Vec<(i64, i64)>,
}

/// One pass over a GPU activity table: its rows checked against `limits`, its ranks found.
pub fn screen(table: &Activity, limits: &Limits) -> Result<Screened, TraceError> {
    table.check()?;
    let verdict = |i: usize| -> u8 {
        let (s, e) = (table.start[i], table.end[i]);
        if !(s >= limits.lo && e >= s && e <= limits.hi && e.wrapping_sub(s) <= limits.max_duration) {
            return 1;
        }
        let (d, p, st) = (table.device[i], table.pid[i], table.stream[i]);
        if !((0..limits.max_device).contains(&d) && (1..=limits.max_pid).contains(&p) && (-1..=limits.max_stream).contains(&st)) {
            return 2;
        }
        0
    };
    let (mut bad_times, mut bad_ids) = (0, 0);
    let mut ranks = FxHashSet::default();
    let mut last = None; // rows of one rank mostly come in runs
    for i in 0..table.start.len() {
        match verdict(i) {
            1 => bad_times += 1,
            2 => bad_ids += 1,
            _ => {
                let key = (table.pid[i], table.device[i]);
                if last != Some(key) {
                    ranks.insert(key);
                    last = Some(key);
                }
            }
        }
    }
    let good = (bad_times + bad_ids > 0).then(|| (0..table.start.len()).map(|i| verdict(i) == 0).collect());
    let mut ranks: Vec<(i64, i64)> = ranks.into_iter().collect();
    ranks.sort_unstable();
    Ok(Screened { bad_times, bad_ids, good, ranks })
}

/// One rank's GPU work sorted by start (stable: kernels, then copies, then memsets, each in table
/// order on a tie), as model/trace.py's GpuItems. Names are the export's string ids from
/// `gpu_items`, the rank's local ones from `trace_ranks`.
#[derive(Debug, PartialEq, Eq)]
pub struct GpuItems {
    pub start: Vec<i64>,
    pub end: Vec<i64>,
    pub name: Vec<i32>,
    pub short_name: Vec<i32>,
    /// The launching runtime call: its row in the rank's calls (`calls_by_start`), -1 when unknown.
    /// Its start and thread are the calls' own: not held twice (12 bytes an item).
    pub launch_call: Ints,
    pub is_nccl: Vec<bool>,
    pub is_kernel: Vec<bool>,
    pub ctas: Ints,
    pub stream: Ints,
    pub correlation: Ints,
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

/// The GPU work of rank (pid, device) and its counts. `calls`: its process's calls (runtime rows,
/// `calls_by_start`), which the launching calls are named by.
fn gpu_items(
    kernels: &Activity,
    names: &KernelColumns,
    copies: &[Copies],
    runtime: &Runtime,
    calls: &[u32],
    pid: i64,
    device: i64,
) -> Result<(GpuItems, GpuCounts), TraceError> {
    kernels.check()?;
    let n = kernels.start.len();
    same_length(&[n, names.name.len(), names.short_name.len(), names.grid_x.len(), names.grid_y.len(), names.grid_z.len(), names.is_nccl.len()])?;
    for c in copies {
        c.table.check()?;
    }

    // Each table's rows of the rank by start (stable: table order on a tie).
    let tables: Vec<&Activity> = std::iter::once(kernels).chain(copies.iter().map(|c| &c.table)).collect();
    let rows: Vec<Vec<u32>> = tables.iter().map(|t| t.rows_by_start(pid, device)).collect();
    let mut counts = GpuCounts { kernels: rows[0].len() as i64, ..GpuCounts::default() };
    counts.nccl_kernels = rows[0].iter().filter(|&&r| names.is_nccl[r as usize]).count() as i64;
    let by_start = rows[0].iter().map(|&r| (kernels.start[r as usize], kernels.end[r as usize], names.is_nccl[r as usize]));
    (counts.nccl_time_ns, counts.compute_overlap_ns) = crate::intervals::nccl_overlap(by_start);
    counts.first_ns = rows.iter().zip(&tables).filter_map(|(r, t)| r.first().map(|&i| t.start[i as usize])).min();
    counts.last_ns = rows.iter().zip(&tables).flat_map(|(r, t)| r.iter().map(|&i| t.end[i as usize])).max();
    let items = items_by_start(&tables, &rows);
    // Column by column: one pass per output column streams through memory, where one pass over
    // all of them at once was 3x slower (too many streams for the prefetchers).
    let of_tables = |of: for<'x, 'y> fn(&'x Activity<'y>) -> &'y [i64]| -> Vec<&[i64]> { tables.iter().map(|a| of(a)).collect() };
    let (starts, ends, streams, correlations) =
        (of_tables(|a| a.start), of_tables(|a| a.end), of_tables(|a| a.stream), of_tables(|a| a.correlation));
    let value = |columns: &[&[i64]], k: usize| {
        let (t, r) = items[k];
        columns[t as usize][r as usize]
    };
    let n = items.len();
    let kernel_or_label = |of: &[i64]| -> Vec<i32> {
        items.iter().map(|&(t, r)| string_id(if t == 0 { of[r as usize] } else { copies[t as usize - 1].label })).collect()
    };
    // Each item's launching call: the first of its process's calls by start with its correlation
    // id (Kineto's runtime and driver calls share one: the outer one), a negative id unknown.
    let launched = FirstRow::new(calls.len(), |k| runtime.correlation[calls[k] as usize]);
    let launch_call = |k: usize| launched.find(value(&correlations, k)).map_or(-1, |call| call as i64);
    let out = GpuItems {
        start: (0..n).map(|k| value(&starts, k)).collect(),
        end: (0..n).map(|k| value(&ends, k)).collect(),
        name: kernel_or_label(names.name),
        short_name: kernel_or_label(names.short_name),
        launch_call: if i32::try_from(calls.len()).is_ok() {
            Ints::I32((0..n).map(|k| launch_call(k) as i32).collect())
        } else {
            Ints::I64((0..n).map(launch_call).collect())
        },
        is_nccl: items.iter().map(|&(t, r)| t == 0 && names.is_nccl[r as usize]).collect(),
        is_kernel: items.iter().map(|&(t, _)| t == 0).collect(),
        // Thread blocks: x * max(y, 1) * max(z, 1), wrapping as numpy's int64 does; 0 for copies.
        ctas: Ints::of(n, |k| match items[k] {
            (0, r) => {
                let r = r as usize;
                names.grid_x[r].wrapping_mul(names.grid_y[r].max(1)).wrapping_mul(names.grid_z[r].max(1))
            }
            _ => 0,
        }),
        stream: Ints::of(n, |k| value(&streams, k)),
        correlation: Ints::of(n, |k| value(&correlations, k)),
    };
    Ok((out, counts))
}

/// The rows of each table (each in start order) as (table, row), all by start, ties in table order
/// (kernels, then the copy tables): the copies (a few thousand) merged first, then the kernels
/// between two copies moved over as one run, not each item picked from every table in turn.
fn items_by_start(tables: &[&Activity], rows: &[Vec<u32>]) -> Vec<(u32, u32)> {
    let start = |t: usize, i: u32| tables[t].start[i as usize];
    let mut copies = Vec::new();
    let mut at = vec![0usize; rows.len()];
    // The earliest start next, of the earliest table on a tie.
    while let Some((_, t)) = (1..rows.len()).filter_map(|t| rows[t].get(at[t]).map(|&i| (start(t, i), t))).min() {
        copies.push((t as u32, rows[t][at[t]]));
        at[t] += 1;
    }
    let kernels = &rows[0];
    let mut items = Vec::with_capacity(kernels.len() + copies.len());
    let mut k = 0;
    for copy in copies {
        let s = start(copy.0 as usize, copy.1);
        let upto = k + kernels[k..].partition_point(|&i| start(0, i) <= s); // a kernel first on a tie
        items.extend(kernels[k..upto].iter().map(|&i| (0, i)));
        items.push(copy);
        k = upto;
    }
    items.extend(kernels[k..].iter().map(|&i| (0, i)));
    items
}

/// A string id as the name columns hold it before `trace_ranks` makes it local: -1 for none (any
/// negative id), ids past int32 saturated (`localize` refuses them: no string table is that long).
fn string_id(id: i64) -> i32 {
    if id < 0 {
        -1
    } else {
        i32::try_from(id).unwrap_or(i32::MAX)
    }
}

/// Host ranges of one process: (start, end, thread, name: a string id), in capture order.
pub struct Ranges<'a> {
    pub start: &'a [i64],
    pub end: &'a [i64],
    pub tid: &'a [i64],
    pub name: &'a [i64],
}

/// A process's calls in start order (stable), as model/trace.py's HostCalls. Names are the
/// export's string ids from `host_calls`, the rank's local ones from `trace_ranks`.
#[derive(Debug, PartialEq, Eq)]
pub struct HostCalls {
    /// None where the calls are the runtime table's rows in order (one process, the table sorted
    /// by start): the table's own columns serve, nothing is copied.
    pub start: Option<Vec<i64>>,
    pub end: Option<Vec<i64>>,
    pub tid: Ints,
    pub correlation: Ints,
    pub name: Vec<i32>,
    /// Where the host work before each thread's first call began (threads in the order their first
    /// calls come): the start of the outermost range around it, else the call's own start. With
    /// the calls' ends it gives every call's (`gap_starts`), which is not held.
    pub thread_origin: Vec<i64>,
    /// The innermost range (index into `Ranges`) on the call's thread that covers the middle of the
    /// gap before the call; -1 where none does.
    pub gap_range: Ints,
}

/// Where the host work before each call (in start order) began: the previous call's end on its
/// thread; for a thread's first call, its `thread_origin` (threads in the order their first calls
/// come). One pass: a thread's latest call is looked up only where the thread changes.
pub fn gap_starts(tid: Ids, end: &[i64], thread_origin: &[i64]) -> Result<Vec<i64>, TraceError> {
    same_length(&[tid.len(), end.len()])?;
    let mut latest: FxHashMap<i64, usize> = FxHashMap::default(); // of the threads switched away from
    let mut origins = thread_origin.iter();
    let mut threads = 0;
    let mut gap = Vec::with_capacity(end.len());
    for k in 0..end.len() {
        let t = tid.at(k);
        if k > 0 && tid.at(k - 1) == t {
            gap.push(end[k - 1]);
            continue;
        }
        if k > 0 {
            latest.insert(tid.at(k - 1), k - 1);
        }
        gap.push(match latest.get(&t) {
            Some(&before) => end[before],
            None => {
                threads += 1;
                *origins.next().ok_or(TraceError::ThreadOrigins(threads, thread_origin.len()))?
            }
        });
    }
    if threads != thread_origin.len() {
        return Err(TraceError::ThreadOrigins(threads, thread_origin.len()));
    }
    Ok(gap)
}

/// The runtime rows of process `pid`'s calls by start (stable: table order on a tie); the runtime
/// table checked here, for its readers that take these rows (`gpu_items`, `host_calls`).
fn calls_by_start(runtime: &Runtime, pid: i64) -> Result<Vec<u32>, TraceError> {
    runtime.check()?;
    let mut rows: Vec<u32> = (0..runtime.pid.len()).filter(|&i| runtime.pid[i] == pid).map(|i| i as u32).collect();
    rows.sort_by_key(|&i| runtime.start[i as usize]); // stable; one pass when sorted
    Ok(rows)
}

/// The calls `rows` of process (`calls_by_start`): each thread's origin (`thread_origin`) and the
/// range each gap before a call fell in (`gap_range`).
fn host_calls(runtime: &Runtime, rows: &[u32], ranges: &Ranges) -> Result<HostCalls, TraceError> {
    same_length(&[ranges.start.len(), ranges.end.len(), ranges.tid.len(), ranges.name.len()])?;
    let n = rows.len();
    let row = |k: usize| rows[k] as usize;
    let whole_table = n == runtime.start.len() && rows.iter().enumerate().all(|(k, &r)| k == r as usize);
    let copied = |of: &[i64]| (!whole_table).then(|| (0..n).map(|k| of[row(k)]).collect::<Vec<i64>>());
    let (start, end) = (copied(runtime.start), copied(runtime.end));
    let tid = Ints::of(n, |k| runtime.tid[row(k)]);
    let threads = tid.ids().rows_by_id(|_| true); // positions in `rows`
    let range_threads = Ids::I64(ranges.tid).rows_by_id(|_| true);
    let own_ranges = |tid: i64| -> &[usize] {
        match range_threads.binary_search_by_key(&tid, |(t, _)| *t) {
            Ok(r) => &range_threads[r].1,
            Err(_) => &[],
        }
    };
    // A thread's work before its first call (a data loader in the first step) counts too.
    let origins: Vec<i64> = threads
        .iter()
        .map(|(tid, mine)| {
            let first_start = runtime.start[row(mine[0])];
            own_ranges(*tid)
                .iter()
                .copied()
                .filter(|&j| ranges.start[j] <= first_start && ranges.end[j] >= first_start)
                .map(|j| ranges.start[j])
                .min()
                .unwrap_or(first_start)
        })
        .collect();
    let mut by_first: Vec<(usize, i64)> = threads.iter().zip(&origins).map(|((_, mine), &origin)| (mine[0], origin)).collect();
    by_first.sort_unstable();
    let thread_origin: Vec<i64> = by_first.into_iter().map(|(_, origin)| origin).collect();
    let mut gap_range = if i32::try_from(ranges.start.len()).is_ok() { Ints::I32(vec![-1; n]) } else { Ints::I64(vec![-1; n]) };
    for ((tid, mine), &origin) in threads.iter().zip(&origins) {
        let own = own_ranges(*tid);
        if own.is_empty() {
            continue;
        }
        // The middle of each gap, rounded down (numpy's floor division); the gap starts where
        // `gap_starts` says, the thread's previous call's end or its origin, found here per thread.
        let middle: Vec<i64> = mine
            .iter()
            .enumerate()
            .map(|(j, &k)| {
                let from = if j == 0 { origin } else { runtime.end[row(mine[j - 1])] };
                from + (runtime.start[row(k)] - from).div_euclid(2)
            })
            .collect();
        let s: Vec<i64> = own.iter().map(|&j| ranges.start[j]).collect();
        let e: Vec<i64> = own.iter().map(|&j| ranges.end[j]).collect();
        let found = crate::intervals::innermost_covering(&s, &e, &middle);
        for (&k, f) in mine.iter().zip(found).filter(|(_, f)| *f >= 0) {
            let range = own[f as usize];
            match &mut gap_range {
                Ints::I32(v) => v[k] = range as i32,
                Ints::I64(v) => v[k] = range as i64,
            }
        }
    }
    Ok(HostCalls {
        start,
        end,
        tid,
        correlation: Ints::of(n, |k| runtime.correlation[row(k)]),
        name: (0..n).map(|k| string_id(runtime.name[row(k)])).collect(),
        thread_origin,
        gap_range,
    })
}

/// One rank of an export: its process, its device and its process's host ranges.
pub struct Rank<'a> {
    pub pid: i64,
    pub device: i64,
    pub ranges: Ranges<'a>,
}

/// One rank traced: its GPU work and counts, its host calls, and its ranges' names (local ids).
#[derive(Debug, PartialEq, Eq)]
pub struct RankTrace {
    pub gpu: GpuItems,
    pub counts: GpuCounts,
    pub calls: HostCalls,
    pub range_name: Vec<i32>,
}

/// The ranks of one export traced, their names ids into one table of the names they use: the
/// export's string ids of its entries (ascending; `n_strings` and `n_strings + 1` are the copy
/// tables' labels).
#[derive(Debug, PartialEq, Eq)]
pub struct ExportTrace {
    pub ranks: Vec<RankTrace>,
    pub strings: Vec<i64>,
}

/// Every rank of an export traced (`kernels` and `copies` screened, every row one of `ranks`):
/// its GPU work and host calls, names as ids into a table of only the names the ranks use, in the
/// export's order (`n_strings`: the length of the export's string table, which the copy labels
/// follow).
pub fn trace_ranks(
    kernels: &Activity,
    names: &KernelColumns,
    copies: &[Copies],
    runtime: &Runtime,
    ranks: &[Rank],
    n_strings: usize,
) -> Result<ExportTrace, TraceError> {
    let mut traced = Vec::with_capacity(ranks.len());
    for rank in ranks {
        let rows = calls_by_start(runtime, rank.pid)?;
        let (gpu, counts) = gpu_items(kernels, names, copies, runtime, &rows, rank.pid, rank.device)?;
        let calls = host_calls(runtime, &rows, &rank.ranges)?;
        let range_name = rank.ranges.name.iter().map(|&id| string_id(id)).collect();
        traced.push(RankTrace { gpu, counts, calls, range_name });
    }
    let strings = localize(&mut traced, n_strings)?;
    Ok(ExportTrace { ranks: traced, strings })
}

/// The names of the traced ranks made ids into a table of the names they use (in export order);
/// returns the export's ids of its entries.
fn localize(traced: &mut [RankTrace], n_strings: usize) -> Result<Vec<i64>, TraceError> {
    let size = n_strings + 2; // the export's strings and the two copy labels
    if i32::try_from(size).is_err() {
        return Err(TraceError::TooManyStrings(n_strings));
    }
    let mut used = vec![false; size];
    for t in traced.iter() {
        for column in [&t.gpu.name, &t.gpu.short_name, &t.calls.name, &t.range_name] {
            for &id in column {
                if id >= 0 {
                    *used.get_mut(id as usize).ok_or(TraceError::StringId(id as i64, n_strings))? = true;
                }
            }
        }
    }
    let mut local = vec![-1i32; size];
    let mut strings = Vec::new();
    for (id, _) in used.iter().enumerate().filter(|(_, &u)| u) {
        local[id] = strings.len() as i32;
        strings.push(id as i64);
    }
    for t in traced.iter_mut() {
        for column in [&mut t.gpu.name, &mut t.gpu.short_name, &mut t.calls.name, &mut t.range_name] {
            for id in column.iter_mut().filter(|id| **id >= 0) {
                *id = local[*id as usize];
            }
        }
    }
    Ok(strings)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn launches_found_densely_or_by_search() {
        // Correlation ids 0..3 (dense) and ids far apart (searched); the calls by start are the
        // table's rows 3, 0, 1, 2: the first call of an id by start wins, a negative id is unknown.
        for (ids, last) in [([2, 0, 2, 1], Some(0)), ([2_000_000_000, 0, 2_000_000_000, -7], None)] {
            let runtime = Runtime { pid: &[1, 1, 1, 1], tid: &[1, 2, 3, 4], start: &[1, 2, 3, 0], end: &[4; 4], correlation: &ids, name: &[0; 4] };
            let calls = calls_by_start(&runtime, 1).unwrap();
            assert_eq!(calls, [3, 0, 1, 2]);
            // As gpu_items finds them.
            let launches = |calls: &[u32]| FirstRow::new(calls.len(), |k| runtime.correlation[calls[k] as usize]);
            let found = launches(&calls);
            assert_eq!([ids[0], ids[1], ids[3], 5, i64::MIN].map(|c| found.find(c)), [Some(1), Some(2), last, None, None]);
            assert_eq!(launches(&calls_by_start(&runtime, 2).unwrap()).find(ids[0]), None);
        }
    }

    #[test]
    fn ints_narrowed_where_every_value_fits() {
        assert_eq!(Ints::of(3, |i| i as i64 - 1), Ints::I32(vec![-1, 0, 1]));
        assert_eq!(Ints::of(2, |i| [7, 1 << 31][i]), Ints::I64(vec![7, 1 << 31]));
        assert_eq!(Ints::of(1, |_| i32::MIN as i64 - 1), Ints::I64(vec![i32::MIN as i64 - 1]));
    }

    #[test]
    fn items_by_start_ties_in_table_order() {
        // Three tables of few distinct starts (ties within and across tables), rows in start order:
        // the same order as a stable sort of all rows by start, tables taken in turn.
        let mut rng = fastrand::Rng::with_seed(11);
        for case in 0..300 {
            let starts: Vec<Vec<i64>> = (0..3).map(|t| (0..rng.usize(0..[40, 8, 5][t])).map(|_| rng.i64(0..12)).collect()).collect();
            let n: Vec<usize> = starts.iter().map(Vec::len).collect();
            let tables: Vec<Activity> = starts
                .iter()
                .map(|s| Activity { start: s, end: s, pid: &[], device: &[], stream: &[], correlation: &[] })
                .collect();
            let rows: Vec<Vec<u32>> = (0..3)
                .map(|t| {
                    let mut r: Vec<u32> = (0..n[t] as u32).collect();
                    r.sort_by_key(|&i| starts[t][i as usize]);
                    r
                })
                .collect();
            let mut want: Vec<(u32, u32)> = rows.iter().enumerate().flat_map(|(t, r)| r.iter().map(move |&i| (t as u32, i))).collect();
            want.sort_by_key(|&(t, i)| starts[t as usize][i as usize]);
            assert_eq!(items_by_start(&tables.iter().collect::<Vec<_>>(), &rows), want, "case {case}");
        }
    }

    #[test]
    fn rows_with_impossible_times_or_ids_counted_and_left_out() {
        let limits = Limits { lo: 10, hi: 1000, max_duration: 100, max_device: 8, max_pid: 99, max_stream: 50 };
        // Rows: good (1, 0); start before lo; reversed; too long; past hi; bad device (times good);
        // bad pid; bad stream; good (2, 1); good (1, 0) again.
        let table = Activity {
            start: &[10, 9, 50, 20, 990, 30, 30, 30, 40, 60],
            end: &[20, 20, 40, 121, 1001, 40, 40, 40, 50, 70],
            pid: &[1, 1, 1, 1, 1, 1, 100, 1, 2, 1],
            device: &[0, 0, 0, 0, 0, 8, 0, 0, 1, 0],
            stream: &[-1, 0, 0, 0, 0, 0, 0, 51, 50, 3],
            correlation: &[0; 10],
        };
        let got = screen(&table, &limits).unwrap();
        let good = [true, false, false, false, false, false, false, false, true, true];
        assert_eq!(got, Screened { bad_times: 4, bad_ids: 3, good: Some(good.to_vec()), ranks: vec![(1, 0), (2, 1)] });
        let clean = Activity { start: &[10], end: &[10], pid: &[1], device: &[0], stream: &[0], correlation: &[0] };
        assert_eq!(screen(&clean, &limits).unwrap(), Screened { bad_times: 0, bad_ids: 0, good: None, ranks: vec![(1, 0)] });
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
            start: &[-5, -2, -3, -4],
            end: &[-4, -1, -2, -3],
            correlation: &[10, 11, 11, 12],
            name: &[0; 4],
        };
        let calls = calls_by_start(&runtime, 1).unwrap();
        assert_eq!(calls, [0, 2, 1]);
        let (items, counts) = gpu_items(&kernels, &names, &[Copies { table: memcpy, label: 99 }], &runtime, &calls, 1, 0).unwrap();
        assert_eq!(items.start, [0, 5, 5]);
        assert_eq!(items.name, [4, 3, 99]);
        assert_eq!(items.is_kernel, [true, true, false]);
        assert_eq!(items.is_nccl, [true, false, false]);
        assert_eq!(items.ctas, Ints::I32(vec![8, 6, 0]));
        // The first call of correlation 11 by start wins (row 2, the calls' second, before row 1);
        // 13 has none.
        assert_eq!(items.launch_call, Ints::I32(vec![0, 1, -1]));
        assert_eq!(
            counts,
            GpuCounts { kernels: 2, nccl_kernels: 1, nccl_time_ns: 10, compute_overlap_ns: 5, first_ns: Some(0), last_ns: Some(20) }
        );
    }

    #[test]
    fn host_calls_gaps_from_the_previous_call_or_the_outer_range() {
        let runtime = Runtime {
            pid: &[1, 1, 1, 2],
            tid: &[7, 7, 8, 7],
            start: &[50, 20, 30, 0],
            end: &[60, 25, 40, 5],
            correlation: &[0, 1, 2, 3],
            name: &[4, 5, -1, 6],
        };
        // Thread 7: step [10, 100] around loader [26, 48]; thread 8 has no range.
        let ranges = Ranges { start: &[10, 26], end: &[100, 48], tid: &[7, 7], name: &[0, 1] };
        let got = host_calls(&runtime, &calls_by_start(&runtime, 1).unwrap(), &ranges).unwrap();
        assert_eq!((got.start, got.correlation, got.name), (Some(vec![20, 30, 50]), Ints::I32(vec![1, 2, 0]), vec![5, -1, 4]));
        // One process, the table in start order: the table's own times.
        let one = Runtime { pid: &[1; 4], start: &[0, 20, 30, 50], ..runtime };
        assert_eq!(host_calls(&one, &calls_by_start(&one, 1).unwrap(), &ranges).map(|c| (c.start, c.end)), Ok((None, None)));
        // Calls by start: 20 (thread 7, first: the step's start 10), 30 (thread 8, first: none
        // around it, its own start), 50 (thread 7: the end of its call at 20).
        assert_eq!(got.thread_origin, [10, 30]);
        assert_eq!(gap_starts(got.tid.ids(), &[25, 40, 60], &got.thread_origin), Ok(vec![10, 30, 25]));
        assert_eq!(got.gap_range, Ints::I32(vec![0, -1, 1]));
        let short = Ranges { tid: &[7], ..ranges };
        assert_eq!(host_calls(&runtime, &calls_by_start(&runtime, 1).unwrap(), &short), Err(TraceError::LengthMismatch(2, 1)));
    }

    #[test]
    fn gap_starts_from_the_previous_call_of_the_thread_or_its_origin() {
        // Random threads: every call's gap start against the definition, each thread's calls apart.
        let mut rng = fastrand::Rng::with_seed(7);
        for case in 0..300 {
            let n = rng.usize(0..40);
            let tid: Vec<i64> = (0..n).map(|_| if case % 3 == 0 { 5 } else { rng.i64(0..4) * 1_000_000_007 }).collect();
            let end: Vec<i64> = (0..n).map(|_| rng.i64(-50..50)).collect();
            let mut order: Vec<i64> = Vec::new(); // threads by first call
            tid.iter().for_each(|t| if !order.contains(t) { order.push(*t) });
            let origin: Vec<i64> = order.iter().map(|_| rng.i64(-100..0)).collect();
            let want: Vec<i64> = (0..n)
                .map(|k| match (0..k).rev().find(|&b| tid[b] == tid[k]) {
                    Some(b) => end[b],
                    None => origin[order.iter().position(|t| *t == tid[k]).unwrap()],
                })
                .collect();
            let narrow: Vec<i32> = tid.iter().map(|&t| t as i32).collect();
            let ids = if case % 2 == 0 && tid.iter().all(|&t| i32::try_from(t).is_ok()) { Ids::I32(&narrow) } else { Ids::I64(&tid) };
            assert_eq!(gap_starts(ids, &end, &origin), Ok(want), "case {case}");
            if !origin.is_empty() {
                let fewer = origin.len() - 1;
                assert_eq!(gap_starts(Ids::I64(&tid), &end, &origin[..fewer]), Err(TraceError::ThreadOrigins(fewer + 1, fewer)));
            }
        }
        assert_eq!(gap_starts(Ids::I64(&[]), &[], &[1]), Err(TraceError::ThreadOrigins(0, 1)));
        assert_eq!(gap_starts(Ids::I64(&[1]), &[], &[]), Err(TraceError::LengthMismatch(1, 0)));
    }

    #[test]
    fn names_made_ids_into_a_table_of_the_names_the_ranks_use() {
        // Strings 0..10; kernels named 3 and 8 (short 9), a memcpy (label 10), calls named 6 and none,
        // ranges named 8 and none: the table is [3, 6, 8, 9, 10].
        let kernels = Activity { start: &[0, 1], end: &[1, 2], pid: &[1, 1], device: &[0, 0], stream: &[0, 0], correlation: &[0, 1] };
        let names = KernelColumns { name: &[3, 8], short_name: &[9, 9], grid_x: &[1, 1], grid_y: &[1, 1], grid_z: &[1, 1], is_nccl: &[false, false] };
        let memcpy = Activity { start: &[3], end: &[4], pid: &[1], device: &[0], stream: &[0], correlation: &[2] };
        let runtime = Runtime { pid: &[1, 1], tid: &[1, 1], start: &[0, 1], end: &[0, 1], correlation: &[0, 1], name: &[6, -1] };
        let rank = Rank { pid: 1, device: 0, ranges: Ranges { start: &[0, 0], end: &[9, 9], tid: &[1, 1], name: &[8, -1] } };
        let copies = [Copies { table: memcpy, label: 10 }];
        let got = trace_ranks(&kernels, &names, &copies, &runtime, &[rank], 10).unwrap();
        assert_eq!(got.strings, [3, 6, 8, 9, 10]);
        let r = &got.ranks[0];
        assert_eq!((&r.gpu.name, &r.gpu.short_name, &r.calls.name, &r.range_name), (&vec![0, 2, 4], &vec![3, 3, 4], &vec![1, -1], &vec![2, -1]));
        // An id past the table is the caller's bug.
        let bad = Rank { pid: 1, device: 0, ranges: Ranges { start: &[0], end: &[9], tid: &[1], name: &[12] } };
        assert_eq!(trace_ranks(&kernels, &names, &copies, &runtime, &[bad], 10), Err(TraceError::StringId(12, 10)));
    }
}
