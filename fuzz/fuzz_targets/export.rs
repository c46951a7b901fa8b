//! Any bytes as an Nsight Systems SQLite export: the reader returns an export or a `ReadError`,
//! never panics. The reader takes a path (SQLite opens files), so each input is written to one
//! file per fuzzing process first.

#![no_main]

use libfuzzer_sys::fuzz_target;
use std::path::PathBuf;
use std::sync::OnceLock;

fn scratch() -> &'static PathBuf {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| std::env::temp_dir().join(format!("collectivetrace-fuzz-{}.sqlite", std::process::id())))
}

fuzz_target!(|data: &[u8]| {
    std::fs::write(scratch(), data).unwrap();
    let _ = collectivetrace_core::read_export(scratch());
});
