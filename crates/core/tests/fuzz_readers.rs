//! A bounded, seeded fuzz run of both readers, for CI: damaged copies of exports and traces, each
//! read once. Every case must end in an `Ok` whose columns make sense or in a `ReadError`: no
//! panic, no hang (each case has a time bound), no unbounded memory (the process's peak resident
//! memory is checked at the end).
//!
//! Seeds: a committed fixture and a Kineto trace written here (always), and real exports and
//! traces beside the checkout (`../shared/data/real`, ignored with a reason when absent).
//! Damage: for SQLite, byte flips, truncations, page swaps and zeroed pages, and SQL edits (text,
//! blobs, NULLs, reals and extreme integers where times and ids belong, dropped and renamed
//! tables and columns, an endless view named like an nsys table); for Kineto, JSON edits (extreme
//! numbers, strings, nested and huge lists where numbers belong, keys removed), truncations and
//! damaged gzip. Hostile ids (deviceId, globalPid, streamId of CUPTI's "invalid", -1, 2^31, 2^62,
//! NULL) must come out as ids the analysis can key on. Files rewritten and truncated while they
//! are read (`cp new old` during a run) must end in a result or `ReadError::Changed`, never a
//! SIGBUS (the reader once mapped the file). `FUZZ_SEED` and `FUZZ_CASES` (per seed file) change the run; the failing case's
//! seed and number are in the message.

use collectivetrace_core::times::CENTURY_NS;
use collectivetrace_core::{read_export, read_kineto, Export, ReadError};
use rusqlite::Connection;
use serde_json::{json, Value};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// A case taking longer is a hang (debug builds read the largest seed in well under a second).
const CASE_LIMIT: Duration = Duration::from_secs(30);
/// The test process's peak resident memory may not pass this (the seeds are a few MB).
const PEAK_RSS_LIMIT_KB: u64 = 1_500_000;

fn real_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/data/real")
}

fn seed() -> u64 {
    std::env::var("FUZZ_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(13)
}

fn cases(default: usize) -> usize {
    std::env::var("FUZZ_CASES").ok().and_then(|s| s.parse().ok()).unwrap_or(default)
}

/// Reads `path` on its own thread; fails the test on a panic or past CASE_LIMIT. Returns what
/// came of it: "ok", or the error's kind ("Sqlite", "InvalidJson", ...), for the run's summary.
fn read_bounded(label: &str, path: &Path, read: fn(&Path) -> Result<Export, ReadError>) -> String {
    let (tx, rx) = mpsc::channel();
    let owned = path.to_path_buf();
    let started = Instant::now();
    std::thread::spawn(move || {
        let result = std::panic::catch_unwind(|| read(&owned));
        let _ = tx.send(result);
    });
    let outcome = match rx.recv_timeout(CASE_LIMIT) {
        Err(_) => panic!("{label}: no result after {CASE_LIMIT:?} (a hang)"),
        Ok(Err(_)) => panic!("{label}: the reader panicked"),
        Ok(Ok(Err(e))) => {
            let message = e.to_string();
            assert!(!message.contains('\n') && !message.is_empty(), "{label}: {message}");
            format!("{e:?}").split(|c: char| !c.is_alphanumeric()).next().unwrap_or("?").to_string()
        }
        Ok(Ok(Ok(export))) => {
            check(label, &export);
            let dropped = export.warnings.iter().any(|w| w.contains("dropped"));
            (if dropped { "ok, rows dropped" } else { "ok" }).to_string()
        }
    };
    assert!(started.elapsed() < CASE_LIMIT, "{label}: took {:?}", started.elapsed());
    outcome
}

/// Counts of outcomes, printed (`cargo test -- --nocapture`) so a run shows what it exercised.
#[derive(Default)]
struct Summary(std::collections::BTreeMap<String, usize>, usize);

impl Summary {
    fn add(&mut self, outcome: String) {
        *self.0.entry(outcome).or_default() += 1;
        self.1 += 1;
    }

    fn print(&self, what: &str, started: Instant) {
        eprintln!("{what}: {} cases in {:.1} s: {:?}", self.1, started.elapsed().as_secs_f64(), self.0);
    }
}

/// What any export must satisfy, damaged input or not.
fn check(label: &str, e: &Export) {
    let origin = e.session.utc_epoch_ns.unwrap_or(0);
    for t in &e.tables {
        let n = t.len();
        assert!(t.columns.iter().all(|(_, c)| c.len() == n), "{label}: {} columns of unequal length", t.name);
        if let Some(start) = t.column("start") {
            assert!(start.windows(2).all(|w| w[0] <= w[1]), "{label}: {} not sorted by start", t.name);
            assert!(start.iter().all(|&s| s >= 0 && s.abs_diff(origin) <= CENTURY_NS as u64), "{label}: {} start out of range", t.name);
            if let Some(end) = t.column("end") {
                assert!(start.iter().zip(end).all(|(s, e)| s <= e), "{label}: {} end before start", t.name);
            }
        }
        for (name, column) in &t.columns {
            // An export's pids are a packed globalPid's 24-bit field, or none (a trace's are its own
            // JSON's, checked by the analysis: model.trace.screen_gpu_work).
            if *name == "pid" && e.session.schema_version.as_deref() != Some("kineto") {
                assert!(column.iter().all(|&p| (-1..1 << 24).contains(&p)), "{label}: {}.pid out of range", t.name);
            }
            let string_id = matches!(*name, "name" | "short_name" | "domain_name" | "dtype" | "pg_name" | "pg_desc" | "pg_ranks")
                || (t.name == "collectives" && *name == "name");
            if string_id {
                assert!(column.iter().all(|&i| i >= -1 && i < e.strings.len() as i64), "{label}: {}.{name} not a string id", t.name);
            }
        }
    }
}

/// Peak resident memory of this process, in kB (Linux), checked after a run.
fn assert_peak_memory_bounded() {
    let Ok(status) = std::fs::read_to_string("/proc/self/status") else { return };
    let peak: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0);
    assert!(peak < PEAK_RSS_LIMIT_KB, "peak resident memory {peak} kB");
}

