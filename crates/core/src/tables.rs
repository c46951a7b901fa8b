//! The event tables the reader pulls, declared once as data: which nsys table (and older or
//! newer names of it), which columns under which names, and how each value is converted.
//! The reader and the SQL floor of the benchmark are both planned from these declarations.

use crate::error::ReadError;
use crate::memory;
use crate::payload::Payloads;
use crate::scan::{self, Row, Value};
use crate::schema::Schema;
use crate::strings::StringTable;
use crate::times::Clock;
use rusqlite::Connection;
use std::path::Path;

/// How a stored value becomes an output value.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Kind {
    Int,
    /// An event's start, session-relative or absolute ns, made absolute UTC ns. A row whose start
    /// or end is unusable (`times`) is dropped; the table is sorted by it.
    Start,
    /// An event's end, as `Start`.
    End,
    /// An end that is NULL for an instant (an NVTX mark): then end = start.
    OpenEnd,
    /// A time that may be absent (NULL or 0: not collected) or unusable: then -1; never drops a row.
    OptionalTime,
    /// A CUPTI id (stream, event) where CUPTI_SYNCHRONIZATION_INVALID_VALUE (0xFFFFFFFF) means
    /// none: then -1.
    CuptiId,
    /// CUPTI's cudaEventSyncId, which counts from 1: 0 and 0xFFFFFFFF mean none, -1.
    SyncId,
    /// Process id from a packed `globalPid`/`globalTid`: `<HW:8><VM:8><PID:24><TID:24>`.
    Pid,
    /// Thread id from a packed `globalTid`.
    Tid,
    /// An id into `StringIds`, made a dense string-table index.
    StringId,
    /// Inline text, interned into the string table.
    Text,
    /// The message size in an NVTX extended payload blob (`payload`), -1 where none; a blob that
    /// does not decode is counted.
    PayloadBytes,
    /// The reduction operation's value in an NVTX extended payload blob, -1 where none.
    PayloadOp,
}

pub struct Col {
    pub name: &'static str,
    /// Stored column names in order of preference (columns get renamed between versions).
    pub sources: &'static [&'static str],
    pub kind: Kind,
}

pub struct TableSpec {
    pub name: &'static str,
    pub tables: &'static [&'static str],
    /// Groups of columns, so tables that share keys share their declaration.
    pub column_groups: &'static [&'static [Col]],
}

impl TableSpec {
    pub fn columns(&self) -> impl Iterator<Item = &'static Col> {
        self.column_groups.iter().flat_map(|group| group.iter())
    }
}

/// Value of a NULL, absent or unusable value.
pub const MISSING: i64 = -1;
/// CUPTI_SYNCHRONIZATION_INVALID_VALUE, as nsys stores it.
const CUPTI_INVALID: i64 = 0xFFFF_FFFF;

