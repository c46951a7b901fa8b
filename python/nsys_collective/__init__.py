"""CollectiveTrace: which CUDA kernels block your NCCL collectives, on which rank, by how much."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("collectivetrace-nsys")
except PackageNotFoundError:  # running from a source tree without an install
    __version__ = "0.0.0+unknown"

from nsys_collective.errors import CollectiveTraceError, InputError, NsysExportError
from nsys_collective.ingest.capture import Export, read_exports, read_kineto
from nsys_collective.result import Result
from nsys_collective.api import load  # noqa: E402 - after the modules it builds on

__all__ = ["CollectiveTraceError", "Export", "InputError", "NsysExportError", "Result", "__version__", "load",
           "read_exports", "read_kineto"]
