//! Reading a file that may change under the reader: its identity (device, inode, size, mtime) is
//! taken before and after the read, and a file written, replaced or truncated meanwhile is
//! refused with `ReadError::Changed` instead of being read half old, half new. Non-regular files
//! (a FIFO would block the reader forever) are refused before they are opened.

use crate::error::ReadError;
use std::path::Path;
use std::time::SystemTime;

#[derive(PartialEq, Eq, Debug)]
struct Identity {
    device: u64,
    inode: u64,
    len: u64,
    modified: Option<SystemTime>,
}

fn identity(path: &Path) -> Result<Identity, ReadError> {
    let meta = match std::fs::metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(ReadError::Missing(path.into())),
        other => other.map_err(|source| ReadError::Io { path: path.into(), source })?,
    };
    if !meta.is_file() {
        return Err(ReadError::NotRegular(path.into()));
    }
    #[cfg(unix)]
    let (device, inode) = {
        use std::os::unix::fs::MetadataExt;
        (meta.dev(), meta.ino())
    };
    #[cfg(not(unix))]
    let (device, inode) = (0, 0);
    Ok(Identity { device, inode, len: meta.len(), modified: meta.modified().ok() })
}

/// `read(path)`, refused when the file is not a regular one or was not the same file, unchanged,
/// from before the read to after it (whatever the read itself concluded).
pub fn read_unchanged<T>(path: &Path, read: impl FnOnce(&Path) -> Result<T, ReadError>) -> Result<T, ReadError> {
    let before = identity(path)?;
    let result = read(path);
    match identity(path) {
        Ok(after) if after == before => result,
        _ => Err(ReadError::Changed(path.into())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_written_during_the_read_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.sqlite");
        std::fs::write(&path, b"old contents").unwrap();
        let changed = read_unchanged(&path, |p| {
            std::fs::write(p, b"new").unwrap();
            Ok(())
        });
        assert!(matches!(changed, Err(ReadError::Changed(_))), "{changed:?}");
        // The same read of a file left alone gives the read's own result.
        assert!(matches!(read_unchanged(&path, |_| Ok(7)), Ok(7)));
        let failed: Result<(), _> = read_unchanged(&path, |p| Err(ReadError::Empty(p.into())));
        assert!(matches!(failed, Err(ReadError::Empty(_))));
    }

    #[test]
    fn non_regular_files_are_refused_before_the_read() {
        let dir = tempfile::tempdir().unwrap();
        let refused = read_unchanged(dir.path(), |_| -> Result<(), ReadError> { panic!("opened a folder") });
        assert!(matches!(refused, Err(ReadError::NotRegular(_))));
    }
}
