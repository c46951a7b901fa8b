//! `cargo bench -p collectivetrace-bench --bench reader`: the reader against SQLite's own scan of the same columns (the floor), on the
//! generated 8-rank set of `scripts/bench_reader.py` (made on first use; or the folder in
//! COLLECTIVETRACE_BENCH_SET).

mod floor;

use collectivetrace_core::{read_export, read_exports};
use floor::floor_scan;
use criterion::{criterion_group, criterion_main, Criterion};
use std::path::PathBuf;
use std::process::Command;

fn bench_set() -> Vec<PathBuf> {
    let dir = match std::env::var_os("COLLECTIVETRACE_BENCH_SET") {
        Some(dir) => PathBuf::from(dir),
        None => {
            let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../../scripts/bench_reader.py");
            let out = Command::new("python3").args([script, "--prepare"]).output().expect("python3 runs");
            assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
            PathBuf::from(String::from_utf8(out.stdout).unwrap().trim())
        }
    };
    let mut paths: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "sqlite"))
        .collect();
    paths.sort();
    paths
}

fn reader(c: &mut Criterion) {
    let paths = bench_set();
    let mut group = c.benchmark_group("8-rank set");
    group.sample_size(10);
    group.bench_function("floor: SQLite sums the columns, 1 thread", |b| {
        b.iter(|| paths.iter().map(|p| floor_scan(p).unwrap()).sum::<i64>())
    });
    group.bench_function("reader, 1 thread", |b| {
        b.iter(|| paths.iter().map(|p| read_export(p).unwrap().tables.len()).sum::<usize>())
    });
    group.bench_function("reader, 2 threads", |b| b.iter(|| read_exports(&paths, Some(2)).unwrap().len()));
    group.finish();
}

criterion_group!(benches, reader);
criterion_main!(benches);
