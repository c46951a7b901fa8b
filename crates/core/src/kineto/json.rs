//! Deserializing only what the reader keeps, and only as much of it as it needs: scalars (lists
//! and objects are skipped, never built), texts capped in length, `grid`/`block` triples, GPU
//! properties, and JSON kept as text only while it is small. A trace's size then bounds the
//! reader's memory, whatever values it holds (a `distributedInfo` listing millions of ranks used
//! to be built as a serde_json tree of many GB).

use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
use std::fmt;

/// Longest text kept (names, metadata): demangled kernel names of real traces stay under 2 KB.
pub(super) const MAX_TEXT: usize = 64 * 1024;
/// JSON kept as text only up to this size (it is parsed again to print it as before: keys sorted).
const MAX_JSON_TEXT: usize = 128 * 1024;

/// Any JSON value, kept when it is a scalar.
pub(super) enum Scalar {
    Int(i64),
    Float(f64),
    Text(String),
    Bool(bool),
    Null,
    Skipped,
}

impl Scalar {
    pub(super) fn int(&self) -> Option<i64> {
        match self {
            Scalar::Int(i) => Some(*i),
            Scalar::Float(f) if f.is_finite() => Some(*f as i64),
            Scalar::Text(t) => t.trim().trim_matches('"').parse().ok(),
            _ => None,
        }
    }

    /// A pid or tid: a number, or a label ending in one (old Kineto wrote `"tid": "stream 7"`).
    pub(super) fn id(&self) -> Option<i64> {
        match self {
            Scalar::Text(t) => {
                let digits = t.trim_end_matches(|c: char| !c.is_ascii_digit());
                let start = digits.rfind(|c: char| !c.is_ascii_digit()).map_or(0, |i| i + 1);
                digits[start..].parse().ok()
            }
            other => other.int(),
        }
    }

    /// µs (integer or fraction) as ns, when that fits an i64. An integer is exact; a fraction is
    /// exact to the ns while below 2^53 ns, which Kineto's 3-month base keeps `ts` under (its
    /// stated reason for it).
    pub(super) fn nanos(&self) -> Option<i64> {
        let micros = match self {
            Scalar::Int(i) => return i.checked_mul(1000),
            Scalar::Float(f) => *f,
            Scalar::Text(t) => t.trim().parse::<f64>().ok()?,
            _ => return None,
        };
        let ns = (micros * 1000.0).round();
        // NaN and infinities fail the comparison; 9.2e18 is just below i64::MAX.
        (ns.abs() < 9.2e18).then_some(ns as i64)
    }

    pub(super) fn text(self) -> Option<String> {
        match self {
            Scalar::Int(i) => Some(i.to_string()),
            Scalar::Float(f) => Some(f.to_string()),
            Scalar::Text(t) => Some(t),
            Scalar::Bool(b) => Some(b.to_string()),
            Scalar::Null | Scalar::Skipped => None,
        }
    }
}

/// `text`, cut to MAX_TEXT bytes at a character boundary.
fn capped(text: &str) -> &str {
    if text.len() <= MAX_TEXT {
        return text;
    }
    let mut end = MAX_TEXT;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

impl<'de> Deserialize<'de> for Scalar {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Scalar, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Scalar;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_i64<E>(self, v: i64) -> Result<Scalar, E> {
                Ok(Scalar::Int(v))
            }
            fn visit_u64<E>(self, v: u64) -> Result<Scalar, E> {
                Ok(i64::try_from(v).map_or(Scalar::Float(v as f64), Scalar::Int))
            }
            fn visit_f64<E>(self, v: f64) -> Result<Scalar, E> {
                Ok(Scalar::Float(v))
            }
            fn visit_str<E>(self, v: &str) -> Result<Scalar, E> {
                Ok(Scalar::Text(capped(v).to_owned()))
            }
            fn visit_string<E>(self, mut v: String) -> Result<Scalar, E> {
                v.truncate(capped(&v).len());
                Ok(Scalar::Text(v))
            }
            fn visit_bool<E>(self, v: bool) -> Result<Scalar, E> {
                Ok(Scalar::Bool(v))
            }
            fn visit_unit<E>(self) -> Result<Scalar, E> {
                Ok(Scalar::Null)
            }
            fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Scalar, A::Error> {
                IgnoredAny.visit_seq(seq).map(|_| Scalar::Skipped)
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Scalar, A::Error> {
                IgnoredAny.visit_map(map).map(|_| Scalar::Skipped)
            }
        }
        d.deserialize_any(V)
    }
}

