//! What-if blame (docs/method.md section 4): the job's dependency graph and its replay.
//!
//! The whole job (every rank, host thread and GPU stream) becomes one max-plus graph on the aligned
//! clock. Every event is a node with a measured time `t_v` and incoming edges `(u, lag)`:
//!
//! ```text
//! t_v = max_u (t_u + lag_uv) + slack_v
//! ```
//!
//! Lags are nominal values (durations, host gaps, launch latency, transfer times) capped at build so
//! that the measurement never violates an edge (`lag_uv <= t_v - t_u`); `slack_v >= 0` is what the
//! graph does not explain. Replaying with nothing changed therefore reproduces the trace exactly; a
//! cause is a [`Change`] of some lags or slacks, and [`Graph::replay`] recomputes every time in one
//! forward pass in topological order.
//!
//! What the graph holds (per rank = one process on one GPU):
//! - **Host threads**: each thread's CUDA API calls in order. `call.start = prev.end + gap` (the gap
//!   is host work; the caller names it with a segment id so a cause can shorten it);
//!   `call.end = call.start + duration`.
//! - **Blocking calls** (synchronize calls, synchronous memcpy): `call.end = max(call.start + d,
//!   waited op end + return latency) + slack`, the waited ops from sync records, the call's own
//!   ops, or inferred (see [`graph`]).
//! - **GPU streams**: ops in order per (rank, stream): `op.start = max(stream predecessor end,
//!   launch call start + launch latency, cross-stream dependencies) + slack`,
//!   `op.end = op.start + duration`.
//! - **Collectives**: an instance's transfer starts at `T = max(member arrivals)` (an arrival is the
//!   member op's start); each member op ends at `max(T + x_r, its start)`.
//! - **Steps**: a step ends at the latest end of its ops over all ranks.
//!
//! Entry points: [`Job`] (the input columns, borrowed) or [`JobData`] (owned, with a builder),
//! [`Graph::build`], [`Graph::fidelity`], [`Graph::replay`] / [`Graph::replay_many`] with a
//! [`Change`], giving an [`Outcome`]; [`Graph::binding_chain`] for the critical path back from a
//! node. Times are i64 ns on the aligned job-wide clock: the caller aligns clocks first.

mod build;
mod by_rank;
pub mod chain;
pub mod fidelity;
pub mod graph;
pub mod input;
mod rank;
pub mod replay;
pub mod summary;
pub mod synth;
mod topo;

pub use chain::Link;
pub use fidelity::Fidelity;
pub use graph::{EdgeKind, Graph, NodeKind, NodeRef};
pub use input::{Calls, Column, EventRecords, Job, JobData, Members, Ops, SyncRecords, SyncType};
pub use replay::{Change, Outcome, ReplayOptions, Workspace};
pub use summary::{replay_collectives, RankJob, RankPart, Summary};

/// Why a job or a change was refused. Every message names the table, row or id at fault.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum WhatIfError {
    /// Inconsistent or out-of-range input: unequal column lengths, an end before its start, an
    /// unknown op, member, call, segment or node id in a change.
    #[error("{0}")]
    Input(String),
    #[error("could not start replay threads: {0}")]
    Threads(String),
}

pub(crate) fn input_error(message: impl Into<String>) -> WhatIfError {
    WhatIfError::Input(message.into())
}

/// Rows bucketed by key (a counting sort into CSR): key k's rows, in row order, are
/// `rows[off[k]..off[k + 1]]`. `keys` are below `n`.
pub(crate) fn rows_by_key(keys: &[u32], n: usize) -> (Vec<u32>, Vec<u32>) {
    let mut off = vec![0u32; n + 1];
    for &k in keys {
        off[k as usize + 1] += 1;
    }
    for k in 0..n {
        off[k + 1] += off[k];
    }
    let mut fill = off.clone();
    let mut rows = vec![0u32; keys.len()];
    for (row, &k) in keys.iter().enumerate() {
        rows[fill[k as usize] as usize] = row as u32;
        fill[k as usize] += 1;
    }
    (off, rows)
}

/// How the graph is built.
#[derive(Clone, Debug)]
pub struct Options {
    /// How close a time must come to count as explained, and how far inference looks (ns): an op
    /// start with slack at most this is "explained" (fidelity); an inferred cross-stream edge needs
    /// the other op to have ended at most this before the start; an inferred wait of a blocking call
    /// needs the op to have ended at most this before the call returned. Default 5 us: above the
    /// 1-3 us a GPU leaves between queued kernels, below a kernel launch. Pass the alignment's end
    /// spread instead when it is larger and cross-rank timing matters.
    pub tolerance_ns: i64,
    /// The nominal launch latency of every rank (ns), instead of the per-rank estimate.
    pub launch_latency_ns: Option<i64>,
    /// The percentile (0..=1) of a rank's positive `op.start - launch call start` taken as its
    /// nominal launch latency; the same percentile of blocking calls' return latencies (binding op
    /// end to return) and of all calls' durations gives a blocking call's nominal return latency and
    /// minimum duration. Default 0.05: launch-bound ops form the low end of that
    /// distribution (queued ops the long tail), and the 5th percentile stays clear of the odd
    /// early timestamp a minimum would pick.
    pub latency_percentile: f64,
}

impl Default for Options {
    fn default() -> Self {
        Options { tolerance_ns: 5_000, launch_latency_ns: None, latency_percentile: 0.05 }
    }
}
