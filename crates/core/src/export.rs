//! Reading one export: open it safely, learn its session facts, pull every table as columns.

use crate::error::ReadError;
use crate::memory;
use crate::payload::Payloads;
use crate::schema::Schema;
use crate::strings::StringTable;
use crate::tables::{self, Kind, Plan, Source, Table, MISSING};
use crate::times::{self, Clock};
use rusqlite::types::ValueRef;
use rusqlite::{Connection, OpenFlags};
use std::collections::{HashMap, TryReserveError};
use std::io::Read;
use std::path::{Path, PathBuf};

/// The newest export schema major version this reader was checked against.
pub const KNOWN_SCHEMA_MAJOR: u32 = 3;
/// Stored times above this are absolute UTC ns (2001+), not ns since the session start.
const ABSOLUTE_TIME_FLOOR: i64 = 1_000_000_000_000_000_000;

pub struct Session {
    pub nsys_version: Option<String>,
    pub schema_version: Option<String>,
    /// Timestamps were stored as absolute UTC (`nsys export --ts-normalize=true`).
    pub time_normalized: bool,
    /// UTC ns of the session start (`TARGET_INFO_SESSION_START_TIME.utcEpochNs`).
    pub utc_epoch_ns: Option<i64>,
    pub hostname: Option<String>,
}

pub struct Export {
    pub path: PathBuf,
    pub session: Session,
    /// `META_DATA_EXPORT` (or the older `EXPORT_META_DATA`) as name/value pairs.
    pub metadata: Vec<(String, String)>,
    /// `TARGET_INFO_SYSTEM_ENV` name/value pairs (hostname, the captured environment, ...).
    pub system_env: Vec<(String, String)>,
    /// `META_DATA_CAPTURE` name/value pairs (capture settings; keys repeat, e.g. one
    /// `PROCESS_0:ENVIRONMENT_VARIABLE` row per variable of the profiled process).
    pub capture: Vec<(String, String)>,
    pub tables: Vec<Table>,
    pub strings: Vec<String>,
    pub warnings: Vec<String>,
}

impl Export {
    pub fn table(&self, name: &str) -> &Table {
        self.tables.iter().find(|t| t.name == name).expect("every declared table is always present")
    }
}

/// Opens an export read-only and immutable, after checking it is a whole SQLite file.
pub fn open(path: &Path) -> Result<Connection, ReadError> {
    check_sqlite_file(path)?;
    let absolute = std::path::absolute(path).map_err(|source| ReadError::Io { path: path.into(), source })?;
    let mut uri = url::Url::from_file_path(&absolute).map_err(|()| ReadError::Missing(path.into()))?;
    // immutable=1: no locks, no journal lookups, never a write into the user's export.
    uri.set_query(Some("mode=ro&immutable=1"));
    let flags = OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_URI | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let conn = Connection::open_with_flags(uri.as_str(), flags).map_err(ReadError::sqlite(path))?;
    // No memory map (SQLite's default, said here so nobody turns it on for speed): a mapped file
    // truncated under the reader (`cp new.sqlite old.sqlite` during a run) kills the process
    // with SIGBUS; read through pread, a short file is an error that `stable` names.
    conn.pragma_update(None, "mmap_size", 0_i64).map_err(ReadError::sqlite(path))?;
    Ok(conn)
}

/// Missing, empty, foreign and truncated files, told apart before SQLite gives a vaguer error.
fn check_sqlite_file(path: &Path) -> Result<(), ReadError> {
    let io = |source| ReadError::Io { path: path.into(), source };
    let meta = match std::fs::metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(ReadError::Missing(path.into())),
        other => other.map_err(io)?,
    };
    if !meta.is_file() {
        return Err(ReadError::NotRegular(path.into()));
    }
    if meta.len() == 0 {
        return Err(ReadError::Empty(path.into()));
    }
    let mut header = Vec::with_capacity(100);
    std::fs::File::open(path).map_err(io)?.take(100).read_to_end(&mut header).map_err(io)?;
    const MAGIC: &[u8] = b"SQLite format 3\0";
    if !header.starts_with(MAGIC) && !MAGIC.starts_with(&header) {
        return Err(ReadError::NotSqlite(path.into()));
    }
    let be32 = |at: usize| u32::from_be_bytes(header[at..at + 4].try_into().unwrap());
    let expected = if header.len() < 100 {
        100
    } else {
        let page_size = match u16::from_be_bytes([header[16], header[17]]) {
            1 => 65_536,
            n => u64::from(n),
        };
        // The in-header page count is trusted only when its change counter is current.
        if be32(24) == be32(92) { page_size * u64::from(be32(28)) } else { 0 }
    };
    if meta.len() < expected {
        return Err(ReadError::Truncated { path: path.into(), actual: meta.len(), expected });
    }
    Ok(())
}

