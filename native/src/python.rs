//! The Python bindings, and the one place where reader errors become Python exceptions.

use crate::error::ReadError;
use crate::export::{self, Export};
use numpy::IntoPyArray;
use pyo3::create_exception;
use pyo3::exceptions::PyException;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use std::path::PathBuf;

create_exception!(_native, CollectiveTraceError, PyException, "Base of every CollectiveTrace error.");
create_exception!(
    _native,
    InputError,
    CollectiveTraceError,
    "Unusable input: missing, empty, not an export, truncated. The CLI exits with status 2."
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

/// SQLite summing the reader's columns of one export in SQL: the benchmark floor.
#[pyfunction]
fn floor_scan(py: Python<'_>, path: PathBuf) -> PyResult<i64> {
    py.detach(|| crate::floor::floor_scan(&path)).map_err(to_py_err)
}

/// The table declarations of the reader, so the pure-Python reference reader reads the same
/// columns: `[(name, [stored table, ...], [(column, [stored column, ...], kind), ...]), ...]`.
#[pyfunction]
fn table_specs() -> Vec<(&'static str, Vec<&'static str>, Vec<(&'static str, Vec<&'static str>, String)>)> {
    crate::tables::ALL
        .iter()
        .map(|spec| {
            let columns = spec.columns().map(|c| (c.name, c.sources.to_vec(), format!("{:?}", c.kind))).collect();
            (spec.name, spec.tables.to_vec(), columns)
        })
        .collect()
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
    m.add_function(wrap_pyfunction!(floor_scan, m)?)?;
    m.add_function(wrap_pyfunction!(table_specs, m)?)?;
    m.add("CollectiveTraceError", m.py().get_type::<CollectiveTraceError>())?;
    m.add("InputError", m.py().get_type::<InputError>())?;
    m.add("KNOWN_SCHEMA_MAJOR", export::KNOWN_SCHEMA_MAJOR)?;
    Ok(())
}
