//! The reader's speed floor for `scripts/bench_reader.py`: SQLite (this crate's bundled build)
//! summing every column the reader reads, one thread. Prints the best of REPEAT runs in seconds.
//!
//!     cargo run --release --example floor -- REPEAT FILE...

#[path = "../benches/floor.rs"]
mod floor;

use std::path::PathBuf;
use std::time::Instant;

fn main() {
    let mut args = std::env::args().skip(1);
    let repeat: usize = args.next().and_then(|r| r.parse().ok()).expect("usage: floor REPEAT FILE...");
    let paths: Vec<PathBuf> = args.map(PathBuf::from).collect();
    let mut best = f64::INFINITY;
    for _ in 0..repeat.max(1) {
        let started = Instant::now();
        let total: i64 = paths.iter().map(|p| floor::floor_scan(p).unwrap_or_else(|e| panic!("{e}"))).sum();
        best = best.min(started.elapsed().as_secs_f64());
        std::hint::black_box(total);
    }
    println!("{best:.6}");
}
