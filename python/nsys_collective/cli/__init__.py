"""The `collectivetrace-nsys` command line: one module per command in this package. Each imports
only what its options and help need; the analysis and the renderers load inside the commands, so
`--help` and `--version` load neither numpy nor the readers (tests/unit/test_imports.py).

Results go to stdout; progress, warnings and errors to stderr (see `console.error_edge` for the
exit statuses).
"""

from __future__ import annotations

import atexit
import os
import sys
import threading

# The BLAS (OpenBLAS, in numpy's and scipy's wheels) reads these once, when it loads. The analysis
# multiplies only small matrices, so a pool of threads per core would cost every run their start
# (0.15 s of CPU on 2 cores, more on big machines) and memory for nothing.
BLAS_THREADS = ("OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS", "OMP_NUM_THREADS")


def main() -> None:
    """The installed command."""
    if sys.argv[1:] == ["--version"]:
        # The one line alone, without typer and rich (half of the start-up): what scripts ask most.
        from nsys_collective.version import __version__

        print(f"collectivetrace-nsys {__version__}")
        sys.exit(0)
    if not any(name in os.environ for name in BLAS_THREADS):  # the user's choice stands
        os.environ["OPENBLAS_NUM_THREADS"] = "1"
    from nsys_collective.cli.commands import run

    try:
        run()
    except SystemExit as e:
        _exit(e)


def _exit(done: SystemExit) -> None:
    """End the process without tearing it down: the OS frees the analysis's arrays (1.5 GB at
    1.9M kernels) at once, where the interpreter would free each object first. Only once no
    thread but daemons is left, every exit handler ran and stdout and stderr are flushed;
    otherwise (a closed pipe, a message for an exit status) Python's own exit, with its messages.
    (A daemon thread, the reduce's prefetch, then also ends without running into the teardown.)"""
    code = done.code
    others = [t for t in threading.enumerate() if t is not threading.main_thread() and not t.daemon]
    if others or (code is not None and not isinstance(code, int)):
        raise done
    try:
        atexit._run_exitfuncs()
        sys.stdout.flush()
        sys.stderr.flush()
    except BaseException:
        raise done from None
    os._exit(code or 0)


def __getattr__(name: str):
    if name == "app":  # the typer application, loaded where it is used (the tests, `run`)
        from nsys_collective.cli.commands import app

        return app
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
