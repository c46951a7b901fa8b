//! NVTX extended payloads: the message size (and reduction operation) NCCL 2.19+ attaches to its
//! API ranges, read from `NVTX_EVENTS.binaryData` by the layout the export's own schema tables
//! state. Exports hold the blobs only when made with `nsys export --include-blobs=true`.
//!
//! A blob (docs/json-fields.md, "NVTX payloads", says what is documented and what is not): a
//! 32-byte header of little-endian u64s, domain id at 0, schema id at 8, payload size at 16 (the
//! field at 24 is not read: sources disagree on it), then the payload, whose entries lie at the
//! offsets `NVTX_PAYLOAD_SCHEMA_ENTRIES` gives (NULL = 0, for the first entry). Nothing here is
//! guessed from NCCL's struct: a schema without a usable "Message size" entry yields no size.
//! A blob shorter than its header says, whose entry lies past its payload, with an absurd size, or
//! naming a schema the export does not declare is dropped and counted (`undecodable`).

use crate::schema::Schema;
use rusqlite::types::ValueRef;
use rusqlite::Connection;
use std::cell::Cell;
use std::collections::{HashMap, HashSet};

/// Bytes before the payload in a blob.
pub const HEADER: usize = 32;
/// A payload larger than this is no NVTX payload (NCCL's are 8 to 40 bytes).
const MAX_PAYLOAD: u64 = 1 << 20;
/// A message size above this (1 PiB) is absurd.
pub const MAX_MESSAGE: u64 = 1 << 50;
/// NVTX_PAYLOAD_ENTRY_TYPE_SCHEMA_ID_STATIC_START: entry types from here are schema (enum) ids.
const SCHEMA_ID_START: u64 = 1 << 24;
const LOW32: u64 = 0xFFFF_FFFF;

/// Where one entry's value lies in a payload, and how it is stored.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Field {
    offset: u64,
    width: u64,
    signed: bool,
}

#[derive(Clone, Copy, Default, Debug)]
struct Layout {
    size: Option<Field>,
    op: Option<Field>,
}

/// The payload layouts of one export, by (domain id, schema id), and how many blobs did not decode.
#[derive(Default)]
pub struct Payloads {
    layouts: HashMap<(u64, u64), Layout>,
    /// Schemas declared in one domain only, by schema id (a blob's domain id may not be the
    /// schema table's: nsys may number domains per process).
    by_schema: HashMap<u64, Option<Layout>>,
    pub undecodable: Cell<usize>,
}

/// What one blob gave: its message size and reduction operation (-1 where its schema has none).
#[derive(Debug, PartialEq, Eq, Clone, Copy)]
pub enum Decoded {
    Values { bytes: i64, op: i64 },
    Bad,
}

/// Size and signedness of a predefined NVTX_PAYLOAD_ENTRY_TYPE_* integer (nvToolsExtPayload.h),
/// as on the 64-bit Linux hosts nsys profiles (LP64: long and size_t are 8 bytes).
fn integer_type(t: u64) -> Option<(u64, bool)> {
    Some(match t {
        1 | 11 => (1, true),
        2 | 12 => (1, false),
        3 | 13 => (2, true),
        4 | 14 => (2, false),
        5 | 15 => (4, true),
        6 | 16 => (4, false),
        7 | 9 | 17 => (8, true),
        8 | 10 | 18 | 22 => (8, false),
        _ => return None,
    })
}

fn int(v: ValueRef<'_>) -> Option<i64> {
    match v {
        ValueRef::Integer(i) => Some(i),
        _ => None,
    }
}

fn text(v: ValueRef<'_>) -> String {
    match v {
        ValueRef::Text(t) => String::from_utf8_lossy(t).trim().to_ascii_lowercase(),
        _ => String::new(),
    }
}

