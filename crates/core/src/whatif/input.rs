//! The job the graph is built from: whole columns, one table per kind of record, rows in any order.
//!
//! Every column is `i64`; all rows of a table have the same length. A column documented as optional
//! may be an empty slice, meaning its default for every row. Ranks are dense `0..n_ranks`; a rank
//! is one process on one GPU (its ops are that device's, its calls that process's). Correlation ids
//! are per rank (`KERNEL.correlationId = RUNTIME.correlationId` within one process); a negative
//! correlation means unknown. Rows are referred to by their index in their table ("op row",
//! "call row", "member row").

use super::{input_error, WhatIfError};

/// Host CUDA API calls (nsys `CUPTI_ACTIVITY_KIND_RUNTIME`, Kineto `cuda_runtime`/`cuda_driver`).
#[derive(Clone, Copy, Default)]
pub struct Calls<'a> {
    pub rank: &'a [i64],
    /// Thread id; calls of one (rank, thread) are ordered by start.
    pub thread: &'a [i64],
    pub start: &'a [i64],
    pub end: &'a [i64],
    pub correlation: &'a [i64],
    /// Optional (default 0). 1: the call blocks the host until GPU work is done (stream, event or
    /// device synchronize, synchronous memcpy/memset). Calls named by a sync record of type 1, 3 or
    /// 4 are blocking whatever this says. `cudaStreamWaitEvent` is not blocking.
    pub blocking: &'a [i64],
    /// Optional (default -1: none). The host-work segment of the gap before this call (from the
    /// previous call's end on the same thread to this call's start), e.g. an id of the innermost
    /// NVTX range or CPU operator covering it. [`super::Change::gaps`] shortens a segment.
    pub segment: &'a [i64],
}

/// GPU ops: kernels, memcpys, memsets (nsys `CUPTI_ACTIVITY_KIND_{KERNEL,MEMCPY,MEMSET}`).
#[derive(Clone, Copy, Default)]
pub struct Ops<'a> {
    pub rank: &'a [i64],
    /// Stream id; ops of one (rank, stream) run in order of start.
    pub stream: &'a [i64],
    pub start: &'a [i64],
    pub end: &'a [i64],
    /// The launching call's correlation id; many ops may share one (a `cudaGraphLaunch`).
    pub correlation: &'a [i64],
    /// Optional (default -1: none). The training step the op belongs to, dense `0..n_steps`.
    pub step: &'a [i64],
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
#[derive(Clone, Copy, Default)]
pub struct SyncRecords<'a> {
    pub rank: &'a [i64],
    /// [`SyncType`] as its number; other values are counted as unresolved and ignored.
    pub kind: &'a [i64],
    /// The stream synchronized (type 3) or made to wait (type 2); ignored otherwise.
    pub stream: &'a [i64],
    /// The event waited for (types 1 and 2); ignored otherwise.
    pub event: &'a [i64],
    /// The correlation id of the synchronizing call (the `cudaStreamWaitEvent`, `...Synchronize`).
    pub correlation: &'a [i64],
    /// Optional (default -1). The correlation id of the matching `cudaEventRecord` when the source
    /// names it (Kineto `cuda_sync` args, nsys `eventSyncId` resolved by the caller); otherwise the
    /// wait is matched to the latest record of the same event id before the waiting call.
    pub record_correlation: &'a [i64],
    /// Optional (default 0). 1 where the caller inferred the row rather than read it from a
    /// capture (a `cudaEventRecord`/`cudaStreamWaitEvent` pair of calls, say): the fidelity counts
    /// its dependency as inferred.
    pub inferred: &'a [i64],
}

/// Event records (nsys `CUDA_EVENT`, one per `cudaEventRecord`).
#[derive(Clone, Copy, Default)]
pub struct EventRecords<'a> {
    pub rank: &'a [i64],
    /// The recording stream.
    pub stream: &'a [i64],
    pub event: &'a [i64],
    /// The correlation id of the `cudaEventRecord` call.
    pub correlation: &'a [i64],
}

/// Collective instances, one row per (instance, member op). Instance ids are dense
/// `0..n_instances`, each with at least one member; an op is a member of at most one instance.
/// A member op is the rank's NCCL kernel or the first op of its copy-engine chain; a point-to-point
/// transfer is an instance of two members; a rank absent from an instance has no row in it.
#[derive(Clone, Copy, Default)]
pub struct Members<'a> {
    pub instance: &'a [i64],
    /// The member's op row (index into [`Ops`]).
    pub op: &'a [i64],
}

/// The whole job, borrowed.
#[derive(Clone, Copy, Default)]
pub struct Job<'a> {
    pub calls: Calls<'a>,
    pub ops: Ops<'a>,
    pub syncs: SyncRecords<'a>,
    pub events: EventRecords<'a>,
    pub members: Members<'a>,
}

