//! The event tables the reader pulls, declared once as data: which nsys table (and older or
//! newer names of it), which columns under which names, and how each value is converted.
//! The reader and the SQL floor of the benchmark are both planned from these declarations.

use crate::schema::Schema;
use crate::strings::StringTable;
use crate::scan::{self, Value};
use rusqlite::Connection;

/// How a stored value becomes an output value.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Kind {
    Int,
    /// Session-relative or absolute ns, made absolute UTC ns.
    Time,
    /// Process id from a packed `globalPid`/`globalTid`: `<HW:8><VM:8><PID:24><TID:24>`.
    Pid,
    /// Thread id from a packed `globalTid`.
    Tid,
    /// An id into `StringIds`, made a dense string-table index.
    StringId,
    /// Inline text, interned into the string table.
    Text,
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

/// Value of a NULL or absent column. NULL times stay NULL_TIME until `Table::close_instants`.
pub const MISSING: i64 = -1;
pub const NULL_TIME: i64 = i64::MIN;

const fn col(name: &'static str, sources: &'static [&'static str], kind: Kind) -> Col {
    Col { name, sources, kind }
}


/// Start, end, device, stream, correlation and process of any GPU activity record.
const GPU_ACTIVITY: &[Col] = &[
    col("start", &["start"], Kind::Time),
    col("end", &["end"], Kind::Time),
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
            col("block_x", &["blockX"], Kind::Int),
            col("block_y", &["blockY"], Kind::Int),
            col("block_z", &["blockZ"], Kind::Int),
            col("registers", &["registersPerThread"], Kind::Int),
            col("static_shared_memory", &["staticSharedMemory"], Kind::Int),
            col("dynamic_shared_memory", &["dynamicSharedMemory"], Kind::Int),
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
        col("start", &["start"], Kind::Time),
        col("end", &["end"], Kind::Time),
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
        col("start", &["start"], Kind::Time),
        col("end", &["end"], Kind::Time),
        col("type", &["eventType"], Kind::Int),
        col("text", &["text"], Kind::Text),
        col("text_id", &["textId"], Kind::StringId),
        col("domain", &["domainId"], Kind::Int),
        col("pid", &["globalTid"], Kind::Pid),
        col("tid", &["globalTid"], Kind::Tid),
    ]],
};

pub const GPU_METRICS: TableSpec = TableSpec {
    name: "gpu_metrics",
    tables: &["GPU_METRICS"],
    column_groups: &[&[
        col("start", &["timestamp"], Kind::Time),
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

pub const ALL: [&TableSpec; 8] = [&KERNELS, &MEMCPY, &MEMSET, &RUNTIME, &NVTX, &GPU_METRICS, &GPU_METRIC_NAMES, &GPUS];

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

    /// Reads the planned columns; absent columns are filled with MISSING.
    pub fn read(
        conn: &Connection,
        spec: &'static TableSpec,
        plan: &Plan,
        time_offset: i64,
        strings: &mut StringTable,
    ) -> rusqlite::Result<Table> {
        let cols: Vec<&Col> = spec.columns().collect();
        let mut values: Vec<Vec<i64>> = vec![Vec::new(); cols.len()];
        if let Some(table) = plan.table {
            // Present columns in select order, each with its output slot.
            let present: Vec<(usize, Kind)> =
                (0..cols.len()).filter(|&i| plan.sources[i].is_some()).map(|i| (i, cols[i].kind)).collect();
            if !present.is_empty() {
                // Sized up front: growing 20 columns by doubling costs copies and page faults.
                let rows: i64 = conn.query_row(&format!("SELECT count(*) FROM \"{table}\""), [], |r| r.get(0))?;
                for &(slot, _) in &present {
                    values[slot].reserve_exact(rows as usize);
                }
                let sql = format!("SELECT {} FROM \"{table}\"", plan.select_list(spec, |c, _| c.to_string()).join(", "));
                scan::for_each_row(conn, &sql, |row| {
                    for (j, &(slot, kind)) in present.iter().enumerate() {
                        values[slot].push(convert(row.get(j), kind, time_offset, strings));
                    }
                })?;
            }
            let n = present.first().map_or(0, |&(slot, _)| values[slot].len());
            for (i, v) in values.iter_mut().enumerate() {
                if plan.sources[i].is_none() {
                    *v = vec![MISSING; n];
                }
            }
        }
        let mut table = Table { name: spec.name, columns: cols.iter().map(|c| c.name).zip(values).collect() };
        table.close_instants();
        table.sort_by_start();
        Ok(table)
    }

    /// An event without an end (an NVTX mark) is an instant: end = start.
    fn close_instants(&mut self) {
        let Some(start) = self.column("start").map(<[i64]>::to_vec) else { return };
        if let Some((_, end)) = self.columns.iter_mut().find(|(n, _)| *n == "end") {
            for (e, s) in end.iter_mut().zip(start) {
                if *e == NULL_TIME {
                    *e = s;
                }
            }
        }
    }

    /// Exports carry no order guarantee (nsys 2025.6+): sort by start, stable, when not sorted.
    pub(crate) fn sort_by_start(&mut self) {
        let Some(start) = self.column("start") else { return };
        if start.windows(2).all(|w| w[0] <= w[1]) {
            return;
        }
        let mut order: Vec<u32> = (0..start.len() as u32).collect();
        order.sort_by_key(|&i| start[i as usize]);
        for (_, column) in &mut self.columns {
            *column = order.iter().map(|&i| column[i as usize]).collect();
        }
    }
}

fn convert(value: Value<'_>, kind: Kind, time_offset: i64, strings: &mut StringTable) -> i64 {
    let int = match value {
        Value::Int(i) => i,
        Value::Real(f) => f as i64,
        Value::Null => return if kind == Kind::Time { NULL_TIME } else { MISSING },
        Value::Text(t) if kind == Kind::Text => return strings.intern(&String::from_utf8_lossy(t)),
        Value::Text(_) | Value::Blob => return MISSING,
    };
    match kind {
        Kind::Int => int,
        Kind::Time => int + time_offset,
        Kind::Pid => (int >> 24) & 0xFF_FFFF,
        Kind::Tid => int & 0xFF_FFFF,
        Kind::StringId => strings.dense(int),
        Kind::Text => MISSING,
    }
}