pub fn read_export(path: &Path) -> Result<Export, ReadError> {
    crate::stable::read_unchanged(path, read_export_once)
}

fn read_export_once(path: &Path) -> Result<Export, ReadError> {
    let conn = open(path)?;
    let schema = Schema::probe(&conn).map_err(ReadError::sqlite(path))?;
    const NSYS_TABLES: [&str; 4] = ["META_DATA_EXPORT", "EXPORT_META_DATA", "TARGET_INFO_SESSION_START_TIME", "StringIds"];
    if schema.first_table(&NSYS_TABLES).is_none() {
        return Err(ReadError::NotAnExport(path.into()));
    }
    read_all(&conn, &schema, path)
}

fn read_all(conn: &Connection, schema: &Schema, path: &Path) -> Result<Export, ReadError> {
    let metadata = match schema.first_table(&["META_DATA_EXPORT", "EXPORT_META_DATA"]) {
        Some(t) => name_values(conn, &format!("SELECT name, value FROM \"{t}\"")).map_err(ReadError::sqlite(path))?,
        None => Vec::new(),
    };
    let system_env = if schema.has_column("TARGET_INFO_SYSTEM_ENV", "name") {
        name_values(conn, "SELECT name, value FROM TARGET_INFO_SYSTEM_ENV").map_err(ReadError::sqlite(path))?
    } else {
        Vec::new()
    };
    let capture = if schema.has_column("META_DATA_CAPTURE", "name") {
        name_values(conn, "SELECT name, value FROM META_DATA_CAPTURE").map_err(ReadError::sqlite(path))?
    } else {
        Vec::new()
    };
    let lookup = |pairs: &[(String, String)], key: &str| pairs.iter().find(|(k, _)| k == key).map(|(_, v)| v.clone());
    let utc_epoch_ns = if schema.has_column("TARGET_INFO_SESSION_START_TIME", "utcEpochNs") {
        // Anything but a usable integer (text, a value no time fits after) is no session start.
        first_integer(conn, "SELECT utcEpochNs FROM TARGET_INFO_SESSION_START_TIME LIMIT 1")
            .map_err(ReadError::sqlite(path))?
            .and_then(times::usable_origin)
    } else {
        None
    };
    let mut warnings = Vec::new();
    let schema_version = lookup(&metadata, "EXPORT_SCHEMA_VERSION");
    let major = schema_version.as_deref().and_then(|v| v.split('.').next()?.parse::<u32>().ok());
    if major.is_some_and(|m| m > KNOWN_SCHEMA_MAJOR) {
        warnings.push(format!(
            "export schema {} is newer than this reader knows (up to {KNOWN_SCHEMA_MAJOR}.x); columns were matched by name",
            schema_version.as_deref().unwrap_or("?")
        ));
    }
    let time_normalized = match lookup(&metadata, "EXPORT_PARAM_TIME_NORMALIZE") {
        Some(v) => v.eq_ignore_ascii_case("true"),
        // Older exports do not say: absolute UTC values are recognisable by their size.
        None => first_start(conn, schema).map_err(ReadError::sqlite(path))?.is_some_and(|t| t >= ABSOLUTE_TIME_FLOOR),
    };
    if utc_epoch_ns.is_none() && !time_normalized {
        warnings.push("no session start time (TARGET_INFO_SESSION_START_TIME): times are relative to the session".into());
    }
    let clock = Clock { offset: if time_normalized { 0 } else { utc_epoch_ns.unwrap_or(0) }, origin: utc_epoch_ns.unwrap_or(0) };

    let mut strings = if schema.has_table("StringIds") { string_ids(conn, path)? } else { StringTable::default() };

    // A stored row takes 4 bytes of the file at the very least.
    let file_len = std::fs::metadata(path).map_err(|source| ReadError::Io { path: path.into(), source })?.len();
    // Unreadable schema tables cost the sizes, never the export.
    let payloads = Payloads::read(conn, schema).unwrap_or_default();
    let max_rows = usize::try_from(file_len / 4).unwrap_or(usize::MAX);
    let source = Source { conn, path, clock, max_rows, payloads: &payloads };
    let mut tables = Vec::with_capacity(tables::ALL.len());
    for spec in tables::ALL {
        let mut plan = Plan::new(spec, schema);
        if let Some(table) = plan.table {
            if let Some(missing) = spec.columns().zip(&plan.sources).find(|(c, s)| c.kind == Kind::Start && s.is_none()) {
                warnings.push(format!("{table} has no '{}' column; skipped", missing.0.sources[0]));
                plan.table = None;
            }
        }
        let (table, dropped) = Table::read(&source, spec, &plan, &mut strings)?;
        if dropped > 0 {
            warnings.push(times::dropped_rows(spec.name, dropped));
        }
        if spec.name == tables::KERNELS.name && dropped > 0 && table.is_empty() {
            return Err(ReadError::NoUsableKernelRows { path: path.into(), rows: dropped });
        }
        tables.push(table);
    }
    if payloads.undecodable.get() > 0 {
        warnings.push(format!(
            "NVTX_EVENTS: {} NVTX payload blobs did not decode (shorter than their header says, a value past their payload, \
             an absurd size, or a schema the export does not declare): their message sizes are unknown",
            payloads.undecodable.get()
        ));
    }
    let mut export = Export {
        path: path.to_path_buf(),
        session: Session {
            nsys_version: lookup(&metadata, "EXPORT_PRODUCT_VERSION"),
            schema_version,
            time_normalized,
            utc_epoch_ns,
            hostname: lookup(&system_env, "Hostname"),
        },
        metadata,
        system_env,
        capture,
        tables,
        strings: Vec::new(),
        warnings,
    };
    resolve_nvtx_names(&mut export).map_err(ReadError::memory(path))?;
    link_event_records(&mut export).map_err(ReadError::memory(path))?;
    export.strings = strings.values;
    Ok(export)
}

