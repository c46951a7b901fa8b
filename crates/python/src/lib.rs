//! The Python bindings of the core (`nsys_collective._native`), and the one place where its errors
//! become Python exceptions. Arguments become Rust values first; the work runs without the GIL.

use collectivetrace_core::error::ReadError;
use collectivetrace_core::export::{self, Export};
use collectivetrace_core::grouping::{self, GroupingError};
use collectivetrace_core::host_time::{self, HostTimeError};
use collectivetrace_core::ids;
use collectivetrace_core::stream_waits;
use collectivetrace_core::whatif::{
    self, Change, EdgeKind, Graph, NodeKind, NodeRef, Outcome, ReplayOptions, WhatIfError, Workspace,
};
use collectivetrace_core::{intervals, kineto, tables};
use numpy::{IntoPyArray, PyArray1, PyArrayMethods, PyReadonlyArray1};
use pyo3::create_exception;
use pyo3::exceptions::PyException;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple};
use std::path::PathBuf;
use std::sync::Mutex;

// Defined under their public module path, so that they pickle (Dask sends them between processes)
// and print as `nsys_collective.errors.InputError`.
create_exception!(nsys_collective.errors, CollectiveTraceError, PyException, "Base of every CollectiveTrace error.");
create_exception!(
    nsys_collective.errors,
    InputError,
    CollectiveTraceError,
    "Unusable input: missing, empty, not an export, truncated, over a limit, more than memory holds. The CLI exits with status 2."
);

/// Every error of the core, for the one mapping below.
enum CoreError {
    Read(ReadError),
    WhatIf(WhatIfError),
    Grouping(GroupingError),
    StreamWaits(stream_waits::LengthMismatch),
    HostTime(HostTimeError),
    Trace(rank_trace::TraceError),
}

impl From<ReadError> for CoreError {
    fn from(err: ReadError) -> Self {
        CoreError::Read(err)
    }
}

impl From<WhatIfError> for CoreError {
    fn from(err: WhatIfError) -> Self {
        CoreError::WhatIf(err)
    }
}

impl From<GroupingError> for CoreError {
    fn from(err: GroupingError) -> Self {
        CoreError::Grouping(err)
    }
}

impl From<HostTimeError> for CoreError {
    fn from(err: HostTimeError) -> Self {
        CoreError::HostTime(err)
    }
}

impl From<rank_trace::TraceError> for CoreError {
    fn from(err: rank_trace::TraceError) -> Self {
        CoreError::Trace(err)
    }
}

impl From<stream_waits::LengthMismatch> for CoreError {
    fn from(err: stream_waits::LengthMismatch) -> Self {
        CoreError::StreamWaits(err)
    }
}

fn to_py_err(err: impl Into<CoreError>) -> PyErr {
    match err.into() {
        CoreError::Read(err @ ReadError::Threads(_)) => CollectiveTraceError::new_err(err.to_string()),
        CoreError::Read(err) => InputError::new_err(err.to_string()),
        CoreError::WhatIf(err @ WhatIfError::Threads(_)) => CollectiveTraceError::new_err(err.to_string()),
        CoreError::WhatIf(err @ WhatIfError::Input(_)) => InputError::new_err(err.to_string()),
        // Columns that do not fit together are the caller's bug, not the user's input.
        CoreError::Grouping(err) => pyo3::exceptions::PyValueError::new_err(err.to_string()),
        CoreError::StreamWaits(err) => pyo3::exceptions::PyValueError::new_err(err.to_string()),
        CoreError::HostTime(err) => pyo3::exceptions::PyValueError::new_err(err.to_string()),
        CoreError::Trace(err) => pyo3::exceptions::PyValueError::new_err(err.to_string()),
    }
}

/// An unusable argument of the what-if binding (a missing column, a wrong dtype), as the core's
/// input error so it maps like the core's own.
fn bad_input(message: String) -> PyErr {
    to_py_err(WhatIfError::Input(message))
}

/// Reads Nsight Systems SQLite exports in parallel, without the GIL. Returns one dict per path,
/// in order; raises InputError naming the first unusable file.
#[pyfunction]
#[pyo3(signature = (paths, threads = None))]
fn read_exports(py: Python<'_>, paths: Vec<PathBuf>, threads: Option<usize>) -> PyResult<Vec<Bound<'_, PyDict>>> {
    let results = py.detach(|| export::read_exports(&paths, threads)).map_err(to_py_err)?;
    results.into_iter().map(|r| export_to_dict(py, r.map_err(to_py_err)?)).collect()
}

/// Reads PyTorch profiler (Kineto) traces, `.json` or `.json.gz`, in parallel, without the GIL.
/// Returns one dict per path in `read_exports`' layout (plus a `collectives` table); raises
/// InputError naming the first unusable file, or one past `max_trace_bytes` of JSON or whose gzip
/// expands more than `max_gzip_ratio`-fold.
#[pyfunction]
#[pyo3(signature = (paths, threads = None, max_trace_bytes = kineto::DEFAULT_MAX_TRACE_BYTES, max_gzip_ratio = kineto::DEFAULT_MAX_GZIP_RATIO))]
fn read_kineto_traces(
    py: Python<'_>,
    paths: Vec<PathBuf>,
    threads: Option<usize>,
    max_trace_bytes: u64,
    max_gzip_ratio: u64,
) -> PyResult<Vec<Bound<'_, PyDict>>> {
    let limits = kineto::KinetoLimits { max_trace_bytes, max_gzip_ratio };
    let results = py.detach(|| kineto::read_kineto_traces_with(&paths, threads, limits)).map_err(to_py_err)?;
    results.into_iter().map(|r| export_to_dict(py, r.map_err(to_py_err)?)).collect()
}

/// (output name, stored names by preference, conversion kind)
type ColumnSpec = (&'static str, Vec<&'static str>, String);

/// The table declarations of the reader, so the pure-Python reference reader reads the same
/// columns: `[(name, [stored table, ...], [(column, [stored column, ...], kind), ...]), ...]`.
#[pyfunction]
fn table_specs() -> Vec<(&'static str, Vec<&'static str>, Vec<ColumnSpec>)> {
    tables::ALL
        .iter()
        .map(|spec| {
            let columns = spec.columns().map(|c| (c.name, c.sources.to_vec(), format!("{:?}", c.kind))).collect();
            (spec.name, spec.tables.to_vec(), columns)
        })
        .collect()
}

type Column<'py> = Bound<'py, PyArray1<i64>>;

/// For every query interval, the sorted items it overlaps: (query index, item index, overlap ns).
#[pyfunction]
fn overlaps<'py>(
    py: Python<'py>,
    q_start: PyReadonlyArray1<'py, i64>,
    q_end: PyReadonlyArray1<'py, i64>,
    i_start: PyReadonlyArray1<'py, i64>,
    i_end: PyReadonlyArray1<'py, i64>,
) -> PyResult<(Column<'py>, Column<'py>, Column<'py>)> {
    let (qs, qe, is, ie) = (q_start.as_slice()?, q_end.as_slice()?, i_start.as_slice()?, i_end.as_slice()?);
    if !is.windows(2).all(|w| w[0] <= w[1]) {
        return Err(pyo3::exceptions::PyValueError::new_err("items must be sorted by start"));
    }
    let (q, i, ns) = py.detach(|| intervals::overlaps(qs, qe, is, ie));
    Ok((q.into_pyarray(py), i.into_pyarray(py), ns.into_pyarray(py)))
}

/// Of the kernels `keep` marks among a rank's GPU work (columns in start order): the time NCCL's
/// cover and the time they share with the others (compute).
#[pyfunction]
fn nccl_overlap(
    py: Python<'_>,
    start: PyReadonlyArray1<'_, i64>,
    end: PyReadonlyArray1<'_, i64>,
    is_nccl: PyReadonlyArray1<'_, bool>,
    keep: PyReadonlyArray1<'_, bool>,
) -> PyResult<(i64, i64)> {
    let (s, e, nccl, keep) = (start.as_slice()?, end.as_slice()?, is_nccl.as_slice()?, keep.as_slice()?);
    if e.len() != s.len() || nccl.len() != s.len() || keep.len() != s.len() {
        return Err(pyo3::exceptions::PyValueError::new_err("columns differ in length"));
    }
    if !s.windows(2).all(|w| w[0] <= w[1]) {
        return Err(pyo3::exceptions::PyValueError::new_err("items must be sorted by start"));
    }
    let kept = (0..s.len()).filter(|&i| keep[i]).map(|i| (s[i], e[i], nccl[i]));
    Ok(py.detach(|| intervals::nccl_overlap(kept)))
}

