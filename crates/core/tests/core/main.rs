//! The core's integration tests in one test binary: each binary is linked with the release
//! profile's LTO, which is most of their build time in the test command (issue 21). The fuzz run
//! stays a binary of its own: it checks its process's peak memory.

mod kineto;
mod real_exports;
mod whatif;
