"""How durations are written for people: table cells and prose, one place for every output."""

from __future__ import annotations


def ms_cell(ns) -> str:
    """A table cell in milliseconds ('-' when unknown)."""
    return "-" if ns is None else f"{ns / 1e6:,.3f}"


def us_cell(ns) -> str:
    """A table cell in microseconds ('-' when unknown)."""
    return "-" if ns is None else f"{ns / 1e3:,.1f}"


def duration_text(ns: float) -> str:
    """A duration in a sentence, in ms from 0.1 ms on, else in µs."""
    return f"{ns / 1e6:,.1f} ms" if abs(ns) >= 100_000 else f"{ns / 1e3:,.0f} µs"