/// For every point, the index of the innermost interval covering it, -1 where none does.
#[pyfunction]
fn innermost_covering<'py>(
    py: Python<'py>,
    start: PyReadonlyArray1<'py, i64>,
    end: PyReadonlyArray1<'py, i64>,
    points: PyReadonlyArray1<'py, i64>,
) -> PyResult<Column<'py>> {
    let (s, e, p) = (start.as_slice()?, end.as_slice()?, points.as_slice()?);
    if s.len() != e.len() {
        return Err(pyo3::exceptions::PyValueError::new_err("start and end differ in length"));
    }
    let out = py.detach(|| intervals::innermost_covering(s, e, p));
    Ok(out.into_pyarray(py))
}

fn export_to_dict(py: Python<'_>, export: Export) -> PyResult<Bound<'_, PyDict>> {
    let session = PyDict::new(py);
    let s = &export.session;
    session.set_item("nsys_version", &s.nsys_version)?;
    session.set_item("schema_version", &s.schema_version)?;
    session.set_item("time_normalized", s.time_normalized)?;
    session.set_item("utc_epoch_ns", s.utc_epoch_ns)?;
    session.set_item("hostname", &s.hostname)?;

    let out = PyDict::new(py);
    out.set_item("path", &export.path)?;
    out.set_item("session", session)?;
    out.set_item("metadata", export.metadata)?;
    out.set_item("system_env", export.system_env)?;
    out.set_item("capture", export.capture)?;
    out.set_item("strings", export.strings)?;
    out.set_item("warnings", export.warnings)?;
    for table in export.tables {
        let columns = PyDict::new(py);
        for (name, values) in table.columns {
            columns.set_item(name, values.into_pyarray(py))?;
        }
        out.set_item(table.name, columns)?;
    }
    Ok(out)
}

/// Integers from a numpy int64 array or any sequence of ints.
fn ints(value: &Bound<'_, PyAny>, what: &str) -> PyResult<Vec<i64>> {
    Ok(match IntValues::of(value, what)? {
        IntValues::Array(a) => a.as_array().to_vec(),
        IntValues::Copied(v) => v,
    })
}

/// Integers read where they lie (a numpy int64 array, borrowed) or copied (any other sequence).
enum IntValues<'py> {
    Array(PyReadonlyArray1<'py, i64>),
    Copied(Vec<i64>),
}

impl<'py> IntValues<'py> {
    fn of(value: &Bound<'py, PyAny>, what: &str) -> PyResult<Self> {
        if let Ok(a) = value.extract::<PyReadonlyArray1<'py, i64>>() {
            return Ok(IntValues::Array(a));
        }
        value.extract().map(IntValues::Copied).map_err(|_| bad_input(format!("change[{what:?}]: a sequence of integers is needed")))
    }

    fn view(&self) -> numpy::ndarray::ArrayView1<'_, i64> {
        match self {
            IntValues::Array(a) => a.as_array(),
            IntValues::Copied(v) => v.as_slice().into(),
        }
    }
}

const CHANGE_KEYS: [&str; 10] =
    ["op", "op_ns", "call", "call_ns", "segment", "segment_ns", "member", "member_ns", "zero_slack", "zero_all_slack"];

/// A change from its dict (see ReplayGraph's docstring).
fn to_change(change: Option<&Bound<'_, PyDict>>) -> PyResult<Change> {
    let mut out = Change::default();
    let Some(change) = change else { return Ok(out) };
    for key in change.keys() {
        let key: String = key.extract()?;
        if !CHANGE_KEYS.contains(&key.as_str()) {
            return Err(bad_input(format!("change: unknown key {key:?} (keys: {})", CHANGE_KEYS.join(", "))));
        }
    }
    // Rows and their values paired in one pass over the two arrays: a change of every op of a rank
    // (a quarter million entries at 1.9M kernels) is copied once, into the change, not three times.
    fn pairs<T>(change: &Bound<'_, PyDict>, rows: &str, values: &str, row: impl Fn(i64) -> PyResult<T>) -> PyResult<Vec<(T, i64)>> {
        let get = |k: &str| change.get_item(k)?.map(|v| IntValues::of(&v, k)).transpose();
        match (get(rows)?, get(values)?) {
            (None, None) => Ok(Vec::new()),
            (Some(r), Some(v)) if r.view().len() == v.view().len() => {
                let mut out = Vec::with_capacity(r.view().len()); // sized once: a collect through `?` grows by doubling
                for (&r, &x) in r.view().iter().zip(v.view()) {
                    out.push((row(r)?, x));
                }
                Ok(out)
            }
            (Some(r), Some(v)) => {
                Err(bad_input(format!("change: {rows:?} has {} entries, {values:?} {}", r.view().len(), v.view().len())))
            }
            _ => Err(bad_input(format!("change: {rows:?} and {values:?} go together"))),
        }
    }
    let row = |what: &'static str| {
        move |r: i64| usize::try_from(r).map_err(|_| bad_input(format!("change: {what} row {r} is negative")))
    };
    out.op_durations = pairs(change, "op", "op_ns", row("op"))?;
    out.call_durations = pairs(change, "call", "call_ns", row("call"))?;
    out.gaps = pairs(change, "segment", "segment_ns", Ok)?;
    out.transfers = pairs(change, "member", "member_ns", row("member"))?;
    if let Some(nodes) = change.get_item("zero_slack")? {
        out.zero_slack = ints(&nodes, "zero_slack")?
            .into_iter()
            .map(|n| u32::try_from(n).map_err(|_| bad_input(format!("change: node {n} out of range"))))
            .collect::<PyResult<_>>()?;
    }
    if let Some(all) = change.get_item("zero_all_slack")? {
        out.zero_all_slack = all.is_truthy()?;
    }
    Ok(out)
}

fn node_kind(name: &str) -> PyResult<NodeKind> {
    NodeKind::ALL.into_iter().find(|k| k.name() == name).ok_or_else(|| {
        bad_input(format!("unknown node kind {name:?} (kinds: {})", NodeKind::ALL.map(|k| k.name()).join(", ")))
    })
}

/// The what-if dependency graph of a whole job (docs/method.md section 4; Rust: `whatif::Graph`), built
/// once, replayed under many changes. Every time is int64 ns on the aligned job-wide clock (apply
/// the clock alignment first); rows are referred to by their index in their table.
///
/// ReplayGraph(calls, ops, members, syncs=None, events=None, *, tolerance_ns=5000,
///             launch_latency_ns=None, latency_percentile=0.05)
///
/// Each table is a dict of 1-D integer (or bool) numpy arrays of equal length, rows in any order, or
/// a list of such dicts (parts, e.g. one per rank; see ReplayJob, which builds later):
/// - calls (CUDA API calls): rank, thread, start, end, correlation; optional blocking (1: waits
///   for the GPU: synchronize calls, synchronous memcpy; default 0), segment (the host-work
///   segment of the gap before the call on its thread, e.g. an NVTX range id; default -1) and
///   own_segment (where >= 0 the gap is a segment of its own, named by the call's row; default -1).
/// - ops (kernels, memcpys, memsets): rank, stream, start, end, launch (the launching call's row
///   among the rank's calls, from 0, -1 unknown; many ops may share one: a CUDA graph); optional
///   step (dense 0..n_steps, default -1).
/// - members (collective instances): instance (dense 0..n_instances, each with a member), op (the
///   member's op row: its NCCL kernel or the first op of its copy-engine chain). A point-to-point
///   pair is an instance of two members; a rank absent from an instance has no row in it.
/// - syncs (CUPTI SYNCHRONIZATION, Kineto cuda_sync): rank, kind (1 event sync, 2 stream wait
///   event, 3 stream sync, 4 device sync), stream, event, correlation (the synchronizing call's);
///   optional record_correlation (the matching cudaEventRecord's, when known; default -1) and
///   inferred (1: the caller inferred the row; its dependency counts as inferred; default 0).
/// - events (CUDA_EVENT, one per cudaEventRecord): rank, stream, event, correlation.
/// Ranks are dense 0..n_ranks; a negative correlation is unknown. A column may also be one int (every
/// row's value) or, for int64 values, (array, shift): each value plus shift (a rank's times on the
/// job's clock), the array borrowed.
///
/// A change (replay, replay_many) is a dict, every key optional, values int sequences or arrays:
/// - "op", "op_ns": op rows and their new durations (0 removes an op's time; a member op is
///   refused: change its transfer);
/// - "call", "call_ns": call rows and their new durations (a blocking call: its minimum duration);
/// - "segment", "segment_ns": segment ids and the new total of each segment's host gaps (a cut
///   taken from the latest gaps first);
/// - "member", "member_ns": member rows and their new transfer time x (the op ends x after T);
/// - "zero_slack": node ids whose slack becomes 0; "zero_all_slack": bool.
/// Unknown keys, rows, segments or nodes, negative values and unequal lengths raise InputError.
///
/// An outcome (replay) is a dict: arrival (per member row: its op's start), transfer_start (per
/// instance: T, the last arrival), wait (per instance: sum of T - arrival), total_wait (int),
/// step_end (per step: the latest end of its ops), step_rank_end (n_steps x n_ranks), rank_end (per
/// rank: its latest op or call end); int64.min marks a step or rank with nothing. With
/// chain_steps > 0: chain_offsets, chain_nodes (instance c's binding chain from its last arrival:
/// chain_nodes[chain_offsets[c]:chain_offsets[c + 1]]). With times=True: op_start, op_end,
/// call_start, call_end per row.
///
/// Node ids: nodes(kind, rows), describe(nodes), slack(nodes); kinds are NODE_KINDS (codes are
/// indices), edge kinds EDGE_KINDS. Build and replays run without the GIL; replay_many runs in parallel.
#[pyclass(frozen, module = "nsys_collective._native")]
struct ReplayGraph {
    graph: Graph,
    /// Workspaces (the time buffer of a replay) kept between calls, replay's and replay_many's.
    spare: Mutex<Vec<Workspace>>,
}

