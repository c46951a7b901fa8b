//! Reader of PyTorch profiler (Kineto) Chrome-trace JSON, `.json` or `.json.gz`, one file per rank.
//!
//! The file is streamed: events are deserialized one at a time into small structs and turned
//! into columns at once, so a trace of hundreds of MB never exists as a JSON tree in memory, and
//! values the reader does not need are read through, not built (`json`). Its bytes are bounded
//! (`input`: `--max-trace-bytes`, and a gzip expansion ratio against decompression bombs). The
//! result is the same `Export` the SQLite reader builds, so the analysis runs unchanged.
//!
//! Time base. Kineto writes `ts`/`dur` in µs. Newer Kineto (about PyTorch 2.2 on) writes `ts`
//! relative to `baseTimeNanoseconds`, the wall clock at program load rounded *down to a 3-month
//! block* (so that `ts` stays exact in a double): absolute UTC ns = base + ts·1000. Two ranks'
//! bases can differ by a whole block (91 days) while their events are simultaneous, so `ts` alone
//! never compares across ranks. Older traces (like the HTA test traces, 2023-04) have no base and
//! an absolute `ts` in µs since the epoch. Both become absolute UTC ns here; a trace whose `ts` is
//! relative but whose base is missing keeps relative times, with a warning. Events whose times are
//! unusable (`times`: missing, not a finite number, negative, reversed, overflowing, or more than
//! a century from the origin) are dropped, with one warning per table counting them.
//!
//! Identity. GPU events carry `pid` = device and `tid` = stream; CPU events the OS pid/tid. The
//! analysis keys a rank by (pid, device) and ties a kernel to its launch by (pid, correlation),
//! so every GPU row (and every `cuda_sync`/`cuda_event` row) gets the host pid (that of the CUDA
//! runtime events).
//!
//! Synchronization. With `enable_cuda_sync_events`, Kineto writes `cuda_sync` events (name and
//! `args.cuda_sync_kind` "Event Sync", "Stream Wait Event", "Stream Sync", "Context Sync";
//! `args.stream` -1 for a context sync; for event syncs `wait_on_stream`,
//! `wait_on_cuda_event_record_corr_id`, `wait_on_cuda_event_id`) and `cuda_event` records (name
//! "cudaEvent", `args.event_id`, `stream`, `correlation`; `ts` the device time, else 0): layout of
//! pytorch/kineto `libkineto/src/CuptiActivity.cpp` (`CudaSyncActivity::metadataJson`,
//! `CudaEventActivity::metadataJson`, `syncTypeString`). They fill the `sync` and `cuda_event`
//! tables the SQLite reader fills from CUPTI's tables, with CUPTI's sync-type numbers.

mod input;
mod json;

pub use input::{KinetoLimits, DEFAULT_MAX_GZIP_RATIO, DEFAULT_MAX_TRACE_BYTES};