fn same_length(table: &str, columns: &[(&str, &[i64])], optional: &[(&str, &[i64])]) -> Result<usize, WhatIfError> {
    let n = columns.first().map_or(0, |(_, c)| c.len());
    for (name, c) in columns {
        if c.len() != n {
            return Err(input_error(format!("{table}: column {name} has {} rows, {} has {n}", c.len(), columns[0].0)));
        }
    }
    for (name, c) in optional {
        if !c.is_empty() && c.len() != n {
            return Err(input_error(format!(
                "{table}: optional column {name} has {} rows, {} has {n} (pass all rows or none)",
                c.len(),
                columns[0].0
            )));
        }
    }
    Ok(n)
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

impl<'a> Job<'a> {
    pub fn n_calls(&self) -> usize {
        self.calls.start.len()
    }

    pub fn n_ops(&self) -> usize {
        self.ops.start.len()
    }

    /// Checks lengths and ranges; returns the number of ranks, instances and steps.
    pub(crate) fn check(&self) -> Result<(usize, usize, usize), WhatIfError> {
        let c = &self.calls;
        let n_calls = same_length(
            "calls",
            &[("rank", c.rank), ("thread", c.thread), ("start", c.start), ("end", c.end), ("correlation", c.correlation)],
            &[("blocking", c.blocking), ("segment", c.segment)],
        )?;
        let o = &self.ops;
        let n_ops = same_length(
            "ops",
            &[("rank", o.rank), ("stream", o.stream), ("start", o.start), ("end", o.end), ("correlation", o.correlation)],
            &[("step", o.step)],
        )?;
        let s = &self.syncs;
        same_length(
            "syncs",
            &[("rank", s.rank), ("kind", s.kind), ("stream", s.stream), ("event", s.event), ("correlation", s.correlation)],
            &[("record_correlation", s.record_correlation), ("inferred", s.inferred)],
        )?;
        let e = &self.events;
        same_length("events", &[("rank", e.rank), ("stream", e.stream), ("event", e.event), ("correlation", e.correlation)], &[])?;
        let m = &self.members;
        let n_members = same_length("members", &[("instance", m.instance), ("op", m.op)], &[])?;
        if n_calls + n_ops >= (u32::MAX / 4) as usize {
            return Err(input_error(format!("{n_calls} calls and {n_ops} ops: too many for one graph (at most about 1e9)")));
        }

        let mut n_ranks = 0usize;
        for (table, ranks) in [("calls", c.rank), ("ops", o.rank), ("syncs", s.rank), ("events", e.rank)] {
            if let Some(row) = ranks.iter().position(|&r| !(0..1 << 24).contains(&r)) {
                return Err(input_error(format!("{table} row {row}: rank {} (ranks are dense, 0..n_ranks)", ranks[row])));
            }
            n_ranks = n_ranks.max(ranks.iter().max().map_or(0, |&r| r as usize + 1));
        }
        for (table, start, end) in [("calls", c.start, c.end), ("ops", o.start, o.end)] {
            if let Some(row) = (0..start.len()).find(|&i| end[i] < start[i]) {
                return Err(input_error(format!("{table} row {row}: end {} before start {}", end[row], start[row])));
            }
            // Keeps every sum of a time and a lag far from overflow.
            if let Some(row) = (0..start.len()).find(|&i| start[i].abs() > 1 << 62 || end[i].abs() > 1 << 62) {
                return Err(input_error(format!("{table} row {row}: time out of range ({}, {})", start[row], end[row])));
            }
        }
        if let Some(row) = c.blocking.iter().position(|&b| b != 0 && b != 1) {
            return Err(input_error(format!("calls row {row}: blocking is {} (0 or 1)", c.blocking[row])));
        }
        if let Some(row) = o.step.iter().position(|&s| !(-1..1 << 31).contains(&s)) {
            return Err(input_error(format!("ops row {row}: step {} (-1 or a dense step index)", o.step[row])));
        }
        let n_steps = o.step.iter().max().map_or(0, |&s| (s + 1) as usize);

        let mut seen = vec![false; n_ops];
        let mut n_instances = 0usize;
        for row in 0..n_members {
            let (inst, op) = (m.instance[row], m.op[row]);
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
        for &inst in m.instance {
            has_member[inst as usize] = true;
        }
        if let Some(inst) = has_member.iter().position(|h| !h) {
            return Err(input_error(format!("instance {inst} has no members (instance ids are dense, 0..n_instances)")));
        }
        Ok((n_ranks, n_instances, n_steps))
    }
}

/// An owned job, with a builder: what tests, benches and the synthetic generator fill row by row.
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
    pub op_correlation: Vec<i64>,
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
    pub fn view(&self) -> Job<'_> {
        Job {
            calls: Calls {
                rank: &self.call_rank,
                thread: &self.call_thread,
                start: &self.call_start,
                end: &self.call_end,
                correlation: &self.call_correlation,
                blocking: &self.call_blocking,
                segment: &self.call_segment,
            },
            ops: Ops {
                rank: &self.op_rank,
                stream: &self.op_stream,
                start: &self.op_start,
                end: &self.op_end,
                correlation: &self.op_correlation,
                step: &self.op_step,
            },
            syncs: SyncRecords {
                rank: &self.sync_rank,
                kind: &self.sync_kind,
                stream: &self.sync_stream,
                event: &self.sync_event,
                correlation: &self.sync_correlation,
                record_correlation: &self.sync_record_correlation,
                inferred: &self.sync_inferred,
            },
            events: EventRecords {
                rank: &self.event_rank,
                stream: &self.event_stream,
                event: &self.event_event,
                correlation: &self.event_correlation,
            },
            members: Members { instance: &self.member_instance, op: &self.member_op },
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

    /// Adds an op; returns its row.
    pub fn op(&mut self, rank: i64, stream: i64, start: i64, end: i64, correlation: i64, step: i64) -> usize {
        self.op_rank.push(rank);
        self.op_stream.push(stream);
        self.op_start.push(start);
        self.op_end.push(end);
        self.op_correlation.push(correlation);
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
