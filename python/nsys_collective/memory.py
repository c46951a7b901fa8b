"""Freed memory handed back to the system between the analysis's stages.

glibc keeps what a process frees in its heaps for reuse, and the many mid-sized numpy arrays a
stage frees between arrays that stay leave most of it stranded there: at 1.9M kernels about a
fifth of the peak was memory already freed (RSS sampled per stage, see scripts/bench_analyze.py).
`release()` returns every free page (glibc's malloc_trim, by the core's `memory::release`, which
the what-if graph's build also calls between its own stages); without glibc it does nothing.
"""

from __future__ import annotations

from nsys_collective import _native


def release() -> None:
    """Give the memory freed so far back to the system (a few ms at most)."""
    _native.release_memory()
