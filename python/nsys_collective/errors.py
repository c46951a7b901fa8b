"""The exceptions CollectiveTrace raises, one hierarchy for the native and the Python code.

The classes are defined by the native extension (so Rust errors map onto them in one place)
and re-exported here; Python code raises the same classes.
"""

from nsys_collective._native import CollectiveTraceError, InputError

__all__ = ["CollectiveTraceError", "InputError", "NsysExportError"]


class NsysExportError(InputError):
    """`nsys export` could not turn a report into an SQLite export."""
