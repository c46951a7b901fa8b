"""Freed memory handed back to the system between the analysis's stages.

glibc keeps what a process frees in its heaps for reuse, and the many mid-sized numpy arrays a
stage frees between arrays that stay leave most of it stranded there: at 1.9M kernels about a
fifth of the peak was memory already freed (RSS sampled per stage, see scripts/bench_analyze.py).
`release()` returns every free page (glibc's malloc_trim); without glibc it does nothing.
"""

from __future__ import annotations

import ctypes
import functools


@functools.cache
def _trim():
    try:
        return ctypes.CDLL(None).malloc_trim  # the C library the process runs on
    except (AttributeError, OSError, TypeError):  # not glibc
        return None


def release() -> None:
    """Give the memory freed so far back to the system (a few ms at most)."""
    trim = _trim()
    if trim is not None:
        trim(0)
