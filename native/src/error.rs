//! Why an export could not be read. Every variant names the file and says what to do,
//! because the message is shown to the user as one line.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error("{0}: no such file")]
    Missing(PathBuf),
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
    #[error("could not start reader threads: {0}")]
    Threads(String),
}

impl ReadError {
    pub(crate) fn sqlite(path: &std::path::Path) -> impl FnOnce(rusqlite::Error) -> ReadError + '_ {
        move |source| ReadError::Sqlite { path: path.to_path_buf(), source }
    }
}