/// `StringIds` as a string table; rows whose id is not an integer name nothing and are skipped.
fn string_ids(conn: &Connection, path: &Path) -> Result<StringTable, ReadError> {
    let mut rows = Vec::new();
    let mut stmt = conn.prepare("SELECT id, value FROM StringIds").map_err(ReadError::sqlite(path))?;
    let mut query = stmt.query([]).map_err(ReadError::sqlite(path))?;
    while let Some(row) = query.next().map_err(ReadError::sqlite(path))? {
        if let ValueRef::Integer(id) = row.get_ref(0).map_err(ReadError::sqlite(path))? {
            let value = text(row.get_ref(1).map_err(ReadError::sqlite(path))?);
            memory::push(&mut rows, (id, value)).map_err(ReadError::memory(path))?;
        }
    }
    Ok(StringTable::from_rows(rows))
}

/// NVTX names come inline (`text`) or as `textId`: merge them into one `name` column, and give
/// each event its domain's name, taken from the domain-create events (type 75) of its process.
fn resolve_nvtx_names(export: &mut Export) -> Result<(), TryReserveError> {
    const DOMAIN_CREATE: i64 = 75;
    let nvtx = export.tables.iter_mut().find(|t| t.name == "nvtx").expect("nvtx is declared");
    let take = |t: &mut Table, name: &str| std::mem::take(&mut t.columns.iter_mut().find(|(n, _)| *n == name).unwrap().1);
    let text = take(nvtx, "text");
    let text_id = take(nvtx, "text_id");
    let mut name: Vec<i64> = memory::with_capacity(text.len())?;
    name.extend(text.iter().zip(&text_id).map(|(&t, &id)| if t != MISSING { t } else { id }));
    let (kind, domain, pid) = (nvtx.column("type").unwrap(), nvtx.column("domain").unwrap(), nvtx.column("pid").unwrap());
    let mut domains = HashMap::new();
    for i in 0..name.len() {
        if kind[i] == DOMAIN_CREATE {
            domains.insert((pid[i], domain[i]), name[i]);
        }
    }
    let mut domain_name: Vec<i64> = memory::with_capacity(name.len())?;
    domain_name.extend((0..name.len()).map(|i| domains.get(&(pid[i], domain[i])).copied().unwrap_or(MISSING)));
    nvtx.columns.retain(|(n, _)| *n != "text" && *n != "text_id");
    nvtx.columns.insert(3, ("name", name));
    nvtx.columns.push(("domain_name", domain_name));
    Ok(())
}

