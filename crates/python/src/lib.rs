//! The Python bindings of the core (`nsys_collective._native`), and the one place where its errors
//! become Python exceptions. Arguments become Rust values first; the work runs without the GIL.

use collectivetrace_core::error::ReadError;
use collectivetrace_core::export::{self, Export};
use collectivetrace_core::lateness::{self, RankOps, Target};
use collectivetrace_core::{intervals, kineto, tables};
use numpy::{IntoPyArray, PyArray1, PyReadonlyArray1, PyReadonlyArray2};
use pyo3::create_exception;
use pyo3::exceptions::PyException;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use std::path::PathBuf;

// Defined under their public module path, so that they pickle (Dask sends them between processes)
// and print as `nsys_collective.errors.InputError`.
create_exception!(nsys_collective.errors, CollectiveTraceError, PyException, "Base of every CollectiveTrace error.");
create_exception!(
    nsys_collective.errors,
    InputError,
    CollectiveTraceError,
    "Unusable input: missing, empty, not an export, truncated, over a limit, more than memory holds. The CLI exits with status 2."
);

fn to_py_err(err: ReadError) -> PyErr {
    match err {
        ReadError::Threads(_) => CollectiveTraceError::new_err(err.to_string()),
        _ => InputError::new_err(err.to_string()),
    }
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

/// Lateness accounting of straggler s against reference q for many collectives (see lateness.rs).
/// `windows_s`/`windows_q`: per target, window start indices, smallest window first, -1 = none.
/// Returns (explanations, blames) as dicts of columns.
#[pyfunction]
#[allow(clippy::too_many_arguments)]
fn explain_lateness<'py>(
    py: Python<'py>,
    s: (PyReadonlyArray1<'py, i64>, PyReadonlyArray1<'py, i64>, PyReadonlyArray1<'py, i64>, PyReadonlyArray1<'py, i64>),
    q: (PyReadonlyArray1<'py, i64>, PyReadonlyArray1<'py, i64>, PyReadonlyArray1<'py, i64>, PyReadonlyArray1<'py, i64>),
    target_s: PyReadonlyArray1<'py, i64>,
    target_q: PyReadonlyArray1<'py, i64>,
    windows_s: PyReadonlyArray2<'py, i64>,
    windows_q: PyReadonlyArray2<'py, i64>,
    tol: i64,
) -> PyResult<(Bound<'py, PyDict>, Bound<'py, PyDict>)> {
    let s_ops = RankOps { start: s.0.as_slice()?, end: s.1.as_slice()?, name: s.2.as_slice()?, launch: s.3.as_slice()? };
    let q_ops = RankOps { start: q.0.as_slice()?, end: q.1.as_slice()?, name: q.2.as_slice()?, launch: q.3.as_slice()? };
    let (ws, wq) = (windows_s.as_array(), windows_q.as_array());
    let targets: Vec<Target> = target_s
        .as_slice()?
        .iter()
        .zip(target_q.as_slice()?)
        .enumerate()
        .map(|(t, (&ts, &tq))| Target {
            s: ts as usize,
            q: tq as usize,
            windows: ws.row(t).iter().zip(wq.row(t)).filter(|(a, b)| **a >= 0 && **b >= 0).map(|(&a, &b)| (a as usize, b as usize)).collect(),
        })
        .collect();
    let n = (s_ops.start.len(), q_ops.start.len());
    if targets.iter().any(|t| t.s >= n.0 || t.q >= n.1 || t.windows.iter().any(|&(a, b)| a > t.s || b > t.q)) {
        return Err(pyo3::exceptions::PyValueError::new_err("target or window index out of range"));
    }
    let (explanations, blames) = py.detach(|| lateness::explain(&s_ops, &q_ops, &targets, tol));
    let e = PyDict::new(py);
    e.set_item("lateness", explanations.iter().map(|x| x.lateness).collect::<Vec<_>>().into_pyarray(py))?;
    e.set_item("unexplained", explanations.iter().map(|x| x.unexplained).collect::<Vec<_>>().into_pyarray(py))?;
    e.set_item("matched", explanations.iter().map(|x| x.matched).collect::<Vec<_>>())?;
    e.set_item("on_time_point", explanations.iter().map(|x| x.on_time_point).collect::<Vec<_>>())?;
    let b = PyDict::new(py);
    b.set_item("target", blames.iter().map(|x| x.target as i64).collect::<Vec<_>>().into_pyarray(py))?;
    b.set_item("cause", blames.iter().map(|x| x.cause as i64).collect::<Vec<_>>().into_pyarray(py))?;
    b.set_item("key", blames.iter().map(|x| x.key).collect::<Vec<_>>().into_pyarray(py))?;
    b.set_item("ns", blames.iter().map(|x| x.ns).collect::<Vec<_>>().into_pyarray(py))?;
    b.set_item("ready", blames.iter().map(|x| x.ready).collect::<Vec<_>>().into_pyarray(py))?;
    Ok((e, b))
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

#[pymodule]
#[pyo3(name = "_native")]
fn native_module(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(read_exports, m)?)?;
    m.add_function(wrap_pyfunction!(read_kineto_traces, m)?)?;
    m.add_function(wrap_pyfunction!(table_specs, m)?)?;
    m.add_function(wrap_pyfunction!(overlaps, m)?)?;
    m.add_function(wrap_pyfunction!(explain_lateness, m)?)?;
    m.add("CollectiveTraceError", m.py().get_type::<CollectiveTraceError>())?;
    m.add("InputError", m.py().get_type::<InputError>())?;
    m.add("KNOWN_SCHEMA_MAJOR", export::KNOWN_SCHEMA_MAJOR)?;
    m.add("DEFAULT_MAX_TRACE_BYTES", kineto::DEFAULT_MAX_TRACE_BYTES)?;
    m.add("DEFAULT_MAX_GZIP_RATIO", kineto::DEFAULT_MAX_GZIP_RATIO)?;
    Ok(())
}