impl ReplayGraph {
    fn with_workspace<T>(&self, f: impl FnOnce(&mut Workspace) -> T) -> T {
        let ws = self.spare.lock().unwrap().pop();
        let mut ws = ws.unwrap_or_else(|| self.graph.workspace());
        let out = f(&mut ws);
        self.spare.lock().unwrap().push(ws);
        out
    }

    fn outcome_dict<'py>(&self, py: Python<'py>, o: Outcome, times: Option<EntityTimes>) -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        d.set_item("arrival", o.arrival.into_pyarray(py))?;
        d.set_item("transfer_start", o.transfer_start.into_pyarray(py))?;
        d.set_item("wait", o.wait.into_pyarray(py))?;
        d.set_item("total_wait", o.total_wait)?;
        d.set_item("step_end", o.step_end.into_pyarray(py))?;
        let (steps, ranks) = (self.graph.n_steps(), self.graph.n_ranks());
        d.set_item("step_rank_end", o.step_rank_end.into_pyarray(py).reshape([steps, ranks])?)?;
        d.set_item("rank_end", o.rank_end.into_pyarray(py))?;
        if !o.chain_offsets.is_empty() {
            d.set_item("chain_offsets", o.chain_offsets.into_iter().map(i64::from).collect::<Vec<_>>().into_pyarray(py))?;
            d.set_item("chain_nodes", o.chain_nodes.into_iter().map(i64::from).collect::<Vec<_>>().into_pyarray(py))?;
        }
        if let Some((op_start, op_end, call_start, call_end)) = times {
            d.set_item("op_start", op_start.into_pyarray(py))?;
            d.set_item("op_end", op_end.into_pyarray(py))?;
            d.set_item("call_start", call_start.into_pyarray(py))?;
            d.set_item("call_end", call_end.into_pyarray(py))?;
        }
        Ok(d)
    }
}

type EntityTimes = (Vec<i64>, Vec<i64>, Vec<i64>, Vec<i64>);