/// Fills `sync.event_record_correlation` and `sync.event_stream` from the `cuda_event` row with
/// the same `event_sync_id` (nsys 2025+ stores one on both; the first record of an id wins).
/// Older exports link a wait to its record only through `event`, which CUDA reuses: left to the
/// analysis, which knows which record came last before the wait.
fn link_event_records(export: &mut Export) -> Result<(), TryReserveError> {
    let records = export.table(tables::CUDA_EVENT.name);
    let column = |name| records.column(name).expect("cuda_event is declared");
    let (ids, correlation, stream) = (column("event_sync_id"), column("correlation"), column("stream"));
    let mut by_id = HashMap::new();
    for i in (0..ids.len()).filter(|&i| ids[i] != MISSING) {
        by_id.entry(ids[i]).or_insert([correlation[i], stream[i]]);
    }
    if by_id.is_empty() {
        return Ok(());
    }
    let sync = export.tables.iter_mut().find(|t| t.name == tables::SYNC.name).expect("sync is declared");
    let ids = memory::copied(sync.column("event_sync_id").unwrap())?;
    for (name, field) in [("event_record_correlation", 0), ("event_stream", 1)] {
        let column = &mut sync.columns.iter_mut().find(|(n, _)| *n == name).expect("declared in tables::SYNC").1;
        for (value, id) in column.iter_mut().zip(&ids) {
            if let Some(record) = by_id.get(id) {
                *value = record[field];
            }
        }
    }
    Ok(())
}

/// The first value of a one-column query when it is an integer.
fn first_integer(conn: &Connection, sql: &str) -> rusqlite::Result<Option<i64>> {
    let mut stmt = conn.prepare(sql)?;
    let mut rows = stmt.query([])?;
    Ok(match rows.next()? {
        Some(row) => match row.get_ref(0)? {
            ValueRef::Integer(i) => Some(i),
            _ => None,
        },
        None => None,
    })
}

/// The first usable stored start (a non-negative integer) of the first event table.
fn first_start(conn: &Connection, schema: &Schema) -> rusqlite::Result<Option<i64>> {
    let Some(table) = schema.first_table(&["CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_RUNTIME", "NVTX_EVENTS"])
    else {
        return Ok(None);
    };
    if !schema.has_column(table, "start") {
        return Ok(None);
    }
    first_integer(conn, &format!("SELECT start FROM \"{table}\" WHERE typeof(start) = 'integer' AND start >= 0 LIMIT 1"))
}

fn name_values(conn: &Connection, sql: &str) -> rusqlite::Result<Vec<(String, String)>> {
    let mut stmt = conn.prepare(sql)?;
    let rows = stmt.query_map([], |r| Ok((text(r.get_ref(0)?), text(r.get_ref(1)?))))?;
    rows.collect()
}

/// Any stored value as text (metadata values are TEXT, but nothing guarantees it).
fn text(value: ValueRef<'_>) -> String {
    match value {
        ValueRef::Null => String::new(),
        ValueRef::Integer(i) => i.to_string(),
        ValueRef::Real(f) => f.to_string(),
        ValueRef::Text(t) | ValueRef::Blob(t) => String::from_utf8_lossy(t).into_owned(),
    }
}

/// Reads many files at once with `read`, on `threads` threads (all cores when None); one result
/// per path, in order, so one bad file fails only itself.
pub fn read_many(
    paths: &[PathBuf],
    threads: Option<usize>,
    read: impl Fn(&Path) -> Result<Export, ReadError> + Sync,
) -> Result<Vec<Result<Export, ReadError>>, ReadError> {
    use rayon::prelude::*;
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads.unwrap_or(0))
        .build()
        .map_err(|e| ReadError::Threads(e.to_string()))?;
    Ok(pool.install(|| paths.par_iter().map(|p| read(p)).collect()))
}

/// Reads many exports at once, one connection per file.
pub fn read_exports(paths: &[PathBuf], threads: Option<usize>) -> Result<Vec<Result<Export, ReadError>>, ReadError> {
    read_many(paths, threads, read_export)
}
