//! The job the graph is built from: one table per kind of record, each table in parts.
//!
//! A table's rows are its parts' rows, in order (rows in any order otherwise); rows are referred to
//! by that index ("op row", "call row", "member row"). A part is a set of [`Column`]s of equal
//! length, borrowed in their own integer width: one part per rank borrows the ranks' own columns,
//! with no copy of the job (a column may also be one value for every row, a part's rank say). An
//! optional column left out is [`Column::All`] of its default. Ranks are dense `0..n_ranks`; a rank
//! is one process on one GPU (its ops are that device's, its calls that process's). Correlation ids
//! are per rank (`RUNTIME.correlationId` of a call, matched by sync and event records within one
//! process); a negative correlation means unknown. An op names its launching call by the call's row
//! among its rank's calls (the caller matches `KERNEL.correlationId` to the call once, as it reads
//! the trace).

use super::{input_error, WhatIfError};

/// One column of a part: its values in their own integer width, or one value for every row.
#[derive(Clone, Copy, Debug)]
pub enum Column<'a> {
    I64(&'a [i64]),
    I32(&'a [i32]),
    I16(&'a [i16]),
    I8(&'a [i8]),
    /// Values above `i64::MAX` are refused.
    U64(&'a [u64]),
    U32(&'a [u32]),
    U16(&'a [u16]),
    U8(&'a [u8]),
    Bool(&'a [bool]),
    /// The same value in every row (a part's rank, an optional column's default).
    All(i64),
    /// Values plus a constant: times on a rank's own clock put on the job's (a constant clock
    /// offset) without a copy.
    Shifted(&'a [i64], i64),
}

/// `$body` with `$s` bound to the column's slice, whatever its width (`$v` to the value of `All`;
/// `$t`, `$d` to the slice and constant of `Shifted`).
macro_rules! each_width {
    ($column:expr, $s:ident => $body:expr, $v:ident => $all:expr, ($t:ident, $d:ident) => $shifted:expr) => {
        match $column {
            Column::I64($s) => $body,
            Column::I32($s) => $body,
            Column::I16($s) => $body,
            Column::I8($s) => $body,
            Column::U64($s) => $body,
            Column::U32($s) => $body,
            Column::U16($s) => $body,
            Column::U8($s) => $body,
            Column::Bool($s) => $body,
            Column::All($v) => $all,
            Column::Shifted($t, $d) => $shifted,
        }
    };
}

impl<'a> Column<'a> {
    /// Its number of rows; None for [`Column::All`], which fits any part.
    pub fn len(&self) -> Option<usize> {
        each_width!(*self, s => Some(s.len()), _v => None, (s, _d) => Some(s.len()))
    }

    pub fn is_empty(&self) -> bool {
        self.len() == Some(0)
    }

    #[inline]
    #[allow(clippy::unnecessary_cast)] // the i64 arm's
    pub fn get(&self, row: usize) -> i64 {
        each_width!(*self, s => s[row] as i64, v => v, (s, d) => s[row].wrapping_add(d))
    }

    /// Its value at `row`, None where a shifted value overflows (the checks' reading of `get`).
    #[allow(clippy::unnecessary_cast)]
    fn checked_get(&self, row: usize) -> Option<i64> {
        each_width!(*self, s => Some(s[row] as i64), v => Some(v), (s, d) => s[row].checked_add(d))
    }

    /// The rows `range` of it.
    pub fn slice(&self, range: std::ops::Range<usize>) -> Column<'a> {
        match *self {
            Column::I64(s) => Column::I64(&s[range]),
            Column::I32(s) => Column::I32(&s[range]),
            Column::I16(s) => Column::I16(&s[range]),
            Column::I8(s) => Column::I8(&s[range]),
            Column::U64(s) => Column::U64(&s[range]),
            Column::U32(s) => Column::U32(&s[range]),
            Column::U16(s) => Column::U16(&s[range]),
            Column::U8(s) => Column::U8(&s[range]),
            Column::Bool(s) => Column::Bool(&s[range]),
            Column::All(v) => Column::All(v),
            Column::Shifted(s, d) => Column::Shifted(&s[range], d),
        }
    }

    /// Its value when all of its `n` rows (n > 0) have the same.
    #[allow(clippy::unnecessary_cast)]
    pub(crate) fn single_value(&self, n: usize) -> Option<i64> {
        each_width!(*self, s => s.iter().all(|&x| x == s[0]).then(|| s[0] as i64), v => (n > 0).then_some(v), (s, d) => s.iter().all(|&x| x == s[0]).then(|| s[0].wrapping_add(d)))
    }

    /// One past the largest of its `n` rows' values (0 where it has none): how many dense ids
    /// (ranks, steps) it names.
    #[allow(clippy::unnecessary_cast)]
    fn top(&self, n: usize) -> usize {
        let top = each_width!(*self, s => s.iter().map(|&x| x as i64 + 1).max().unwrap_or(0), v => if n > 0 { v + 1 } else { 0 }, (s, d) => s.iter().map(|&x| x.wrapping_add(d) + 1).max().unwrap_or(0));
        top as usize
    }

    /// The first of its `n` rows whose value fails `ok`.
    #[allow(clippy::unnecessary_cast)]
    fn find_bad(&self, n: usize, ok: impl Fn(i64) -> bool) -> Option<usize> {
        each_width!(*self, s => s.iter().position(|&x| !ok(x as i64)), v => (n > 0 && !ok(v)).then_some(0), (s, d) => s.iter().position(|&x| !ok(x.wrapping_add(d))))
    }

    /// Appends the rows `range` to `out` as i64.
    #[allow(clippy::unnecessary_cast)]
    pub(crate) fn extend_into(&self, range: std::ops::Range<usize>, out: &mut Vec<i64>) {
        each_width!(*self, s => out.extend(s[range].iter().map(|&x| x as i64)), v => out.extend(std::iter::repeat_n(v, range.len())), (s, d) => out.extend(s[range].iter().map(|&x| x.wrapping_add(d))))
    }
}

/// Host CUDA API calls (nsys `CUPTI_ACTIVITY_KIND_RUNTIME`, Kineto `cuda_runtime`/`cuda_driver`).
#[derive(Clone, Copy, Debug)]
pub struct Calls<'a> {
    pub rank: Column<'a>,
    /// Thread id; calls of one (rank, thread) are ordered by start.
    pub thread: Column<'a>,
    pub start: Column<'a>,
    pub end: Column<'a>,
    pub correlation: Column<'a>,
    /// Optional (default 0). 1: the call blocks the host until GPU work is done (stream, event or
    /// device synchronize, synchronous memcpy/memset). Calls named by a sync record of type 1, 3 or
    /// 4 are blocking whatever this says. `cudaStreamWaitEvent` is not blocking.
    pub blocking: Column<'a>,
    /// Optional (default -1: none). The host-work segment of the gap before this call (from the
    /// previous call's end on the same thread to this call's start), e.g. an id of the innermost
    /// NVTX range or CPU operator covering it. [`super::Change::gaps`] shortens a segment.
    pub segment: Column<'a>,
    /// Optional (default -1). Where >= 0 (the gap lies in some range of the caller's), the gap is
    /// a segment of its own, named by the call's row (`segment` there is ignored): what a caller
    /// that cuts gaps one by one gives without a column of rows.
    pub own_segment: Column<'a>,
}

/// GPU ops: kernels, memcpys, memsets (nsys `CUPTI_ACTIVITY_KIND_{KERNEL,MEMCPY,MEMSET}`).
#[derive(Clone, Copy, Debug)]
pub struct Ops<'a> {
    pub rank: Column<'a>,
    /// Stream id; ops of one (rank, stream) run in order of start.
    pub stream: Column<'a>,
    pub start: Column<'a>,
    pub end: Column<'a>,
    /// The launching call: its row among the rank's calls (the rank's rows of [`Calls`], in order,
    /// from 0), negative where unknown; many ops may share one (a `cudaGraphLaunch`).
    pub launch: Column<'a>,
    /// Optional (default -1: none). The training step the op belongs to, dense `0..n_steps`.
    pub step: Column<'a>,
}

/// CUPTI synchronization record types (nsys `CUPTI_ACTIVITY_KIND_SYNCHRONIZATION.syncType`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(i64)]
pub enum SyncType {
    /// `cudaEventSynchronize`: the call waits for the event's recorded work.
    EventSync = 1,
    /// `cudaStreamWaitEvent`: `stream` waits, on the GPU, for the event's recorded work.
    StreamWaitEvent = 2,
    /// `cudaStreamSynchronize`: the call waits for `stream`'s work enqueued before it.
    StreamSync = 3,
    /// `cudaDeviceSynchronize`/`cuCtxSynchronize`: the call waits for every stream of the rank.
    DeviceSync = 4,
}

/// Synchronization records (nsys `CUPTI_ACTIVITY_KIND_SYNCHRONIZATION`, Kineto `cuda_sync`).
#[derive(Clone, Copy, Debug)]
pub struct SyncRecords<'a> {
    pub rank: Column<'a>,
    /// [`SyncType`] as its number; other values are counted as unresolved and ignored.
    pub kind: Column<'a>,
    /// The stream synchronized (type 3) or made to wait (type 2); ignored otherwise.
    pub stream: Column<'a>,
    /// The event waited for (types 1 and 2); ignored otherwise.
    pub event: Column<'a>,
    /// The correlation id of the synchronizing call (the `cudaStreamWaitEvent`, `...Synchronize`).
    pub correlation: Column<'a>,
    /// Optional (default -1). The correlation id of the matching `cudaEventRecord` when the source
    /// names it (Kineto `cuda_sync` args, nsys `eventSyncId` resolved by the caller); otherwise the
    /// wait is matched to the latest record of the same event id before the waiting call.
    pub record_correlation: Column<'a>,
    /// Optional (default 0). 1 where the caller inferred the row rather than read it from a
    /// capture (a `cudaEventRecord`/`cudaStreamWaitEvent` pair of calls, say): the fidelity counts
    /// its dependency as inferred.
    pub inferred: Column<'a>,
}

/// Event records (nsys `CUDA_EVENT`, one per `cudaEventRecord`).
#[derive(Clone, Copy, Debug)]
pub struct EventRecords<'a> {
    pub rank: Column<'a>,
    /// The recording stream.
    pub stream: Column<'a>,
    pub event: Column<'a>,
    /// The correlation id of the `cudaEventRecord` call.
    pub correlation: Column<'a>,
}

/// Collective instances, one row per (instance, member op). Instance ids are dense
/// `0..n_instances`, each with at least one member; an op is a member of at most one instance.
/// A member op is the rank's NCCL kernel or the first op of its copy-engine chain; a point-to-point
/// transfer is an instance of two members; a rank absent from an instance has no row in it.
#[derive(Clone, Copy, Debug)]
pub struct Members<'a> {
    pub instance: Column<'a>,
    /// The member's op row (index into [`Ops`]).
    pub op: Column<'a>,
}

/// A table part's columns by name, the rank's first (what grouping by rank and checking read).
pub(crate) trait Part<'a, const K: usize>: Copy + Sync {
    const TABLE: &'static str;
    const NAMES: [&'static str; K];
    /// The columns that must be given (the others default).
    const REQUIRED: usize;
    fn columns(&self) -> [Column<'a>; K];
}

impl<'a> Part<'a, 8> for Calls<'a> {
    const TABLE: &'static str = "calls";
    const NAMES: [&'static str; 8] = ["rank", "thread", "start", "end", "correlation", "blocking", "segment", "own_segment"];
    const REQUIRED: usize = 5;
    fn columns(&self) -> [Column<'a>; 8] {
        [self.rank, self.thread, self.start, self.end, self.correlation, self.blocking, self.segment, self.own_segment]
    }
}

impl<'a> Part<'a, 6> for Ops<'a> {
    const TABLE: &'static str = "ops";
    const NAMES: [&'static str; 6] = ["rank", "stream", "start", "end", "launch", "step"];
    const REQUIRED: usize = 5;
    fn columns(&self) -> [Column<'a>; 6] {
        [self.rank, self.stream, self.start, self.end, self.launch, self.step]
    }
}

impl<'a> Part<'a, 7> for SyncRecords<'a> {
    const TABLE: &'static str = "syncs";
    const NAMES: [&'static str; 7] = ["rank", "kind", "stream", "event", "correlation", "record_correlation", "inferred"];
    const REQUIRED: usize = 5;
    fn columns(&self) -> [Column<'a>; 7] {
        [self.rank, self.kind, self.stream, self.event, self.correlation, self.record_correlation, self.inferred]
    }
}

impl<'a> Part<'a, 4> for EventRecords<'a> {
    const TABLE: &'static str = "events";
    const NAMES: [&'static str; 4] = ["rank", "stream", "event", "correlation"];
    const REQUIRED: usize = 4;
    fn columns(&self) -> [Column<'a>; 4] {
        [self.rank, self.stream, self.event, self.correlation]
    }
}

impl<'a> Part<'a, 2> for Members<'a> {
    const TABLE: &'static str = "members";
    const NAMES: [&'static str; 2] = ["instance", "op"];
    const REQUIRED: usize = 2;
    fn columns(&self) -> [Column<'a>; 2] {
        [self.instance, self.op]
    }
}

/// The whole job, borrowed: each table as its parts.
#[derive(Clone, Debug, Default)]
pub struct Job<'a> {
    pub calls: Vec<Calls<'a>>,
    pub ops: Vec<Ops<'a>>,
    pub syncs: Vec<SyncRecords<'a>>,
    pub events: Vec<EventRecords<'a>>,
    pub members: Vec<Members<'a>>,
}

/// The number of rows of each part of a table (checking that its columns agree).
pub(crate) fn part_rows<'a, const K: usize, P: Part<'a, K>>(parts: &[P]) -> Result<Vec<usize>, WhatIfError> {
    let mut out = Vec::with_capacity(parts.len());
    for (k, part) in parts.iter().enumerate() {
        let what = if parts.len() == 1 { P::TABLE.to_string() } else { format!("{}[{k}]", P::TABLE) };
        let columns = part.columns();
        let mut n: Option<(usize, &str)> = None;
        for (j, c) in columns.iter().enumerate() {
            let Some(len) = c.len() else { continue };
            match n {
                None => n = Some((len, P::NAMES[j])),
                Some((m, first)) if m != len => {
                    let required = j < P::REQUIRED;
                    return Err(input_error(if required {
                        format!("{what}: column {} has {len} rows, {first} has {m}", P::NAMES[j])
                    } else {
                        format!("{what}: optional column {} has {len} rows, {first} has {m} (pass all rows or none)", P::NAMES[j])
                    }));
                }
                _ => {}
            }
        }
        out.push(n.map_or(0, |x| x.0));
    }
    Ok(out)
}

/// The first row (in the table's numbering) of a table whose column `j` fails `ok`.
fn find_bad<'a, const K: usize, P: Part<'a, K>>(parts: &[P], rows: &[usize], j: usize, ok: impl Fn(i64) -> bool + Copy) -> Option<(usize, i64)> {
    let mut base = 0;
    for (part, &n) in parts.iter().zip(rows) {
        let c = part.columns()[j];
        if let Some(i) = c.find_bad(n, ok) {
            return Some((base + i, c.get(if c.len().is_some() { i } else { 0 })));
        }
        base += n;
    }
    None
}

/// The first of n rows whose end is before its start or whose time is out of range (beyond
/// 2^62: keeps every sum of a time and a lag far from overflow).
/// A shifted time whose sum overflows is out of range too (so a rank's largest shifted time is its
/// largest time, shifted).
fn find_bad_time(start: Column, end: Column, n: usize) -> Option<usize> {
    let in_range = |t: i64| t.unsigned_abs() <= 1 << 62;
    let bad = |s: Option<i64>, e: Option<i64>| !matches!((s, e), (Some(s), Some(e)) if s <= e && in_range(s) && in_range(e));
    match (start, end) {
        (Column::I64(s), Column::I64(e)) => s.iter().zip(e).position(|(&s, &e)| bad(Some(s), Some(e))),
        (Column::Shifted(s, a), Column::Shifted(e, b)) => s.iter().zip(e).position(|(&s, &e)| bad(s.checked_add(a), e.checked_add(b))),
        _ => (0..n).find(|&i| bad(start.checked_get(i), end.checked_get(i))),
    }
}

/// What the checks find: the tables' sizes.
pub(crate) struct Sizes {
    pub(crate) calls: Vec<usize>,
    pub(crate) ops: Vec<usize>,
    pub(crate) syncs: Vec<usize>,
    pub(crate) events: Vec<usize>,
    pub(crate) members: Vec<usize>,
    pub(crate) n_ranks: usize,
    pub(crate) n_instances: usize,
    pub(crate) n_steps: usize,
}

impl Sizes {
    pub(crate) fn n_calls(&self) -> usize {
        self.calls.iter().sum()
    }

    pub(crate) fn n_ops(&self) -> usize {
        self.ops.iter().sum()
    }

    pub(crate) fn n_members(&self) -> usize {
        self.members.iter().sum()
    }
}

impl<'a> Job<'a> {
    pub fn n_calls(&self) -> usize {
        part_rows(&self.calls).map_or(0, |r| r.iter().sum())
    }

    pub fn n_ops(&self) -> usize {
        part_rows(&self.ops).map_or(0, |r| r.iter().sum())
    }

    /// The member rows' (instance, op), in order.
    pub(crate) fn member_rows(&self, rows: &[usize]) -> Vec<(i64, i64)> {
        let mut out = Vec::with_capacity(rows.iter().sum());
        for (m, &n) in self.members.iter().zip(rows) {
            out.extend((0..n).map(|i| (m.instance.get(i), m.op.get(i))));
        }
        out
    }

    /// Checks lengths and ranges; returns the tables' sizes and the number of ranks, instances and
    /// steps.
    pub(crate) fn check(&self) -> Result<Sizes, WhatIfError> {
        let (calls, ops) = (part_rows(&self.calls)?, part_rows(&self.ops)?);
        let (syncs, events, members) = (part_rows(&self.syncs)?, part_rows(&self.events)?, part_rows(&self.members)?);
        let (n_calls, n_ops) = (calls.iter().sum::<usize>(), ops.iter().sum::<usize>());
        if n_calls + n_ops >= (u32::MAX / 4) as usize {
            return Err(input_error(format!("{n_calls} calls and {n_ops} ops: too many for one graph (at most about 1e9)")));
        }
        let dense_rank = |r: i64| (0..1 << 24).contains(&r);
        let bad_rank = |table: &str, found: Option<(usize, i64)>| match found {
            Some((row, r)) => Err(input_error(format!("{table} row {row}: rank {r} (ranks are dense, 0..n_ranks)"))),
            None => Ok(()),
        };
        bad_rank("calls", find_bad(&self.calls, &calls, 0, dense_rank))?;
        bad_rank("ops", find_bad(&self.ops, &ops, 0, dense_rank))?;
        bad_rank("syncs", find_bad(&self.syncs, &syncs, 0, dense_rank))?;
        bad_rank("events", find_bad(&self.events, &events, 0, dense_rank))?;
        let n_ranks = (self.calls.iter().map(|p| p.rank).zip(&calls))
            .chain(self.ops.iter().map(|p| p.rank).zip(&ops))
            .chain(self.syncs.iter().map(|p| p.rank).zip(&syncs))
            .chain(self.events.iter().map(|p| p.rank).zip(&events))
            .map(|(c, &n)| c.top(n))
            .max()
            .unwrap_or(0);

        for (table, parts, rows) in [("calls", &self.calls.iter().map(|p| (p.start, p.end)).collect::<Vec<_>>(), &calls), ("ops", &self.ops.iter().map(|p| (p.start, p.end)).collect(), &ops)] {
            let mut base = 0;
            for (&(start, end), &n) in parts.iter().zip(rows.iter()) {
                if let Some(i) = find_bad_time(start, end, n) {
                    return Err(input_error(match (start.checked_get(i), end.checked_get(i)) {
                        (Some(s), Some(e)) if e < s => format!("{table} row {}: end {e} before start {s}", base + i),
                        (Some(s), Some(e)) => format!("{table} row {}: time out of range ({s}, {e})", base + i),
                        _ => format!("{table} row {}: time out of range (its clock shift overflows)", base + i),
                    }));
                }
                base += n;
            }
        }
        if let Some((row, b)) = find_bad(&self.calls, &calls, 5, |b| b == 0 || b == 1) {
            return Err(input_error(format!("calls row {row}: blocking is {b} (0 or 1)")));
        }
        if let Some((row, s)) = find_bad(&self.ops, &ops, 5, |s| (-1..1 << 31).contains(&s)) {
            return Err(input_error(format!("ops row {row}: step {s} (-1 or a dense step index)")));
        }
        let n_steps = self.ops.iter().zip(&ops).map(|(p, &n)| p.step.top(n)).max().unwrap_or(0);
        // Each op's launching call is one of its rank's.
        let mut rank_calls = vec![0i64; n_ranks];
        for (part, &n) in self.calls.iter().zip(&calls) {
            match part.rank {
                Column::All(_) if n == 0 => {}
                Column::All(r) => rank_calls[r as usize] += n as i64,
                rank => (0..n).for_each(|i| rank_calls[rank.get(i) as usize] += 1),
            }
        }
        let mut base = 0;
        for (part, &n) in self.ops.iter().zip(&ops) {
            let bad = match part.rank {
                Column::All(r) => part.launch.find_bad(n, |call| call < rank_calls[r as usize]),
                rank => (0..n).find(|&i| part.launch.get(i) >= rank_calls[rank.get(i) as usize]),
            };
            if let Some(i) = bad {
                let (r, call) = (part.rank.get(i), part.launch.get(i));
                return Err(input_error(format!("ops row {}: launch {call} out of range (rank {r} has {} calls)", base + i, rank_calls[r as usize])));
            }
            base += n;
        }

        let mut seen = vec![false; n_ops];
        let mut n_instances = 0usize;
        let rows = self.member_rows(&members);
        for (row, &(inst, op)) in rows.iter().enumerate() {
            if !(0..1 << 31).contains(&inst) {
                return Err(input_error(format!("members row {row}: instance {inst} (dense, 0..n_instances)")));
            }
            if !(0..n_ops as i64).contains(&op) {
                return Err(input_error(format!("members row {row}: op row {op} out of range (the job has {n_ops} ops)")));
            }
            if std::mem::replace(&mut seen[op as usize], true) {
                return Err(input_error(format!("members row {row}: op row {op} is a member of two instances")));
            }
            n_instances = n_instances.max(inst as usize + 1);
        }
        let mut has_member = vec![false; n_instances];
        for &(inst, _) in &rows {
            has_member[inst as usize] = true;
        }
        if let Some(inst) = has_member.iter().position(|h| !h) {
            return Err(input_error(format!("instance {inst} has no members (instance ids are dense, 0..n_instances)")));
        }
        Ok(Sizes { calls, ops, syncs, events, members, n_ranks, n_instances, n_steps })
    }
}

/// `column[row]`, or `default` when the optional column is empty.
#[inline]
pub(crate) fn opt(column: &[i64], row: usize, default: i64) -> i64 {
    if column.is_empty() {
        default
    } else {
        column[row]
    }
}

/// An owned job, with a builder: what tests, benches and the synthetic generator fill row by row.
/// An optional column left empty is its default.
#[derive(Clone, Debug, Default)]
pub struct JobData {
    pub call_rank: Vec<i64>,
    pub call_thread: Vec<i64>,
    pub call_start: Vec<i64>,
    pub call_end: Vec<i64>,
    pub call_correlation: Vec<i64>,
    pub call_blocking: Vec<i64>,
    pub call_segment: Vec<i64>,
    pub op_rank: Vec<i64>,
    pub op_stream: Vec<i64>,
    pub op_start: Vec<i64>,
    pub op_end: Vec<i64>,
    /// The launching call's row among the rank's calls (see [`Ops::launch`]), -1 unknown.
    pub op_launch: Vec<i64>,
    pub op_step: Vec<i64>,
    pub sync_rank: Vec<i64>,
    pub sync_kind: Vec<i64>,
    pub sync_stream: Vec<i64>,
    pub sync_event: Vec<i64>,
    pub sync_correlation: Vec<i64>,
    pub sync_record_correlation: Vec<i64>,
    pub sync_inferred: Vec<i64>,
    pub event_rank: Vec<i64>,
    pub event_stream: Vec<i64>,
    pub event_event: Vec<i64>,
    pub event_correlation: Vec<i64>,
    pub member_instance: Vec<i64>,
    pub member_op: Vec<i64>,
}

impl JobData {
    /// The job as one part per table.
    pub fn view(&self) -> Job<'_> {
        fn c(v: &[i64]) -> Column<'_> {
            Column::I64(v)
        }
        fn or(v: &[i64], default: i64) -> Column<'_> {
            if v.is_empty() {
                Column::All(default)
            } else {
                Column::I64(v)
            }
        }
        Job {
            calls: vec![Calls {
                rank: c(&self.call_rank),
                thread: c(&self.call_thread),
                start: c(&self.call_start),
                end: c(&self.call_end),
                correlation: c(&self.call_correlation),
                blocking: or(&self.call_blocking, 0),
                segment: or(&self.call_segment, -1),
                own_segment: Column::All(-1),
            }],
            ops: vec![Ops {
                rank: c(&self.op_rank),
                stream: c(&self.op_stream),
                start: c(&self.op_start),
                end: c(&self.op_end),
                launch: c(&self.op_launch),
                step: or(&self.op_step, -1),
            }],
            syncs: vec![SyncRecords {
                rank: c(&self.sync_rank),
                kind: c(&self.sync_kind),
                stream: c(&self.sync_stream),
                event: c(&self.sync_event),
                correlation: c(&self.sync_correlation),
                record_correlation: or(&self.sync_record_correlation, -1),
                inferred: or(&self.sync_inferred, 0),
            }],
            events: vec![EventRecords {
                rank: c(&self.event_rank),
                stream: c(&self.event_stream),
                event: c(&self.event_event),
                correlation: c(&self.event_correlation),
            }],
            members: vec![Members { instance: c(&self.member_instance), op: c(&self.member_op) }],
        }
    }

    /// Adds a call; returns its row.
    #[allow(clippy::too_many_arguments)]
    pub fn call(&mut self, rank: i64, thread: i64, start: i64, end: i64, correlation: i64, blocking: bool, segment: i64) -> usize {
        self.call_rank.push(rank);
        self.call_thread.push(thread);
        self.call_start.push(start);
        self.call_end.push(end);
        self.call_correlation.push(correlation);
        self.call_blocking.push(blocking as i64);
        self.call_segment.push(segment);
        self.call_rank.len() - 1
    }

    /// How many calls rank `rank` has so far: the row among its calls (an op's `launch`) of the
    /// next call added to it.
    pub fn calls_of(&self, rank: i64) -> i64 {
        self.call_rank.iter().filter(|&&r| r == rank).count() as i64
    }

    /// Adds an op launched by the rank's call row `launch` (-1: unknown); returns its row.
    pub fn op(&mut self, rank: i64, stream: i64, start: i64, end: i64, launch: i64, step: i64) -> usize {
        self.op_rank.push(rank);
        self.op_stream.push(stream);
        self.op_start.push(start);
        self.op_end.push(end);
        self.op_launch.push(launch);
        self.op_step.push(step);
        self.op_rank.len() - 1
    }

    /// Adds a sync record.
    pub fn sync(&mut self, rank: i64, kind: SyncType, stream: i64, event: i64, correlation: i64, record_correlation: i64) {
        self.sync_rank.push(rank);
        self.sync_kind.push(kind as i64);
        self.sync_stream.push(stream);
        self.sync_event.push(event);
        self.sync_correlation.push(correlation);
        self.sync_record_correlation.push(record_correlation);
        self.sync_inferred.push(0);
    }

    /// Adds an event record.
    pub fn event(&mut self, rank: i64, stream: i64, event: i64, correlation: i64) {
        self.event_rank.push(rank);
        self.event_stream.push(stream);
        self.event_event.push(event);
        self.event_correlation.push(correlation);
    }

    /// Adds a member op to an instance; returns the member row.
    pub fn member(&mut self, instance: i64, op: usize) -> usize {
        self.member_instance.push(instance);
        self.member_op.push(op as i64);
        self.member_instance.len() - 1
    }
}