#[pymethods]
impl ReplayGraph {
    #[new]
    #[pyo3(signature = (calls, ops, members, syncs = None, events = None, *, tolerance_ns = 5000, launch_latency_ns = None, latency_percentile = 0.05))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        calls: &Bound<'_, PyAny>,
        ops: &Bound<'_, PyAny>,
        members: &Bound<'_, PyAny>,
        syncs: Option<&Bound<'_, PyAny>>,
        events: Option<&Bound<'_, PyAny>>,
        tolerance_ns: i64,
        launch_latency_ns: Option<i64>,
        latency_percentile: f64,
    ) -> PyResult<ReplayGraph> {
        // One way in: the tables gathered as ReplayJob gathers them, then built at once.
        ReplayJob::new(calls, ops, members, syncs, events)?.build(py, tolerance_ns, launch_latency_ns, latency_percentile)
    }

    #[classattr]
    #[allow(non_snake_case)]
    fn NODE_KINDS() -> Vec<&'static str> {
        NodeKind::ALL.map(|k| k.name()).to_vec()
    }

    #[classattr]
    #[allow(non_snake_case)]
    fn EDGE_KINDS() -> Vec<&'static str> {
        EdgeKind::ALL.map(|k| k.name()).to_vec()
    }

    #[getter]
    fn n_ops(&self) -> usize {
        self.graph.n_ops()
    }

    #[getter]
    fn n_calls(&self) -> usize {
        self.graph.n_calls()
    }

    #[getter]
    fn n_instances(&self) -> usize {
        self.graph.n_instances()
    }

    #[getter]
    fn n_members(&self) -> usize {
        self.graph.n_members()
    }

    #[getter]
    fn n_ranks(&self) -> usize {
        self.graph.n_ranks()
    }

    #[getter]
    fn n_steps(&self) -> usize {
        self.graph.n_steps()
    }

    #[getter]
    fn n_nodes(&self) -> usize {
        self.graph.n_nodes()
    }

    /// Bytes the graph holds.
    fn heap_bytes(&self) -> usize {
        self.graph.heap_bytes()
    }

    /// Lets go of the time buffers kept between replays (8 bytes a node each); a later replay
    /// makes a new one.
    fn release_buffers(&self) {
        self.spare.lock().unwrap().clear();
    }

    /// How far the graph explains the trace: the `whatif.fidelity` block of the output contract
    /// (ops, explained_start_share, start_error_ns {p50, p99, max}, slack_ns,
    /// recorded_dependencies, inferred_dependencies) and the counts and nominal lags behind it.
    fn fidelity<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let f = self.graph.fidelity();
        let d = PyDict::new(py);
        d.set_item("ops", f.ops)?;
        d.set_item("calls", f.calls)?;
        d.set_item("nodes", f.nodes)?;
        d.set_item("edges", f.edges)?;
        d.set_item("tolerance_ns", f.tolerance_ns)?;
        d.set_item("explained_op_starts", f.explained_op_starts)?;
        d.set_item("explained_start_share", f.explained_start_share)?;
        d.set_item("anchored_op_starts", f.anchored_op_starts)?;
        let error = PyDict::new(py);
        error.set_item("p50", f.start_error_p50)?;
        error.set_item("p99", f.start_error_p99)?;
        error.set_item("max", f.start_error_max)?;
        d.set_item("start_error_ns", error)?;
        d.set_item("op_start_slack_ns", f.op_start_slack_ns)?;
        d.set_item("slack_ns", f.slack_ns)?;
        d.set_item("recorded_dependencies", f.recorded_dependencies)?;
        d.set_item("inferred_dependencies", f.inferred_dependencies)?;
        d.set_item("recorded_stream_waits", f.recorded_stream_waits)?;
        d.set_item("inferred_stream_waits", f.inferred_stream_waits)?;
        d.set_item("recorded_syncs", f.recorded_syncs)?;
        d.set_item("inferred_syncs", f.inferred_syncs)?;
        d.set_item("unresolved_syncs", f.unresolved_syncs)?;
        d.set_item("dropped_dependencies", f.dropped_dependencies)?;
        d.set_item("transfer_violations", f.transfer_violations)?;
        d.set_item("launch_latency_ns", f.launch_latency_ns.clone().into_pyarray(py))?;
        d.set_item("return_latency_ns", f.return_latency_ns.clone().into_pyarray(py))?;
        d.set_item("blocking_min_duration_ns", f.blocking_min_duration_ns.clone().into_pyarray(py))?;
        Ok(d)
    }

    /// Replays one change (None: the trace itself) without the GIL; returns the outcome dict.
    #[pyo3(signature = (change = None, *, chain_steps = 0, times = false))]
    fn replay<'py>(
        &self,
        py: Python<'py>,
        change: Option<&Bound<'py, PyDict>>,
        chain_steps: usize,
        times: bool,
    ) -> PyResult<Bound<'py, PyDict>> {
        let change = to_change(change)?;
        let options = ReplayOptions { chain_steps };
        let (outcome, times) = py
            .detach(|| {
                self.with_workspace(|ws| {
                    let outcome = self.graph.replay(&change, ws, &options)?;
                    Ok::<_, WhatIfError>((outcome, times.then(|| self.graph.entity_times(ws.times()))))
                })
            })
            .map_err(to_py_err)?;
        self.outcome_dict(py, outcome, times)
    }

    /// Replays many changes in parallel without the GIL (`threads`: a pool of that size, else
    /// rayon's global one); one outcome dict per change, in order. One bad change fails the batch.
    #[pyo3(signature = (changes, *, chain_steps = 0, threads = None))]
    fn replay_many<'py>(
        &self,
        py: Python<'py>,
        changes: Vec<Bound<'py, PyDict>>,
        chain_steps: usize,
        threads: Option<usize>,
    ) -> PyResult<Vec<Bound<'py, PyDict>>> {
        let changes: Vec<Change> = changes.iter().map(|c| to_change(Some(c))).collect::<PyResult<_>>()?;
        let options = ReplayOptions { chain_steps };
        let outcomes = py.detach(|| self.graph.replay_many(&changes, &options, threads, &self.spare)).map_err(to_py_err)?;
        outcomes.into_iter().map(|o| self.outcome_dict(py, o, None)).collect()
    }

    /// The binding chain back from `node` on the measured times, that node first: dict of arrays
    /// node, kind (NODE_KINDS codes), row, time, slack (the node's own), via (EDGE_KINDS code of the
    /// edge that set its time; "anchor" ends the chain), lag (that edge's).
    #[pyo3(signature = (node, max_steps = 1000))]
    fn binding_chain<'py>(&self, py: Python<'py>, node: i64, max_steps: usize) -> PyResult<Bound<'py, PyDict>> {
        let node = u32::try_from(node).map_err(|_| bad_input(format!("node {node} out of range")))?;
        let links = py.detach(|| self.graph.binding_chain(node, max_steps)).map_err(to_py_err)?;
        let refs: Vec<NodeRef> = links.iter().map(|l| self.graph.describe(l.node).expect("a chain's nodes exist")).collect();
        let d = PyDict::new(py);
        d.set_item("node", links.iter().map(|l| l.node as i64).collect::<Vec<_>>().into_pyarray(py))?;
        d.set_item("kind", refs.iter().map(|r| r.kind as i64).collect::<Vec<_>>().into_pyarray(py))?;
        d.set_item("row", refs.iter().map(|r| r.row as i64).collect::<Vec<_>>().into_pyarray(py))?;
        d.set_item("time", links.iter().map(|l| l.time).collect::<Vec<_>>().into_pyarray(py))?;
        d.set_item("slack", links.iter().map(|l| l.slack).collect::<Vec<_>>().into_pyarray(py))?;
        d.set_item("via", links.iter().map(|l| l.via as i64).collect::<Vec<_>>().into_pyarray(py))?;
        d.set_item("lag", links.iter().map(|l| l.lag).collect::<Vec<_>>().into_pyarray(py))?;
        Ok(d)
    }

    /// Node ids of rows of one kind ("op_start", "op_end", "call_start", "call_end", "transfer":
    /// instance ids, "origin": row 0).
    fn nodes<'py>(&self, py: Python<'py>, kind: &str, rows: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyArray1<i64>>> {
        let kind = node_kind(kind)?;
        let ids = ints(rows, "rows")?
            .into_iter()
            .map(|row| {
                usize::try_from(row)
                    .ok()
                    .and_then(|row| self.graph.node(NodeRef { kind, row }))
                    .map(i64::from)
                    .ok_or_else(|| bad_input(format!("{} row {row} out of range", kind.name())))
            })
            .collect::<PyResult<Vec<i64>>>()?;
        Ok(ids.into_pyarray(py))
    }

    /// The slack of each node (ns): the part of its measured time its dependencies do not explain
    /// (0 for an end, which is its start plus its duration). `slack(nodes("op_start", rows))` is the
    /// per-op unexplained delay: candidates for "idle" causes (zero_slack).
    fn slack<'py>(&self, py: Python<'py>, nodes: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyArray1<i64>>> {
        let slack = ints(nodes, "nodes")?
            .into_iter()
            .map(|node| {
                u32::try_from(node)
                    .ok()
                    .and_then(|n| self.graph.slack_of(n))
                    .ok_or_else(|| bad_input(format!("node {node} out of range (the graph has {} nodes)", self.graph.n_nodes())))
            })
            .collect::<PyResult<Vec<i64>>>()?;
        Ok(slack.into_pyarray(py))
    }

    /// What nodes stand for: (kind codes into NODE_KINDS, rows), two int64 arrays.
    fn describe<'py>(&self, py: Python<'py>, nodes: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyTuple>> {
        let (mut kinds, mut rows) = (Vec::new(), Vec::new());
        for node in ints(nodes, "nodes")? {
            let r = u32::try_from(node)
                .ok()
                .and_then(|n| self.graph.describe(n))
                .ok_or_else(|| bad_input(format!("node {node} out of range (the graph has {} nodes)", self.graph.n_nodes())))?;
            kinds.push(r.kind as i64);
            rows.push(r.row as i64);
        }
        PyTuple::new(py, [kinds.into_pyarray(py), rows.into_pyarray(py)])
    }
}

#[pymodule]
#[pyo3(name = "_native")]
fn native_module(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(read_exports, m)?)?;
    m.add_function(wrap_pyfunction!(read_kineto_traces, m)?)?;
    m.add_function(wrap_pyfunction!(table_specs, m)?)?;
    m.add_function(wrap_pyfunction!(overlaps, m)?)?;
    m.add_function(wrap_pyfunction!(innermost_covering, m)?)?;
    m.add_function(wrap_pyfunction!(nccl_overlap, m)?)?;
    m.add_class::<ReplayGraph>()?;
    m.add_class::<ReplayJob>()?;
    m.add_function(wrap_pyfunction!(rank_summaries, m)?)?;
    m.add_function(wrap_pyfunction!(replay_collectives, m)?)?;
    m.add("CollectiveTraceError", m.py().get_type::<CollectiveTraceError>())?;
    m.add("InputError", m.py().get_type::<InputError>())?;
    m.add("KNOWN_SCHEMA_MAJOR", export::KNOWN_SCHEMA_MAJOR)?;
    m.add("DEFAULT_MAX_TRACE_BYTES", kineto::DEFAULT_MAX_TRACE_BYTES)?;
    m.add("DEFAULT_MAX_GZIP_RATIO", kineto::DEFAULT_MAX_GZIP_RATIO)?;
    m.add_function(wrap_pyfunction!(group_ids, m)?)?;
    m.add_function(wrap_pyfunction!(group_sorted_rows, m)?)?;
    m.add_function(wrap_pyfunction!(group_occurrence, m)?)?;
    m.add_function(wrap_pyfunction!(median_of_others, m)?)?;
    m.add_function(wrap_pyfunction!(infer_stream_waits, m)?)?;
    m.add_function(wrap_pyfunction!(range_host_time, m)?)?;
    m.add_function(wrap_pyfunction!(range_host_pieces, m)?)?;
    m.add_function(wrap_pyfunction!(screen_activity, m)?)?;
    m.add_function(wrap_pyfunction!(trace_ranks, m)?)?;
    m.add_function(wrap_pyfunction!(gap_starts, m)?)?;
    m.add_function(wrap_pyfunction!(run_references, m)?)?;
    m.add_function(wrap_pyfunction!(release_memory, m)?)?;
    m.add_function(wrap_pyfunction!(share_one_heap, m)?)?;
    Ok(())
}

/// Gives the memory freed so far back to the system (glibc's malloc_trim; elsewhere nothing):
/// python/nsys_collective/memory.py, between the analysis's stages. Without the GIL (the graph's
/// build calls it from its thread while the main one works on).
#[pyfunction]
fn release_memory(py: Python<'_>) {
    py.detach(collectivetrace_core::memory::release)
}

/// The threads started from now on allocate from the main heap (glibc's M_ARENA_MAX 1; elsewhere
/// nothing): python/nsys_collective/memory.py, before a command starts any thread.
#[pyfunction]
fn share_one_heap() {
    collectivetrace_core::memory::one_heap()
}

// Grouping of rows by integer keys (crates/core/src/grouping.rs): model/grouping.py's primitives.

