//! The speed floor for the reader: SQLite itself scanning the same columns of the same tables,
//! summing them in SQL so that no rows leave SQLite. A reader cannot beat one thread of this by
//! much; the benchmarks report the reader's time as a ratio of it. Used by `cargo bench` and by
//! the `floor` example that `scripts/bench_reader.py` runs.

use collectivetrace_core::error::ReadError;
use collectivetrace_core::export::open;
use collectivetrace_core::schema::Schema;
use collectivetrace_core::tables::{self, Kind, Plan};
use std::path::Path;

/// Sums every column the reader would read (text as its length); returns the total so the work
/// is observable.
pub fn floor_scan(path: &Path) -> Result<i64, ReadError> {
    let conn = open(path)?;
    let schema = Schema::probe(&conn).map_err(ReadError::sqlite(path))?;
    let mut queries = Vec::new();
    if schema.has_table("StringIds") {
        queries.push("SELECT TOTAL(id) + TOTAL(length(value)) FROM StringIds".to_string());
    }
    for spec in tables::ALL {
        let plan = Plan::new(spec, &schema);
        let Some(table) = plan.table else { continue };
        let sums = plan.select_list(spec, |c, kind| {
            if kind == Kind::Text { format!("TOTAL(length({c}))") } else { format!("TOTAL({c})") }
        });
        if !sums.is_empty() {
            queries.push(format!("SELECT {} FROM \"{table}\"", sums.join(" + ")));
        }
    }
    let mut total = 0.0;
    for sql in queries {
        total += conn.query_row(&sql, [], |r| r.get::<_, f64>(0)).map_err(ReadError::sqlite(path))?;
    }
    Ok(total as i64)
}