// ---------------------------------------------------------------------------------------------
// SQLite exports

/// Values put where times, ids and names belong.
const HOSTILE_SQL: [&str; 14] = [
    "NULL", "'x'", "''", "X'00ff'", "1.5", "-1", "0", "4294967295", "9223372036854775807", "-9223372036854775808", "1e300",
    "-1e300", "start", "end + 1",
];

/// A copy of `source` with random byte damage.
fn damage_bytes(rng: &mut fastrand::Rng, bytes: &[u8]) -> Vec<u8> {
    let mut out = bytes.to_vec();
    let page = match u16::from_be_bytes([out[16], out[17]]) {
        1 => 65_536,
        n => n.max(512) as usize,
    };
    let pages = out.len() / page;
    match rng.u8(0..4) {
        0 => {
            for _ in 0..rng.usize(1..=16) {
                let at = rng.usize(0..out.len());
                out[at] ^= rng.u8(1..=255);
            }
        }
        1 => out.truncate(rng.usize(0..out.len())),
        2 if pages > 2 => {
            let (a, b) = (rng.usize(1..pages), rng.usize(1..pages));
            for i in 0..page {
                out.swap(a * page + i, b * page + i);
            }
        }
        _ if pages > 1 => {
            let p = rng.usize(1..pages);
            out[p * page..(p + 1) * page].fill(0);
        }
        _ => out.truncate(out.len() / 2),
    }
    out
}

/// Ids CUPTI or a damaged file may store: CUPTI's invalid, -1, past i32, past the packed pid field.
const HOSTILE_IDS: [&str; 8] =
    ["NULL", "-1", "4294967295", "2147483648", "4611686018427387904", "-4611686018427387904", "9223372036854775807", "16777216"];

