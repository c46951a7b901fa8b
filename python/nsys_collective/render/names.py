"""Kernel and NVTX names as people can read them: one shortening for every output."""

from __future__ import annotations

import re


def _strip_brackets(name: str) -> str:
    """A C++ name without its template arguments and parameter list."""
    out, depth = [], 0
    for ch in name:
        if ch in "<(":
            depth += 1
        elif ch in ">)" and depth:
            depth -= 1
        elif depth == 0:
            out.append(ch)
    return "".join(out)


def short_name(name: str | None, width: int = 48) -> str:
    """A kernel name a person can read in a chart: no `void`, templates, arguments or
    namespaces; cut in the middle (the head says what it is, the tail which variant)."""
    if not name:
        return "?"
    s = name
    if len(s) > width and not s.startswith("["):  # "[CUDA memcpy]" and the like stay whole
        s = re.sub(r"^void\s+", "", s)
        s = _strip_brackets(s).strip() or s
        s = s.split("::")[-1] or s
    if len(s) <= width:
        return s
    head = (width - 1) * 3 // 5
    return s[:head] + "…" + s[len(s) - (width - 1 - head):]


def unique_labels(names: list[str], width: int = 48) -> list[str]:
    """Short names, widened until names that differ stay different; template variants that
    only their arguments tell apart are numbered."""
    for w in range(width, width + 64, 8):
        labels = [short_name(n, w) for n in names]
        if len(set(labels)) == len(set(names)):
            return labels
    labels = [short_name(n, width) for n in names]
    variants: dict[str, list[str]] = {}
    for n, label in zip(names, labels):
        if n not in variants.setdefault(label, []):
            variants[label].append(n)
    return [label if len(variants[label]) == 1 else f"{label} (variant {variants[label].index(n) + 1})"
            for n, label in zip(names, labels)]


def distinct_names(names: list[str], full: list[str]) -> list[str]:
    """The names as shown, except where different full names share one (template variants that
    only their arguments tell apart): those are shown whole, without a leading `void`."""
    groups: dict[str, set[str]] = {}
    for name, whole in zip(names, full):
        groups.setdefault(name, set()).add(whole)
    return [re.sub(r"^void\s+", "", whole) if len(groups[name]) > 1 else name for name, whole in zip(names, full)]
