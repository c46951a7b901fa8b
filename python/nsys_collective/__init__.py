"""CollectiveTrace: which CUDA kernels block your NCCL collectives, on which rank, by how much."""

from __future__ import annotations

import importlib

# The API's names, each loaded from its module on first use (PEP 562): `import nsys_collective`,
# which every command does first, must not load the analysis (numpy, the readers) for `--help`.
_LAZY = {
    "CollectiveTraceError": "errors", "InputError": "errors", "NsysExportError": "errors",
    "Export": "ingest.capture", "read_exports": "ingest.capture", "read_kineto": "ingest.capture",
    "Result": "result",
    "compare_runs": "api", "load": "api", "tables": "api", "to_pandas": "api",
    "__version__": "version",  # importlib.metadata, some 20 ms
}

__all__ = sorted(_LAZY)


def __getattr__(name: str):
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})
