//! The hot loop of the reader: stepping a SELECT through SQLite's C API.
//!
//! rusqlite's checked per-value accessors (bounds check, `ValueRef` construction) cost about a
//! fifth of the read time on tables of a million rows (perf, on the benchmark set). Here each
//! value is one type check and one fetch; everything unsafe stays in this file.

use rusqlite::{ffi, Connection};
use std::ffi::{c_int, CStr, CString};

/// One stored value, borrowed from the current row.
#[derive(Clone, Copy)]
pub enum Value<'a> {
    Int(i64),
    Real(f64),
    Text(&'a [u8]),
    Null,
    Blob(&'a [u8]),
}

struct Statement(*mut ffi::sqlite3_stmt);

impl Drop for Statement {
    fn drop(&mut self) {
        unsafe { ffi::sqlite3_finalize(self.0) };
    }
}

fn error(db: *mut ffi::sqlite3, code: c_int) -> rusqlite::Error {
    let message = unsafe { CStr::from_ptr(ffi::sqlite3_errmsg(db)) }.to_string_lossy().into_owned();
    rusqlite::Error::SqliteFailure(ffi::Error::new(code), Some(message))
}

/// Runs `sql` and calls `on_row` once per result row with a reader of its columns; the first
/// error, SQLite's or `on_row`'s, stops the scan.
pub fn for_each_row<E: From<rusqlite::Error>>(
    conn: &Connection,
    sql: &str,
    mut on_row: impl FnMut(&Row) -> Result<(), E>,
) -> Result<(), E> {
    let sql = CString::new(sql).map_err(|e| rusqlite::Error::ToSqlConversionFailure(Box::new(e)))?;
    // SAFETY: the connection outlives this call and the statement, which is finalized on drop;
    // column pointers are only read before the next step.
    unsafe {
        let db = conn.handle();
        let mut raw = std::ptr::null_mut();
        let code = ffi::sqlite3_prepare_v2(db, sql.as_ptr(), -1, &mut raw, std::ptr::null_mut());
        if code != ffi::SQLITE_OK {
            return Err(error(db, code).into());
        }
        let stmt = Statement(raw);
        loop {
            match ffi::sqlite3_step(stmt.0) {
                ffi::SQLITE_ROW => on_row(&Row(stmt.0))?,
                ffi::SQLITE_DONE => return Ok(()),
                code => return Err(error(db, code).into()),
            }
        }
    }
}

pub struct Row(*mut ffi::sqlite3_stmt);

impl Row {
    pub fn get(&self, column: usize) -> Value<'_> {
        let (stmt, i) = (self.0, column as c_int);
        // SAFETY: `column` is below the statement's column count (callers select that many);
        // text is valid until the next step, which the borrow of `self` outlives.
        unsafe {
            // One column lookup, then the cheap value accessors (the column ones repeat checks).
            let value = ffi::sqlite3_column_value(stmt, i);
            match ffi::sqlite3_value_type(value) {
                ffi::SQLITE_INTEGER => Value::Int(ffi::sqlite3_value_int64(value)),
                ffi::SQLITE_NULL => Value::Null,
                ffi::SQLITE_FLOAT => Value::Real(ffi::sqlite3_value_double(value)),
                ffi::SQLITE_TEXT => {
                    let text = ffi::sqlite3_value_text(value);
                    let len = ffi::sqlite3_value_bytes(value) as usize;
                    Value::Text(if text.is_null() { &[] } else { std::slice::from_raw_parts(text, len) })
                }
                _ => {
                    let blob = ffi::sqlite3_value_blob(value) as *const u8;
                    let len = ffi::sqlite3_value_bytes(value) as usize;
                    Value::Blob(if blob.is_null() { &[] } else { std::slice::from_raw_parts(blob, len) })
                }
            }
        }
    }
}
