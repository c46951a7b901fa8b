"""Freed memory handed back to the system between the analysis's stages.

glibc keeps what a process frees in its heaps for reuse, and the many mid-sized numpy arrays a
stage frees between arrays that stay leave most of it stranded there: at 1.9M kernels about a
fifth of the peak was memory already freed (RSS sampled per stage, see scripts/bench_analyze.py).
`release()` returns every free page (glibc's malloc_trim, by the core's `memory::release`, which
the what-if graph's build also calls between its own stages); without glibc it does nothing.
malloc_trim returns the free top of the main heap only, not of a thread's own heap (the readers',
the graph build's, the core's workers'), which stays resident up to its trim threshold (up to 64
MiB): `one_heap()` makes a command's threads share the main heap (at 1.9M kernels the peak is
368-378 MiB with it, 383-402 without, and no slower, 5 runs each alternated).
"""

from __future__ import annotations

from nsys_collective import _native


def release() -> None:
    """Give the memory freed so far back to the system (a few ms at most)."""
    _native.release_memory()


def one_heap() -> None:
    """Let the threads started from now on allocate from the main heap (glibc; elsewhere nothing):
    a command calls it before it starts any thread. Not done on import: it would set the heaps of
    a program that imports the package as a library."""
    _native.share_one_heap()
