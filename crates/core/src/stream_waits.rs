//! Stream waits where the capture recorded none: which `cudaStreamWaitEvent` call waited for which
//! `cudaEventRecord` call, from the host calls and the GPU work they launched. A wait waits for
//! the latest record before it on the same thread that recorded another stream; a record's stream
//! is the one its thread last launched work on before it, a wait's the one its thread next
//! launches work on. PyTorch records and waits on the thread that launches (DDP's reducer,
//! FSDP's prefetch, tensor-parallel collectives).

use crate::ids::Ids;
use rustc_hash::FxHashMap;

/// The calls and launches of one rank. Calls are in start order.
pub struct Calls<'a> {
    pub tid: Ids<'a>,
    pub start: &'a [i64],
    pub is_record: &'a [bool],
    pub is_wait: &'a [bool],
}

/// The GPU ops of the rank: the thread and time of their launch (negative: unknown) and stream.
pub struct Launches<'a> {
    pub tid: Ids<'a>,
    pub launch: &'a [i64],
    pub stream: Ids<'a>,
}

/// The waits paired with their records, thread by thread (ascending thread id), waits in call
/// order: the record's call row and stream, the wait's call row and stream.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Pairs {
    pub record_call: Vec<usize>,
    pub record_stream: Vec<i64>,
    pub wait_call: Vec<usize>,
    pub wait_stream: Vec<i64>,
}

/// Columns of one table that differ in length: the caller's bug.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
#[error("stream-wait columns differ in length ({0} and {1} rows)")]
pub struct LengthMismatch(pub usize, pub usize);

fn same_length(columns: &[usize]) -> Result<(), LengthMismatch> {
    match columns.iter().find(|&&n| n != columns[0]) {
        Some(&n) => Err(LengthMismatch(columns[0], n)),
        None => Ok(()),
    }
}

/// Each wait's record (see the module's comment).
pub fn pair(calls: &Calls, ops: &Launches) -> Result<Pairs, LengthMismatch> {
    same_length(&[calls.tid.len(), calls.start.len(), calls.is_record.len(), calls.is_wait.len()])?;
    same_length(&[ops.tid.len(), ops.launch.len(), ops.stream.len()])?;
    let mut out = Pairs::default();
    let mut launched: FxHashMap<i64, Vec<usize>> =
        ops.tid.rows_by_id(|op| ops.launch[op] >= 0).into_iter().collect();
    for (thread, rows) in calls.tid.rows_by_id(|c| calls.is_record[c] || calls.is_wait[c]) {
        let Some(order) = launched.get_mut(&thread) else { continue };
        order.sort_by_key(|&op| ops.launch[op]); // stable: equal launches in row order
        let when: Vec<i64> = order.iter().map(|&op| ops.launch[op]).collect();
        // Calls come in time order, so each search goes on from where the last one ended: one walk
        // over the thread's launches, not a binary search per call (thousands per rank).
        // Records with a launch before them, and the stream of that launch.
        let (mut records, mut streams) = (Vec::new(), Vec::new());
        let mut before = 0;
        for &c in rows.iter().filter(|&&c| calls.is_record[c]) {
            before = walk(&when, before, |w| w < calls.start[c]);
            if before > 0 {
                records.push(c);
                streams.push(ops.stream.at(order[before - 1]));
            }
        }
        // Per record, the latest record at or before it of another stream than its own.
        let mut other_before: Vec<Option<usize>> = Vec::with_capacity(records.len());
        for k in 0..records.len() {
            other_before.push(match k {
                0 => None,
                _ if streams[k - 1] != streams[k] => Some(k - 1),
                _ => other_before[k - 1],
            });
        }
        let (mut after, mut upto) = (0, 0);
        for &c in rows.iter().filter(|&&c| calls.is_wait[c]) {
            after = walk(&when, after, |w| w <= calls.start[c]);
            upto = walk(&records, upto, |r| calls.start[r] <= calls.start[c]);
            let Some(&next) = order.get(after) else { continue };
            let stream = ops.stream.at(next);
            let found = match upto.checked_sub(1) {
                Some(k) if streams[k] != stream => Some(k),
                Some(k) => other_before[k],
                None => None,
            };
            if let Some(k) = found {
                out.record_call.push(records[k]);
                out.record_stream.push(streams[k]);
                out.wait_call.push(c);
                out.wait_stream.push(stream);
            }
        }
    }
    Ok(out)
}