use crate::error::ReadError;
use crate::export::{Export, Session};
use crate::memory;
use crate::strings::StringTable;
use crate::tables::{self, Table, TableSpec, MISSING};
use crate::times::{self, Clock};
use input::{Exceeded, Input};
use json::{Dim3, Gpu, Scalar, SmallJson};
use serde::de::{DeserializeSeed, Deserializer, Error as _, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
use std::collections::{BTreeMap, HashMap, TryReserveError};
use std::fmt;
use std::io::BufRead;
use std::path::{Path, PathBuf};

/// The `Visitor` methods for the JSON kinds a visitor does not read (listed after the `;`): each
/// gives `$value` (a list or object skipped first), so that one odd value in a trace is passed
/// over instead of failing the whole file.
macro_rules! other_json_gives {
    ($de:lifetime, $ty:ty, $value:expr; $($kind:ident),+) => {
        $(other_json_gives!(@$kind $de, $ty, $value);)+
    };
    (@bool $de:lifetime, $ty:ty, $value:expr) => { fn visit_bool<E>(self, _: bool) -> Result<$ty, E> { Ok($value) } };
    (@i64 $de:lifetime, $ty:ty, $value:expr) => { fn visit_i64<E>(self, _: i64) -> Result<$ty, E> { Ok($value) } };
    (@u64 $de:lifetime, $ty:ty, $value:expr) => { fn visit_u64<E>(self, _: u64) -> Result<$ty, E> { Ok($value) } };
    (@f64 $de:lifetime, $ty:ty, $value:expr) => { fn visit_f64<E>(self, _: f64) -> Result<$ty, E> { Ok($value) } };
    (@str $de:lifetime, $ty:ty, $value:expr) => { fn visit_str<E>(self, _: &str) -> Result<$ty, E> { Ok($value) } };
    (@unit $de:lifetime, $ty:ty, $value:expr) => { fn visit_unit<E>(self) -> Result<$ty, E> { Ok($value) } };
    (@seq $de:lifetime, $ty:ty, $value:expr) => {
        fn visit_seq<A: SeqAccess<$de>>(self, seq: A) -> Result<$ty, A::Error> {
            IgnoredAny.visit_seq(seq).map(|_| $value)
        }
    };
    (@map $de:lifetime, $ty:ty, $value:expr) => {
        fn visit_map<A: MapAccess<$de>>(self, map: A) -> Result<$ty, A::Error> {
            IgnoredAny.visit_map(map).map(|_| $value)
        }
    };
}

/// NVTX push/pop range: how CPU annotation ranges appear in the `nvtx` table.
const RANGE: i64 = 59;
/// Times from this many ns (2001-09) on are absolute; below, relative to a base.
const ABSOLUTE_NS_FLOOR: i64 = 1_000_000_000_000_000_000;
/// `distributedInfo` values are kept as text only below this size (`pg_config` lists every group's ranks).
const PG_CONFIG_MAX: usize = 64 * 1024;
/// `distributedInfo` keys kept at most.
const DISTRIBUTED_INFO_KEYS: usize = 256;
/// `deviceProperties` entries kept at most (a node has a few GPUs).
const MAX_GPUS: usize = 1024;
/// What a visitor says when an allocation failed; `Trace::out_of_memory` tells the reader.
const OUT_OF_MEMORY: &str = "out of memory";

/// Reads one Kineto trace into an `Export`, with the default limits.
pub fn read_kineto(path: &Path) -> Result<Export, ReadError> {
    read_kineto_with(path, KinetoLimits::default())
}

/// Reads one Kineto trace into an `Export`, refusing it past `limits`.
pub fn read_kineto_with(path: &Path, limits: KinetoLimits) -> Result<Export, ReadError> {
    crate::stable::read_unchanged(path, |path| read_kineto_once(path, limits))
}

fn read_kineto_once(path: &Path, limits: KinetoLimits) -> Result<Export, ReadError> {
    let mut trace = Trace::default();
    let (parsed, gzip) = match input::open(path, limits)? {
        Input::Plain(reader) => (parse(reader, &mut trace), false),
        Input::Gzip(reader) => (parse(reader, &mut trace), true),
    };
    if trace.out_of_memory {
        return Err(ReadError::OutOfMemory(path.into()));
    }
    parsed.map_err(|e| json_error(path, gzip, e))?;
    trace.finish(path).map_err(|e| match e {
        Finish::Read(e) => e,
        Finish::Memory => ReadError::OutOfMemory(path.into()),
    })
}

/// Generic, not `dyn Read`: serde_json reads byte by byte, which is fast only on a concrete
/// `BufReader` (std specializes its byte iterator).
fn parse<R: BufRead>(reader: R, trace: &mut Trace) -> Result<(), serde_json::Error> {
    let mut de = serde_json::Deserializer::from_reader(reader);
    TraceSeed(trace).deserialize(&mut de)?;
    de.end()
}

/// Reads many traces at once, `threads` at a time (all cores when None), with the default limits.
pub fn read_kineto_traces(paths: &[PathBuf], threads: Option<usize>) -> Result<Vec<Result<Export, ReadError>>, ReadError> {
    read_kineto_traces_with(paths, threads, KinetoLimits::default())
}

/// Reads many traces at once, `threads` at a time (all cores when None), each within `limits`.
pub fn read_kineto_traces_with(
    paths: &[PathBuf],
    threads: Option<usize>,
    limits: KinetoLimits,
) -> Result<Vec<Result<Export, ReadError>>, ReadError> {
    crate::export::read_many(paths, threads, |path| read_kineto_with(path, limits))
}

fn json_error(path: &Path, gzip: bool, e: serde_json::Error) -> ReadError {
    use serde_json::error::Category;
    let category = e.classify();
    let kind = e.io_error_kind();
    if category == Category::Io {
        let io = std::io::Error::from(e);
        if let Some(limit) = Exceeded::read_error(path, &io) {
            return limit;
        }
        let path = path.to_path_buf();
        return match kind {
            Some(std::io::ErrorKind::UnexpectedEof) if gzip => ReadError::TruncatedGzip(path),
            _ if gzip => ReadError::BadGzip { path, message: io.to_string() },
            _ => ReadError::Io { path, source: io },
        };
    }
    let path = path.to_path_buf();
    match category {
        Category::Data => ReadError::NotKineto { path, reason: e.to_string() },
        _ => {
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
    gpus: Vec<Gpu>,
    /// `deviceProperties` entries beyond MAX_GPUS, not kept.
    gpus_left_out: usize,
    strings: StringTable,
    kernels: Columns<KERNEL_COLUMNS>,
    memcpy: Columns<COPY_COLUMNS>,
    memset: Columns<COPY_COLUMNS>,
    runtime: Columns<6>,
    nvtx: Columns<8>,
    sync: Columns<SYNC_COLUMNS>,
    cuda_event: Columns<CUDA_EVENT_COLUMNS>,
    cpu_ops: Columns<8>,
    collectives: Columns<COLLECTIVE_COLUMNS>,
    /// Events dropped for unusable times, by output table.
    dropped: HashMap<&'static str, usize>,
    /// How many CPU-side events each pid has: the most common one is the host process.
    cpu_pids: HashMap<i64, usize>,
    /// Latest start read (ns, before any base): tells absolute from relative times.
    max_ts: i64,
    /// An allocation failed while reading events (the parse was stopped for it).
    out_of_memory: bool,
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
                    // A base no century of times fits after is no base.
                    trace.base_ns = base.int().and_then(times::usable_origin);
                    trace.metadata.push((key, base.text().unwrap_or_default()));
                }
                "distributedInfo" => map.next_value_seed(DistributedInfo(&mut trace.metadata))?,
                "deviceProperties" => map.next_value_seed(DeviceProperties(trace))?,
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
            if self.0.add(event).is_err() {
                self.0.out_of_memory = true;
                return Err(A::Error::custom(OUT_OF_MEMORY));
            }
        }
        Ok(())
    }
}

