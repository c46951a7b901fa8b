//! Any bytes as a PyTorch profiler (Kineto) trace, plain or gzip: the reader returns an export or
//! a `ReadError`, never panics. Limits as the defaults, but 256 MiB of JSON at most, so that a
//! decompression bomb the fuzzer builds costs a run seconds, not minutes.

#![no_main]

use collectivetrace_core::kineto::{read_kineto_with, KinetoLimits};
use libfuzzer_sys::fuzz_target;
use std::path::PathBuf;
use std::sync::OnceLock;

fn scratch() -> &'static PathBuf {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| std::env::temp_dir().join(format!("collectivetrace-fuzz-{}.json", std::process::id())))
}

fuzz_target!(|data: &[u8]| {
    std::fs::write(scratch(), data).unwrap();
    let limits = KinetoLimits { max_trace_bytes: 256 << 20, ..KinetoLimits::default() };
    let _ = read_kineto_with(scratch(), limits);
});