const fn col(name: &'static str, sources: &'static [&'static str], kind: Kind) -> Col {
    Col { name, sources, kind }
}


/// Start, end, device, stream, correlation and process of any GPU activity record.
const GPU_ACTIVITY: &[Col] = &[
    col("start", &["start"], Kind::Start),
    col("end", &["end"], Kind::End),
    col("device", &["deviceId"], Kind::Int),
    col("stream", &["streamId"], Kind::Int),
    col("correlation", &["correlationId"], Kind::Int),
    col("pid", &["globalPid"], Kind::Pid),
];

pub const KERNELS: TableSpec = TableSpec {
    name: "kernels",
    tables: &["CUPTI_ACTIVITY_KIND_KERNEL"],
    column_groups: &[
        GPU_ACTIVITY,
        &[
            col("name", &["demangledName", "shortName"], Kind::StringId),
            col("short_name", &["shortName", "demangledName"], Kind::StringId),
            col("grid_x", &["gridX"], Kind::Int),
            col("grid_y", &["gridY"], Kind::Int),
            col("grid_z", &["gridZ"], Kind::Int),
        ],
    ],
};

pub const MEMCPY: TableSpec = TableSpec {
    name: "memcpy",
    tables: &["CUPTI_ACTIVITY_KIND_MEMCPY"],
    column_groups: &[GPU_ACTIVITY, &[col("bytes", &["bytes"], Kind::Int), col("kind", &["copyKind"], Kind::Int)]],
};

pub const MEMSET: TableSpec = TableSpec {
    name: "memset",
    tables: &["CUPTI_ACTIVITY_KIND_MEMSET"],
    column_groups: &[GPU_ACTIVITY, &[col("bytes", &["bytes"], Kind::Int), col("kind", &["memKind"], Kind::Int)]],
};

pub const RUNTIME: TableSpec = TableSpec {
    name: "runtime",
    tables: &["CUPTI_ACTIVITY_KIND_RUNTIME"],
    column_groups: &[&[
        col("start", &["start"], Kind::Start),
        col("end", &["end"], Kind::End),
        col("pid", &["globalTid"], Kind::Pid),
        col("tid", &["globalTid"], Kind::Tid),
        col("correlation", &["correlationId"], Kind::Int),
        col("name", &["nameId"], Kind::StringId),
    ]],
};

/// `text` and `text_id` are merged into `name` after reading (a name is stored either way).
pub const NVTX: TableSpec = TableSpec {
    name: "nvtx",
    tables: &["NVTX_EVENTS"],
    column_groups: &[&[
        col("start", &["start"], Kind::Start),
        col("end", &["end"], Kind::OpenEnd),
        col("type", &["eventType"], Kind::Int),
        col("text", &["text"], Kind::Text),
        col("text_id", &["textId"], Kind::StringId),
        col("domain", &["domainId"], Kind::Int),
        col("pid", &["globalTid"], Kind::Pid),
        col("tid", &["globalTid"], Kind::Tid),
        // NCCL's message size and reduction operation, from exports made with --include-blobs.
        col("payload_bytes", &["binaryData"], Kind::PayloadBytes),
        col("payload_op", &["binaryData"], Kind::PayloadOp),
    ]],
};

pub const GPU_METRICS: TableSpec = TableSpec {
    name: "gpu_metrics",
    tables: &["GPU_METRICS"],
    column_groups: &[&[
        col("start", &["timestamp"], Kind::Start),
        col("type", &["typeId"], Kind::Int),
        col("metric", &["metricId"], Kind::Int),
        col("value", &["value"], Kind::Int),
    ]],
};

/// Names of the sampled metrics ("SMs Active [Throughput %]", ...), keyed by (type, metric).
pub const GPU_METRIC_NAMES: TableSpec = TableSpec {
    name: "gpu_metric_names",
    tables: &["TARGET_INFO_GPU_METRICS"],
    column_groups: &[&[
        col("type", &["typeId"], Kind::Int),
        col("metric", &["metricId"], Kind::Int),
        col("name", &["metricName"], Kind::Text),
    ]],
};

/// GPUs; 2026.x exports may lack TARGET_INFO_GPU and keep only TARGET_INFO_CUDA_DEVICE.
pub const GPUS: TableSpec = TableSpec {
    name: "gpus",
    tables: &["TARGET_INFO_GPU", "TARGET_INFO_CUDA_DEVICE"],
    column_groups: &[&[
        col("id", &["id", "cudaId"], Kind::Int),
        col("name", &["name"], Kind::Text),
        col("bus_location", &["busLocation"], Kind::Text),
        col("sm_count", &["smCount", "numMultiprocessors"], Kind::Int),
    ]],
};

/// CUDA synchronization calls (stream, event and context synchronize, stream wait event): when a
/// blocking call returned, and which event a wait was for. Kineto's `cuda_sync` events fill the
/// same columns. `sync_type` is CUPTI's: 0 unknown, 1 event synchronize, 2 stream wait event,
/// 3 stream synchronize, 4 context synchronize. 2025+ exports store both `syncType` and a
/// `deprecatedSyncType` (NULL in every file seen); older ones only `syncType`.
pub const SYNC: TableSpec = TableSpec {
    name: "sync",
    tables: &["CUPTI_ACTIVITY_KIND_SYNCHRONIZATION"],
    column_groups: &[&[
        col("start", &["start"], Kind::Start),
        col("end", &["end"], Kind::End),
        col("device", &["deviceId"], Kind::Int),
        col("stream", &["streamId"], Kind::CuptiId),
        col("correlation", &["correlationId"], Kind::Int),
        col("pid", &["globalPid"], Kind::Pid),
        col("sync_type", &["syncType", "deprecatedSyncType"], Kind::Int),
        col("event", &["eventId"], Kind::CuptiId),
        col("event_sync_id", &["eventSyncId"], Kind::SyncId),
        // Never stored: the correlation id of the event-record call (cudaEventRecord) whose event
        // this sync waited for, and the stream that event was recorded on. Kineto writes them
        // (`wait_on_cuda_event_record_corr_id`, `wait_on_stream`); for an export they come from
        // the `cuda_event` row with the same `event_sync_id` (`export::link_event_records`).
        col("event_record_correlation", &[], Kind::Int),
        col("event_stream", &[], Kind::Int),
    ]],
};

/// CUDA event records (cudaEventRecord): on which stream, by which call (`correlation`), which
/// event. `time` is the device-side completion time, which nsys 2026+ stores when collected
/// (else 0, here -1). No start: kept in stored order.
pub const CUDA_EVENT: TableSpec = TableSpec {
    name: "cuda_event",
    tables: &["CUPTI_ACTIVITY_KIND_CUDA_EVENT"],
    column_groups: &[&[
        col("device", &["deviceId"], Kind::Int),
        col("stream", &["streamId"], Kind::CuptiId),
        col("correlation", &["correlationId"], Kind::Int),
        col("pid", &["globalPid"], Kind::Pid),
        col("event", &["eventId"], Kind::CuptiId),
        col("event_sync_id", &["eventSyncId"], Kind::SyncId),
        col("time", &["timestamp"], Kind::OptionalTime),
    ]],
};

/// Host operators: PyTorch profiler (Kineto) `cpu_op` events, in the `nvtx` table's layout (type
/// 59, a push/pop range; domain name `cpu_op`), so that the two concatenate into all host ranges.
/// An nsys export has no such table (PyTorch's NVTX ranges are in `nvtx`): always empty there.
pub const CPU_OPS: TableSpec = TableSpec {
    name: "cpu_ops",
    tables: &[],
    column_groups: &[&[
        col("start", &[], Kind::Start),
        col("end", &[], Kind::End),
        col("type", &[], Kind::Int),
        col("name", &[], Kind::StringId),
        col("domain", &[], Kind::Int),
        col("pid", &[], Kind::Pid),
        col("tid", &[], Kind::Tid),
        col("domain_name", &[], Kind::StringId),
    ]],
};

pub const ALL: [&TableSpec; 11] =
    [&KERNELS, &MEMCPY, &MEMSET, &RUNTIME, &NVTX, &GPU_METRICS, &GPU_METRIC_NAMES, &GPUS, &SYNC, &CUDA_EVENT, &CPU_OPS];

/// A table planned against one export: the stored table and, per output column, its source.
pub struct Plan {
    pub table: Option<&'static str>,
    pub sources: Vec<Option<&'static str>>,
}

impl Plan {
    pub fn new(spec: &TableSpec, schema: &Schema) -> Plan {
        let table = schema.first_table(spec.tables);
        let sources = spec
            .columns()
            .map(|c| table.and_then(|t| schema.first_column(t, c.sources)))
            .collect();
        Plan { table, sources }
    }

    /// One SQL expression per present source, `wrap` turning a quoted column into an expression.
    pub fn select_list(&self, spec: &TableSpec, wrap: impl Fn(&str, Kind) -> String) -> Vec<String> {
        spec.columns()
            .zip(&self.sources)
            .filter_map(|(c, s)| s.map(|s| wrap(&format!("\"{s}\""), c.kind)))
            .collect()
    }
}

/// Whole columns of one table, all `i64`.
pub struct Table {
    pub name: &'static str,
    pub columns: Vec<(&'static str, Vec<i64>)>,
}

impl Table {
    pub fn column(&self, name: &str) -> Option<&[i64]> {
        self.columns.iter().find(|(n, _)| *n == name).map(|(_, v)| v.as_slice())
    }

    pub fn len(&self) -> usize {
        self.columns.first().map_or(0, |(_, v)| v.len())
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Reads the planned columns; absent columns are filled with MISSING (an absent end with the
    /// start). Rows with unusable times are left out: returns the table and how many.
    pub fn read(
        source: &Source,
        spec: &'static TableSpec,
        plan: &Plan,
        strings: &mut StringTable,
    ) -> Result<(Table, usize), ReadError> {
        let cols: Vec<&Col> = spec.columns().collect();
        let mut values: Vec<Vec<i64>> = vec![Vec::new(); cols.len()];
        let mut dropped = 0;
        if let Some(table) = plan.table {
            let (path, sql_err) = (source.path, ReadError::sqlite(source.path));
            // Present columns in select order, each with its output slot.
            let present: Vec<(usize, Kind)> =
                (0..cols.len()).filter(|&i| plan.sources[i].is_some()).map(|i| (i, cols[i].kind)).collect();
            if !present.is_empty() {
                // Sized up front (growing 20 columns by doubling costs copies and page faults), but
                // never beyond what the file can hold, and fallibly.
                let count: i64 = source
                    .conn
                    .query_row(&format!("SELECT count(*) FROM \"{table}\""), [], |r| r.get(0))
                    .map_err(sql_err)?;
                let rows = usize::try_from(count).unwrap_or(0).min(source.max_rows);
                for &(slot, _) in &present {
                    values[slot].try_reserve_exact(rows).map_err(ReadError::memory(path))?;
                }
                let times = Times::plan(&present);
                let sql = format!("SELECT {} FROM \"{table}\"", plan.select_list(spec, |c, _| c.to_string()).join(", "));
                scan::for_each_row(source.conn, &sql, |row| {
                    let Some((start, end)) = times.span(row, &source.clock) else {
                        dropped += 1;
                        return Ok(());
                    };
                    for (j, &(slot, kind)) in present.iter().enumerate() {
                        let value = match kind {
                            Kind::Start => start,
                            Kind::End | Kind::OpenEnd => end,
                            _ => convert(row.get(j), kind, source, strings),
                        };
                        memory::push(&mut values[slot], value).map_err(|_| Stop::Memory)?;
                    }
                    Ok(())
                })
                .map_err(|stop| match stop {
                    Stop::Sql(e) => ReadError::sqlite(path)(e),
                    Stop::Memory => ReadError::OutOfMemory(path.into()),
                })?;
            }
            let n = present.first().map_or(0, |&(slot, _)| values[slot].len());
            let start = cols.iter().position(|c| c.kind == Kind::Start).filter(|&i| plan.sources[i].is_some());
            for i in 0..cols.len() {
                if plan.sources[i].is_none() {
                    values[i] = match (cols[i].kind, start) {
                        // No end column: every event is an instant.
                        (Kind::End | Kind::OpenEnd, Some(s)) => memory::copied(&values[s]),
                        _ => memory::filled(n, MISSING),
                    }
                    .map_err(ReadError::memory(path))?;
                }
            }
        }
        let mut table = Table { name: spec.name, columns: cols.iter().map(|c| c.name).zip(values).collect() };
        table.sort_by_start().map_err(ReadError::memory(source.path))?;
        Ok((table, dropped))
    }

    /// Exports carry no order guarantee (nsys 2025.6+): sort by start, stable, when not sorted.
    pub(crate) fn sort_by_start(&mut self) -> Result<(), std::collections::TryReserveError> {
        let Some(start) = self.column("start") else { return Ok(()) };
        if start.windows(2).all(|w| w[0] <= w[1]) {
            return Ok(());
        }
        let mut order: Vec<u32> = memory::with_capacity(start.len())?;
        order.extend(0..start.len() as u32);
        // Unstable on (start, index): a stable order without the merge sort's buffer.
        order.sort_unstable_by_key(|&i| (start[i as usize], i));
        for (_, column) in &mut self.columns {
            *column = memory::permuted(column, &order)?;
        }
        Ok(())
    }
}

/// What one export's tables are read from: the connection, its file (for errors), the clock that
/// makes its times absolute, and how many rows any of its tables can hold at most.
pub struct Source<'a> {
    pub conn: &'a Connection,
    pub path: &'a Path,
    pub clock: Clock,
    pub max_rows: usize,
    pub payloads: &'a Payloads,
}

/// Why a scan stopped before its end.
enum Stop {
    Sql(rusqlite::Error),
    Memory,
}

impl From<rusqlite::Error> for Stop {
    fn from(e: rusqlite::Error) -> Self {
        Stop::Sql(e)
    }
}

/// Where a row's start and end are in the select list, and how to check them.
struct Times {
    start: Option<usize>,
    end: Option<(usize, Kind)>,
}

impl Times {
    fn plan(present: &[(usize, Kind)]) -> Times {
        let at = |want: &[Kind]| present.iter().position(|(_, k)| want.contains(k));
        Times { start: at(&[Kind::Start]), end: at(&[Kind::End, Kind::OpenEnd]).map(|j| (j, present[j].1)) }
    }

    /// The row's absolute (start, end), or None when unusable; (0, 0) in a table without times.
    #[inline]
    fn span(&self, row: &Row, clock: &Clock) -> Option<(i64, i64)> {
        let Some(j) = self.start else { return Some((0, 0)) };
        let Value::Int(start) = row.get(j) else { return None };
        let end = match self.end {
            None => start,
            Some((k, kind)) => match row.get(k) {
                Value::Int(end) => end,
                Value::Null if kind == Kind::OpenEnd => start,
                _ => return None,
            },
        };
        clock.span(start, end)
    }
}

fn convert(value: Value<'_>, kind: Kind, source: &Source, strings: &mut StringTable) -> i64 {
    match (kind, value) {
        (Kind::OptionalTime, Value::Int(t)) if t > 0 => return source.clock.absolute(t).unwrap_or(MISSING),
        (Kind::PayloadBytes, Value::Blob(b) | Value::Text(b)) => return source.payloads.message_bytes(b),
        (Kind::PayloadOp, Value::Blob(b) | Value::Text(b)) => return source.payloads.reduction_op(b),
        (Kind::OptionalTime | Kind::PayloadBytes | Kind::PayloadOp, _) => return MISSING,
        _ => {}
    }
    let int = match value {
        Value::Int(i) => i,
        Value::Real(f) => f as i64,
        Value::Null => return MISSING,
        Value::Text(t) if kind == Kind::Text => return strings.intern(&String::from_utf8_lossy(t)),
        Value::Text(_) | Value::Blob(_) => return MISSING,
    };
    match kind {
        Kind::Int => int,
        // A negative globalPid (-1: none) is no process, not pid 0xFFFFFF.
        Kind::Pid if int < 0 => MISSING,
        Kind::Pid => (int >> 24) & 0xFF_FFFF,
        Kind::Tid => int & 0xFF_FFFF,
        Kind::StringId => strings.dense(int),
        Kind::CuptiId if int == CUPTI_INVALID => MISSING,
        Kind::SyncId if int == 0 || int == CUPTI_INVALID => MISSING,
        Kind::CuptiId | Kind::SyncId => int,
        Kind::Text | Kind::Start | Kind::End | Kind::OpenEnd | Kind::OptionalTime | Kind::PayloadBytes | Kind::PayloadOp => MISSING,
    }
}
