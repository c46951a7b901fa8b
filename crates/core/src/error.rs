//! Why an export could not be read. Every variant names the file and says what to do,
//! because the message is shown to the user as one line.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error("{0}: no such file")]
    Missing(PathBuf),
    #[error("{0}: not a regular file (a FIFO, device, socket or folder); pass the export or trace file itself")]
    NotRegular(PathBuf),
    #[error("{0}: the file changed while it was read (another program wrote, replaced or truncated it); read it again once it is complete")]
    Changed(PathBuf),
    #[error("{0}: empty file, not an Nsight Systems export")]
    Empty(PathBuf),
    #[error("{0}: not an SQLite file; pass an Nsight Systems export (nsys export --type sqlite) or a .nsys-rep report")]
    NotSqlite(PathBuf),
    #[error("{path}: truncated SQLite file ({actual} of {expected} bytes); export the report again")]
    Truncated { path: PathBuf, actual: u64, expected: u64 },
    #[error("{0}: an SQLite file but not an Nsight Systems export (no nsys tables)")]
    NotAnExport(PathBuf),
    #[error("{path}: unreadable SQLite export ({source}); export the report again")]
    Sqlite { path: PathBuf, source: rusqlite::Error },
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error("{0}: empty file, not a PyTorch profiler (Kineto) trace")]
    EmptyTrace(PathBuf),
    #[error("{0}: truncated gzip (the file ends early); copy or write the trace again")]
    TruncatedGzip(PathBuf),
    #[error("{path}: damaged gzip ({message}); copy or write the trace again")]
    BadGzip { path: PathBuf, message: String },
    #[error("{path}: invalid JSON at line {line}, column {column} ({message}); the trace is damaged or was not fully written: profile again")]
    InvalidJson { path: PathBuf, line: usize, column: usize, message: String },
    #[error("{path}: not a PyTorch profiler (Kineto) trace ({reason}); pass the JSON that torch.profiler writes (export_chrome_trace, tensorboard_trace_handler)")]
    NotKineto { path: PathBuf, reason: String },
    #[error("{0}: no GPU events: profile with ProfilerActivity.CUDA (torch.profiler.profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]))")]
    NoGpuEvents(PathBuf),
    #[error("{path}: none of its {rows} kernel rows has usable times (NULL, non-integer, negative, reversed or out of range); export the report again")]
    NoUsableKernelRows { path: PathBuf, rows: usize },
    #[error("{path}: none of its {events} kernel events has usable times (missing, non-numeric, negative, reversed or out of range); profile again")]
    NoUsableKernelEvents { path: PathBuf, events: usize },
    #[error("{path}: more than {limit} bytes of JSON (the --max-trace-bytes limit); if the trace is genuine, raise --max-trace-bytes")]
    TraceTooLarge { path: PathBuf, limit: u64 },
    #[error("{path}: gzip expands more than {ratio}-fold (a decompression bomb?), refused; if the trace is genuine, raise --max-gzip-ratio or gunzip it first")]
    GzipBomb { path: PathBuf, ratio: u64 },
    #[error("{0}: not enough memory to read it; read fewer files at once or free memory")]
    OutOfMemory(PathBuf),
    #[error("could not start reader threads: {0}")]
    Threads(String),
}

impl ReadError {
    /// For `map_err` on an allocation that may fail (a column sized from the file).
    pub fn memory(path: &std::path::Path) -> impl FnOnce(std::collections::TryReserveError) -> ReadError + '_ {
        move |_| ReadError::OutOfMemory(path.to_path_buf())
    }

    pub fn sqlite(path: &std::path::Path) -> impl FnOnce(rusqlite::Error) -> ReadError + '_ {
        move |source| ReadError::Sqlite { path: path.to_path_buf(), source }
    }
}
