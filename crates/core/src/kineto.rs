//! Reader of PyTorch profiler (Kineto) Chrome-trace JSON, `.json` or `.json.gz`, one file per rank.
//!
//! The file is streamed: events are deserialized one at a time into small structs and turned
//! into columns at once, so a trace of hundreds of MB never exists as a JSON tree in memory. The
//! result is the same `Export` the SQLite reader builds, so the analysis runs unchanged.
//!
//! Time base. Kineto writes `ts`/`dur` in µs. Newer Kineto (about PyTorch 2.2 on) writes `ts`
//! relative to `baseTimeNanoseconds`, the wall clock at program load rounded *down to a 3-month
//! block* (so that `ts` stays exact in a double): absolute UTC ns = base + ts·1000. Two ranks'
//! bases can differ by a whole block (91 days) while their events are simultaneous, so `ts` alone
//! never compares across ranks. Older traces (like the HTA test traces, 2023-04) have no base and
//! an absolute `ts` in µs since the epoch. Both become absolute UTC ns here; a trace whose `ts` is
//! relative but whose base is missing keeps relative times, with a warning.
//!
//! Identity. GPU events carry `pid` = device and `tid` = stream; CPU events the OS pid/tid. The
//! analysis keys a rank by (pid, device) and ties a kernel to its launch by (pid, correlation),
//! so every GPU row gets the host pid (that of the CUDA runtime events).

use crate::error::ReadError;
use crate::export::{Export, Session};
use crate::strings::StringTable;
use crate::tables::{self, Table, TableSpec, MISSING};
use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
use std::collections::HashMap;
use std::fmt;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};

/// NVTX push/pop range: how CPU annotation ranges appear in the `nvtx` table.
const RANGE: i64 = 59;
/// Times from this many ns (2001-09) on are absolute; below, relative to a base.
const ABSOLUTE_NS_FLOOR: i64 = 1_000_000_000_000_000_000;
/// `distributedInfo.pg_config` is kept as JSON text only below this size (it lists every group's ranks).
const PG_CONFIG_MAX: usize = 64 * 1024;

/// Reads one Kineto trace into an `Export`.
pub fn read_kineto(path: &Path) -> Result<Export, ReadError> {
    let file = match std::fs::File::open(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(ReadError::Missing(path.into())),
        other => other.map_err(|source| ReadError::Io { path: path.into(), source })?,
    };
    let mut raw = BufReader::with_capacity(1 << 16, file);
    let head = raw.fill_buf().map_err(|source| ReadError::Io { path: path.into(), source })?;
    if head.is_empty() {
        return Err(ReadError::EmptyTrace(path.into()));
    }
    // By content, not by name: `.json` files are sometimes gzip and the other way round.
    let gzip = head.starts_with(&[0x1f, 0x8b]);
    let mut trace = Trace::default();
    let parsed = if gzip {
        parse(BufReader::with_capacity(1 << 16, flate2::read::MultiGzDecoder::new(raw)), &mut trace)
    } else {
        parse(raw, &mut trace)
    };
    parsed.map_err(|e| json_error(path, gzip, e))?;
    trace.finish(path)
}

/// Generic, not `dyn Read`: serde_json reads byte by byte, which is fast only on a concrete
/// `BufReader` (std specializes its byte iterator).
fn parse<R: BufRead>(reader: R, trace: &mut Trace) -> Result<(), serde_json::Error> {
    let mut de = serde_json::Deserializer::from_reader(reader);
    TraceSeed(trace).deserialize(&mut de)?;
    de.end()
}

/// Reads many traces at once, `threads` at a time (all cores when None).
pub fn read_kineto_traces(paths: &[PathBuf], threads: Option<usize>) -> Result<Vec<Result<Export, ReadError>>, ReadError> {
    crate::export::read_many(paths, threads, read_kineto)
}

fn json_error(path: &Path, gzip: bool, e: serde_json::Error) -> ReadError {
    use serde_json::error::Category;
    let path = path.to_path_buf();
    match (e.classify(), e.io_error_kind()) {
        (Category::Io, Some(std::io::ErrorKind::UnexpectedEof)) if gzip => ReadError::TruncatedGzip(path),
        (Category::Io, _) if gzip => ReadError::BadGzip { path, message: e.to_string() },
        (Category::Io, _) => ReadError::Io { path, source: e.into() },
        (Category::Data, _) => ReadError::NotKineto { path, reason: e.to_string() },
        (Category::Syntax | Category::Eof, _) => {
            // serde's text ends in " at line L column C": said once, by the variant.
            let text = e.to_string();
            let message = text.rsplit_once(" at line ").map_or(text.as_str(), |(m, _)| m).to_string();
            ReadError::InvalidJson { path, line: e.line(), column: e.column(), message }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Deserialization: the top-level object, the event list, one event, its args.

/// What the trace's top level and events contribute, before the time base is known (the base
/// may come after `traceEvents`, as may `distributedInfo`).
#[derive(Default)]
struct Trace {
    saw_events: bool,
    base_ns: Option<i64>,
    metadata: Vec<(String, String)>,
    gpus: Vec<serde_json::Value>,
    strings: StringTable,
    kernels: Columns<KERNEL_COLUMNS>,
    memcpy: Columns<COPY_COLUMNS>,
    memset: Columns<COPY_COLUMNS>,
    runtime: Columns<6>,
    nvtx: Columns<8>,
    collectives: Columns<COLLECTIVE_COLUMNS>,
    /// How many CPU-side events each pid has: the most common one is the host process.
    cpu_pids: HashMap<i64, usize>,
    /// Latest `ts` read (ns, before any base): tells absolute from relative times.
    max_ts: i64,
}

struct TraceSeed<'a>(&'a mut Trace);

impl<'de> DeserializeSeed<'de> for TraceSeed<'_> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for TraceSeed<'_> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a trace object with traceEvents, or a list of trace events")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let trace = self.0;
        while let Some(key) = map.next_key::<String>()? {
            match key.as_str() {
                "traceEvents" => map.next_value_seed(EventsSeed(trace))?,
                "baseTimeNanoseconds" => {
                    let base: Scalar = map.next_value()?;
                    trace.base_ns = base.int();
                    trace.metadata.push((key, base.text().unwrap_or_default()));
                }
                "distributedInfo" => {
                    let info: serde_json::Value = map.next_value()?;
                    flatten_distributed_info(&info, &mut trace.metadata);
                }
                "deviceProperties" => {
                    if let serde_json::Value::Array(gpus) = map.next_value()? {
                        trace.gpus = gpus;
                    }
                }
                _ => {
                    // Scalars only (schemaVersion, displayTimeUnit, cuda_runtime_version, ...).
                    if let Some(text) = map.next_value::<Scalar>()?.text() {
                        trace.metadata.push((key, text));
                    }
                }
            }
        }
        Ok(())
    }

    /// Chrome's "JSON Array Format": the file is the event list itself.
    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<(), A::Error> {
        EventsSeed(self.0).visit_seq(seq)
    }
}

