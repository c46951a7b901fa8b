//! How far the graph explains the trace (the `whatif.fidelity` block of the output contract).

/// Counts and distributions measured when the graph is built. An op start is *explained* when its
/// slack (start minus what its dependencies allow) is at most the tolerance; an *anchored* op start
/// has no dependency at all (the first op of a stream with no known launch) and is not explained.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Fidelity {
    /// GPU ops and host calls in the job.
    pub ops: usize,
    pub calls: usize,
    /// Nodes (time slots) and edges of the graph.
    pub nodes: usize,
    pub edges: usize,
    /// [`super::Options::tolerance_ns`].
    pub tolerance_ns: i64,
    /// Op starts with slack <= tolerance, and their share of all ops.
    pub explained_op_starts: usize,
    pub explained_start_share: f64,
    /// Op starts with no dependency (kept at their measured time in every replay).
    pub anchored_op_starts: usize,
    /// Slack of the op starts that have dependencies (ns): p50, p99, max, and sum.
    pub start_error_p50: i64,
    pub start_error_p99: i64,
    pub start_error_max: i64,
    pub op_start_slack_ns: i64,
    /// Slack of every node (op starts and blocking call ends; calls' gaps are host work, not slack).
    pub slack_ns: i64,
    /// Cross-stream dependencies and blocking waits from records (sync records, event records, a
    /// call's own op) and from inference; `recorded_dependencies`/`inferred_dependencies` sum them.
    pub recorded_dependencies: usize,
    pub inferred_dependencies: usize,
    pub recorded_stream_waits: usize,
    pub inferred_stream_waits: usize,
    pub recorded_syncs: usize,
    pub inferred_syncs: usize,
    /// Sync and event records that name no known call, event record or sync type, or contradict the
    /// trace (a waited op that ended after the call returned, a dependency that ended after the op
    /// that waited for it started), and blocking calls whose wait could not be found. (A matched
    /// wait with no work before it or after it constrains nothing and is not counted.)
    pub unresolved_syncs: usize,
    /// Edges dropped to break a cycle (contradictory records); 0 on a consistent trace.
    pub dropped_dependencies: usize,
    /// Members whose op ended before the instance's last arrival (clock error): `x_r < 0`.
    pub transfer_violations: usize,
    /// Per rank, the nominal lags used (ns): launch latency, blocking calls' return latency and
    /// minimum duration.
    pub launch_latency_ns: Vec<i64>,
    pub return_latency_ns: Vec<i64>,
    pub blocking_min_duration_ns: Vec<i64>,
}
