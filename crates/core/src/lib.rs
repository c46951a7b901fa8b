//! CollectiveTrace's core: readers of Nsight Systems SQLite exports and PyTorch profiler (Kineto)
//! traces into whole columns, and the interval and attribution kernels the analysis runs on them.
//!
//! Pure Rust, no Python: `cargo test` runs it alone. The bindings are the `collectivetrace-python`
//! crate beside this one.

pub mod error;
pub mod export;
pub mod grouping;
pub mod host_time;
pub mod ids;
pub mod intervals;
pub mod kineto;
pub mod memory;
pub mod payload;
mod scan;
mod stable;
pub mod schema;
pub mod stream_waits;
pub mod strings;
pub mod tables;
pub mod times;
pub mod whatif;

pub use error::ReadError;
pub use export::{read_export, read_exports, Export, Session};
pub use kineto::{read_kineto, read_kineto_traces, read_kineto_traces_with, read_kineto_with, KinetoLimits};
pub use tables::Table;
pub mod rank_trace;