struct EventsSeed<'a>(&'a mut Trace);

impl<'de> DeserializeSeed<'de> for EventsSeed<'_> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for EventsSeed<'_> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a list of trace events")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        self.0.saw_events = true;
        while let Some(event) = seq.next_element::<Event>()? {
            self.0.add(event);
        }
        Ok(())
    }
}

/// Trace-event phase: only complete events ("X") carry activities.
#[derive(Deserialize, Default, PartialEq, Eq, Clone, Copy)]
enum Phase {
    X,
    #[default]
    #[serde(other)]
    Other,
}

/// Event categories the reader uses; older Kineto spelled some differently (the aliases).
#[derive(Deserialize, Default, PartialEq, Eq, Clone, Copy)]
enum Category {
    #[serde(rename = "kernel", alias = "Kernel")]
    Kernel,
    #[serde(rename = "gpu_memcpy", alias = "Memcpy")]
    Memcpy,
    #[serde(rename = "gpu_memset", alias = "Memset")]
    Memset,
    #[serde(rename = "cuda_runtime", alias = "cuda_driver", alias = "Runtime")]
    Runtime,
    #[serde(rename = "user_annotation")]
    UserAnnotation,
    #[serde(rename = "gpu_user_annotation")]
    GpuUserAnnotation,
    #[serde(rename = "cpu_op", alias = "Operator")]
    CpuOp,
    #[default]
    #[serde(other)]
    Other,
}

#[derive(Default)]
struct Event {
    ph: Phase,
    cat: Category,
    name: String,
    pid: Option<i64>,
    tid: Option<i64>,
    /// Relative or absolute (see the module comment) ns.
    ts: Option<i64>,
    dur: Option<i64>,
    args: Args,
}

#[derive(Deserialize)]
#[serde(field_identifier)]
enum EventKey {
    #[serde(rename = "ph")]
    Ph,
    #[serde(rename = "cat")]
    Cat,
    #[serde(rename = "name")]
    Name,
    #[serde(rename = "pid")]
    Pid,
    #[serde(rename = "tid")]
    Tid,
    #[serde(rename = "ts")]
    Ts,
    #[serde(rename = "dur")]
    Dur,
    #[serde(rename = "args")]
    Args,
    #[serde(other)]
    Other,
}

// By hand rather than derived: a repeated key (seen in rewritten traces) keeps its last value,
// as Python's json does, instead of failing the whole file.
impl<'de> Deserialize<'de> for Event {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Event, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Event;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a trace event object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Event, A::Error> {
                let mut e = Event::default();
                while let Some(key) = map.next_key::<EventKey>()? {
                    match key {
                        EventKey::Ph => e.ph = map.next_value()?,
                        EventKey::Cat => e.cat = map.next_value()?,
                        EventKey::Name => e.name = map.next_value::<Scalar>()?.text().unwrap_or_default(),
                        EventKey::Pid => e.pid = map.next_value::<Scalar>()?.id(),
                        EventKey::Tid => e.tid = map.next_value::<Scalar>()?.id(),
                        EventKey::Ts => e.ts = map.next_value::<Scalar>()?.nanos(),
                        EventKey::Dur => e.dur = map.next_value::<Scalar>()?.nanos(),
                        EventKey::Args => e.args = map.next_value()?,
                        EventKey::Other => {
                            map.next_value::<IgnoredAny>()?;
                        }
                    }
                }
                Ok(e)
            }
        }
        d.deserialize_map(V)
    }
}

/// The `args` the reader uses; the rest are skipped unparsed.
#[derive(Default)]
struct Args {
    device: Option<i64>,
    stream: Option<i64>,
    correlation: Option<i64>,
    grid: [Option<i64>; 3],
    block: [Option<i64>; 3],
    registers: Option<i64>,
    /// Kineto writes static + dynamic shared memory as one number.
    shared_memory: Option<i64>,
    bytes: Option<i64>,
    // record_param_comms (PyTorch 2.x): what the collective was.
    collective: Option<String>,
    in_nelems: Option<i64>,
    out_nelems: Option<i64>,
    group_size: Option<i64>,
    dtype: Option<String>,
    pg_name: Option<String>,
    pg_desc: Option<String>,
    pg_ranks: Option<String>,
    seq: Option<i64>,
    rank: Option<i64>,
    src_rank: Option<i64>,
    dst_rank: Option<i64>,
}

