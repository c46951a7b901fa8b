"""The causes blame names, shared with the native core by name (never by position): the core
publishes each of its cause codes' names (`_native.LATENESS_CAUSES`), and `from_code` maps a
code to the `Cause` of that name, so a cause added on one side and not the other fails loudly."""

from __future__ import annotations

from enum import Enum

from nsys_collective import _native


class Cause(str, Enum):
    """`collectives[].blame[].cause` of the output contract."""

    KERNEL = "kernel"
    HOST_LAUNCH = "host_launch"
    IDLE = "idle"
    WINDOW = "window"  # no reference rank ran the same program: what ran on the straggler meanwhile
    UNEXPLAINED = "unexplained"


_BY_CODE = tuple(Cause(name) for name in _native.LATENESS_CAUSES)


def from_code(code: int) -> Cause:
    """The cause of a native lateness code."""
    return _BY_CODE[code]