/// `grid`/`block`: up to three integers; extra entries are ignored.
pub(super) struct Dim3(pub(super) [Option<i64>; 3]);

impl<'de> Deserialize<'de> for Dim3 {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Dim3, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Dim3;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a list of three integers")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Dim3, A::Error> {
                let mut out = [None; 3];
                let mut i = 0;
                while let Some(v) = seq.next_element::<Scalar>()? {
                    if i < 3 {
                        out[i] = v.int();
                    }
                    i += 1;
                }
                Ok(Dim3(out))
            }
        }
        d.deserialize_seq(V)
    }
}

/// A JSON value while its text stays under MAX_JSON_TEXT bytes; None when larger (the rest is read
/// through, not built).
pub(super) struct SmallJson(pub(super) Option<serde_json::Value>);

impl SmallJson {
    /// As text: a string as is, anything else as compact JSON (keys sorted); None for null.
    pub(super) fn text(self) -> Option<String> {
        match self.0? {
            serde_json::Value::Null => None,
            serde_json::Value::String(s) => Some(s),
            other => Some(other.to_string()),
        }
    }
}

impl<'de> Deserialize<'de> for SmallJson {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<SmallJson, D::Error> {
        let mut text = Vec::new();
        let mut full = false;
        Capture { text: &mut text, full: &mut full }.deserialize(d)?;
        Ok(SmallJson(if full { None } else { serde_json::from_slice(&text).ok() }))
    }
}

/// Writes a value's JSON text into `text` until it would pass MAX_JSON_TEXT; then marks it full,
/// drops it, and reads the rest without writing.
struct Capture<'a> {
    text: &'a mut Vec<u8>,
    full: &'a mut bool,
}

impl Capture<'_> {
    fn put(&mut self, bytes: &[u8]) {
        if *self.full {
        } else if self.text.len() + bytes.len() > MAX_JSON_TEXT {
            self.overflow();
        } else {
            self.text.extend_from_slice(bytes);
        }
    }

    fn overflow(&mut self) {
        *self.full = true;
        *self.text = Vec::new();
    }

    fn put_json<T: serde::Serialize + ?Sized>(&mut self, value: &T) {
        if !*self.full {
            let bytes = serde_json::to_vec(value).unwrap_or_default();
            self.put(&bytes);
        }
    }

    fn nested(&mut self) -> Capture<'_> {
        Capture { text: self.text, full: self.full }
    }
}

impl<'de> DeserializeSeed<'de> for Capture<'_> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Capture<'_> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_bool<E>(mut self, v: bool) -> Result<(), E> {
        self.put_json(&v);
        Ok(())
    }
    fn visit_i64<E>(mut self, v: i64) -> Result<(), E> {
        self.put_json(&v);
        Ok(())
    }
    fn visit_u64<E>(mut self, v: u64) -> Result<(), E> {
        self.put_json(&v);
        Ok(())
    }
    fn visit_f64<E>(mut self, v: f64) -> Result<(), E> {
        self.put_json(&v);
        Ok(())
    }
    fn visit_str<E>(mut self, v: &str) -> Result<(), E> {
        if v.len() > MAX_JSON_TEXT {
            self.overflow();
        }
        self.put_json(v);
        Ok(())
    }
    fn visit_unit<E>(mut self) -> Result<(), E> {
        self.put(b"null");
        Ok(())
    }
    fn visit_seq<A: SeqAccess<'de>>(mut self, mut seq: A) -> Result<(), A::Error> {
        self.put(b"[");
        let mut first = true;
        while seq.next_element_seed(Item(self.nested(), first))?.is_some() {
            first = false;
        }
        self.put(b"]");
        Ok(())
    }
    fn visit_map<A: MapAccess<'de>>(mut self, mut map: A) -> Result<(), A::Error> {
        self.put(b"{");
        let mut first = true;
        while map.next_key_seed(Item(self.nested(), first))?.is_some() {
            self.put(b":");
            map.next_value_seed(self.nested())?;
            first = false;
        }
        self.put(b"}");
        Ok(())
    }
}