impl Payloads {
    /// The layouts the export declares; none (every blob then undecodable) without the tables.
    pub fn read(conn: &Connection, schema: &Schema) -> rusqlite::Result<Payloads> {
        const ENTRIES: &str = "NVTX_PAYLOAD_SCHEMA_ENTRIES";
        let columns = ["domainId", "schemaId", "idx", "flags", "type", "name", "offset"];
        let mut payloads = Payloads::default();
        if !columns.iter().all(|c| schema.has_column(ENTRIES, c)) {
            return Ok(payloads);
        }
        // Enumerations (the reduction operation): their value size, by (domain, schema).
        let mut enums: HashMap<(i64, i64), u64> = HashMap::new();
        if ["domainId", "schemaId", "size"].iter().all(|c| schema.has_column("NVTX_PAYLOAD_ENUMS", c)) {
            let mut stmt = conn.prepare("SELECT domainId, schemaId, size FROM NVTX_PAYLOAD_ENUMS")?;
            let mut rows = stmt.query([])?;
            while let Some(r) = rows.next()? {
                if let (Some(d), Some(s), Some(n)) = (int(r.get_ref(0)?), int(r.get_ref(1)?), int(r.get_ref(2)?)) {
                    if matches!(n, 1 | 2 | 4 | 8) {
                        enums.entry((d, s)).or_insert(n as u64);
                    }
                }
            }
        }
        let mut seen = HashSet::new();
        let mut stmt = conn.prepare(&format!("SELECT {} FROM {ENTRIES}", columns.map(|c| format!("\"{c}\"")).join(", ")))?;
        let mut rows = stmt.query([])?;
        while let Some(r) = rows.next()? {
            let (Some(domain), Some(id), Some(idx)) = (int(r.get_ref(0)?), int(r.get_ref(1)?), int(r.get_ref(2)?)) else {
                continue;
            };
            // A process that registers the same schema repeats its rows: the first wins.
            if domain < 0 || id < 0 || !seen.insert((domain, id, idx)) {
                continue;
            }
            let layout = payloads.layouts.entry((domain as u64, id as u64)).or_default();
            let flags = int(r.get_ref(3)?).unwrap_or(0);
            let kind = int(r.get_ref(4)?).map(|t| t as u64);
            let name = text(r.get_ref(5)?);
            // NULL stands for 0 (as for flags); only the first entry can start there.
            let offset = match int(r.get_ref(6)?) {
                Some(o) if o >= 0 => o as u64,
                None if idx == 0 => 0,
                _ => continue,
            };
            // Pointers, arrays, deep copies: the value is not inline at the offset.
            if flags != 0 {
                continue;
            }
            let field = |(width, signed)| Field { offset, width, signed };
            if name.starts_with("message size") {
                layout.size = kind.and_then(integer_type).map(field);
            } else if name == "reduction operation" {
                layout.op = kind.and_then(|t| {
                    integer_type(t).or_else(|| {
                        (t >= SCHEMA_ID_START).then(|| enums.get(&(domain, t as i64)).map(|&n| (n, false))).flatten()
                    })
                }).map(field);
            }
        }
        let mut domains_of: HashMap<u64, usize> = HashMap::new();
        for &(_, id) in payloads.layouts.keys() {
            *domains_of.entry(id).or_default() += 1;
        }
        for (&(_, id), layout) in &payloads.layouts {
            payloads.by_schema.insert(id, (domains_of[&id] == 1).then_some(*layout));
        }
        Ok(payloads)
    }

    fn layout(&self, domain: u64, id: u64) -> Option<Layout> {
        // The header's ids as u64, then their low halves (a reader of 2026.x exports saw the high
        // halves as reserved words), then the schema id alone where one domain declares it.
        self.layouts
            .get(&(domain, id))
            .or_else(|| self.layouts.get(&(domain & LOW32, id & LOW32)))
            .copied()
            .or_else(|| self.by_schema.get(&id).or_else(|| self.by_schema.get(&(id & LOW32))).copied().flatten())
    }

    /// The values of one blob by its schema's layout, every read bounds-checked.
    pub fn decode(&self, blob: &[u8]) -> Decoded {
        let u64_at = |at: usize| u64::from_le_bytes(blob[at..at + 8].try_into().unwrap());
        if blob.len() < HEADER {
            return Decoded::Bad;
        }
        let (domain, id, size) = (u64_at(0), u64_at(8), u64_at(16));
        let Some(layout) = self.layout(domain, id) else { return Decoded::Bad };
        if size > MAX_PAYLOAD || HEADER as u64 + size > blob.len() as u64 {
            return Decoded::Bad;
        }
        let payload = &blob[HEADER..HEADER + size as usize];
        let read = |f: Field| -> Option<(u64, bool)> {
            let end = f.offset.checked_add(f.width)?;
            if end > payload.len() as u64 {
                return None;
            }
            let bytes = &payload[f.offset as usize..end as usize];
            let mut raw = [0u8; 8];
            raw[..bytes.len()].copy_from_slice(bytes);
            let value = u64::from_le_bytes(raw);
            // A signed value's sign bit set: negative.
            let negative = f.signed && bytes[bytes.len() - 1] & 0x80 != 0;
            Some((value, negative))
        };
        let bytes = match layout.size.map(read) {
            None => -1,
            Some(None) => return Decoded::Bad,
            Some(Some((v, negative))) if negative || v > MAX_MESSAGE => return Decoded::Bad,
            Some(Some((v, _))) => v as i64,
        };
        let op = match layout.op.map(read) {
            Some(Some((v, false))) if v <= i64::MAX as u64 => v as i64,
            Some(None) => return Decoded::Bad,
            _ => -1,
        };
        Decoded::Values { bytes, op }
    }

