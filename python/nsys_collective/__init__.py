"""CollectiveTrace: which CUDA kernels block your NCCL collectives, on which rank, by how much."""

from nsys_collective.version import __version__

from nsys_collective.errors import CollectiveTraceError, InputError, NsysExportError
from nsys_collective.ingest.capture import Export, read_exports, read_kineto
from nsys_collective.result import Result
from nsys_collective.api import compare_runs, load, tables, to_pandas  # noqa: E402 - after the modules it builds on

__all__ = ["CollectiveTraceError", "Export", "InputError", "NsysExportError", "Result", "__version__", "compare_runs",
           "load", "read_exports", "read_kineto", "tables", "to_pandas"]