type Keys<'py> = Vec<PyReadonlyArray1<'py, i64>>;

fn key_slices<'a>(keys: &'a [PyReadonlyArray1<'_, i64>]) -> PyResult<Vec<&'a [i64]>> {
    keys.iter().map(|k| k.as_slice().map_err(PyErr::from)).collect()
}

fn positions(py: Python<'_>, rows: Vec<usize>) -> Column<'_> {
    rows.into_iter().map(|r| r as i64).collect::<Vec<_>>().into_pyarray(py)
}

/// Each row's group number (rows whose keys are all equal share one), numbered in the order the
/// rows first have them or, `sorted`, in key order; and how many groups there are.
#[pyfunction]
#[pyo3(signature = (keys, sorted = false))]
fn group_ids<'py>(py: Python<'py>, keys: Keys<'py>, sorted: bool) -> PyResult<(Column<'py>, usize)> {
    let keys = key_slices(&keys)?;
    let order = if sorted { grouping::Order::Sorted } else { grouping::Order::FirstAppearance };
    let groups = py.detach(|| grouping::group_ids(&keys, order)).map_err(to_py_err)?;
    Ok((positions(py, groups.id), groups.count))
}

/// The rows sorted by their keys (the first key first), equal keys by `then`, then in row order;
/// and each group's first position in that order.
#[pyfunction]
#[pyo3(signature = (keys, then = None))]
fn group_sorted_rows<'py>(
    py: Python<'py>,
    keys: Keys<'py>,
    then: Option<PyReadonlyArray1<'py, i64>>,
) -> PyResult<(Column<'py>, Column<'py>)> {
    let keys = key_slices(&keys)?;
    let then = then.as_ref().map(|t| t.as_slice()).transpose()?;
    let (rows, first) = py.detach(|| grouping::sorted_rows(&keys, then)).map_err(to_py_err)?;
    Ok((positions(py, rows), positions(py, first)))
}

/// Each row's position among the rows with the same keys, in row order.
#[pyfunction]
fn group_occurrence<'py>(py: Python<'py>, keys: Keys<'py>) -> PyResult<Column<'py>> {
    let keys = key_slices(&keys)?;
    Ok(py.detach(|| grouping::occurrence(&keys)).map_err(to_py_err)?.into_pyarray(py))
}

/// Per row, the median value of the other rows with the same keys (NaN: none; two rows: the
/// other's; three or more: the median of all).
#[pyfunction]
fn median_of_others<'py>(
    py: Python<'py>,
    value: PyReadonlyArray1<'py, i64>,
    keys: Keys<'py>,
) -> PyResult<Bound<'py, PyArray1<f64>>> {
    let (value, keys) = (value.as_slice()?, key_slices(&keys)?);
    Ok(py.detach(|| grouping::median_of_others(value, &keys)).map_err(to_py_err)?.into_pyarray(py))
}

/// Stream waits inferred from one rank's calls (in start order) and its ops' launches
/// (crates/core/src/stream_waits.rs): (record call rows, record streams, wait call rows, wait
/// streams), one entry per paired wait.
#[pyfunction]
#[allow(clippy::too_many_arguments)]
fn infer_stream_waits<'py>(
    py: Python<'py>,
    call_tid: IdArray<'py>,
    call_start: PyReadonlyArray1<'py, i64>,
    is_record: PyReadonlyArray1<'py, bool>,
    is_wait: PyReadonlyArray1<'py, bool>,
    op_tid: IdArray<'py>,
    op_launch: PyReadonlyArray1<'py, i64>,
    op_stream: IdArray<'py>,
) -> PyResult<(Column<'py>, Column<'py>, Column<'py>, Column<'py>)> {
    let calls = stream_waits::Calls {
        tid: call_tid.ids()?,
        start: call_start.as_slice()?,
        is_record: is_record.as_slice()?,
        is_wait: is_wait.as_slice()?,
    };
    let ops = stream_waits::Launches { tid: op_tid.ids()?, launch: op_launch.as_slice()?, stream: op_stream.ids()? };
    let pairs = py.detach(|| stream_waits::pair(&calls, &ops)).map_err(to_py_err)?;
    Ok((
        positions(py, pairs.record_call),
        pairs.record_stream.into_pyarray(py),
        positions(py, pairs.wait_call),
        pairs.wait_stream.into_pyarray(py),
    ))
}

/// A 1-D numpy int32 or int64 array of ids, read as it is (ids::Ids).
#[derive(FromPyObject)]
enum IdArray<'py> {
    I32(PyReadonlyArray1<'py, i32>),
    I64(PyReadonlyArray1<'py, i64>),
}

impl IdArray<'_> {
    fn ids(&self) -> PyResult<ids::Ids<'_>> {
        Ok(match self {
            IdArray::I32(a) => ids::Ids::I32(a.as_slice()?),
            IdArray::I64(a) => ids::Ids::I64(a.as_slice()?),
        })
    }
}

// Host time inside one rank's ranges (crates/core/src/host_time.rs): attribution/whatif/host.py.

/// One rank's calls as host_time reads them: (start, end, gap_start, gap_range, blocking).
type HostCalls<'py> = (
    PyReadonlyArray1<'py, i64>,
    PyReadonlyArray1<'py, i64>,
    PyReadonlyArray1<'py, i64>,
    PyReadonlyArray1<'py, i64>,
    PyReadonlyArray1<'py, bool>,
);

fn host_calls<'a>(c: &'a HostCalls<'_>) -> PyResult<host_time::Calls<'a>> {
    Ok(host_time::Calls {
        start: c.0.as_slice()?,
        end: c.1.as_slice()?,
        gap_start: c.2.as_slice()?,
        gap_range: c.3.as_slice()?,
        blocking: c.4.as_slice()?,
    })
}

/// Per range of one rank, its host time (its gaps; its calls that do not wait for the GPU) and
/// where its first gap began (int64 max: none): three int64 arrays.
#[pyfunction]
fn range_host_time<'py>(
    py: Python<'py>,
    calls: HostCalls<'py>,
    ranges: usize,
) -> PyResult<(Column<'py>, Column<'py>, Column<'py>)> {
    let calls = host_calls(&calls)?;
    let t = py.detach(|| host_time::range_time(&calls, ranges)).map_err(to_py_err)?;
    Ok((t.gaps.into_pyarray(py), t.calls.into_pyarray(py), t.first_gap.into_pyarray(py)))
}

/// The host-time pieces of the ranges with a row (`row_of`, -1: none), in row order, each row's in
/// time order: (row, call, is_call, ns).
#[pyfunction]
fn range_host_pieces<'py>(
    py: Python<'py>,
    calls: HostCalls<'py>,
    row_of: PyReadonlyArray1<'py, i64>,
    with_calls: bool,
) -> PyResult<(Column<'py>, Column<'py>, Bound<'py, PyArray1<bool>>, Column<'py>)> {
    let (calls, row_of) = (host_calls(&calls)?, row_of.as_slice()?);
    let p = py.detach(|| host_time::pieces(&calls, row_of, with_calls)).map_err(to_py_err)?;
    Ok((p.row.into_pyarray(py), positions(py, p.call), p.is_call.into_pyarray(py), p.ns.into_pyarray(py)))
}

// Per-rank max-plus summaries and the replay over collectives (whatif::summary): the map stage
// condenses each rank's graph; the reduce replays the job from the summaries alone.

const SUMMARY_KEYS: [&str; 6] = ["member_start", "member_end", "konst", "off", "input", "weight"];

fn summary_dict<'py>(py: Python<'py>, s: whatif::Summary) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("member_start", s.member_start.into_pyarray(py))?;
    d.set_item("member_end", s.member_end.into_pyarray(py))?;
    d.set_item("n_steps", s.n_steps)?;
    d.set_item("konst", s.konst.into_pyarray(py))?;
    d.set_item("off", s.off.into_iter().map(i64::from).collect::<Vec<_>>().into_pyarray(py))?;
    d.set_item("input", s.input.into_iter().map(i64::from).collect::<Vec<_>>().into_pyarray(py))?;
    d.set_item("weight", s.weight.into_pyarray(py))?;
    Ok(d)
}

