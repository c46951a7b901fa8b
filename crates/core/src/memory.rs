//! Allocations sized by what a file holds (rows, events) are fallible: running out of memory is a
//! `ReadError::OutOfMemory`, never an abort (a failed infallible allocation aborts the process,
//! and with it the Python interpreter that called the reader). And [`release`]: freed memory handed
//! back to the system between the stages of a long computation, all of it where the process's
//! threads share one heap ([`one_heap`]).

use std::collections::TryReserveError;

/// `Vec::push`, growing fallibly.
pub(crate) fn push<T>(column: &mut Vec<T>, value: T) -> Result<(), TryReserveError> {
    if column.len() == column.capacity() {
        column.try_reserve(column.len().max(1024))?;
    }
    column.push(value);
    Ok(())
}

/// An empty vector with room for `n` values.
pub(crate) fn with_capacity<T>(n: usize) -> Result<Vec<T>, TryReserveError> {
    let mut v = Vec::new();
    v.try_reserve_exact(n)?;
    Ok(v)
}

/// `n` copies of `value`.
pub(crate) fn filled(n: usize, value: i64) -> Result<Vec<i64>, TryReserveError> {
    let mut v = with_capacity(n)?;
    v.resize(n, value);
    Ok(v)
}

/// A copy of `column`.
pub(crate) fn copied(column: &[i64]) -> Result<Vec<i64>, TryReserveError> {
    let mut v = with_capacity(column.len())?;
    v.extend_from_slice(column);
    Ok(v)
}

/// The values of `column` in the order of `order` (indices into it).
pub(crate) fn permuted(column: &[i64], order: &[u32]) -> Result<Vec<i64>, TryReserveError> {
    let mut v = with_capacity(order.len())?;
    v.extend(order.iter().map(|&i| column[i as usize]));
    Ok(v)
}

/// Gives the memory freed so far back to the system (glibc's `malloc_trim`; elsewhere nothing).
/// glibc keeps freed blocks for reuse, and those below its mmap threshold (which rises to 32 MiB
/// as large blocks are freed) stay resident: a stage's temporaries then sit under the next stage's
/// allocations, which are fresh pages if they are larger.
pub fn release() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        extern "C" {
            fn malloc_trim(pad: usize) -> std::ffi::c_int;
        }
        // SAFETY: malloc_trim only returns free pages of the allocator's own heaps.
        unsafe {
            malloc_trim(0);
        }
    }
}

/// Makes the threads started from now on allocate from the main heap, not from heaps of their own
/// (glibc's `M_ARENA_MAX` 1; elsewhere nothing). `malloc_trim` returns the free pages inside every
/// heap but the free top of the main heap only: a thread's heap (a reader's, the graph build's, a
/// worker's, reused by the threads after it) keeps its freed top resident, up to its trim threshold
/// (which rises to 64 MiB as large blocks are freed). Called before any thread starts.
pub fn one_heap() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        const M_ARENA_MAX: std::ffi::c_int = -8;
        extern "C" {
            fn mallopt(param: std::ffi::c_int, value: std::ffi::c_int) -> std::ffi::c_int;
        }
        // SAFETY: mallopt only sets a limit the allocator reads when a thread first allocates.
        unsafe {
            mallopt(M_ARENA_MAX, 1);
        }
    }
}
