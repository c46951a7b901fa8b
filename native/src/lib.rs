//! Reader of Nsight Systems SQLite exports (and PyTorch profiler traces, `kineto`) for CollectiveTrace.
//!
//! Pure Rust: `cargo test` needs no Python. The optional `python` feature adds the bindings,
//! all in `python.rs`.

pub mod error;
pub mod export;
pub mod floor;
mod scan;
pub mod intervals;
pub mod kineto;
pub mod lateness;
pub mod schema;
pub mod strings;
pub mod tables;

#[cfg(feature = "python")]
mod python;

pub use error::ReadError;
pub use export::{read_export, read_exports, Export, Session};
pub use kineto::{read_kineto, read_kineto_traces};
pub use tables::Table;