/// `distributedInfo` as `distributedInfo.<key>` metadata pairs (rank, world_size, backend, ...),
/// keys sorted; values as text, left out when long (`pg_config` lists every group's ranks).
/// Anything but an object is ignored.
struct DistributedInfo<'a>(&'a mut Vec<(String, String)>);

impl<'de> DeserializeSeed<'de> for DistributedInfo<'_> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for DistributedInfo<'_> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("distributedInfo")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let mut fields = BTreeMap::new();
        while let Some(key) = map.next_key::<Scalar>()? {
            let value: SmallJson = map.next_value()?;
            let (Some(key), Some(text)) = (key.text(), value.text()) else { continue };
            if text.len() <= PG_CONFIG_MAX && (fields.len() < DISTRIBUTED_INFO_KEYS || fields.contains_key(&key)) {
                fields.insert(key, text);
            }
        }
        self.0.extend(fields.into_iter().map(|(k, v)| (format!("distributedInfo.{k}"), v)));
        Ok(())
    }
    other_json_gives!('de, (), (); bool, i64, u64, f64, str, unit, seq);
}

/// `deviceProperties`: the first MAX_GPUS objects of the list, the rest counted; anything but a
/// list is ignored.
struct DeviceProperties<'a>(&'a mut Trace);

impl<'de> DeserializeSeed<'de> for DeviceProperties<'_> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for DeviceProperties<'_> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("deviceProperties")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let trace = self.0;
        trace.gpus.clear();
        trace.gpus_left_out = 0;
        while let Some(gpu) = seq.next_element::<GpuEntry>()? {
            match gpu.0 {
                Some(gpu) if trace.gpus.len() < MAX_GPUS => trace.gpus.push(gpu),
                Some(_) => trace.gpus_left_out += 1,
                None => {}
            }
        }
        Ok(())
    }
    other_json_gives!('de, (), (); bool, i64, u64, f64, str, unit, map);
}

/// A `deviceProperties` entry: a GPU when it is an object, else nothing.
struct GpuEntry(Option<Gpu>);

impl<'de> Deserialize<'de> for GpuEntry {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<GpuEntry, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = GpuEntry;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a device properties entry")
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<GpuEntry, A::Error> {
                Gpu::deserialize(serde::de::value::MapAccessDeserializer::new(map)).map(|g| GpuEntry(Some(g)))
            }
            other_json_gives!('de, GpuEntry, GpuEntry(None); bool, i64, u64, f64, str, unit, seq);
        }
        d.deserialize_any(V)
    }
}

/// Trace-event phase: only complete events ("X") carry activities.
#[derive(Default, PartialEq, Eq, Clone, Copy)]
enum Phase {
    X,
    #[default]
    Other,
}

impl<'de> Deserialize<'de> for Phase {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Phase, D::Error> {
        d.deserialize_any(ByName(|name| if name == "X" { Phase::X } else { Phase::Other }))
    }
}

/// Event categories the reader uses.
#[derive(Default, PartialEq, Eq, Clone, Copy)]
enum Category {
    Kernel,
    Memcpy,
    Memset,
    Runtime,
    UserAnnotation,
    GpuUserAnnotation,
    CpuOp,
    CudaSync,
    CudaEvent,
    #[default]
    Other,
}

impl<'de> Deserialize<'de> for Category {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Category, D::Error> {
        // Older Kineto spelled some differently (the second names).
        d.deserialize_any(ByName(|name| match name {
            "kernel" | "Kernel" => Category::Kernel,
            "gpu_memcpy" | "Memcpy" => Category::Memcpy,
            "gpu_memset" | "Memset" => Category::Memset,
            "cuda_runtime" | "cuda_driver" | "Runtime" => Category::Runtime,
            "user_annotation" => Category::UserAnnotation,
            "gpu_user_annotation" => Category::GpuUserAnnotation,
            "cpu_op" | "Operator" => Category::CpuOp,
            "cuda_sync" => Category::CudaSync,
            "cuda_event" => Category::CudaEvent,
            _ => Category::Other,
        }))
    }
}

/// A value named by a string; anything else (a number, a list where a name belongs) is the
/// default, so one odd event is skipped rather than failing the whole trace.
struct ByName<T>(fn(&str) -> T);

impl<'de, T: Default> Visitor<'de> for ByName<T> {
    type Value = T;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a name")
    }
    fn visit_str<E>(self, v: &str) -> Result<T, E> {
        Ok((self.0)(v))
    }
    other_json_gives!('de, T, T::default(); bool, i64, u64, f64, unit, seq, map);
}

impl Category {
    /// The output table an event of this category becomes a row of (where it is counted when
    /// dropped); None for categories the reader skips.
    fn table(self) -> Option<&'static str> {
        Some(match self {
            Category::Kernel => tables::KERNELS.name,
            Category::Memcpy => tables::MEMCPY.name,
            Category::Memset => tables::MEMSET.name,
            Category::Runtime => tables::RUNTIME.name,
            Category::UserAnnotation | Category::GpuUserAnnotation => tables::NVTX.name,
            Category::CpuOp => tables::CPU_OPS.name,
            Category::CudaSync => tables::SYNC.name,
            Category::CudaEvent => tables::CUDA_EVENT.name,
            Category::Other => return None,
        })
    }
}

/// A `ts` or `dur` as read: absent, unusable (not a finite number of µs that fits in ns), or ns.
#[derive(Default, Clone, Copy)]
enum Stamp {
    #[default]
    Absent,
    Unusable,
    Ns(i64),
}