#[derive(Deserialize)]
#[serde(field_identifier)]
enum ArgKey {
    #[serde(rename = "device")]
    Device,
    #[serde(rename = "stream")]
    Stream,
    #[serde(rename = "correlation")]
    Correlation,
    #[serde(rename = "grid")]
    Grid,
    #[serde(rename = "block")]
    Block,
    #[serde(rename = "registers per thread")]
    Registers,
    #[serde(rename = "shared memory")]
    SharedMemory,
    #[serde(rename = "bytes")]
    Bytes,
    #[serde(rename = "Collective name")]
    Collective,
    #[serde(rename = "In msg nelems")]
    InNelems,
    #[serde(rename = "Out msg nelems")]
    OutNelems,
    #[serde(rename = "Group size")]
    GroupSize,
    #[serde(rename = "dtype")]
    Dtype,
    #[serde(rename = "Process Group Name")]
    PgName,
    #[serde(rename = "Process Group Description")]
    PgDesc,
    #[serde(rename = "Process Group Ranks")]
    PgRanks,
    #[serde(rename = "Seq")]
    Seq,
    #[serde(rename = "Rank")]
    Rank,
    #[serde(rename = "Src Rank")]
    SrcRank,
    #[serde(rename = "Dst Rank")]
    DstRank,
    #[serde(other)]
    Other,
}

impl<'de> Deserialize<'de> for Args {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Args, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Args;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an args object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Args, A::Error> {
                let mut a = Args::default();
                while let Some(key) = map.next_key::<ArgKey>()? {
                    let int = |s: Scalar| s.int();
                    match key {
                        ArgKey::Device => a.device = int(map.next_value()?),
                        ArgKey::Stream => a.stream = int(map.next_value()?),
                        ArgKey::Correlation => a.correlation = int(map.next_value()?),
                        ArgKey::Grid => a.grid = map.next_value::<Dim3>()?.0,
                        ArgKey::Block => a.block = map.next_value::<Dim3>()?.0,
                        ArgKey::Registers => a.registers = int(map.next_value()?),
                        ArgKey::SharedMemory => a.shared_memory = int(map.next_value()?),
                        ArgKey::Bytes => a.bytes = int(map.next_value()?),
                        ArgKey::Collective => a.collective = map.next_value::<Scalar>()?.text(),
                        ArgKey::InNelems => a.in_nelems = int(map.next_value()?),
                        ArgKey::OutNelems => a.out_nelems = int(map.next_value()?),
                        ArgKey::GroupSize => a.group_size = int(map.next_value()?),
                        ArgKey::Dtype => a.dtype = map.next_value::<Scalar>()?.text(),
                        ArgKey::PgName => a.pg_name = map.next_value::<Scalar>()?.text(),
                        ArgKey::PgDesc => a.pg_desc = map.next_value::<Scalar>()?.text(),
                        ArgKey::PgRanks => a.pg_ranks = map.next_value::<JsonText>()?.0,
                        ArgKey::Seq => a.seq = int(map.next_value()?),
                        ArgKey::Rank => a.rank = int(map.next_value()?),
                        ArgKey::SrcRank => a.src_rank = int(map.next_value()?),
                        ArgKey::DstRank => a.dst_rank = int(map.next_value()?),
                        ArgKey::Other => {
                            map.next_value::<IgnoredAny>()?;
                        }
                    }
                }
                Ok(a)
            }
        }
        d.deserialize_map(V)
    }
}

/// Any JSON value, kept when it is a scalar; lists and objects are skipped without being built.
enum Scalar {
    Int(i64),
    Float(f64),
    Text(String),
    Bool(bool),
    Null,
    Skipped,
}

impl Scalar {
    fn int(&self) -> Option<i64> {
        match self {
            Scalar::Int(i) => Some(*i),
            Scalar::Float(f) if f.is_finite() => Some(*f as i64),
            Scalar::Text(t) => t.trim().trim_matches('"').parse().ok(),
            _ => None,
        }
    }

    /// A pid or tid: a number, or a label ending in one (old Kineto wrote `"tid": "stream 7"`).
    fn id(&self) -> Option<i64> {
        match self {
            Scalar::Text(t) => {
                let digits = t.trim_end_matches(|c: char| !c.is_ascii_digit());
                let start = digits.rfind(|c: char| !c.is_ascii_digit()).map_or(0, |i| i + 1);
                digits[start..].parse().ok()
            }
            other => other.int(),
        }
    }

    /// µs (integer or fraction) as ns. An integer is exact; a fraction is exact to the ns while
    /// below 2^53 ns, which Kineto's 3-month base keeps `ts` under (its stated reason for it).
    fn nanos(&self) -> Option<i64> {
        match self {
            Scalar::Int(i) => i.checked_mul(1000),
            Scalar::Float(f) if f.is_finite() => Some((f * 1000.0).round() as i64),
            Scalar::Text(t) => t.trim().parse::<f64>().ok().filter(|f| f.is_finite()).map(|f| (f * 1000.0).round() as i64),
            _ => None,
        }
    }

    fn text(self) -> Option<String> {
        match self {
            Scalar::Int(i) => Some(i.to_string()),
            Scalar::Float(f) => Some(f.to_string()),
            Scalar::Text(t) => Some(t),
            Scalar::Bool(b) => Some(b.to_string()),
            Scalar::Null | Scalar::Skipped => None,
        }
    }
}

