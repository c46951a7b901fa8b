//! The reader on the real exports beside the checkout (`../shared/data/real/`), against FACTS.tsv.
//! Where that folder is absent (build.rs looks), those tests are ignored, saying why.

use collectivetrace_core::{read_export, read_exports, ReadError};
use std::path::{Path, PathBuf};

fn real_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/data/real")
}

fn facts(dir: &Path) -> Vec<std::collections::HashMap<String, String>> {
    let text = std::fs::read_to_string(dir.join("FACTS.tsv")).unwrap();
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().unwrap().split('\t').collect();
    lines
        .map(|l| header.iter().map(|h| h.to_string()).zip(l.split('\t').map(str::to_string)).collect())
        .collect()
}

#[test]
#[cfg_attr(not(real_data), ignore = "real data not found at ../shared/data/real (it lives beside the checkout, never in it)")]
fn every_real_export_matches_its_facts() {
    let dir = real_dir();
    for f in facts(&dir) {
        let path = dir.join(&f["file"]);
        let export = read_export(&path).unwrap_or_else(|e| panic!("{e}"));
        let kernels = export.table("kernels");
        assert_eq!(kernels.len(), f["kernels"].parse::<usize>().unwrap(), "{}", f["file"]);
        assert_eq!(export.table("nvtx").len(), f["nvtx_rows"].parse::<usize>().unwrap(), "{}", f["file"]);
        assert_eq!(export.session.hostname.as_deref(), Some(f["host"].as_str()));
        assert_eq!(export.session.utc_epoch_ns, Some(f["utcEpochNs"].parse().unwrap()));
        assert_eq!(export.session.nsys_version.as_deref(), Some(f["nsys"].as_str()));
        let nccl = kernels
            .column("short_name")
            .unwrap()
            .iter()
            .filter(|&&id| id >= 0 && export.strings[id as usize].starts_with("nccl"))
            .count();
        assert_eq!(nccl, f["nccl_kernels"].parse::<usize>().unwrap(), "{}", f["file"]);
        let start = kernels.column("start").unwrap();
        assert!(start.windows(2).all(|w| w[0] <= w[1]), "kernels sorted by start");
        assert!(start.iter().all(|&t| t >= export.session.utc_epoch_ns.unwrap()), "times are absolute UTC");
    }
}

#[test]
#[cfg_attr(not(real_data), ignore = "real data not found at ../shared/data/real (it lives beside the checkout, never in it)")]
fn many_files_in_parallel_equal_one_by_one() {
    let dir = real_dir();
    let paths: Vec<PathBuf> = facts(&dir).iter().map(|f| dir.join(&f["file"])).collect();
    let together = read_exports(&paths, Some(2)).unwrap();
    for (path, export) in paths.iter().zip(together) {
        let export = export.unwrap();
        let alone = read_export(path).unwrap();
        assert_eq!(export.strings, alone.strings);
        for (a, b) in export.tables.iter().zip(&alone.tables) {
            assert_eq!(a.columns, b.columns, "{} {}", path.display(), a.name);
        }
    }
}

#[test]
fn bad_files_are_told_apart() {
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, bytes: &[u8]| {
        let p = dir.path().join(name);
        std::fs::write(&p, bytes).unwrap();
        p
    };
    let missing = dir.path().join("absent.sqlite");
    assert!(matches!(read_export(&missing), Err(ReadError::Missing(_))));
    assert!(matches!(read_export(&write("empty.sqlite", b"")), Err(ReadError::Empty(_))));
    assert!(matches!(read_export(&write("text.sqlite", b"hello, world\n")), Err(ReadError::NotSqlite(_))));
    assert!(matches!(read_export(&write("short.sqlite", b"SQLite format 3\0\x10\0")), Err(ReadError::Truncated { .. })));

    let plain = dir.path().join("plain.sqlite");
    let conn = rusqlite::Connection::open(&plain).unwrap();
    conn.execute_batch("CREATE TABLE t (x); INSERT INTO t VALUES (1);").unwrap();
    drop(conn);
    assert!(matches!(read_export(&plain), Err(ReadError::NotAnExport(_))));
    let bytes = std::fs::read(&plain).unwrap();
    let cut = write("cut.sqlite", &bytes[..bytes.len() - 100]);
    assert!(matches!(read_export(&cut), Err(ReadError::Truncated { .. })));
    // The message names the file and says what to do.
    let message = read_export(&cut).err().unwrap().to_string();
    assert!(message.starts_with(&cut.display().to_string()) && message.contains("export the report again"));
}

