"""Kernel and NVTX names as people can read them: one shortening for every output; and the names
of the clocks and of how they were aligned."""

from __future__ import annotations

import re

from nsys_collective.units import count


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
    """Short names, told apart where different names share one (distinct_names: the template
    arguments that differ); names that still share a label are numbered."""
    labels = distinct_names([short_name(n, width) for n in names], names)
    variants: dict[str, list[str]] = {}
    for n, label in zip(names, labels):
        if n not in variants.setdefault(label, []):
            variants[label].append(n)
    return [label if len(variants[label]) == 1 else f"{label} (variant {variants[label].index(n) + 1})"
            for n, label in zip(names, labels)]


_OPEN, _CLOSE = "<({[", ">)}]"


def _split_top(text: str, sep: str) -> list[str]:
    """text split at `sep` outside any bracket."""
    parts, depth, start, k = [], 0, 0, 0
    while k < len(text):
        ch = text[k]
        if ch in _OPEN:
            depth += 1
        elif ch in _CLOSE and depth:
            depth -= 1
        elif depth == 0 and text.startswith(sep, k):
            parts.append(text[start:k])
            start = k = k + len(sep)
            continue
        k += 1
    return parts + [text[start:]]


def _named(part: str) -> bool:
    """Whether a part of a qualified name names something: not a lambda, an anonymous namespace or
    a lambda's call operator (`{lambda()#1}`, `(anonymous namespace)`, `operator()() const`)."""
    return bool(part) and part[0] not in _OPEN and not part.startswith("operator")


def _node(text: str) -> tuple[str, list[str]]:
    """(head, template arguments) of a C++ name: the last named part of its qualified name (for a
    lambda, the function it is defined in), without `void`, namespaces or the parameter list."""
    text = re.sub(r"^\s*(void|const)\s+", "", text.strip())
    parts = [p.strip() for p in _split_top(text, "::")]
    part = next((p for p in reversed(parts) if _named(p)), parts[-1])
    cut = min([i for i in (part.find("<"), part.find("(")) if i > 0] or [len(part)])
    head = part[:cut].strip()
    if cut < len(part) and part[cut] == "<":
        inner, depth = [], 0
        for ch in part[cut:]:
            depth += ch in _OPEN
            depth -= ch in _CLOSE
            inner.append(ch)
            if depth == 0:
                break
        return head, [a.strip() for a in _split_top("".join(inner)[1:-1], ",")]
    return head, []


def _tell_apart(texts: list[str]) -> list[str]:
    """The shortest labels that keep different texts different: the head of each C++ name, and for
    heads that several share, only the template arguments that tell them apart, themselves told
    apart the same way (the others shown as `…`)."""
    nodes = [_node(t) for t in texts]
    labels = [head for head, _ in nodes]
    groups: dict[str, list[int]] = {}
    for k, (head, _) in enumerate(nodes):
        groups.setdefault(head, []).append(k)
    for members in groups.values():
        if len({texts[k] for k in members}) < 2:
            continue
        width = max(len(nodes[k][1]) for k in members)
        args = [[nodes[k][1][p] if p < len(nodes[k][1]) else "" for p in range(width)] for k in members]
        chosen: list[int] = []
        # Greedily add the argument that splits the group most, until the arguments tell its
        # names apart (or none is left that splits it further).
        while True:
            key = lambda row: tuple(row[p] for p in chosen)  # noqa: E731
            parted = len({key(r) for r in args})
            gains = [(len({key(r) + (r[p],) for r in args}), -p) for p in range(width) if p not in chosen]
            best = max(gains, default=(parted, 0))
            if best[0] <= parted:
                break
            chosen.append(-best[1])
            if best[0] == len({tuple(r) for r in args}):
                break
        if len({tuple(args[i][p] for p in chosen) for i in range(len(members))}) < len({texts[k] for k in members}):
            # Same head and arguments: their scopes (a lambda's), namespaces or parameters differ.
            for k, label in zip(members, _scoped([texts[k] for k in members])):
                labels[k] = label
            continue
        shown = {p: _tell_apart([row[p] for row in args]) for p in chosen}
        for i, k in enumerate(members):
            cells = [shown[p][i] if p in shown else "…" for p in range(width)]
            cells = [c for j, c in enumerate(cells) if not (c == "…" and j and cells[j - 1] == "…")]
            labels[k] = f"{labels[k]}<{', '.join(cells)}>"
    return labels


def _parameters_elided(text: str) -> str:
    """text with each parameter list that holds something as `(…)` (`(anonymous namespace)` kept)."""
    out, k = [], 0
    while k < len(text):
        if text[k] == "(" and k and (text[k - 1].isalnum() or text[k - 1] in "_>") and text[k + 1:k + 2] != ")":
            depth, j = 0, k
            while j < len(text):
                depth += text[j] in _OPEN
                depth -= text[j] in _CLOSE
                j += 1
                if depth == 0:
                    break
            out.append("(…)")
            k = j
            continue
        out.append(text[k])
        k += 1
    return "".join(out)


def _scoped(texts: list[str]) -> list[str]:
    """Names one head and template arguments do not tell apart, in the first of these forms that
    does, parameter lists as `(…)` and a lambda's call operators left out in both: from the last named
    part on (`launch_clamp_scalar(…)::{lambda()#1}::{lambda()#7}::{lambda(…)#1}`), then with the
    namespaces; else whole."""
    whole = [re.sub(r"^\s*(void|const)\s+", "", t.strip()) for t in texts]
    split = [[p.strip() for p in _split_top(t, "::")] for t in whole]
    last = [max((i for i, p in enumerate(parts) if _named(p)), default=0) for parts in split]
    from_named = ["::".join(p for p in parts[i:] if not p.startswith("operator")) for parts, i in zip(split, last)]
    qualified = ["::".join(p for p in parts if not p.startswith("operator")) for parts in split]
    for form in ([_parameters_elided(t) for t in from_named], [_parameters_elided(t) for t in qualified]):
        if len(set(form)) == len(set(whole)):
            return form
    return whole


def distinct_names(names: list[str], full: list[str]) -> list[str]:
    """The names as shown, except where different full names share one (template variants that
    only their arguments tell apart): those get the shortest form that tells them apart, their
    template arguments abbreviated to the ones that differ (the full names are in --json)."""
    groups: dict[str, list[int]] = {}
    for k, name in enumerate(names):
        groups.setdefault(name, []).append(k)
    out = list(names)
    for members in groups.values():
        if len({full[k] for k in members}) > 1:
            for k, label in zip(members, _tell_apart([full[k] for k in members])):
                out[k] = label
    return out


def clock_label(clock) -> str:
    """A clock of alignment.hosts in words: its host, else the ranks that read it (profiler traces
    record no host: one clock per rank)."""
    ranks = getattr(clock, "ranks", None)
    if clock.host:
        return clock.host
    return f"{'rank' if len(ranks) == 1 else 'ranks'} {', '.join(map(str, ranks))}" if ranks else "one clock"


def method_words(a) -> str:
    """How the clocks were aligned, in a few words."""
    if a.method == "none (one clock)":
        return "none needed, every rank reads one clock"
    if a.method.startswith("none"):
        return "none, no collective to fit the clocks on"
    per_rank = bool(a.hosts) and not any(h.host for h in a.hosts)
    return f"fitted on {count(a.instances_used, 'collective')}" + (", one clock per rank" if per_rank else "")
