//! One string table per export. Names in the event tables are ids into `StringIds`, which may be
//! sparse (derived exports drop unused strings), and NVTX also stores names inline in `text`.
//! Both end up as dense indices into `values`, so Python gets one list and integer columns.

use std::collections::HashMap;

#[derive(Default)]
pub struct StringTable {
    /// `StringIds.id` in ascending order; `values[i]` is the string of `ids[i]`.
    ids: Vec<i64>,
    /// True when `ids` is `first, first+1, ...`: the common case, looked up without a search.
    contiguous: bool,
    pub values: Vec<String>,
    /// Built on the first `intern`, so exports without inline text never pay for it.
    index: Option<HashMap<String, i64>>,
}

impl StringTable {
    pub fn from_rows(mut rows: Vec<(i64, String)>) -> StringTable {
        rows.sort_by_key(|(id, _)| *id);
        rows.dedup_by_key(|(id, _)| *id);
        let contiguous = rows.windows(2).all(|w| w[1].0 == w[0].0 + 1);
        let (ids, values) = rows.into_iter().unzip();
        StringTable { ids, contiguous, values, index: None }
    }

    /// Dense index of a `StringIds` id, or -1 when the export has no such string.
    pub fn dense(&self, id: i64) -> i64 {
        let Some(&first) = self.ids.first() else { return -1 };
        if self.contiguous {
            let i = id.wrapping_sub(first);
            if (0..self.ids.len() as i64).contains(&i) { i } else { -1 }
        } else {
            self.ids.binary_search(&id).map_or(-1, |i| i as i64)
        }
    }

    /// Dense index of `text`, appended when new.
    pub fn intern(&mut self, text: &str) -> i64 {
        let values = &mut self.values;
        let index = self.index.get_or_insert_with(|| {
            let mut index = HashMap::with_capacity(values.len());
            for (i, v) in values.iter().enumerate() {
                index.entry(v.clone()).or_insert(i as i64);
            }
            index
        });
        if let Some(&i) = index.get(text) {
            return i;
        }
        values.push(text.to_owned());
        let i = values.len() as i64 - 1;
        index.insert(text.to_owned(), i);
        i
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sparse_ids_map_to_dense_indices() {
        let t = StringTable::from_rows(vec![(900, "b".into()), (7, "a".into()), (3_000_000, "c".into())]);
        assert_eq!(t.values, ["a", "b", "c"]);
        assert_eq!((t.dense(7), t.dense(900), t.dense(3_000_000), t.dense(8)), (0, 1, 2, -1));
    }

    #[test]
    fn contiguous_ids_and_interning_reuse_existing_strings() {
        let mut t = StringTable::from_rows(vec![(1, "x".into()), (2, "y".into())]);
        assert_eq!((t.dense(0), t.dense(1), t.dense(2), t.dense(3)), (-1, 0, 1, -1));
        assert_eq!(t.intern("y"), 1);
        assert_eq!(t.intern("z"), 2);
        assert_eq!(t.intern("z"), 2);
        assert_eq!(t.values.len(), 3);
    }
}