#[test]
#[cfg_attr(not(real_data), ignore = "real data not found at ../shared/data/real (it lives beside the checkout, never in it)")]
fn a_bad_file_fails_only_itself_in_a_parallel_read() {
    let dir = tempfile::tempdir().unwrap();
    let empty = dir.path().join("empty.sqlite");
    std::fs::write(&empty, b"").unwrap();
    let good = real_dir().join("versions/nsys-2026.1-test-cuda.sqlite");
    let results = read_exports(&[good, empty], Some(2)).unwrap();
    assert_eq!(results[0].as_ref().unwrap().table("kernels").len(), 4);
    assert!(matches!(results[1], Err(ReadError::Empty(_))));
}

/// `SELECT COUNT(*)` of a stored table, 0 when the export lacks it.
fn stored_rows(path: &Path, table: &str) -> usize {
    let conn = rusqlite::Connection::open_with_flags(path, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY).unwrap();
    let exists: bool = conn
        .query_row("SELECT count(*) > 0 FROM sqlite_master WHERE type = 'table' AND name = ?1", [table], |r| r.get(0))
        .unwrap();
    if !exists {
        return 0;
    }
    conn.query_row(&format!("SELECT count(*) FROM \"{table}\""), [], |r| r.get::<_, i64>(0)).unwrap() as usize
}

#[test]
#[cfg_attr(not(real_data), ignore = "real data not found at ../shared/data/real (it lives beside the checkout, never in it)")]
fn sync_event_and_runtime_rows_of_every_real_export_equal_sqlite_counts() {
    let dir = real_dir();
    // Counts seen on two files with plain sqlite3: (sync, cuda_event, runtime).
    let observed = [("nsys-ai-2gpu/mfu_2gpu_before.sqlite", (366, 0, 7466)), ("versions/nsys-2023.2-sgemm.sqlite", (81, 42, 2307))];
    for f in facts(&dir) {
        let path = dir.join(&f["file"]);
        let export = read_export(&path).unwrap_or_else(|e| panic!("{e}"));
        let got = (export.table("sync").len(), export.table("cuda_event").len(), export.table("runtime").len());
        let stored = (
            stored_rows(&path, "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION"),
            stored_rows(&path, "CUPTI_ACTIVITY_KIND_CUDA_EVENT"),
            stored_rows(&path, "CUPTI_ACTIVITY_KIND_RUNTIME"),
        );
        assert_eq!(got, stored, "{}", f["file"]);
        if let Some((_, want)) = observed.iter().find(|(file, _)| *file == f["file"]) {
            assert_eq!(got, *want, "{}", f["file"]);
        }
        assert!(export.warnings.iter().all(|w| !w.contains("dropped")), "{}: {:?}", f["file"], export.warnings);
        let sync = export.table("sync");
        let (start, end) = (sync.column("start").unwrap(), sync.column("end").unwrap());
        assert!(start.windows(2).all(|w| w[0] <= w[1]) && start.iter().zip(end).all(|(s, e)| s <= e));
        assert!(sync.column("event").unwrap().iter().chain(sync.column("stream").unwrap()).all(|&id| id != 0xFFFF_FFFF));
    }
}

#[test]
#[cfg_attr(not(real_data), ignore = "real data not found at ../shared/data/real (it lives beside the checkout, never in it)")]
fn a_wait_links_to_its_event_record() {
    let export = read_export(&real_dir().join("versions/nsys-2026.1-test-cuda.sqlite")).unwrap();
    let sync = export.table("sync");
    let col = |name: &str| sync.column(name).unwrap().to_vec();
    assert_eq!((col("sync_type"), col("stream"), col("event"), col("event_sync_id")), (vec![1], vec![-1], vec![2], vec![2]));
    assert_eq!((col("event_record_correlation"), col("event_stream")), (vec![147], vec![7]));
    assert_eq!(export.table("cuda_event").column("time").unwrap(), [-1, -1], "timestamp 0: not collected");
}