impl<'de> Deserialize<'de> for Scalar {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Scalar, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Scalar;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_i64<E>(self, v: i64) -> Result<Scalar, E> {
                Ok(Scalar::Int(v))
            }
            fn visit_u64<E>(self, v: u64) -> Result<Scalar, E> {
                Ok(i64::try_from(v).map_or(Scalar::Float(v as f64), Scalar::Int))
            }
            fn visit_f64<E>(self, v: f64) -> Result<Scalar, E> {
                Ok(Scalar::Float(v))
            }
            fn visit_str<E>(self, v: &str) -> Result<Scalar, E> {
                Ok(Scalar::Text(v.to_owned()))
            }
            fn visit_string<E>(self, v: String) -> Result<Scalar, E> {
                Ok(Scalar::Text(v))
            }
            fn visit_bool<E>(self, v: bool) -> Result<Scalar, E> {
                Ok(Scalar::Bool(v))
            }
            fn visit_unit<E>(self) -> Result<Scalar, E> {
                Ok(Scalar::Null)
            }
            fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Scalar, A::Error> {
                IgnoredAny.visit_seq(seq).map(|_| Scalar::Skipped)
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Scalar, A::Error> {
                IgnoredAny.visit_map(map).map(|_| Scalar::Skipped)
            }
        }
        d.deserialize_any(V)
    }
}

/// `grid`/`block`: up to three integers; extra entries are ignored.
struct Dim3([Option<i64>; 3]);

impl<'de> Deserialize<'de> for Dim3 {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Dim3, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Dim3;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a list of three integers")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Dim3, A::Error> {
                let mut out = [None; 3];
                let mut i = 0;
                while let Some(v) = seq.next_element::<Scalar>()? {
                    if i < 3 {
                        out[i] = v.int();
                    }
                    i += 1;
                }
                Ok(Dim3(out))
            }
        }
        d.deserialize_seq(V)
    }
}

/// A value kept as text: a string as is, anything else as compact JSON ("[0, 1, 2]" or [0, 1, 2]).
struct JsonText(Option<String>);

impl<'de> Deserialize<'de> for JsonText {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<JsonText, D::Error> {
        Ok(JsonText(match serde_json::Value::deserialize(d)? {
            serde_json::Value::Null => None,
            serde_json::Value::String(s) => Some(s),
            other => Some(other.to_string()),
        }))
    }
}