fn summary_of(d: &Bound<'_, PyDict>) -> PyResult<whatif::Summary> {
    let get = |k: &str| -> PyResult<Vec<i64>> {
        let v = d.get_item(k)?.ok_or_else(|| bad_input(format!("summary: {k:?} missing (keys: {})", SUMMARY_KEYS.join(", "))))?;
        ints(&v, k)
    };
    let narrow = |v: Vec<i64>, k: &str| -> PyResult<Vec<u32>> {
        v.into_iter().map(|x| u32::try_from(x).map_err(|_| bad_input(format!("summary[{k:?}]: {x} out of range")))).collect()
    };
    let n_steps: usize = d.get_item("n_steps")?.ok_or_else(|| bad_input("summary: \"n_steps\" missing".into()))?.extract()?;
    let s = whatif::Summary {
        member_start: get("member_start")?,
        member_end: get("member_end")?,
        n_steps,
        konst: get("konst")?,
        off: narrow(get("off")?, "off")?,
        input: narrow(get("input")?, "input")?,
        weight: get("weight")?,
    };
    let rows = s.konst.len();
    let consistent = s.member_end.len() == s.n_members()
        && rows == s.n_members() + s.n_steps + 1
        && s.off.len() == rows + 1
        && s.off.first() == Some(&0)
        && s.off.windows(2).all(|w| w[0] <= w[1])
        && s.off[rows] as usize == s.input.len()
        && s.weight.len() == s.input.len()
        && s.input.iter().all(|&m| (m as usize) < s.n_members());
    if !consistent {
        return Err(bad_input("summary: inconsistent arrays (not one made by rank_summaries)".into()));
    }
    Ok(s)
}

/// rank_summaries(graph, changes=None) -> list of summary dicts, one per change (None: the
/// unchanged rank only). `graph` is a ReplayGraph of ONE rank (rank 0, its member instances dense).
/// A summary gives the rank's arrival at each member row, its end of each step and its last end
/// as max-plus functions of its member ops' ends (whatif::summary): member_start, member_end (the
/// measured), n_steps, and rows konst/off/input/weight (row k = max(konst[k], max over
/// j in off[k]:off[k+1] of end[input[j]] + weight[j])). A change's "member"/"member_ns" are ignored
/// here: give them to replay_collectives. Runs without the GIL, changes in parallel.
#[pyfunction]
#[pyo3(signature = (graph, changes = None))]
fn rank_summaries<'py>(py: Python<'py>, graph: PyRef<'py, ReplayGraph>, changes: Option<Vec<Bound<'py, PyDict>>>) -> PyResult<Vec<Bound<'py, PyDict>>> {
    let changes: Vec<Change> = match changes {
        None => vec![Change::default()],
        Some(list) => list.iter().map(|c| to_change(Some(c))).collect::<PyResult<_>>()?,
    };
    let g = &graph.graph;
    let summaries = py.detach(|| g.summaries(&changes)).map_err(to_py_err)?;
    summaries.into_iter().map(|s| summary_dict(py, s)).collect()
}

/// replay_collectives(summaries, member_rows, member_instance, n_steps, change=None) -> outcome
/// dict (as ReplayGraph.replay's, without chains): the job replayed from its ranks' summaries over
/// its collectives only. summaries[r] and member_rows[r] (the job's member row of each of its
/// member rows) are dense rank r's; member_instance: per member row of the job, its instance;
/// change: only "member"/"member_ns" (transfer times) are read, by job member row.
#[pyfunction]
#[pyo3(signature = (summaries, member_rows, member_instance, n_steps, change = None))]
fn replay_collectives<'py>(
    py: Python<'py>,
    summaries: Vec<Bound<'py, PyDict>>,
    member_rows: Vec<Bound<'py, PyAny>>,
    member_instance: &Bound<'py, PyAny>,
    n_steps: usize,
    change: Option<&Bound<'py, PyDict>>,
) -> PyResult<Bound<'py, PyDict>> {
    if summaries.len() != member_rows.len() {
        return Err(bad_input(format!("{} summaries, {} member_rows", summaries.len(), member_rows.len())));
    }
    let summaries: Vec<whatif::Summary> = summaries.iter().map(summary_of).collect::<PyResult<_>>()?;
    let to_u32 = |v: Vec<i64>, what: &str| -> PyResult<Vec<u32>> {
        v.into_iter().map(|x| u32::try_from(x).map_err(|_| bad_input(format!("{what}: {x} out of range")))).collect()
    };
    let rows: Vec<Vec<u32>> = member_rows.iter().map(|r| to_u32(ints(r, "member_rows")?, "member_rows")).collect::<PyResult<_>>()?;
    let instance = to_u32(ints(member_instance, "member_instance")?, "member_instance")?;
    let transfers = to_change(change)?.transfers;
    let parts: Vec<whatif::RankPart> = summaries.iter().zip(&rows).map(|(summary, member_row)| whatif::RankPart { summary, member_row }).collect();
    let o = py.detach(|| whatif::replay_collectives(&parts, &instance, n_steps, &transfers)).map_err(to_py_err)?;
    let d = PyDict::new(py);
    let ranks = parts.len();
    d.set_item("arrival", o.arrival.into_pyarray(py))?;
    d.set_item("transfer_start", o.transfer_start.into_pyarray(py))?;
    d.set_item("wait", o.wait.into_pyarray(py))?;
    d.set_item("total_wait", o.total_wait)?;
    d.set_item("step_end", o.step_end.into_pyarray(py))?;
    d.set_item("step_rank_end", o.step_rank_end.into_pyarray(py).reshape([n_steps, ranks])?)?;
    d.set_item("rank_end", o.rank_end.into_pyarray(py))?;
    Ok(d)
}

// The ranks' traces from their export's tables (crates/core/src/rank_trace.rs): model/trace.py's
// screening of GPU work, GPU items, counts and host calls.

use collectivetrace_core::rank_trace;

/// The named int64 columns of an export table (a dict of numpy arrays; other columns ignored).
struct TableColumns<'py> {
    arrays: Vec<PyReadonlyArray1<'py, i64>>,
}

impl<'py> TableColumns<'py> {
    fn of(table: &Bound<'py, PyDict>, what: &str, names: &[&str]) -> PyResult<Self> {
        let mut arrays = Vec::with_capacity(names.len());
        for &name in names {
            let value = table
                .get_item(name)?
                .ok_or_else(|| pyo3::exceptions::PyValueError::new_err(format!("{what}: column {name:?} missing")))?;
            arrays.push(value.extract::<PyReadonlyArray1<'py, i64>>().map_err(|_| {
                pyo3::exceptions::PyValueError::new_err(format!("{what}[{name:?}]: a 1-D numpy int64 array is needed"))
            })?);
        }
        Ok(TableColumns { arrays })
    }

    fn slices(&self) -> PyResult<Vec<&[i64]>> {
        self.arrays.iter().map(|a| a.as_slice().map_err(PyErr::from)).collect()
    }
}

const ACTIVITY: [&str; 6] = ["start", "end", "pid", "device", "stream", "correlation"];
const RUNTIME: [&str; 6] = ["pid", "tid", "start", "end", "correlation", "name"];

fn activity<'a>(c: &[&'a [i64]]) -> rank_trace::Activity<'a> {
    rank_trace::Activity { start: c[0], end: c[1], pid: c[2], device: c[3], stream: c[4], correlation: c[5] }
}

fn runtime_of<'a>(c: &[&'a [i64]]) -> rank_trace::Runtime<'a> {
    rank_trace::Runtime { pid: c[0], tid: c[1], start: c[2], end: c[3], correlation: c[4], name: c[5] }
}

/// An int32 or int64 column as a numpy array.
fn ints_array(py: Python<'_>, ints: rank_trace::Ints) -> Bound<'_, PyAny> {
    match ints {
        rank_trace::Ints::I32(v) => v.into_pyarray(py).into_any(),
        rank_trace::Ints::I64(v) => v.into_pyarray(py).into_any(),
    }
}

/// gap_starts(tid, end, thread_origin) -> where the host work before each call (in start order)
/// began: the previous call's end on its thread, a thread's first call its origin
/// (model/trace.py's HostCalls.gap_start).
#[pyfunction]
fn gap_starts<'py>(
    py: Python<'py>,
    tid: IdArray<'py>,
    end: PyReadonlyArray1<'py, i64>,
    thread_origin: PyReadonlyArray1<'py, i64>,
) -> PyResult<Column<'py>> {
    let (tid, end, thread_origin) = (tid.ids()?, end.as_slice()?, thread_origin.as_slice()?);
    Ok(py.detach(|| rank_trace::gap_starts(tid, end, thread_origin)).map_err(to_py_err)?.into_pyarray(py))
}