impl Stamp {
    fn of(value: Scalar) -> Stamp {
        value.nanos().map_or(Stamp::Unusable, Stamp::Ns)
    }
}

#[derive(Default)]
struct Event {
    ph: Phase,
    cat: Category,
    name: String,
    pid: Option<i64>,
    tid: Option<i64>,
    /// Relative or absolute (see the module comment) ns.
    ts: Stamp,
    dur: Stamp,
    args: Args,
}

impl Event {
    /// (start, end) in stored ns, when `ts` is a non-negative time and `dur` absent (an instant)
    /// or a non-negative duration that the end does not overflow with.
    fn span(&self) -> Option<(i64, i64)> {
        let Stamp::Ns(start) = self.ts else { return None };
        let dur = match self.dur {
            Stamp::Absent => 0,
            Stamp::Ns(dur) => dur,
            Stamp::Unusable => return None,
        };
        if start < 0 || dur < 0 {
            return None;
        }
        Some((start, start.checked_add(dur)?))
    }
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
                        EventKey::Ts => e.ts = Stamp::of(map.next_value()?),
                        EventKey::Dur => e.dur = Stamp::of(map.next_value()?),
                        EventKey::Args => e.args = map.next_value()?,
                        EventKey::Other => {
                            map.next_value::<IgnoredAny>()?;
                        }
                    }
                }
                Ok(e)
            }
            // Not an object: nothing the reader uses (its phase is not "X").
            other_json_gives!('de, Event, Event::default(); bool, i64, u64, f64, str, unit, seq);
        }
        d.deserialize_any(V)
    }
}

/// The `args` the reader uses; the rest are skipped unparsed.
#[derive(Default)]
struct Args {
    device: Option<i64>,
    stream: Option<i64>,
    correlation: Option<i64>,
    grid: [Option<i64>; 3],
    bytes: Option<i64>,
    // record_param_comms (PyTorch 2.x): what the collective was.
    collective: Option<String>,
    in_nelems: Option<i64>,
    out_nelems: Option<i64>,
    group_size: Option<i64>,
    dtype: Option<String>,
    // Older and Megatron traces: the op's inputs' shapes and types (the size is their product).
    input_dims: Option<String>,
    input_type: Option<String>,
    pg_name: Option<String>,
    pg_desc: Option<String>,
    pg_ranks: Option<String>,
    seq: Option<i64>,
    rank: Option<i64>,
    src_rank: Option<i64>,
    dst_rank: Option<i64>,
    // cuda_sync and cuda_event.
    sync_kind: Option<String>,
    wait_on_stream: Option<i64>,
    wait_on_record_correlation: Option<i64>,
    wait_on_event: Option<i64>,
    event_id: Option<i64>,
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
    #[serde(rename = "Input Dims")]
    InputDims,
    #[serde(rename = "Input type")]
    InputType,
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
    #[serde(rename = "cuda_sync_kind")]
    SyncKind,
    #[serde(rename = "wait_on_stream")]
    WaitOnStream,
    #[serde(rename = "wait_on_cuda_event_record_corr_id")]
    WaitOnRecordCorrelation,
    #[serde(rename = "wait_on_cuda_event_id")]
    WaitOnEvent,
    #[serde(rename = "event_id")]
    EventId,
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
                        ArgKey::Bytes => a.bytes = int(map.next_value()?),
                        ArgKey::Collective => a.collective = map.next_value::<Scalar>()?.text(),
                        ArgKey::InNelems => a.in_nelems = int(map.next_value()?),
                        ArgKey::OutNelems => a.out_nelems = int(map.next_value()?),
                        ArgKey::GroupSize => a.group_size = int(map.next_value()?),
                        ArgKey::Dtype => a.dtype = map.next_value::<Scalar>()?.text(),
                        ArgKey::InputDims => a.input_dims = map.next_value::<SmallJson>()?.text(),
                        ArgKey::InputType => a.input_type = map.next_value::<SmallJson>()?.text(),
                        ArgKey::PgName => a.pg_name = map.next_value::<Scalar>()?.text(),
                        ArgKey::PgDesc => a.pg_desc = map.next_value::<Scalar>()?.text(),
                        ArgKey::PgRanks => a.pg_ranks = map.next_value::<SmallJson>()?.text(),
                        ArgKey::Seq => a.seq = int(map.next_value()?),
                        ArgKey::Rank => a.rank = int(map.next_value()?),
                        ArgKey::SrcRank => a.src_rank = int(map.next_value()?),
                        ArgKey::DstRank => a.dst_rank = int(map.next_value()?),
                        ArgKey::SyncKind => a.sync_kind = map.next_value::<Scalar>()?.text(),
                        ArgKey::WaitOnStream => a.wait_on_stream = int(map.next_value()?),
                        ArgKey::WaitOnRecordCorrelation => a.wait_on_record_correlation = int(map.next_value()?),
                        ArgKey::WaitOnEvent => a.wait_on_event = int(map.next_value()?),
                        ArgKey::EventId => a.event_id = int(map.next_value()?),
                        ArgKey::Other => {
                            map.next_value::<IgnoredAny>()?;
                        }
                    }
                }
                Ok(a)
            }
            // Not an object: no args.
            other_json_gives!('de, Args, Args::default(); bool, i64, u64, f64, str, unit, seq);
        }
        d.deserialize_any(V)
    }
}