/// `distributedInfo` as `distributedInfo.<key>` metadata pairs (rank, world_size, backend, ...).
fn flatten_distributed_info(info: &serde_json::Value, out: &mut Vec<(String, String)>) {
    let Some(fields) = info.as_object() else { return };
    for (key, value) in fields {
        let text = match value {
            serde_json::Value::Null => continue,
            serde_json::Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        if text.len() <= PG_CONFIG_MAX {
            out.push((format!("distributedInfo.{key}"), text));
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Events into rows of columns; columns into the `Export`'s tables.

const KERNEL_COLUMNS: usize = 17;
const COPY_COLUMNS: usize = 8;
const COLLECTIVE_COLUMNS: usize = 16;
/// Placeholder pid of GPU rows, replaced by the host pid once all events are read.
const HOST: i64 = i64::MIN;

/// Output layout of the extra `collectives` table: one row per `record_param_comms` CPU op.
pub const COLLECTIVE_COLUMN_NAMES: [&str; COLLECTIVE_COLUMNS] = [
    "start", "end", "pid", "tid", "name", "in_nelems", "out_nelems", "group_size", "dtype", "pg_name", "pg_desc",
    "pg_ranks", "seq", "rank", "src_rank", "dst_rank",
];
const NVTX_COLUMN_NAMES: [&str; 8] = ["start", "end", "type", "name", "domain", "pid", "tid", "domain_name"];

impl Trace {
    fn add(&mut self, e: Event) {
        if e.ph != Phase::X {
            return;
        }
        let Some(ts) = e.ts else { return };
        self.max_ts = self.max_ts.max(ts);
        let (start, end) = (ts, ts + e.dur.unwrap_or(0).max(0));
        let a = &e.args;
        let v = |x: Option<i64>| x.unwrap_or(MISSING);
        match e.cat {
            Category::Kernel => {
                let name = self.strings.intern(&e.name);
                let short = match short_name(&e.name) {
                    s if s.len() == e.name.len() || s.is_empty() => name,
                    s => self.strings.intern(s),
                };
                let device = a.device.or(e.pid);
                self.kernels.push([
                    start, end, v(device), v(a.stream.or(e.tid)), v(a.correlation), HOST, name, short,
                    v(a.grid[0]), v(a.grid[1]), v(a.grid[2]), v(a.block[0]), v(a.block[1]), v(a.block[2]),
                    v(a.registers), v(a.shared_memory), MISSING,
                ]);
            }
            Category::Memcpy | Category::Memset => {
                let (rows, kind) = match e.cat {
                    Category::Memcpy => (&mut self.memcpy, copy_kind(&e.name)),
                    _ => (&mut self.memset, memory_kind(&e.name)),
                };
                let device = a.device.or(e.pid);
                rows.push([start, end, v(device), v(a.stream.or(e.tid)), v(a.correlation), HOST, v(a.bytes), kind]);
            }
            Category::Runtime => {
                self.count_cpu_pid(e.pid);
                let name = self.strings.intern(&e.name);
                self.runtime.push([start, end, v(e.pid), v(e.tid), v(a.correlation), name]);
            }
            Category::UserAnnotation => {
                self.count_cpu_pid(e.pid);
                let name = self.strings.intern(&e.name);
                self.nvtx.push([start, end, RANGE, name, 0, v(e.pid), v(e.tid), MISSING]);
            }
            Category::GpuUserAnnotation => {
                // A GPU-timeline range (tid = stream), kept apart from CPU ranges by its domain
                // name, so no launch on a CPU thread is ever placed inside it.
                let name = self.strings.intern(&e.name);
                let domain = self.strings.intern("gpu_user_annotation");
                self.nvtx.push([start, end, RANGE, name, 1, HOST, v(a.stream.or(e.tid)), domain]);
            }
            Category::CpuOp => {
                self.count_cpu_pid(e.pid);
                if e.name == "record_param_comms" {
                    self.add_collective(start, end, &e);
                }
            }
            Category::Other => {}
        }
    }

    fn count_cpu_pid(&mut self, pid: Option<i64>) {
        if let Some(pid) = pid {
            *self.cpu_pids.entry(pid).or_default() += 1;
        }
    }

    /// PyTorch's c10d op: a range `nccl:<collective>` (what the NCCL op classifier reads, like
    /// `emit_nvtx`'s ranges in an nsys export) plus a `collectives` row with sizes and group.
    fn add_collective(&mut self, start: i64, end: i64, e: &Event) {
        let a = &e.args;
        let Some(collective) = a.collective.as_deref().filter(|c| !c.is_empty()) else { return };
        let v = |x: Option<i64>| x.unwrap_or(MISSING);
        let (pid, tid) = (v(e.pid), v(e.tid));
        let range = self.strings.intern(&format!("nccl:{collective}"));
        self.nvtx.push([start, end, RANGE, range, 0, pid, tid, MISSING]);
        let mut text = |s: &Option<String>| s.as_deref().map_or(MISSING, |s| self.strings.intern(s));
        let row = [
            start, end, pid, tid, text(&a.collective), v(a.in_nelems), v(a.out_nelems), v(a.group_size),
            text(&a.dtype), text(&a.pg_name), text(&a.pg_desc), text(&a.pg_ranks), v(a.seq), v(a.rank),
            v(a.src_rank), v(a.dst_rank),
        ];
        self.collectives.push(row);
    }

    fn finish(mut self, path: &Path) -> Result<Export, ReadError> {
        if !self.saw_events {
            return Err(ReadError::NotKineto { path: path.into(), reason: "no traceEvents".into() });
        }
        if self.kernels.is_empty() && self.memcpy.is_empty() && self.memset.is_empty() {
            return Err(ReadError::NoGpuEvents(path.into()));
        }
        let mut warnings = Vec::new();
        // Time base (module comment): base + ts, or ts alone when it is already absolute.
        let ts_absolute = self.max_ts >= ABSOLUTE_NS_FLOOR;
        if ts_absolute && self.base_ns.is_some() {
            warnings.push("absolute timestamps beside a baseTimeNanoseconds: the base was not added".into());
        }
        let offset = if ts_absolute { 0 } else { self.base_ns.unwrap_or(0) };
        let absolute = ts_absolute || self.base_ns.is_some();
        if !absolute {
            warnings.push(
                "no baseTimeNanoseconds and relative timestamps: times are relative to an unknown origin; ranks align only by their collectives"
                    .into(),
            );
        }
        // The host process: the pid of most CPU events (ties: the smaller pid, for stable output).
        let host = self.cpu_pids.iter().max_by_key(|&(&pid, &n)| (n, std::cmp::Reverse(pid))).map_or(MISSING, |(&p, _)| p);
        if self.runtime.is_empty() {
            warnings.push("no CUDA runtime events: kernels cannot be tied to the CPU thread that launched them".into());
        }

        let gpus = gpu_rows(&self.gpus, &mut self.strings);
        let names = |spec: &TableSpec| spec.columns().map(|c| c.name).collect::<Vec<_>>();
        let tables = vec![
            self.kernels.into_table(tables::KERNELS.name, &names(&tables::KERNELS), offset, host),
            self.memcpy.into_table(tables::MEMCPY.name, &names(&tables::MEMCPY), offset, host),
            self.memset.into_table(tables::MEMSET.name, &names(&tables::MEMSET), offset, host),
            self.runtime.into_table(tables::RUNTIME.name, &names(&tables::RUNTIME), offset, host),
            self.nvtx.into_table(tables::NVTX.name, &NVTX_COLUMN_NAMES, offset, host),
            Columns::<4>::default().into_table(tables::GPU_METRICS.name, &names(&tables::GPU_METRICS), 0, host),
            Columns::<3>::default().into_table(tables::GPU_METRIC_NAMES.name, &names(&tables::GPU_METRIC_NAMES), 0, host),
            gpus.into_table(tables::GPUS.name, &names(&tables::GPUS), 0, host),
            self.collectives.into_table("collectives", &COLLECTIVE_COLUMN_NAMES, offset, host),
        ];
        Ok(Export {
            path: path.to_path_buf(),
            session: Session {
                nsys_version: None,
                schema_version: Some("kineto".into()),
                time_normalized: absolute,
                utc_epoch_ns: self.base_ns,
                hostname: None,
            },
            metadata: self.metadata,
            system_env: Vec::new(),
            capture: Vec::new(),
            tables,
            strings: self.strings.values,
            warnings,
        })
    }
}

/// A table being filled row by row, stored as columns from the start (no second copy).
struct Columns<const N: usize>([Vec<i64>; N]);

impl<const N: usize> Default for Columns<N> {
    fn default() -> Self {
        Columns(std::array::from_fn(|_| Vec::new()))
    }
}

impl<const N: usize> Columns<N> {
    fn push(&mut self, row: [i64; N]) {
        for (column, value) in self.0.iter_mut().zip(row) {
            column.push(value);
        }
    }

    fn is_empty(&self) -> bool {
        self.0[0].is_empty()
    }

    /// The finished table, sorted by start: `offset` added to the start and end (the first two
    /// columns of every event table), the HOST placeholder made `host`. `names` must follow the
    /// row layout (checked).
    fn into_table(self, name: &'static str, names: &[&'static str], offset: i64, host: i64) -> Table {
        assert_eq!(names.len(), N, "{name}: row layout and declared columns differ");
        let columns = names
            .iter()
            .zip(self.0)
            .enumerate()
            .map(|(i, (&n, mut values))| {
                for x in &mut values {
                    if i < 2 {
                        *x += offset;
                    } else if *x == HOST {
                        *x = host;
                    }
                }
                (n, values)
            })
            .collect();
        let mut table = Table { name, columns };
        table.sort_by_start();
        table
    }
}

/// `deviceProperties` entries as `gpus` rows: id, name, bus_location, sm_count.
fn gpu_rows(gpus: &[serde_json::Value], strings: &mut StringTable) -> Columns<4> {
    let mut rows = Columns::default();
    for g in gpus.iter().filter(|g| g.is_object()) {
        let int = |key| g.get(key).and_then(serde_json::Value::as_i64).unwrap_or(MISSING);
        let name = g.get("name").and_then(serde_json::Value::as_str).map_or(MISSING, |n| strings.intern(n));
        rows.push([int("id"), name, MISSING, int("numSms")]);
    }
    rows
}

/// nsys `copyKind` of a Kineto memcpy name ("Memcpy DtoH (Device -> Pageable)").
fn copy_kind(name: &str) -> i64 {
    const KINDS: [(&str, i64); 10] = [
        ("HtoD", 1), ("DtoH", 2), ("HtoA", 3), ("AtoH", 4), ("AtoA", 5),
        ("AtoD", 6), ("DtoA", 7), ("DtoD", 8), ("HtoH", 9), ("PtoP", 10),
    ];
    let word = name.split_whitespace().nth(1).unwrap_or("");
    KINDS.iter().find(|(k, _)| *k == word).map_or(MISSING, |&(_, v)| v)
}

/// CUPTI memory kind of a Kineto memset name ("Memset (Device)").
fn memory_kind(name: &str) -> i64 {
    const KINDS: [(&str, i64); 5] = [("(Pageable)", 1), ("(Pinned)", 2), ("(Device)", 3), ("(Array)", 4), ("(Managed)", 5)];
    KINDS.iter().find(|(k, _)| name.ends_with(k)).map_or(MISSING, |&(_, v)| v)
}

/// nsys-style short name of a demangled kernel name: without return type, scope, template
/// arguments and parameters ("void ns::foo<int>(int*)" -> "foo").
fn short_name(name: &str) -> &str {
    let bytes = name.as_bytes();
    // Drop the parameter list: the top-level "(...)" group that ends the name.
    let mut end = name.len();
    if name.ends_with(')') {
        let mut depth = 0;
        for (i, &b) in bytes.iter().enumerate().rev() {
            match b {
                b')' | b'>' => depth += 1,
                b'(' | b'<' => depth -= 1,
                _ => {}
            }
            if depth == 0 && b == b'(' {
                end = i;
                break;
            }
        }
    }
    // Drop a trailing template argument list.
    if name[..end].ends_with('>') {
        let mut depth = 0;
        for (i, &b) in bytes[..end].iter().enumerate().rev() {
            match b {
                b'>' | b')' => depth += 1,
                b'<' | b'(' => depth -= 1,
                _ => {}
            }
            if depth == 0 && b == b'<' {
                end = i;
                break;
            }
        }
    }
    // Keep what follows the last top-level space or "::" (return type, namespaces, classes).
    let mut depth = 0;
    let mut start = 0;
    for (i, &b) in bytes[..end].iter().enumerate() {
        match b {
            b'<' | b'(' => depth += 1,
            b'>' | b')' => depth -= 1,
            b' ' if depth == 0 => start = i + 1,
            b':' if depth == 0 && bytes.get(i + 1) == Some(&b':') => start = i + 2,
            _ => {}
        }
    }
    let short = name[start.min(end)..end].trim();
    if short.is_empty() { name } else { short }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn write(dir: &tempfile::TempDir, name: &str, bytes: &[u8]) -> PathBuf {
        let path = dir.path().join(name);
        std::fs::write(&path, bytes).unwrap();
        path
    }

    fn gz(text: &str) -> Vec<u8> {
        let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        enc.write_all(text.as_bytes()).unwrap();
        enc.finish().unwrap()
    }

    const BASE: i64 = 1_760_000_000_000_000_000;

    /// A PyTorch 2.x-style trace: relative ts, base after the events, collective metadata.
    fn modern() -> String {
        format!(
            r#"{{
  "schemaVersion": 1,
  "deviceProperties": [{{"id": 0, "name": "NVIDIA H100 80GB HBM3", "numSms": 132, "totalGlobalMem": 1}}],
  "distributedInfo": {{"backend": "nccl", "rank": 3, "world_size": 8, "pg_count": 1, "pg_config": [{{"pg_name": "0", "ranks": [0, 1]}}]}},
  "traceEvents": [
    {{"ph": "X", "cat": "kernel", "name": "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)", "pid": 0, "tid": 7,
      "ts": 2000.500, "dur": 10.250, "args": {{"device": 0, "stream": 7, "correlation": 11, "grid": [2, 1, 1], "block": [640, 1, 1],
      "registers per thread": 96, "shared memory": 1024, "Collective name": "allreduce"}}}},
    {{"ph": "X", "cat": "kernel", "name": "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, at::detail::Array<char*, 1> >(int, at::native::FillFunctor<float>, at::detail::Array<char*, 1>)",
      "pid": 0, "tid": 7, "ts": 1000.000, "dur": 1.5, "args": {{"device": 0, "stream": 7, "correlation": 10, "grid": [8, 1, 1], "block": [128, 1, 1]}}}},
    {{"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 4321, "tid": 4322, "ts": 999.0, "dur": 3.0, "args": {{"correlation": 10}}}},
    {{"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 4321, "tid": 4322, "ts": 1999.0, "dur": 3.0, "args": {{"correlation": 11, "correlation": 11}}}},
    {{"ph": "X", "cat": "cpu_op", "name": "record_param_comms", "pid": 4321, "tid": 4322, "ts": 1998.0, "dur": 5.0,
      "args": {{"Collective name": "allreduce", "In msg nelems": 1024, "Out msg nelems": 1024, "Group size": 8, "dtype": "Float",
      "Process Group Name": "0", "Process Group Description": "default_pg", "Process Group Ranks": "[0, 1, 2, 3, 4, 5, 6, 7]", "Seq": 42, "Rank": 3}}}},
    {{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#5", "pid": 4321, "tid": 4322, "ts": 900.0, "dur": 2000.0}},
    {{"ph": "X", "cat": "gpu_user_annotation", "name": "ProfilerStep#5", "pid": 0, "tid": 7, "ts": 1000.0, "dur": 1100.0}},
    {{"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy DtoH (Device -> Pinned)", "pid": 0, "tid": 7, "ts": 1500.0, "dur": 2.0, "args": {{"device": 0, "stream": 7, "correlation": 12, "bytes": 4096}}}},
    {{"ph": "M", "name": "process_name", "pid": 4321, "tid": 0, "args": {{"name": "python"}}}},
    {{"ph": "i", "name": "Record Window End", "pid": "", "tid": "", "ts": 5000.0}}
  ],
  "baseTimeNanoseconds": {BASE},
  "traceName": "rank3.json"
}}"#
        )
    }

    fn col<'a>(export: &'a Export, table: &str, column: &str) -> &'a [i64] {
        export.table(table).column(column).unwrap_or_else(|| panic!("{table}.{column}"))
    }

    #[test]
    fn modern_trace_becomes_an_export() {
        let dir = tempfile::tempdir().unwrap();
        let e = read_kineto(&write(&dir, "rank3.json", modern().as_bytes())).unwrap();
        let s = |id: i64| e.strings[id as usize].as_str();
        // Sorted by start; base + ts·1000, fractions exact; GPU rows carry the host pid.
        assert_eq!(col(&e, "kernels", "start"), [BASE + 1_000_000, BASE + 2_000_500]);
        assert_eq!(col(&e, "kernels", "end"), [BASE + 1_001_500, BASE + 2_010_750]);
        assert_eq!(col(&e, "kernels", "pid"), [4321, 4321]);
        assert_eq!(col(&e, "kernels", "correlation"), [10, 11]);
        assert_eq!(col(&e, "kernels", "grid_x"), [8, 2]);
        assert_eq!(col(&e, "kernels", "block_x"), [128, 640]);
        assert_eq!(col(&e, "kernels", "registers"), [-1, 96]);
        let short = col(&e, "kernels", "short_name");
        assert_eq!((s(short[0]), s(short[1])), ("vectorized_elementwise_kernel", "ncclDevKernel_AllReduce_Sum_f32_RING_LL"));
        assert_eq!(col(&e, "runtime", "tid"), [4322, 4322]);
        assert_eq!(col(&e, "memcpy", "bytes"), [4096]);
        assert_eq!(col(&e, "memcpy", "kind"), [2]);
        // Ranges: the step on the CPU, the step on the GPU (own domain), the collective.
        let names: Vec<&str> = col(&e, "nvtx", "name").iter().map(|&i| s(i)).collect();
        assert_eq!(names, ["ProfilerStep#5", "ProfilerStep#5", "nccl:allreduce"]);
        assert_eq!(col(&e, "nvtx", "type"), [RANGE; 3]);
        assert_eq!(col(&e, "nvtx", "pid"), [4321; 3]);
        assert_eq!(col(&e, "nvtx", "tid"), [4322, 7, 4322]);
        assert_eq!(s(col(&e, "nvtx", "domain_name")[1]), "gpu_user_annotation");
        assert_eq!(col(&e, "collectives", "in_nelems"), [1024]);
        assert_eq!(col(&e, "collectives", "seq"), [42]);
        assert_eq!(s(col(&e, "collectives", "pg_desc")[0]), "default_pg");
        assert_eq!(s(col(&e, "collectives", "pg_ranks")[0]), "[0, 1, 2, 3, 4, 5, 6, 7]");
        assert_eq!(col(&e, "gpus", "sm_count"), [132]);
        assert_eq!(s(col(&e, "gpus", "name")[0]), "NVIDIA H100 80GB HBM3");
        let meta: HashMap<_, _> = e.metadata.iter().cloned().collect();
        assert_eq!(meta["distributedInfo.rank"], "3");
        assert_eq!(meta["distributedInfo.world_size"], "8");
        assert_eq!(meta["schemaVersion"], "1");
        assert_eq!(e.session.utc_epoch_ns, Some(BASE));
        assert!(e.session.time_normalized && e.warnings.is_empty(), "{:?}", e.warnings);
    }

    #[test]
    fn tables_have_the_sqlite_readers_columns() {
        let dir = tempfile::tempdir().unwrap();
        let e = read_kineto(&write(&dir, "t.json", modern().as_bytes())).unwrap();
        for spec in tables::ALL {
            let ours: Vec<&str> = e.table(spec.name).columns.iter().map(|c| c.0).collect();
            let want: Vec<&str> = if spec.name == "nvtx" { NVTX_COLUMN_NAMES.to_vec() } else { spec.columns().map(|c| c.name).collect() };
            assert_eq!(ours, want, "{}", spec.name);
        }
        assert_eq!(e.tables.iter().map(|t| t.name).take(tables::ALL.len()).collect::<Vec<_>>(), tables::ALL.map(|t| t.name));
    }

    #[test]
    fn gzip_and_plain_read_the_same() {
        let dir = tempfile::tempdir().unwrap();
        let plain = read_kineto(&write(&dir, "a.json", modern().as_bytes())).unwrap();
        let zipped = read_kineto(&write(&dir, "a.json.gz", &gz(&modern()))).unwrap();
        assert_eq!(plain.strings, zipped.strings);
        for (a, b) in plain.tables.iter().zip(&zipped.tables) {
            assert_eq!(a.columns, b.columns);
        }
    }

    #[test]
    fn ranks_on_either_side_of_a_three_month_block_agree() {
        // Same instant, two ranks whose programs loaded on either side of a block boundary:
        // bases 91 days apart, `ts` 91 days apart the other way.
        const BLOCK_NS: i64 = 7_889_238 * 1_000_000_000;
        let dir = tempfile::tempdir().unwrap();
        let trace = |base: i64, ts_us: i64| {
            format!(r#"{{"baseTimeNanoseconds": {base}, "traceEvents": [{{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": {ts_us}.125, "dur": 1}}]}}"#)
        };
        let late = read_kineto(&write(&dir, "a.json", trace(BASE + BLOCK_NS, 5_000_000).as_bytes())).unwrap();
        let early = read_kineto(&write(&dir, "b.json", trace(BASE, BLOCK_NS / 1000 + 5_000_000).as_bytes())).unwrap();
        assert_eq!(col(&late, "kernels", "start"), col(&early, "kernels", "start"));
        assert_eq!(col(&late, "kernels", "start"), [BASE + BLOCK_NS + 5_000_000_125]);
    }

    #[test]
    fn old_absolute_microseconds_and_string_tids() {
        let dir = tempfile::tempdir().unwrap();
        let text = r#"[{"ph": "X", "cat": "Kernel", "name": "k", "pid": 1, "tid": "stream 7", "ts": 1682725898082228, "dur": 10,
                        "args": {"device": 1, "correlation": 5}}]"#;
        let e = read_kineto(&write(&dir, "old.json", text.as_bytes())).unwrap();
        assert_eq!(col(&e, "kernels", "start"), [1_682_725_898_082_228_000]);
        assert_eq!(col(&e, "kernels", "stream"), [7]);
        assert_eq!(col(&e, "kernels", "device"), [1]);
        assert!(e.session.time_normalized);
        assert!(e.warnings.iter().any(|w| w.contains("no CUDA runtime")));
    }

    #[test]
    fn relative_times_without_a_base_are_kept_and_warned_about() {
        let dir = tempfile::tempdir().unwrap();
        let text = r#"{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 12.5, "dur": 1}]}"#;
        let e = read_kineto(&write(&dir, "rel.json", text.as_bytes())).unwrap();
        assert_eq!(col(&e, "kernels", "start"), [12_500]);
        assert!(!e.session.time_normalized);
        assert!(e.warnings.iter().any(|w| w.contains("baseTimeNanoseconds")));
    }

    fn error(name: &str, bytes: &[u8]) -> String {
        let dir = tempfile::tempdir().unwrap();
        let path = write(&dir, name, bytes);
        let message = read_kineto(&path).err().expect("an error").to_string();
        assert!(message.starts_with(&path.display().to_string()), "{message}");
        assert!(!message.contains('\n'), "{message}");
        message
    }

    #[test]
    fn damaged_and_foreign_inputs_say_what_is_wrong() {
        let whole = gz(&modern());
        assert!(error("t.json.gz", &whole[..whole.len() / 2]).contains("truncated gzip"));
        assert!(error("t.json.gz", &whole[..whole.len() - 4]).contains("truncated gzip"));
        let mut corrupt = whole.clone();
        corrupt[20..40].fill(0xff);
        assert!(error("t.json.gz", &corrupt).contains("gzip"));
        let m = error("t.json", b"{\"traceEvents\": [\n {\"ph\": \"X\",, }]}");
        assert!(m.contains("invalid JSON at line 2, column"), "{m}");
        let m = error("t.json", &modern().as_bytes()[..500]);
        assert!(m.contains("invalid JSON") && m.contains("EOF"), "{m}");
        assert!(error("t.json", b"{\"schemaVersion\": 1}").contains("no traceEvents"));
        assert!(error("t.json", b"{\"traceEvents\": 3}").contains("not a PyTorch profiler"));
        let cpu_only = r#"{"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 1, "dur": 1}]}"#;
        assert!(error("t.json", cpu_only.as_bytes()).contains("no GPU events: profile with ProfilerActivity.CUDA"));
        assert!(error("t.json", b"").contains("empty"));
        assert!(error("t.json", b"SQLite format 3\0").contains("invalid JSON at line 1"));
        assert!(matches!(read_kineto(Path::new("/nonexistent/t.json")), Err(ReadError::Missing(_))));
    }

    #[test]
    fn short_names() {
        for (full, short) in [
            ("ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)", "ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t"),
            ("ncclDevKernel_Generic_4(ncclDevKernelArgsStorage<4096ul>)", "ncclDevKernel_Generic_4"),
            ("void fbgemm_gpu::permute_2D_lengths_kernel<int>(int, int, int const*, int const*, int*)", "permute_2D_lengths_kernel"),
            ("void (anonymous namespace)::softmax_warp_forward<float, float, float, 10, false>(float*, float const*, int)", "softmax_warp_forward"),
            ("triton_poi_fused_add_0", "triton_poi_fused_add_0"),
            ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas", "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas"),
            ("void cutlass::Kernel2<cutlass_80_tensorop_s1688gemm_64x64_16x6_tn_align4>(cutlass_80_tensorop_s1688gemm_64x64_16x6_tn_align4::Params)", "Kernel2"),
        ] {
            assert_eq!(short_name(full), short, "{full}");
        }
    }
}
