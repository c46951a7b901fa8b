//! What tables and columns one export has. The schema is not stable across nsys versions and
//! tables are created lazily, so every read is planned from this probe, never assumed.

use rusqlite::Connection;
use std::collections::HashMap;

pub struct Schema {
    tables: HashMap<String, Vec<String>>,
}

impl Schema {
    /// Stored tables only: a view runs arbitrary SQL (an endless recursive one never returns), and
    /// no export has one.
    pub fn probe(conn: &Connection) -> rusqlite::Result<Schema> {
        let mut names = conn.prepare("SELECT name FROM sqlite_master WHERE type = 'table'")?;
        let names: Vec<String> = names.query_map([], |row| row.get(0))?.collect::<Result<_, _>>()?;
        let mut tables = HashMap::with_capacity(names.len());
        for name in names {
            let mut info = conn.prepare(&format!("PRAGMA table_info(\"{}\")", name.replace('"', "\"\"")))?;
            let columns = info.query_map([], |row| row.get::<_, String>(1))?.collect::<Result<_, _>>()?;
            tables.insert(name, columns);
        }
        Ok(Schema { tables })
    }

    pub fn has_table(&self, table: &str) -> bool {
        self.tables.contains_key(table)
    }

    pub fn has_column(&self, table: &str, column: &str) -> bool {
        self.tables.get(table).is_some_and(|cols| cols.iter().any(|c| c == column))
    }

    /// The first of `tables` that exists.
    pub fn first_table<'a>(&self, tables: &[&'a str]) -> Option<&'a str> {
        tables.iter().copied().find(|t| self.has_table(t))
    }

    /// The first of `columns` that `table` has.
    pub fn first_column<'a>(&self, table: &str, columns: &[&'a str]) -> Option<&'a str> {
        columns.iter().copied().find(|c| self.has_column(table, c))
    }

    pub fn is_empty(&self) -> bool {
        self.tables.is_empty()
    }
}