/// screen_activity(table, limits) -> (bad_times, bad_ids, good, ranks): a GPU activity table's
/// rows with impossible times counted, then those with impossible ids (limits: (lo, hi,
/// max_duration, max_device, max_pid, max_stream), as rank_trace::Limits), which rows are kept (a
/// bool array, None where all are) and the ranks [(pid, device), ...] of those, sorted.
#[pyfunction]
fn screen_activity<'py>(
    py: Python<'py>,
    table: &Bound<'py, PyDict>,
    limits: (i64, i64, i64, i64, i64, i64),
) -> PyResult<(usize, usize, Option<Bound<'py, PyArray1<bool>>>, Vec<(i64, i64)>)> {
    let t = TableColumns::of(table, "activity", &ACTIVITY)?;
    let ts = t.slices()?;
    let (lo, hi, max_duration, max_device, max_pid, max_stream) = limits;
    let limits = rank_trace::Limits { lo, hi, max_duration, max_device, max_pid, max_stream };
    let s = py.detach(|| rank_trace::screen(&activity(&ts), &limits)).map_err(to_py_err)?;
    Ok((s.bad_times, s.bad_ids, s.good.map(|g| g.into_pyarray(py)), s.ranks))
}

/// One rank to trace: (pid, device, range_start, range_end, range_tid, range_name).
type RankArgs<'py> = (i64, i64, PyReadonlyArray1<'py, i64>, PyReadonlyArray1<'py, i64>, PyReadonlyArray1<'py, i64>, PyReadonlyArray1<'py, i64>);

/// trace_ranks(kernels, is_nccl, copies, runtime, ranks, n_strings) -> (traces, strings): every
/// rank of an export (its tables screened) traced without the GIL. `is_nccl`: per kernel row;
/// `copies`: [(memcpy table, its label's string id), ...]; `ranks`: [(pid, device, range_start,
/// range_end, range_tid, range_name), ...]; `n_strings`: the export's string count. Per rank:
/// (GpuItems' columns, (kernels, nccl_kernels, nccl_time_ns, compute_overlap_ns, first_ns,
/// last_ns), HostCalls' columns but `kind`, the ranges' names); names are ids into the table
/// whose entries are the export's string ids `strings`.
#[pyfunction]
fn trace_ranks<'py>(
    py: Python<'py>,
    kernels: &Bound<'py, PyDict>,
    is_nccl: PyReadonlyArray1<'py, bool>,
    copies: Vec<(Bound<'py, PyDict>, i64)>,
    runtime: &Bound<'py, PyDict>,
    ranks: Vec<RankArgs<'py>>,
    n_strings: usize,
) -> PyResult<(Vec<Bound<'py, PyTuple>>, Column<'py>)> {
    let k = TableColumns::of(kernels, "kernels", &ACTIVITY)?;
    let kn = TableColumns::of(kernels, "kernels", &["name", "short_name", "grid_x", "grid_y", "grid_z"])?;
    let copy_columns: Vec<(TableColumns, i64)> =
        copies.iter().map(|(t, label)| Ok((TableColumns::of(t, "copies", &ACTIVITY)?, *label))).collect::<PyResult<_>>()?;
    let rt = TableColumns::of(runtime, "runtime", &RUNTIME)?;
    let (ks, kns, rts) = (k.slices()?, kn.slices()?, rt.slices()?);
    let copy_slices: Vec<(Vec<&[i64]>, i64)> = copy_columns.iter().map(|(c, l)| Ok((c.slices()?, *l))).collect::<PyResult<_>>()?;
    let is_nccl = is_nccl.as_slice()?;
    let names = rank_trace::KernelColumns { name: kns[0], short_name: kns[1], grid_x: kns[2], grid_y: kns[3], grid_z: kns[4], is_nccl };
    let copies: Vec<rank_trace::Copies> = copy_slices.iter().map(|(c, l)| rank_trace::Copies { table: activity(c), label: *l }).collect();
    let ranks: Vec<rank_trace::Rank> = ranks
        .iter()
        .map(|(pid, device, start, end, tid, name)| {
            let ranges = rank_trace::Ranges { start: start.as_slice()?, end: end.as_slice()?, tid: tid.as_slice()?, name: name.as_slice()? };
            Ok(rank_trace::Rank { pid: *pid, device: *device, ranges })
        })
        .collect::<PyResult<_>>()?;
    let traced = py
        .detach(|| rank_trace::trace_ranks(&activity(&ks), &names, &copies, &runtime_of(&rts), &ranks, n_strings))
        .map_err(to_py_err)?;
    let mut out = Vec::with_capacity(traced.ranks.len());
    for rank_trace::RankTrace { gpu, counts: c, calls, range_name } in traced.ranks {
        let g = PyDict::new(py);
        g.set_item("start", gpu.start.into_pyarray(py))?;
        g.set_item("end", gpu.end.into_pyarray(py))?;
        g.set_item("name", gpu.name.into_pyarray(py))?;
        g.set_item("short_name", gpu.short_name.into_pyarray(py))?;
        g.set_item("launch_call", ints_array(py, gpu.launch_call))?;
        g.set_item("is_nccl", gpu.is_nccl.into_pyarray(py))?;
        g.set_item("is_kernel", gpu.is_kernel.into_pyarray(py))?;
        g.set_item("ctas", ints_array(py, gpu.ctas))?;
        g.set_item("stream", ints_array(py, gpu.stream))?;
        g.set_item("correlation", ints_array(py, gpu.correlation))?;
        let h = PyDict::new(py);
        for (name, copied) in [("start", calls.start), ("end", calls.end)] {
            match copied {
                Some(v) => h.set_item(name, v.into_pyarray(py))?,
                None => h.set_item(name, runtime.get_item(name)?)?, // the runtime table's own column
            }
        }
        h.set_item("tid", ints_array(py, calls.tid))?;
        h.set_item("correlation", ints_array(py, calls.correlation))?;
        h.set_item("name", calls.name.into_pyarray(py))?;
        h.set_item("thread_origin", calls.thread_origin.into_pyarray(py))?;
        h.set_item("gap_range", ints_array(py, calls.gap_range))?;
        let counts = (c.kernels, c.nccl_kernels, c.nccl_time_ns, c.compute_overlap_ns, c.first_ns, c.last_ns);
        out.push((g, counts, h, range_name.into_pyarray(py)).into_pyobject(py)?);
    }
    Ok((out, traced.strings.into_pyarray(py)))
}

/// One rank's runs as `run_references` takes them: (program, step, name, start, end, keep).
type RankRuns<'py> = (
    i64,
    IdArray<'py>,
    IdArray<'py>,
    PyReadonlyArray1<'py, i64>,
    PyReadonlyArray1<'py, i64>,
    PyReadonlyArray1<'py, bool>,
);

/// Per rank: each row's occurrence among the rank's runs of its step and name (-1: no run), and
/// the median of the others and of the other ranks in its group (program, step, name, occurrence).
#[pyfunction]
#[allow(clippy::type_complexity)]
fn run_references<'py>(
    py: Python<'py>,
    ranks: Vec<RankRuns<'py>>,
) -> PyResult<Vec<(Bound<'py, PyArray1<i32>>, Bound<'py, PyArray1<f64>>, Bound<'py, PyArray1<f64>>)>> {
    let runs = ranks
        .iter()
        .map(|(program, step, name, start, end, keep)| {
            Ok(grouping::RankRuns {
                program: *program,
                step: step.ids()?,
                name: name.ids()?,
                start: start.as_slice()?,
                end: end.as_slice()?,
                keep: keep.as_slice()?,
            })
        })
        .collect::<PyResult<Vec<_>>>()?;
    let out = py.detach(|| grouping::run_references(&runs)).map_err(to_py_err)?;
    Ok(out
        .into_iter()
        .map(|r| (r.occurrence.into_pyarray(py), r.of_others.into_pyarray(py), r.of_other_ranks.into_pyarray(py)))
        .collect())
}

// The what-if graph's input: the ranks' own columns, borrowed (python/.../whatif/graph.py): no
// job-wide table on either side, no copy of the columns.

/// One table's parts: a dict of columns, or a list of them (rows in list order).
fn table_parts<'py>(table: &str, value: Option<&Bound<'py, PyAny>>) -> PyResult<Vec<Bound<'py, PyDict>>> {
    let Some(value) = value.filter(|v| !v.is_none()) else { return Ok(Vec::new()) };
    if let Ok(d) = value.cast::<PyDict>() {
        return Ok(vec![d.clone()]);
    }
    value.extract::<Vec<Bound<'py, PyDict>>>().map_err(|_| bad_input(format!("{table}: a dict of columns or a list of them is needed")))
}