/// A list element or map key: a comma before all but the first, then the value.
struct Item<'a>(Capture<'a>, bool);

impl<'de> DeserializeSeed<'de> for Item<'_> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(mut self, d: D) -> Result<(), D::Error> {
        if !self.1 {
            self.0.put(b",");
        }
        self.0.deserialize(d)
    }
}

/// One `deviceProperties` entry: the fields the `gpus` table keeps.
#[derive(Default)]
pub(super) struct Gpu {
    pub(super) id: Option<i64>,
    pub(super) name: Option<String>,
    pub(super) sm_count: Option<i64>,
}

impl<'de> Deserialize<'de> for Gpu {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Gpu, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Gpu;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a device properties object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Gpu, A::Error> {
                let mut gpu = Gpu::default();
                while let Some(key) = map.next_key::<Scalar>()? {
                    let value: Scalar = map.next_value()?;
                    let int = match value {
                        Scalar::Int(i) => Some(i),
                        _ => None,
                    };
                    match key.text().as_deref() {
                        Some("id") => gpu.id = int,
                        Some("numSms") => gpu.sm_count = int,
                        Some("name") => gpu.name = if let Scalar::Text(t) = value { Some(t) } else { None },
                        _ => {}
                    }
                }
                Ok(gpu)
            }
        }
        d.deserialize_map(V)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn small(text: &str) -> Option<String> {
        serde_json::from_str::<SmallJson>(text).unwrap().text()
    }

    #[test]
    fn small_json_prints_as_a_parsed_value_would() {
        for text in [
            r#"[{"pg_name": "0", "ranks": [0, 1], "desc": "default_pg"}, {"b": 2.5, "a": -1e-7, "c": [true, null, "é\"\n"]}]"#,
            r#"{"z": {}, "y": [], "x": [[1], [2, [3]]], "w": 18446744073709551615}"#,
            "42",
            "1.5e300",
        ] {
            let value: serde_json::Value = serde_json::from_str(text).unwrap();
            assert_eq!(small(text), Some(value.to_string()), "{text}");
        }
        assert_eq!(small(r#""as is""#), Some("as is".into()));
        assert_eq!(small("null"), None);
    }

    #[test]
    fn large_json_is_read_through_not_kept() {
        let ranks = format!("[{}0]", "0,".repeat(MAX_JSON_TEXT));
        assert_eq!(small(&ranks), None);
        let long = format!("\"{}\"", "x".repeat(MAX_JSON_TEXT + 1));
        assert_eq!(small(&long), None);
        // What follows a skipped value still parses.
        let pair: (SmallJson, i64) = serde_json::from_str(&format!("[{ranks}, 7]")).unwrap();
        assert!(pair.0 .0.is_none() && pair.1 == 7);
    }

    #[test]
    fn texts_are_capped_and_times_checked() {
        let Scalar::Text(t) = serde_json::from_str::<Scalar>(&format!("\"{}\"", "é".repeat(MAX_TEXT))).unwrap() else { panic!() };
        assert!(t.len() <= MAX_TEXT && t.chars().all(|c| c == 'é'));
        let nanos = |text: &str| serde_json::from_str::<Scalar>(text).unwrap().nanos();
        assert_eq!((nanos("1.5"), nanos("\"2\""), nanos("7")), (Some(1500), Some(2000), Some(7000)));
        assert_eq!((nanos("1e300"), nanos("\"NaN\""), nanos("\"inf\""), nanos("9.2e15")), (None, None, None, None));
        assert_eq!((nanos("9223372036854775807"), nanos("[1]"), nanos("null")), (None, None, None));
    }
}
