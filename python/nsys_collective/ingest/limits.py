"""What one input may make a reader hold, and how long its export may take: a leaf (no numpy), so the command line's help can show
the defaults without loading the analysis."""

from __future__ import annotations

from dataclasses import dataclass

from nsys_collective import _native

# `nsys export` of one report may take this long (--export-timeout); a real export of a GB report
# takes minutes, a hung nsys forever.
DEFAULT_TIMEOUT_S = 3600.0


@dataclass(frozen=True)
class Limits:
    """How much one input may make a reader hold, whatever the file claims: a PyTorch profiler
    trace's JSON size, and how many times a gzip may expand (a small bomb is refused, not read)."""

    max_trace_bytes: int = _native.DEFAULT_MAX_TRACE_BYTES
    max_gzip_ratio: int = _native.DEFAULT_MAX_GZIP_RATIO