// ---------------------------------------------------------------------------------------------
// Events into rows of columns; columns into the `Export`'s tables.

const KERNEL_COLUMNS: usize = 11;
const COPY_COLUMNS: usize = 8;
const SYNC_COLUMNS: usize = 11;
const CUDA_EVENT_COLUMNS: usize = 7;
const COLLECTIVE_COLUMNS: usize = 18;
/// Placeholder pid of GPU rows, replaced by the host pid once all events are read.
const HOST: i64 = i64::MIN;

/// Output layout of the extra `collectives` table: one row per `record_param_comms` CPU op.
pub const COLLECTIVE_COLUMN_NAMES: [&str; COLLECTIVE_COLUMNS] = [
    "start", "end", "pid", "tid", "name", "in_nelems", "out_nelems", "group_size", "dtype", "pg_name", "pg_desc",
    "pg_ranks", "seq", "rank", "src_rank", "dst_rank", "input_dims", "input_type",
];
const NVTX_COLUMN_NAMES: [&str; 8] = ["start", "end", "type", "name", "domain", "pid", "tid", "domain_name"];

/// CUPTI's CUpti_ActivitySynchronizationType of a Kineto sync kind (`syncTypeString`):
/// 1 event synchronize, 2 stream wait event, 3 stream synchronize, 4 context synchronize, else 0.
fn sync_type(kind: &str) -> i64 {
    match kind {
        "Event Sync" => 1,
        "Stream Wait Event" => 2,
        "Stream Sync" => 3,
        "Context Sync" => 4,
        _ => 0,
    }
}

/// A stream or event id: CUPTI_SYNCHRONIZATION_INVALID_VALUE (-1 as int32, or 0xFFFFFFFF) and
/// other negatives mean none.
fn cupti_id(id: Option<i64>) -> i64 {
    match id {
        Some(i) if i >= 0 && i != 0xFFFF_FFFF => i,
        _ => MISSING,
    }
}