    /// The message size of a blob, counting one that does not decode.
    pub fn message_bytes(&self, blob: &[u8]) -> i64 {
        match self.decode(blob) {
            Decoded::Values { bytes, .. } => bytes,
            Decoded::Bad => {
                self.undecodable.set(self.undecodable.get() + 1);
                -1
            }
        }
    }

    /// The reduction operation's value of a blob (ncclRedOp_t: 0 sum, 1 prod, 2 max, 3 min, 4 avg).
    pub fn reduction_op(&self, blob: &[u8]) -> i64 {
        match self.decode(blob) {
            Decoded::Values { op, .. } => op,
            Decoded::Bad => -1,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// NCCL's AllReduce schema as nsys 2026.2 exports it (nsys-ai-2gpu): communicator (u64, offset
    /// NULL), message size (type 22, 8), reduction operation (enum 16777232, 16).
    fn nccl() -> Payloads {
        let conn = Connection::open_in_memory().unwrap();
        conn.execute_batch(
            "CREATE TABLE NVTX_PAYLOAD_SCHEMA_ENTRIES (domainId INTEGER, schemaId INTEGER, idx INTEGER, flags INTEGER,
                 type INTEGER, name TEXT, description TEXT, arrayOrUnionDetail INTEGER, offset INTEGER);
             CREATE TABLE NVTX_PAYLOAD_ENUMS (domainId INTEGER, schemaId INTEGER, name TEXT, numEntries INTEGER, size INTEGER);
             INSERT INTO NVTX_PAYLOAD_ENUMS VALUES (1, 16777232, NULL, 5, 4);
             INSERT INTO NVTX_PAYLOAD_SCHEMA_ENTRIES VALUES
                 (1, 16777223, 0, NULL, 18, 'NCCL communicator ID', NULL, NULL, NULL),
                 (1, 16777223, 1, NULL, 22, 'Message size [bytes]', NULL, NULL, 8),
                 (1, 16777223, 2, NULL, 16777232, 'Reduction operation', NULL, NULL, 16),
                 (1, 16777223, 0, NULL, 18, 'NCCL communicator ID', NULL, NULL, NULL),
                 (1, 16777218, 0, NULL, 18, 'NCCL communicator ID', NULL, NULL, NULL),
                 (1, 16777218, 1, NULL, 5, 'No. of ranks', NULL, NULL, 8);",
        )
        .unwrap();
        Payloads::read(&conn, &Schema::probe(&conn).unwrap()).unwrap()
    }

    fn blob(domain: u64, schema: u64, payload: &[u8]) -> Vec<u8> {
        let mut b = Vec::new();
        for v in [domain, schema, payload.len() as u64, (HEADER + payload.len()) as u64] {
            b.extend(v.to_le_bytes());
        }
        b.extend(payload);
        b
    }

    fn all_reduce(bytes: u64, op: u32) -> Vec<u8> {
        let mut p = 0xABCD_u64.to_le_bytes().to_vec();
        p.extend(bytes.to_le_bytes());
        p.extend(op.to_le_bytes());
        p.extend([0; 4]);
        blob(1, 16777223, &p)
    }

    #[test]
    fn the_size_and_operation_are_where_the_schema_says() {
        let p = nccl();
        assert_eq!(p.decode(&all_reduce(64 << 20, 4)), Decoded::Values { bytes: 64 << 20, op: 4 });
        // A schema without a size: nothing, and nothing wrong.
        assert_eq!(p.decode(&blob(1, 16777218, &[0; 16])), Decoded::Values { bytes: -1, op: -1 });
        assert_eq!(p.undecodable.get(), 0);
    }

    #[test]
    fn short_inconsistent_or_absurd_blobs_are_dropped_and_counted() {
        let p = nccl();
        let good = all_reduce(4096, 0);
        let mut cases = vec![
            good[..HEADER - 1].to_vec(),                 // shorter than the header
            good[..good.len() - 1].to_vec(),             // shorter than its header says
            blob(1, 16777223, &good[HEADER..HEADER + 12]), // the size's entry lies past the payload
            all_reduce(MAX_MESSAGE + 1, 0),              // an absurd size
            blob(1, 999, &good[HEADER..]),               // a schema the export does not declare
        ];
        let mut huge = good.clone();
        huge[16..24].copy_from_slice(&u64::MAX.to_le_bytes()); // a payload size past any blob
        cases.push(huge);
        for case in &cases {
            assert_eq!(p.message_bytes(case), -1);
        }
        assert_eq!(p.undecodable.get(), cases.len());
        assert_eq!(p.message_bytes(&good), 4096);
    }

    #[test]
    fn no_schema_tables_no_layouts() {
        let conn = Connection::open_in_memory().unwrap();
        let p = Payloads::read(&conn, &Schema::probe(&conn).unwrap()).unwrap();
        assert_eq!(p.decode(&all_reduce(8, 0)), Decoded::Bad);
    }
}