/// The first position at or after `from` where `holds` no longer does, in a slice whose leading
/// values all hold (what `partition_point` finds, walked to from a position before it).
fn walk<T: Copy>(sorted: &[T], from: usize, holds: impl Fn(T) -> bool) -> usize {
    // The calls come in start order (`Calls`): a walk never starts past where `holds` stops.
    debug_assert!(from == 0 || holds(sorted[from - 1]), "calls out of start order");
    from + sorted[from..].iter().take_while(|&&v| holds(v)).count()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The definition, one wait at a time over every record.
    fn scan(calls: &Calls, ops: &Launches) -> Pairs {
        let mut out = Pairs::default();
        let mut threads: Vec<i64> =
            (0..calls.tid.len()).filter(|&c| calls.is_record[c] || calls.is_wait[c]).map(|c| calls.tid.at(c)).collect();
        threads.sort();
        threads.dedup();
        for t in threads {
            let mut order: Vec<usize> = (0..ops.tid.len()).filter(|&o| ops.tid.at(o) == t && ops.launch[o] >= 0).collect();
            order.sort_by_key(|&o| ops.launch[o]);
            let stream_before = |x: i64| order.iter().rev().find(|&&o| ops.launch[o] < x).map(|&o| ops.stream.at(o));
            let stream_after = |x: i64| order.iter().find(|&&o| ops.launch[o] > x).map(|&o| ops.stream.at(o));
            for w in (0..calls.tid.len()).filter(|&c| calls.tid.at(c) == t && calls.is_wait[c]) {
                let Some(ws) = stream_after(calls.start[w]) else { continue };
                let best = (0..calls.tid.len())
                    .filter(|&r| calls.tid.at(r) == t && calls.is_record[r] && calls.start[r] <= calls.start[w])
                    .filter_map(|r| stream_before(calls.start[r]).map(|s| (r, s)))
                    .filter(|&(_, s)| s != ws)
                    .last();
                if let Some((r, s)) = best {
                    out.record_call.push(r);
                    out.record_stream.push(s);
                    out.wait_call.push(w);
                    out.wait_stream.push(ws);
                }
            }
        }
        out
    }

    #[test]
    fn pairs_as_the_scan_does_on_random_calls() {
        let mut rng = fastrand::Rng::with_seed(5);
        for _ in 0..300 {
            let (n, m) = (rng.usize(0..80), rng.usize(0..60));
            let mut start: Vec<i64> = (0..n).map(|_| rng.i64(0..200)).collect();
            start.sort(); // calls in start order, ties on purpose
            let tid: Vec<i32> = (0..n).map(|_| rng.i32(1..4)).collect();
            let kind: Vec<u8> = (0..n).map(|_| rng.u8(0..3)).collect();
            let (is_record, is_wait): (Vec<bool>, Vec<bool>) = kind.iter().map(|&k| (k == 0, k == 1)).unzip();
            let op_tid: Vec<i64> = (0..m).map(|_| rng.i64(1..4)).collect();
            let launch: Vec<i64> = (0..m).map(|_| if rng.u8(0..10) == 0 { -1 } else { rng.i64(0..200) }).collect();
            let stream: Vec<i64> = (0..m).map(|_| rng.i64(7..10)).collect();
            let calls = Calls { tid: Ids::I32(&tid), start: &start, is_record: &is_record, is_wait: &is_wait };
            let ops = Launches { tid: Ids::I64(&op_tid), launch: &launch, stream: Ids::I64(&stream) };
            assert_eq!(pair(&calls, &ops).unwrap(), scan(&calls, &ops));
        }
    }

    #[test]
    fn a_wait_skips_the_records_of_its_own_stream() {
        // Thread 1 launches on stream 7, records (7), launches on 8, records (8), waits, launches on 8.
        let calls = Calls {
            tid: Ids::I32(&[1, 1, 1]),
            start: &[10, 30, 40],
            is_record: &[true, true, false],
            is_wait: &[false, false, true],
        };
        let ops = Launches { tid: Ids::I64(&[1, 1, 1]), launch: &[5, 20, 50], stream: Ids::I32(&[7, 8, 8]) };
        let got = pair(&calls, &ops).unwrap();
        assert_eq!(got, Pairs { record_call: vec![0], record_stream: vec![7], wait_call: vec![2], wait_stream: vec![8] });
        let short = Calls { tid: Ids::I32(&[1]), ..calls };
        assert_eq!(pair(&short, &ops), Err(LengthMismatch(1, 3)));
    }
}