impl Trace {
    fn add(&mut self, e: Event) -> Result<(), TryReserveError> {
        if e.ph != Phase::X {
            return Ok(());
        }
        let Some(table) = e.cat.table() else { return Ok(()) };
        let a = &e.args;
        let v = |x: Option<i64>| x.unwrap_or(MISSING);
        if e.cat == Category::CudaEvent {
            // The device time is optional (0 when not collected): the record counts without it.
            let time = e.span().map_or(MISSING, |(start, _)| if start > 0 { start } else { MISSING });
            let row = [v(a.device.or(e.pid)), cupti_id(a.stream.or(e.tid)), v(a.correlation), HOST, cupti_id(a.event_id), MISSING, time];
            return self.cuda_event.push(row);
        }
        let Some((start, end)) = e.span() else {
            *self.dropped.entry(table).or_default() += 1;
            return Ok(());
        };
        self.max_ts = self.max_ts.max(start);
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
                    v(a.grid[0]), v(a.grid[1]), v(a.grid[2]),
                ])?;
            }
            Category::Memcpy | Category::Memset => {
                let (rows, kind) = match e.cat {
                    Category::Memcpy => (&mut self.memcpy, copy_kind(&e.name)),
                    _ => (&mut self.memset, memory_kind(&e.name)),
                };
                let device = a.device.or(e.pid);
                rows.push([start, end, v(device), v(a.stream.or(e.tid)), v(a.correlation), HOST, v(a.bytes), kind])?;
            }
            Category::Runtime => {
                self.count_cpu_pid(e.pid);
                let name = self.strings.intern(&e.name);
                self.runtime.push([start, end, v(e.pid), v(e.tid), v(a.correlation), name])?;
            }
            Category::UserAnnotation => {
                self.count_cpu_pid(e.pid);
                let name = self.strings.intern(&e.name);
                self.nvtx.push([start, end, RANGE, name, 0, v(e.pid), v(e.tid), MISSING])?;
            }
            Category::GpuUserAnnotation => {
                // A GPU-timeline range (tid = stream), kept apart from CPU ranges by its domain
                // name, so no launch on a CPU thread is ever placed inside it.
                let name = self.strings.intern(&e.name);
                let domain = self.strings.intern("gpu_user_annotation");
                self.nvtx.push([start, end, RANGE, name, 1, HOST, v(a.stream.or(e.tid)), domain])?;
            }
            Category::CpuOp => {
                self.count_cpu_pid(e.pid);
                let name = self.strings.intern(&e.name);
                let domain = self.strings.intern("cpu_op");
                self.cpu_ops.push([start, end, RANGE, name, 0, v(e.pid), v(e.tid), domain])?;
                if e.name == "record_param_comms" {
                    self.add_collective(start, end, &e)?;
                }
            }
            Category::CudaSync => {
                let kind = a.sync_kind.as_deref().unwrap_or(&e.name);
                let sync_type = sync_type(kind);
                // Only event syncs wait for an event (the other kinds carry none).
                let waits = sync_type == 1 || sync_type == 2;
                let on = |x: Option<i64>| if waits { cupti_id(x) } else { MISSING };
                self.sync.push([
                    start, end, v(a.device.or(e.pid)), cupti_id(a.stream.or(e.tid)), v(a.correlation), HOST, sync_type,
                    on(a.wait_on_event), MISSING, on(a.wait_on_record_correlation), on(a.wait_on_stream),
                ])?;
            }
            Category::CudaEvent | Category::Other => {}
        }
        Ok(())
    }

    fn count_cpu_pid(&mut self, pid: Option<i64>) {
        if let Some(pid) = pid {
            *self.cpu_pids.entry(pid).or_default() += 1;
        }
    }

    /// PyTorch's c10d op: a range `nccl:<collective>` (what the NCCL op classifier reads, like
    /// `emit_nvtx`'s ranges in an nsys export) plus a `collectives` row with sizes and group. An
    /// op without a collective name (older PyTorch) gives the row only, for its input dims.
    fn add_collective(&mut self, start: i64, end: i64, e: &Event) -> Result<(), TryReserveError> {
        let a = &e.args;
        let v = |x: Option<i64>| x.unwrap_or(MISSING);
        let (pid, tid) = (v(e.pid), v(e.tid));
        match a.collective.as_deref().filter(|c| !c.is_empty()) {
            Some(collective) => {
                let range = self.strings.intern(&format!("nccl:{collective}"));
                self.nvtx.push([start, end, RANGE, range, 0, pid, tid, MISSING])?;
            }
            None if a.input_dims.is_none() => return Ok(()),
            None => {}
        }
        let mut text = |s: &Option<String>| s.as_deref().map_or(MISSING, |s| self.strings.intern(s));
        let row = [
            start, end, pid, tid, text(&a.collective), v(a.in_nelems), v(a.out_nelems), v(a.group_size),
            text(&a.dtype), text(&a.pg_name), text(&a.pg_desc), text(&a.pg_ranks), v(a.seq), v(a.rank),
            v(a.src_rank), v(a.dst_rank), text(&a.input_dims), text(&a.input_type),
        ];
        self.collectives.push(row)
    }

    fn finish(mut self, path: &Path) -> Result<Export, Finish> {
        if !self.saw_events {
            return Err(Finish::Read(ReadError::NotKineto { path: path.into(), reason: "no traceEvents".into() }));
        }
        let mut warnings = Vec::new();
        // Time base (module comment): base + ts, or ts alone when it is already absolute.
        let ts_absolute = self.max_ts >= ABSOLUTE_NS_FLOOR;
        if ts_absolute && self.base_ns.is_some() {
            warnings.push("absolute timestamps beside a baseTimeNanoseconds: the base was not added".into());
        }
        let clock = Clock { offset: if ts_absolute { 0 } else { self.base_ns.unwrap_or(0) }, origin: self.base_ns.unwrap_or(0) };
        let absolute = ts_absolute || self.base_ns.is_some();
        if !absolute {
            warnings.push(
                "no baseTimeNanoseconds and relative timestamps: times are relative to an unknown origin; ranks align only by their collectives"
                    .into(),
            );
        }
        // The host process: the pid of most CPU events (ties: the smaller pid, for stable output).
        let host = self.cpu_pids.iter().max_by_key(|&(&pid, &n)| (n, std::cmp::Reverse(pid))).map_or(MISSING, |(&p, _)| p);
        let kernel_events = self.kernels.len() + self.dropped.get(tables::KERNELS.name).copied().unwrap_or(0);

        let gpus = gpu_rows(&self.gpus, &mut self.strings)?;
        if self.gpus_left_out > 0 {
            warnings.push(format!("deviceProperties lists {} GPUs: kept the first {MAX_GPUS}", MAX_GPUS + self.gpus_left_out));
        }
        for time in &mut self.cuda_event.0[6] {
            if *time != MISSING {
                *time = clock.absolute(*time).unwrap_or(MISSING);
            }
        }
        let names = |spec: &TableSpec| spec.columns().map(|c| c.name).collect::<Vec<_>>();
        let timed = Some(clock);
        let mut dropped = self.dropped;
        let mut table = |name: &'static str, built: Result<(Table, usize), TryReserveError>| -> Result<Table, Finish> {
            let (table, late) = built?;
            *dropped.entry(name).or_default() += late;
            Ok(table)
        };
        let tables = vec![
            table("kernels", self.kernels.into_table(tables::KERNELS.name, &names(&tables::KERNELS), timed, host))?,
            table("memcpy", self.memcpy.into_table(tables::MEMCPY.name, &names(&tables::MEMCPY), timed, host))?,
            table("memset", self.memset.into_table(tables::MEMSET.name, &names(&tables::MEMSET), timed, host))?,
            table("runtime", self.runtime.into_table(tables::RUNTIME.name, &names(&tables::RUNTIME), timed, host))?,
            table("nvtx", self.nvtx.into_table(tables::NVTX.name, &NVTX_COLUMN_NAMES, timed, host))?,
            table("gpu_metrics", Columns::<4>::default().into_table(tables::GPU_METRICS.name, &names(&tables::GPU_METRICS), timed, host))?,
            table("gpu_metric_names", Columns::<3>::default().into_table(tables::GPU_METRIC_NAMES.name, &names(&tables::GPU_METRIC_NAMES), None, host))?,
            table("gpus", gpus.into_table(tables::GPUS.name, &names(&tables::GPUS), None, host))?,
            table("sync", self.sync.into_table(tables::SYNC.name, &names(&tables::SYNC), timed, host))?,
            table("cuda_event", self.cuda_event.into_table(tables::CUDA_EVENT.name, &names(&tables::CUDA_EVENT), None, host))?,
            table("cpu_ops", self.cpu_ops.into_table(tables::CPU_OPS.name, &names(&tables::CPU_OPS), timed, host))?,
            // Dropped record_param_comms ops are counted under cpu_ops, where they were read.
            table("cpu_ops", self.collectives.into_table("collectives", &COLLECTIVE_COLUMN_NAMES, timed, host).map(|(t, _)| (t, 0)))?,
        ];
        let rows = |name: &str| tables.iter().find(|t| t.name == name).map_or(0, Table::len);
        if kernel_events > 0 && rows(tables::KERNELS.name) == 0 {
            return Err(Finish::Read(ReadError::NoUsableKernelEvents { path: path.into(), events: kernel_events }));
        }
        if rows(tables::KERNELS.name) + rows(tables::MEMCPY.name) + rows(tables::MEMSET.name) == 0 {
            return Err(Finish::Read(ReadError::NoGpuEvents(path.into())));
        }
        if rows(tables::RUNTIME.name) == 0 {
            warnings.push("no CUDA runtime events: kernels cannot be tied to the CPU thread that launched them".into());
        }
        for spec in tables::ALL {
            match dropped.get(spec.name) {
                Some(&n) if n > 0 => warnings.push(times::dropped_events(spec.name, n)),
                _ => {}
            }
        }
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