/// The table without its NOT NULL and PRIMARY KEY constraints, so any value can be stored.
fn loosen(db: &Connection, table: &str) -> rusqlite::Result<()> {
    // Only a table: an earlier edit may have made the name an endless view, which a copy would
    // fill without end.
    let kind: String = db.query_row("SELECT type FROM sqlite_master WHERE name = ?1", [table], |r| r.get(0))?;
    if kind != "table" {
        return Ok(());
    }
    db.execute_batch(&format!(
        "CREATE TABLE fuzz_loose AS SELECT * FROM \"{table}\"; DROP TABLE \"{table}\"; ALTER TABLE fuzz_loose RENAME TO \"{table}\";"
    ))
}

/// One to four random SQL edits of the export at `path`; edits SQLite refuses are skipped.
fn damage_sql(rng: &mut fastrand::Rng, path: &Path) {
    let db = Connection::open(path).unwrap();
    let tables: Vec<String> = {
        let mut s = db.prepare("SELECT name FROM sqlite_master WHERE type = 'table'").unwrap();
        s.query_map([], |r| r.get(0)).unwrap().collect::<Result<_, _>>().unwrap()
    };
    // Mostly the tables the reader reads.
    let interesting: Vec<&String> =
        tables.iter().filter(|t| t.starts_with("CUPTI") || t.starts_with("NVTX") || t.starts_with("TARGET") || *t == "StringIds" || t.starts_with("META")).collect();
    for _ in 0..rng.usize(1..=4) {
        let table = if interesting.is_empty() || rng.u8(0..10) == 0 { &tables[rng.usize(0..tables.len())] } else { interesting[rng.usize(0..interesting.len())] };
        let columns: Vec<String> = {
            let mut s = db.prepare(&format!("PRAGMA table_info(\"{table}\")")).unwrap();
            s.query_map([], |r| r.get(1)).unwrap().collect::<Result<_, _>>().unwrap()
        };
        if columns.is_empty() {
            continue;
        }
        let column = &columns[rng.usize(0..columns.len())];
        let value = HOSTILE_SQL[rng.usize(0..HOSTILE_SQL.len())].replace("start", &format!("\"{}\"", columns[0]));
        let (m, r) = (rng.u64(1..=5), rng.u64(0..5));
        let sql = match rng.u8(0..12) {
            10 | 11 => {
                // Hostile ids where the analysis keys ranks and streams.
                let id = HOSTILE_IDS[rng.usize(0..HOSTILE_IDS.len())];
                let column = ["deviceId", "globalPid", "streamId", "globalTid"][rng.usize(0..4)];
                let _ = loosen(&db, table);
                format!("UPDATE \"{table}\" SET \"{column}\" = {id} WHERE rowid % {m} = {r}")
            }
            0 => format!("DROP TABLE \"{table}\""),
            1 => format!("ALTER TABLE \"{table}\" DROP COLUMN \"{column}\""),
            2 => format!("ALTER TABLE \"{table}\" RENAME COLUMN \"{column}\" TO \"{column}_renamed\""),
            3 => format!("DELETE FROM \"{table}\" WHERE rowid % {m} = {r}"),
            4 => "DROP TABLE IF EXISTS CUPTI_ACTIVITY_KIND_MEMSET; CREATE VIEW CUPTI_ACTIVITY_KIND_MEMSET AS \
                  WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n) SELECT i AS start, i AS end FROM n"
                .to_string(),
            _ => {
                let _ = loosen(&db, table);
                format!("UPDATE \"{table}\" SET \"{column}\" = {value} WHERE rowid % {m} = {r}")
            }
        };
        let _ = db.execute_batch(&sql);
    }
}

fn fuzz_exports(what: &str, sources: &[PathBuf], per_source: usize, seed: u64) {
    let (started, mut summary) = (Instant::now(), Summary::default());
    let dir = tempfile::tempdir().unwrap();
    let mut rng = fastrand::Rng::with_seed(seed);
    for source in sources {
        let bytes = std::fs::read(source).unwrap();
        for case in 0..per_source {
            let path = dir.path().join(format!("case{case}.sqlite"));
            let label = format!("{} case {case} (FUZZ_SEED={seed})", source.display());
            if case % 2 == 0 {
                std::fs::write(&path, damage_bytes(&mut rng, &bytes)).unwrap();
            } else {
                std::fs::write(&path, &bytes).unwrap();
                damage_sql(&mut rng, &path);
            }
            summary.add(read_bounded(&label, &path, read_export));
        }
    }
    summary.print(what, started);
}

