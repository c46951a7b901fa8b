"""How figures are written for people: one rounding rule for every output (terminal, findings,
charts, HTML, compare), so a figure reads the same wherever it appears."""

from __future__ import annotations

import math

# Largest first: a duration is written in the largest unit that keeps it at 1 or more.
_UNITS = (("s", 1e9), ("ms", 1e6), ("µs", 1e3), ("ns", 1.0))
DIGITS = 3  # significant digits: enough to tell causes apart, few enough to read at a glance


def duration(ns) -> str:
    """A duration: three significant digits in the largest unit that keeps it at 1 or more
    ('25.4 ms', '3.71 ms', '968 µs'); '-' when unknown."""
    if ns is None:
        return "-"
    size = abs(float(ns))
    if size == 0:
        return "0 ms"
    for unit, scale in _UNITS:
        # Rounded first, so that 999.6 µs reads '1.00 ms', not '1,000 µs'.
        value = float(f"{size / scale:.{DIGITS}g}")
        if value >= 1 or unit == "ns":
            break
    decimals = max(0, DIGITS - 1 - math.floor(math.log10(value))) if value > 0 and unit != "ns" else 0
    return f"{'-' if ns < 0 else ''}{value:,.{decimals}f} {unit}"


def signed_duration(ns) -> str:
    """A change: the duration with its sign ('+1.20 ms', '-968 µs', '0 ms')."""
    if ns is None or ns == 0:
        return duration(ns)
    return ("+" if ns > 0 else "") + duration(ns)


def count(n: int, noun: str, plural: str | None = None) -> str:
    """'1 collective', '18 collectives' (or the plural given, for nouns that do not take an s)."""
    return f"{n:,} {noun if n == 1 else plural or noun + 's'}"