/// Why `Trace::finish` failed: a refused trace, or an allocation.
enum Finish {
    Read(ReadError),
    Memory,
}

impl From<TryReserveError> for Finish {
    fn from(_: TryReserveError) -> Self {
        Finish::Memory
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
    fn push(&mut self, row: [i64; N]) -> Result<(), TryReserveError> {
        for (column, value) in self.0.iter_mut().zip(row) {
            memory::push(column, value)?;
        }
        Ok(())
    }

    fn len(&self) -> usize {
        self.0[0].len()
    }

    /// The finished table, sorted by start, and how many rows it lost. With a `clock`, the first
    /// two columns (start and end of every event table) are made absolute and rows whose times
    /// are then unusable dropped. The HOST placeholder is made `host`. `names` must follow the
    /// row layout (checked).
    fn into_table(
        self,
        name: &'static str,
        names: &[&'static str],
        clock: Option<Clock>,
        host: i64,
    ) -> Result<(Table, usize), TryReserveError> {
        assert_eq!(names.len(), N, "{name}: row layout and declared columns differ");
        let mut columns = self.0;
        let mut kept = columns[0].len();
        if let Some(clock) = clock {
            kept = 0;
            for row in 0..columns[0].len() {
                if let Some((start, end)) = clock.span(columns[0][row], columns[1][row]) {
                    for column in &mut columns[2..] {
                        column[kept] = column[row];
                    }
                    (columns[0][kept], columns[1][kept]) = (start, end);
                    kept += 1;
                }
            }
        }
        let dropped = columns[0].len() - kept;
        for (i, column) in columns.iter_mut().enumerate() {
            column.truncate(kept);
            if clock.is_none() || i >= 2 {
                column.iter_mut().filter(|x| **x == HOST).for_each(|x| *x = host);
            }
        }
        let mut table = Table { name, columns: names.iter().copied().zip(columns).collect() };
        table.sort_by_start()?;
        Ok((table, dropped))
    }
}

/// `deviceProperties` entries as `gpus` rows: id, name, bus_location, sm_count.
fn gpu_rows(gpus: &[Gpu], strings: &mut StringTable) -> Result<Columns<4>, TryReserveError> {
    let mut rows = Columns::default();
    for g in gpus {
        let name = g.name.as_deref().map_or(MISSING, |n| strings.intern(n));
        rows.push([g.id.unwrap_or(MISSING), name, MISSING, g.sm_count.unwrap_or(MISSING)])?;
    }
    Ok(rows)
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
        assert_eq!(col(&e, "kernels", "grid_y"), [1, 1]);
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
    fn input_dims_are_kept_even_without_a_collective_name() {
        // Older PyTorch (PARAM's DLRM trace) writes record_param_comms with only its inputs'
        // shapes and types: no range (nothing names the collective), but a row for the size.
        let dir = tempfile::tempdir().unwrap();
        let text = modern().replacen(
            r#""Collective name": "allreduce", "In msg nelems": 1024, "Out msg nelems": 1024,"#,
            r#""Input Dims": [[6144], [], []], "Input type": ["float", "Scalar", "Scalar"],"#,
            1,
        );
        let e = read_kineto(&write(&dir, "old.json", text.as_bytes())).unwrap();
        let s = |id: i64| e.strings[id as usize].as_str();
        let names: Vec<&str> = col(&e, "nvtx", "name").iter().map(|&i| s(i)).collect();
        assert_eq!(names, ["ProfilerStep#5", "ProfilerStep#5"]);
        assert_eq!(col(&e, "collectives", "in_nelems"), [-1]);
        assert_eq!(s(col(&e, "collectives", "input_dims")[0]), "[[6144],[],[]]");
        assert_eq!(s(col(&e, "collectives", "input_type")[0]), r#"["float","Scalar","Scalar"]"#);
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
    fn cuda_sync_and_cuda_event_fill_the_nsys_tables() {
        // Layout of pytorch/kineto libkineto/src/CuptiActivity.cpp (CudaSyncActivity, CudaEventActivity).
        let text = modern().replace(
            r#"{"ph": "i", "name": "Record Window End""#,
            r#"{"ph": "X", "cat": "cuda_sync", "name": "Stream Wait Event", "pid": 0, "tid": 24, "ts": 1001.5, "dur": 0.5,
                "args": {"cuda_sync_kind": "Stream Wait Event", "wait_on_stream": 7, "wait_on_cuda_event_record_corr_id": 20,
                "wait_on_cuda_event_id": 3, "stream": 24, "correlation": 21, "device": 0, "context": 1}},
              {"ph": "X", "cat": "cuda_sync", "name": "Context Sync", "pid": 0, "tid": -1, "ts": 1100, "dur": 50,
                "args": {"cuda_sync_kind": "Context Sync", "stream": -1, "correlation": 30, "device": 0, "context": 1}},
              {"ph": "X", "cat": "cuda_event", "name": "cudaEvent", "pid": 0, "tid": 7, "ts": 0, "dur": 1,
                "args": {"event_id": 3, "stream": 7, "correlation": 20, "device": 0, "context": 1}},
              {"ph": "i", "name": "Record Window End""#,
        );
        let dir = tempfile::tempdir().unwrap();
        let e = read_kineto(&write(&dir, "t.json", text.as_bytes())).unwrap();
        assert_eq!(col(&e, "sync", "start"), [BASE + 1_001_500, BASE + 1_100_000]);
        assert_eq!(col(&e, "sync", "sync_type"), [2, 4]);
        assert_eq!(col(&e, "sync", "stream"), [24, -1]);
        assert_eq!(col(&e, "sync", "event"), [3, -1]);
        assert_eq!(col(&e, "sync", "event_record_correlation"), [20, -1]);
        assert_eq!(col(&e, "sync", "event_stream"), [7, -1]);
        assert_eq!(col(&e, "sync", "pid"), [4321, 4321]);
        assert_eq!(col(&e, "cuda_event", "correlation"), [20]);
        assert_eq!(col(&e, "cuda_event", "time"), [-1], "ts 0: no device time");
        // record_param_comms is a cpu_op too.
        assert_eq!(col(&e, "cpu_ops", "start"), [BASE + 1_998_000]);
        assert_eq!(e.strings[col(&e, "cpu_ops", "domain_name")[0] as usize], "cpu_op");
    }

    #[test]
    fn unusable_times_are_dropped_and_counted() {
        let kernel = |ts: &str, dur: &str| {
            format!(r#"{{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": {ts}, "dur": {dur}, "args": {{"correlation": 1}}}}"#)
        };
        let events = [kernel("10", "1"), kernel("1e300", "1"), kernel("\"NaN\"", "1"), kernel("10", "-1"), kernel("10", "9.2e15"), kernel("-3", "1")];
        let text = format!(r#"{{"baseTimeNanoseconds": {BASE}, "traceEvents": [{}]}}"#, events.join(","));
        let dir = tempfile::tempdir().unwrap();
        let e = read_kineto(&write(&dir, "t.json", text.as_bytes())).unwrap();
        assert_eq!(col(&e, "kernels", "start"), [BASE + 10_000]);
        assert_eq!(e.warnings.last().unwrap(), &times::dropped_events("kernels", 5));
        let none = format!(r#"{{"traceEvents": [{}]}}"#, events[1..].join(","));
        let err = read_kineto(&write(&dir, "none.json", none.as_bytes())).err().unwrap();
        assert!(matches!(err, ReadError::NoUsableKernelEvents { events: 5, .. }), "{err}");
    }

    #[test]
    fn limits_refuse_large_traces_and_bombs() {
        let dir = tempfile::tempdir().unwrap();
        let small = KinetoLimits { max_trace_bytes: 100, ..KinetoLimits::default() };
        for (name, bytes) in [("t.json", modern().into_bytes()), ("t.json.gz", gz(&modern()))] {
            let err = read_kineto_with(&write(&dir, name, &bytes), small).err().unwrap();
            assert!(matches!(err, ReadError::TraceTooLarge { limit: 100, .. }), "{err}");
            assert!(err.to_string().contains("--max-trace-bytes"));
        }
        // 20 MiB of whitespace in a valid trace: about 1000-fold, past the 16 MiB the ratio waits for.
        let padded = modern().replacen("\"traceName\"", &format!("{}\"traceName\"", " ".repeat(20 << 20)), 1);
        let bomb = write(&dir, "bomb.json.gz", &gz(&padded));
        let err = read_kineto(&bomb).err().unwrap();
        assert!(matches!(err, ReadError::GzipBomb { ratio: DEFAULT_MAX_GZIP_RATIO, .. }), "{err}");
        assert!(read_kineto_with(&bomb, KinetoLimits { max_gzip_ratio: 5000, ..KinetoLimits::default() }).is_ok());
    }

    #[test]
    fn huge_distributed_info_keeps_the_small_fields() {
        let dir = tempfile::tempdir().unwrap();
        let ranks = format!("[{}0]", "1, ".repeat(1_000_000));
        let text = modern().replace(r#""pg_config": [{"pg_name": "0", "ranks": [0, 1]}]"#, &format!(r#""pg_config": {ranks}, "nested": {{"a": {ranks}}}"#));
        let e = read_kineto(&write(&dir, "t.json", text.as_bytes())).unwrap();
        let meta: HashMap<_, _> = e.metadata.iter().cloned().collect();
        assert_eq!((meta["distributedInfo.rank"].as_str(), meta["distributedInfo.world_size"].as_str()), ("3", "8"));
        assert!(!meta.contains_key("distributedInfo.pg_config") && !meta.contains_key("distributedInfo.nested"));
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