#[test]
fn fuzz_committed_fixture_exports() {
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/demo-4rank-2host/rep_0.sqlite");
    fuzz_exports("committed fixture exports", &[fixture], cases(120), seed());
    assert_peak_memory_bounded();
}

#[test]
#[cfg_attr(not(real_data), ignore = "real data not found at ../shared/data/real (it lives beside the checkout, never in it)")]
fn fuzz_real_exports() {
    let real = real_dir();
    let sources: Vec<PathBuf> = [
        "versions/nsys-2026.1-test-cuda.sqlite",
        "versions/nsys-2023.2-sgemm.sqlite",
        "versions/nsys-2022.2-pipit-saxpy-mpi-rank0.sqlite",
        "fs24-ring-6rank-2node/example_2_nsys_report_ault43.cscs.ch_485052.sqlite",
        "nsys-ai-2gpu/mfu_2gpu_before.sqlite",
    ]
    .iter()
    .map(|f| real.join(f))
    .collect();
    fuzz_exports("real exports", &sources, cases(24), seed() + 1);
    assert_peak_memory_bounded();
}

/// Reads `bytes` at `path` again and again while another thread rewrites the file in place the
/// way `cp` does (truncate, then write) and truncates it at random lengths: every read must end
/// in a result or a `ReadError` (a SIGBUS would end the test process); the summary shows how
/// often `Changed` was met.
fn read_while_rewritten(what: &str, bytes: &[u8], name: &str, rounds: usize, seed: u64, read: fn(&Path) -> Result<Export, ReadError>) {
    let (started, mut summary) = (Instant::now(), Summary::default());
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(name);
    std::fs::write(&path, bytes).unwrap();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = {
        let (path, bytes, stop) = (path.clone(), bytes.to_vec(), stop.clone());
        std::thread::spawn(move || {
            let mut rng = fastrand::Rng::with_seed(seed);
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let mut f = std::fs::OpenOptions::new().write(true).truncate(true).open(&path).unwrap();
                let cut = rng.usize(0..=bytes.len());
                f.write_all(&bytes[..cut]).unwrap();
                std::thread::sleep(Duration::from_micros(rng.u64(0..2_000)));
                f.write_all(&bytes[cut..]).unwrap();
                drop(f);
                std::thread::sleep(Duration::from_micros(rng.u64(0..2_000)));
            }
        })
    };
    for round in 0..rounds {
        summary.add(read_bounded(&format!("{what} round {round} (FUZZ_SEED={seed})"), &path, read));
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    writer.join().unwrap();
    summary.print(what, started);
}

#[test]
fn fuzz_exports_changing_under_the_reader() {
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/demo-4rank-2host/rep_0.sqlite");
    read_while_rewritten("export rewritten while read", &std::fs::read(fixture).unwrap(), "x.sqlite", cases(200), seed() + 4, read_export);
    assert_peak_memory_bounded();
}

#[test]
fn fuzz_traces_changing_under_the_reader() {
    let bytes = serde_json::to_vec(&synthetic_trace()).unwrap();
    read_while_rewritten("trace rewritten while read", &bytes, "x.json", cases(200), seed() + 5, read_kineto);
}

#[test]
fn non_regular_files_are_refused_before_opening() {
    let dir = tempfile::tempdir().unwrap();
    for read in [read_export as fn(&Path) -> Result<Export, ReadError>, read_kineto] {
        // A folder here; a FIFO (which would block an open forever) in the Python tests.
        let outcome = read_bounded("a folder", dir.path(), read);
        assert_eq!(outcome, "NotRegular");
    }
}

// ---------------------------------------------------------------------------------------------
// Kineto traces

