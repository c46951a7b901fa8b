//! A trace's JSON bytes, bounded. Plain or gzip (told by content, not by name), counted as they
//! are parsed, so that an oversized trace or a decompression bomb is refused early, with an error
//! naming the limit, instead of filling memory or taking minutes.

use crate::error::ReadError;
use std::cell::Cell;
use std::fmt;
use std::fs::File;
use std::io::{self, BufRead, BufReader, Read};
use std::path::Path;
use std::rc::Rc;

/// Most JSON bytes read from one trace by default: 8 GiB (a trace that large holds some 20
/// million events; the columns of them need about a third of that in memory).
pub const DEFAULT_MAX_TRACE_BYTES: u64 = 8 << 30;
/// Most JSON bytes per gzip byte by default. Real traces expand 14 to 18-fold (the real ones
/// beside the checkout); deflate cannot exceed about 1030-fold, which only repetition reaches.
pub const DEFAULT_MAX_GZIP_RATIO: u64 = 200;
/// The ratio is checked only past this many bytes, so that small, repetitive traces pass.
const RATIO_FLOOR: u64 = 16 << 20;

/// Limits on reading one trace (`--max-trace-bytes`, `--max-gzip-ratio` in the CLI).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KinetoLimits {
    /// Most JSON bytes read from one trace, after decompression.
    pub max_trace_bytes: u64,
    /// Most JSON bytes per compressed byte of a gzip trace (checked past 16 MiB).
    pub max_gzip_ratio: u64,
}

impl Default for KinetoLimits {
    fn default() -> Self {
        KinetoLimits { max_trace_bytes: DEFAULT_MAX_TRACE_BYTES, max_gzip_ratio: DEFAULT_MAX_GZIP_RATIO }
    }
}

/// A limit reached, carried inside an `io::Error` through serde_json back to `read_kineto`.
#[derive(Debug)]
pub(super) enum Exceeded {
    Bytes(u64),
    Ratio(u64),
}

impl fmt::Display for Exceeded {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        match self {
            Exceeded::Bytes(limit) => write!(f, "more than {limit} bytes"),
            Exceeded::Ratio(ratio) => write!(f, "expands more than {ratio}-fold"),
        }
    }
}

impl std::error::Error for Exceeded {}

impl Exceeded {
    /// The `ReadError` of an I/O error that is a limit reached, if it is one.
    pub(super) fn read_error(path: &Path, error: &io::Error) -> Option<ReadError> {
        let path = path.to_path_buf();
        match error.get_ref()?.downcast_ref::<Exceeded>()? {
            Exceeded::Bytes(limit) => Some(ReadError::TraceTooLarge { path, limit: *limit }),
            Exceeded::Ratio(ratio) => Some(ReadError::GzipBomb { path, ratio: *ratio }),
        }
    }
}

/// Counts the bytes read through it: the compressed side of a gzip trace.
pub(super) struct Counted<R> {
    inner: R,
    count: Rc<Cell<u64>>,
}

impl<R: Read> Read for Counted<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.count.set(self.count.get() + n as u64);
        Ok(n)
    }
}

/// The JSON byte stream, failing once it passes a limit.
pub(super) struct Limited<R> {
    inner: R,
    read: u64,
    /// Compressed bytes consumed so far (gzip only).
    compressed: Option<Rc<Cell<u64>>>,
    limits: KinetoLimits,
}

impl<R: Read> Read for Limited<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.read += n as u64;
        if self.read > self.limits.max_trace_bytes {
            return Err(io::Error::other(Exceeded::Bytes(self.limits.max_trace_bytes)));
        }
        if let Some(compressed) = &self.compressed {
            if self.read > RATIO_FLOOR && self.read > compressed.get().saturating_mul(self.limits.max_gzip_ratio) {
                return Err(io::Error::other(Exceeded::Ratio(self.limits.max_gzip_ratio)));
            }
        }
        Ok(n)
    }
}

/// Buffered for serde_json, which reads byte by byte: fast only on a concrete `BufReader`.
pub(super) enum Input {
    Plain(BufReader<Limited<BufReader<File>>>),
    Gzip(BufReader<Limited<flate2::read::MultiGzDecoder<Counted<BufReader<File>>>>>),
}

/// Opens a trace: missing and empty files are told apart here, gzip by its magic bytes.
pub(super) fn open(path: &Path, limits: KinetoLimits) -> Result<Input, ReadError> {
    let file = match File::open(path) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Err(ReadError::Missing(path.into())),
        other => other.map_err(|source| ReadError::Io { path: path.into(), source })?,
    };
    let mut raw = BufReader::with_capacity(1 << 16, file);
    let head = raw.fill_buf().map_err(|source| ReadError::Io { path: path.into(), source })?;
    if head.is_empty() {
        return Err(ReadError::EmptyTrace(path.into()));
    }
    Ok(if head.starts_with(&[0x1f, 0x8b]) {
        let count = Rc::new(Cell::new(0));
        let decoder = flate2::read::MultiGzDecoder::new(Counted { inner: raw, count: count.clone() });
        Input::Gzip(BufReader::with_capacity(1 << 16, Limited { inner: decoder, read: 0, compressed: Some(count), limits }))
    } else {
        Input::Plain(BufReader::with_capacity(1 << 16, Limited { inner: raw, read: 0, compressed: None, limits }))
    })
}