/// The arrays a job's columns borrow, kept alive with it (a strided array's values copied).
#[derive(Default)]
struct Kept {
    arrays: Vec<Py<PyAny>>,
    copies: Vec<Vec<i64>>,
}

impl Kept {
    /// A column of the part: a 1-D numpy array of any integer or bool dtype, borrowed, or one int,
    /// or (an int64 array, an int): its values plus the int, borrowed.
    fn column(&mut self, value: &Bound<'_, PyAny>, what: &str) -> PyResult<whatif::Column<'static>> {
        use whatif::Column as C;
        if let Ok(v) = value.extract::<i64>() {
            return Ok(C::All(v));
        }
        if let Ok((values, shift)) = value.extract::<(Bound<'_, PyAny>, i64)>() {
            return match self.column(&values, what)? {
                C::I64(s) => Ok(C::Shifted(s, shift)),
                _ => Err(bad_input(format!("{what}: (values, shift) needs int64 values"))),
            };
        }
        if let Ok(a) = value.cast::<PyArray1<u64>>() {
            if let Some(v) = a.readonly().as_array().iter().find(|&&v| v > i64::MAX as u64) {
                return Err(bad_input(format!("{what}: value {v} out of range")));
            }
        }
        macro_rules! try_dtype {
            ($($t:ty => $variant:ident),*) => {$(
                if let Ok(a) = value.cast::<PyArray1<$t>>() {
                    let a = a.readonly();
                    return Ok(match a.as_slice() {
                        Ok(s) => {
                            self.arrays.push(value.clone().unbind());
                            // SAFETY: the array is kept alive in `self.arrays` as long as the job
                            // borrowing it, and not changed meanwhile (ReplayJob's contract).
                            C::$variant(unsafe { std::slice::from_raw_parts(s.as_ptr(), s.len()) })
                        }
                        Err(_) => {
                            self.copies.push(a.as_array().iter().map(|&v| v as i64).collect());
                            let copy = self.copies.last().unwrap();
                            // SAFETY: the copy's buffer is kept in `self.copies`, never changed.
                            C::I64(unsafe { std::slice::from_raw_parts(copy.as_ptr(), copy.len()) })
                        }
                    });
                }
            )*};
        }
        try_dtype!(i64 => I64, i32 => I32, i16 => I16, i8 => I8, u64 => U64, u32 => U32, u16 => U16, u8 => U8, bool => Bool);
        Err(bad_input(format!("{what}: a 1-D numpy array of integers is needed")))
    }

    /// A table's parts, their columns by name in the order given (an optional one a part lacks
    /// takes its default there).
    fn parts<const K: usize>(&mut self, table: &str, parts: &[Bound<'_, PyDict>], names: [&str; K], optional: &[(&str, i64)]) -> PyResult<Vec<[whatif::Column<'static>; K]>> {
        let mut out = Vec::with_capacity(parts.len());
        for (k, part) in parts.iter().enumerate() {
            for key in part.keys() {
                let key: String = key.extract()?;
                if !names.contains(&key.as_str()) {
                    return Err(bad_input(format!("{table}[{k}]: unknown column {key:?} (columns: {})", names.join(", "))));
                }
            }
            let mut columns = [whatif::Column::All(0); K];
            let mut n: Option<usize> = None; // the part's length: that of its first array
            for (j, name) in names.iter().enumerate() {
                let what = format!("{table}[{k}][{name:?}]");
                columns[j] = match (part.get_item(*name)?, optional.iter().find(|(o, _)| o == name)) {
                    (Some(v), _) => self.column(&v, &what)?,
                    (None, Some(&(_, default))) => whatif::Column::All(default),
                    (None, None) => return Err(bad_input(format!("{table}[{k}]: column {name:?} missing"))),
                };
                if let Some(len) = columns[j].len() {
                    match n {
                        None => n = Some(len),
                        Some(n) if n != len => return Err(bad_input(format!("{what}: {len} rows, the part's other columns {n}"))),
                        _ => {}
                    }
                }
            }
            out.push(columns);
        }
        Ok(out)
    }
}

/// A job's tables, borrowing the arrays they came from (dropped first: `kept` outlives `job`).
struct BorrowedJob {
    job: whatif::Job<'static>,
    _kept: Kept,
}

/// The input of a job's ReplayGraph from per-rank parts (see ReplayGraph for the tables):
/// ReplayJob(calls, ops, members, syncs=None, events=None), each table a dict of columns or a list
/// of them (one or more per rank, rows in list order), columns 1-D numpy arrays of any integer or
/// bool dtype, borrowed as they are (none is copied: they must not change until the job is built),
/// a part's `rank` an array or one int. `build(...)` (ReplayGraph's keywords) makes the graph
/// without the GIL and lets the arrays go: a job is built once.
#[pyclass(frozen, module = "nsys_collective._native")]
struct ReplayJob {
    input: Mutex<Option<BorrowedJob>>,
}

#[pymethods]
impl ReplayJob {
    #[new]
    #[pyo3(signature = (calls, ops, members, syncs = None, events = None))]
    fn new(
        calls: &Bound<'_, PyAny>,
        ops: &Bound<'_, PyAny>,
        members: &Bound<'_, PyAny>,
        syncs: Option<&Bound<'_, PyAny>>,
        events: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<ReplayJob> {
        let mut kept = Kept::default();
        let calls = kept.parts(
            "calls",
            &table_parts("calls", Some(calls))?,
            ["rank", "thread", "start", "end", "correlation", "blocking", "segment", "own_segment"],
            &[("blocking", 0), ("segment", -1), ("own_segment", -1)],
        )?;
        let ops = kept.parts("ops", &table_parts("ops", Some(ops))?, ["rank", "stream", "start", "end", "launch", "step"], &[("step", -1)])?;
        let members = kept.parts("members", &table_parts("members", Some(members))?, ["instance", "op"], &[])?;
        let syncs = kept.parts(
            "syncs",
            &table_parts("syncs", syncs)?,
            ["rank", "kind", "stream", "event", "correlation", "record_correlation", "inferred"],
            &[("record_correlation", -1), ("inferred", 0)],
        )?;
        let events = kept.parts("events", &table_parts("events", events)?, ["rank", "stream", "event", "correlation"], &[])?;
        let job = whatif::Job {
            calls: calls
                .into_iter()
                .map(|[rank, thread, start, end, correlation, blocking, segment, own_segment]| whatif::Calls {
                    rank,
                    thread,
                    start,
                    end,
                    correlation,
                    blocking,
                    segment,
                    own_segment,
                })
                .collect(),
            ops: ops.into_iter().map(|[rank, stream, start, end, launch, step]| whatif::Ops { rank, stream, start, end, launch, step }).collect(),
            syncs: syncs
                .into_iter()
                .map(|[rank, kind, stream, event, correlation, record_correlation, inferred]| whatif::SyncRecords {
                    rank,
                    kind,
                    stream,
                    event,
                    correlation,
                    record_correlation,
                    inferred,
                })
                .collect(),
            events: events.into_iter().map(|[rank, stream, event, correlation]| whatif::EventRecords { rank, stream, event, correlation }).collect(),
            members: members.into_iter().map(|[instance, op]| whatif::Members { instance, op }).collect(),
        };
        Ok(ReplayJob { input: Mutex::new(Some(BorrowedJob { job, _kept: kept })) })
    }

    /// The job's ReplayGraph; raises InputError as ReplayGraph does, CollectiveTraceError when the
    /// job was built already.
    #[pyo3(signature = (*, tolerance_ns = 5000, launch_latency_ns = None, latency_percentile = 0.05))]
    fn build(&self, py: Python<'_>, tolerance_ns: i64, launch_latency_ns: Option<i64>, latency_percentile: f64) -> PyResult<ReplayGraph> {
        let input = self.input.lock().unwrap().take().ok_or_else(|| CollectiveTraceError::new_err("this ReplayJob was built already"))?;
        let options = whatif::Options { tolerance_ns, launch_latency_ns, latency_percentile };
        let graph = py.detach(|| Graph::build(&input.job, &options)).map_err(to_py_err)?;
        drop(input); // the arrays let go, with the GIL held
        Ok(ReplayGraph { graph, spare: Mutex::new(Vec::new()) })
    }
}