/// Values put where numbers, names and objects belong.
fn hostile_json(rng: &mut fastrand::Rng) -> Value {
    let nested = (0..rng.usize(1..300)).fold(json!([]), |inner, _| json!([inner]));
    match rng.u8(0..16) {
        0 => json!(1e300),
        1 => json!(-1.0),
        2 => json!(9.2e15),
        3 => json!("NaN"),
        4 => json!("x"),
        5 => nested,
        6 => json!({}),
        7 => Value::Null,
        8 => json!(true),
        9 => json!(i64::MAX),
        10 => json!(u64::MAX),
        11 => json!(-0.0),
        12 => json!("é".repeat(rng.usize(1..100_000))),
        13 => Value::Array(vec![json!(7); rng.usize(0..200_000)]),
        14 => json!(i64::MIN),
        _ => json!("inf"),
    }
}

/// A trace of every category the reader uses, with the top-level keys it reads.
fn synthetic_trace() -> Value {
    let base = 1_760_000_000_000_000_000_i64;
    let mut events = vec![json!({"ph": "M", "name": "process_name", "pid": 77, "tid": 0, "args": {"name": "python"}})];
    for i in 0..40 {
        let ts = 1000.0 + 10.0 * i as f64;
        events.push(json!({"ph": "X", "cat": "kernel", "name": format!("void k{i}<int>(int*)"), "pid": 0, "tid": 7, "ts": ts + 2.0, "dur": 5.5,
            "args": {"device": 0, "stream": 7, "correlation": i, "grid": [2, 1, 1], "block": [128, 1, 1], "registers per thread": 32, "shared memory": 0}}));
        events.push(json!({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 77, "tid": 78, "ts": ts, "dur": 1.0, "args": {"correlation": i}}));
        events.push(json!({"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 77, "tid": 78, "ts": ts - 1.0, "dur": 3.0, "args": {"External id": i}}));
    }
    events.extend([
        json!({"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy DtoH (Device -> Pinned)", "pid": 0, "tid": 7, "ts": 1500.0, "dur": 2.0, "args": {"device": 0, "stream": 7, "correlation": 90, "bytes": 4096}}),
        json!({"ph": "X", "cat": "gpu_memset", "name": "Memset (Device)", "pid": 0, "tid": 7, "ts": 1510.0, "dur": 2.0, "args": {"device": 0, "stream": 7, "correlation": 91, "bytes": 64}}),
        json!({"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 77, "tid": 78, "ts": 900.0, "dur": 1000.0}),
        json!({"ph": "X", "cat": "gpu_user_annotation", "name": "ProfilerStep#1", "pid": 0, "tid": 7, "ts": 1000.0, "dur": 900.0}),
        json!({"ph": "X", "cat": "cpu_op", "name": "record_param_comms", "pid": 77, "tid": 78, "ts": 1200.0, "dur": 3.0,
            "args": {"Collective name": "allreduce", "In msg nelems": 1024, "Out msg nelems": 1024, "Group size": 2, "dtype": "Float",
                     "Process Group Name": "0", "Process Group Description": "default_pg", "Process Group Ranks": [0, 1], "Seq": 1, "Rank": 0}}),
        json!({"ph": "X", "cat": "cuda_sync", "name": "Stream Wait Event", "pid": 0, "tid": 24, "ts": 1300.0, "dur": 1.0,
            "args": {"cuda_sync_kind": "Stream Wait Event", "wait_on_stream": 7, "wait_on_cuda_event_record_corr_id": 5, "wait_on_cuda_event_id": 3, "stream": 24, "correlation": 92, "device": 0}}),
        json!({"ph": "X", "cat": "cuda_event", "name": "cudaEvent", "pid": 0, "tid": 7, "ts": 1290.0, "dur": 1, "args": {"event_id": 3, "stream": 7, "correlation": 5, "device": 0}}),
    ]);
    json!({
        "schemaVersion": 1,
        "deviceProperties": [{"id": 0, "name": "NVIDIA H100", "numSms": 132}],
        "distributedInfo": {"backend": "nccl", "rank": 0, "world_size": 2, "pg_config": [{"pg_name": "0", "ranks": [0, 1]}]},
        "traceEvents": events,
        "baseTimeNanoseconds": base,
    })
}

/// One to five random edits of a parsed trace.
fn damage_json(rng: &mut fastrand::Rng, trace: &mut Value) {
    for _ in 0..rng.usize(1..=5) {
        let value = hostile_json(rng);
        let events = trace["traceEvents"].as_array_mut().filter(|e| !e.is_empty());
        match (rng.u8(0..8), events) {
            (0, _) => {
                let key = ["baseTimeNanoseconds", "distributedInfo", "deviceProperties", "traceEvents", "schemaVersion"][rng.usize(0..5)];
                trace[key] = value;
            }
            (1, Some(events)) => {
                let i = rng.usize(0..events.len());
                let key = ["ts", "dur", "ph", "cat", "name", "pid", "tid", "args"][rng.usize(0..8)];
                if let Some(event) = events[i].as_object_mut() {
                    event.remove(key);
                }
            }
            (2, Some(events)) => {
                let i = rng.usize(0..events.len());
                events[i] = value;
            }
            (3 | 4, Some(events)) => {
                let i = rng.usize(0..events.len());
                let key = ["device", "stream", "correlation", "grid", "bytes", "Process Group Ranks", "wait_on_cuda_event_id", "event_id"][rng.usize(0..8)];
                if events[i]["args"].is_object() {
                    events[i]["args"][key] = value;
                }
            }
            (_, Some(events)) => {
                let i = rng.usize(0..events.len());
                let key = ["ts", "dur", "pid", "tid", "name", "cat", "ph"][rng.usize(0..7)];
                if events[i].is_object() {
                    events[i][key] = value;
                }
            }
            (_, None) => {}
        }
    }
}

fn gz(bytes: &[u8]) -> Vec<u8> {
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    enc.write_all(bytes).unwrap();
    enc.finish().unwrap()
}

fn fuzz_traces(what: &str, sources: &[Value], per_source: usize, seed: u64) {
    let (started, mut summary) = (Instant::now(), Summary::default());
    let dir = tempfile::tempdir().unwrap();
    let mut rng = fastrand::Rng::with_seed(seed);
    for (s, source) in sources.iter().enumerate() {
        for case in 0..per_source {
            let label = format!("trace {s} case {case} (FUZZ_SEED={seed})");
            let mut trace = source.clone();
            damage_json(&mut rng, &mut trace);
            let mut bytes = serde_json::to_vec(&trace).unwrap();
            let path = dir.path().join(format!("case{case}.json"));
            match case % 4 {
                // Cut short, plain or zipped.
                1 => bytes.truncate(rng.usize(0..bytes.len())),
                2 => {
                    bytes = gz(&bytes);
                    let at = rng.usize(0..bytes.len());
                    match rng.u8(0..3) {
                        0 => bytes.truncate(at),
                        1 => bytes[at] ^= rng.u8(1..=255),
                        _ => bytes.extend_from_slice(b"trailing garbage"),
                    }
                }
                _ => {}
            }
            std::fs::write(&path, &bytes).unwrap();
            summary.add(read_bounded(&label, &path, read_kineto));
        }
    }
    summary.print(what, started);
}

#[test]
fn fuzz_synthetic_traces() {
    fuzz_traces("synthetic traces", &[synthetic_trace()], cases(160), seed() + 2);
    assert_peak_memory_bounded();
}

#[test]
#[cfg_attr(not(real_data), ignore = "real data not found at ../shared/data/real/kineto (it lives beside the checkout, never in it)")]
fn fuzz_real_traces() {
    let kineto = real_dir().join("kineto");
    let read = |p: PathBuf| -> Value {
        let bytes = std::fs::read(&p).unwrap();
        let mut text = Vec::new();
        if bytes.starts_with(&[0x1f, 0x8b]) {
            std::io::Read::read_to_end(&mut flate2::read::GzDecoder::new(&bytes[..]), &mut text).unwrap();
        } else {
            text = bytes;
        }
        serde_json::from_slice(&text).unwrap()
    };
    let sources = [
        read(kineto.join("hta-trace_filter-2rank/sampled_rank-0.json.gz")),
        read(kineto.join("param-dlrm-8rank/worker0_step_12.1694128201545.pt.trace.json")),
    ];
    fuzz_traces("real traces", &sources, cases(30), seed() + 3);
    assert_peak_memory_bounded();
}
