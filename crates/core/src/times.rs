//! Which stored times are usable, and how they become absolute UTC ns: one rule for both readers
//! (and for the Python reference reader, which repeats it). A time is usable when it is a
//! non-negative integer that, once the session origin is added, fits in an i64 and lies within a
//! century of that origin; an event is usable when its start and end are, in that order. Other
//! events are dropped and counted, never passed on as garbage (a NULL start used to reach the
//! analysis as i64::MIN, a reversed one as a negative duration).

/// 100 years of ns: no capture spans more; a time further from its session is damage.
pub const CENTURY_NS: i64 = 100 * 365 * 86_400 * 1_000_000_000;

/// A session origin (`utcEpochNs`, `baseTimeNanoseconds`) is used only when a century of times
/// after it still fits in an i64; otherwise it is treated as absent.
pub fn usable_origin(ns: i64) -> Option<i64> {
    (0..=i64::MAX - CENTURY_NS).contains(&ns).then_some(ns)
}

#[derive(Clone, Copy, Debug)]
pub struct Clock {
    /// Added to every stored time: the session origin when times are stored relative to it, else 0.
    pub offset: i64,
    /// The session origin in output time (0 when unknown): usable times lie within a century of it.
    pub origin: i64,
}

impl Clock {
    /// The absolute time of a stored one, if usable.
    #[inline]
    pub fn absolute(&self, stored: i64) -> Option<i64> {
        if stored < 0 {
            return None;
        }
        let t = stored.checked_add(self.offset)?;
        (t.abs_diff(self.origin) <= CENTURY_NS as u64).then_some(t)
    }

    /// An event's absolute (start, end), if both are usable and in order.
    #[inline]
    pub fn span(&self, start: i64, end: i64) -> Option<(i64, i64)> {
        let span = (self.absolute(start)?, self.absolute(end)?);
        (span.0 <= span.1).then_some(span)
    }
}

/// The one warning of an export table that lost rows.
pub fn dropped_rows(table: &str, rows: usize) -> String {
    format!("{table}: {rows} rows dropped (NULL, non-integer, negative, reversed or out-of-range times)")
}

/// The one warning of a trace table that lost events.
pub fn dropped_events(table: &str, events: usize) -> String {
    format!("{table}: {events} events dropped (missing, non-numeric, negative, reversed or out-of-range times)")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn usable_times() {
        let relative = Clock { offset: 1_700_000_000_000_000_000, origin: 1_700_000_000_000_000_000 };
        assert_eq!(relative.absolute(5), Some(1_700_000_000_000_000_005));
        assert_eq!(relative.absolute(-1), None);
        assert_eq!(relative.absolute(i64::MAX - 10), None, "overflows once the origin is added");
        assert_eq!(relative.absolute(CENTURY_NS + 1), None, "more than a century after the session start");
        assert_eq!(relative.span(10, 5), None);
        assert_eq!(relative.span(5, 5), Some((1_700_000_000_000_000_005, 1_700_000_000_000_000_005)));
        let absolute = Clock { offset: 0, origin: 1_700_000_000_000_000_000 };
        assert_eq!(absolute.absolute(1_699_999_999_000_000_000), Some(1_699_999_999_000_000_000), "a little before the start");
        assert_eq!(absolute.absolute(1_700_000_000_000_000_000 + CENTURY_NS + 1), None);
        assert_eq!(usable_origin(i64::MAX - 10), None);
        assert_eq!(usable_origin(-1), None);
    }
}
