"""The causes blame names (docs/output-contract.md: `whatif.causes[].cause`, `blame[].cause`):
one entry per kind, the one place that says what a cause is, which fields name it, what its
finding says, which function proposes it and how it is drawn. Everything that words, draws,
tables, compares or stores a cause reads it from here; a kind that is not here is an error
(`UnknownCause`), never another kind's words.

A new cause is its entry in `CAUSES` and its candidate function. A new *family* (a cause named by
something no family names yet) is also a `Family` here and its blame variant in result.py.

This module is a leaf (the standard library, units and errors only) so that the result, the renderers
and the store can read it without reaching the model. That is why a cause's candidate function is
named by its dotted path (`candidates`) instead of imported: the pickers need the model, and the
what-if replay (attribution.whatif.replay) resolves the names when it runs.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Callable, Literal

from nsys_collective.errors import InputError
from nsys_collective.units import count
from nsys_collective.units import duration as _ms


@dataclass(frozen=True)
class Family:
    """Causes named and drawn alike."""

    name: str
    # The fields that name a cause of the family in a blame entry, each from a what-if cause's field.
    fields: tuple[tuple[str, str], ...]
    # The contract's list that sums the family's what-if causes, if any (blocking_kernels, ...).
    summed_in: str | None
    # How a chart marks it on the straggler's lane: its kernel's runs, or a note (`Kind.note`).
    draws_runs: bool = False


KERNEL = Family("kernel", (("kernel", "name"), ("kernel_full", "name_full")), "blocking_kernels", draws_runs=True)
HOST = Family("host", (("nvtx", "name"),), "blocking_launches")
TRANSFER = Family("transfer", (("name", "name"),), None)
IDLE = Family("idle", (), None)
# A rank as a whole (its GPU, its CUDA API calls, its host) at its peers' pace: named by the rank
# (and, for API stalls, the API that stalled most).
RANK = Family("rank", (("name", "name"),), None)
UNEXPLAINED = Family("unexplained", (), None)
FAMILIES = (KERNEL, HOST, TRANSFER, IDLE, RANK, UNEXPLAINED)

# A finding's sentence: (the what-if cause, where it acts in words, what fixing it gains in words).
Sentence = Callable[[dict, str, str], str]


@dataclass(frozen=True)
class Kind:
    kind: str  # as the document writes it
    family: Family
    acts_on: Literal["rank", "host", "job"]  # what `rank`/`host` of its entries say: one rank, a host's ranks, every rank
    label: str  # what it is in a few words (a chart's legend, the report's top card)
    unnamed: str  # its name in a table where the cause has none
    subject: str  # it as the subject of compare's sentences ({kernel}, {nvtx}: its names)
    caption: str  # a chart's cause line ({kernel} {nvtx} {name} {host} {rank}: its fields; {part}: what fixing it saved; {ns})
    note: tuple[str, str]  # a chart's label in the straggler's lane, long and short (families that draw no runs)
    finding: Sentence | None  # None: never a finding on its own (not a replayed cause)
    candidates: str | None  # "module:function" proposing it to the what-if replay; None: not replayed
    qualifier: str = ""  # after its name in the report's blame cell ("extra runs")
    plural: bool = False  # its subject is plural ("Slow transfers are ...")

    @property
    def replayed(self) -> bool:
        return self.candidates is not None


class UnknownCause(InputError):
    """A cause kind the registry does not hold: a stored document from a newer version (input the
    tool cannot read: one line, exit status 2), or a bug."""


def _than(cause: dict) -> str:
    return "than on the other ranks" if cause["reference"] == "peers" else "than in its other steps"


def _parts(cause: dict) -> str:
    """A rank-level cause's largest parts, as the end of its sentence."""
    parts = cause.get("parts") or []
    named = [f"{p['name']} ({_ms(p['excess_ns'])})" for p in parts if p.get("name")]
    return f"; its largest parts: {', '.join(named)}" if named else ""


def _host_sentence(c: dict, where: str, gain: str) -> str:
    """A host cause: time beyond the peers' in a range, or work the peers do not do."""
    name = c["name"] or "no named range"
    around = f" (inside {' > '.join(c['context'])})" if c.get("context") else ""
    if c["reference"] == "none":
        return (f"{where}: the host spent {_ms(c['excess_ns'])} in '{name}'{around}, which the other ranks do not run; "
                f"not running it {gain}.")
    return (f"{where}: the host spent {_ms(c['excess_ns'])} more than the other ranks in '{name}'{around} "
            f"while the GPU waited for its launches; fixing it {gain}.")


def _these(where: str) -> str:
    return "these hosts" if "," in where else "this host"


_KERNEL_NOTE = ("", "")  # kernel causes draw their runs instead
_HOST_NOTE = ("late: host in '{nvtx}' ▶", "host ▶")
_PICKERS = "nsys_collective.attribution.whatif"

CAUSES: dict[str, Kind] = {k.kind: k for k in (
    Kind("kernel", KERNEL, "rank", label="kernel", unnamed="kernel", subject="{kernel}",
         caption="{kernel}\n    longer on the straggler: {part}", note=_KERNEL_NOTE,
         finding=lambda c, where, gain: f"{where}: {c['name']} ran {c['slowdown']:.0%} longer {_than(c)}; fixing it {gain}.",
         candidates=f"{_PICKERS}.kernels:kernel_candidates"),
    Kind("extra_kernel", KERNEL, "rank", label="extra kernel", unnamed="extra kernel runs", subject="{kernel}",
         caption="{kernel}\n    extra runs on the straggler: {part}", note=_KERNEL_NOTE, qualifier="extra runs",
         finding=lambda c, where, gain: (
             f"{where}: {c['name']} ran {count(c['runs'], 'time')} against {c['reference_runs']} on the other ranks "
             f"(more work on this rank); without the extra runs the job {gain}."),
         candidates=f"{_PICKERS}.kernels:extra_candidates"),
    Kind("host", HOST, "rank", label="host", unnamed="host time", subject="Host time in '{nvtx}'",
         caption="host time in '{nvtx}' on rank {rank}: {part}", note=_HOST_NOTE,
         finding=_host_sentence, candidates=f"{_PICKERS}.host:host_candidates"),
    Kind("host_group", HOST, "host", label="host group", unnamed="host time", subject="Host time in '{nvtx}'",
         caption="host time in '{nvtx}' on every rank of {host}: {part}", note=_HOST_NOTE,
         finding=lambda c, where, gain: (
             f"{where}: every rank of {_these(where)} ended '{c['name'] or 'no named range'}' later than the other hosts "
             f"({_ms(c['excess_ns'])} of host time in all); fixing it on {_these(where)} {gain}."),
         candidates=f"{_PICKERS}.host:host_group_candidates"),
    Kind("transfer", TRANSFER, "job", label="transfer", unnamed="slow transfers", subject="Slow transfers", plural=True,
         caption="slow transfers ({name}): {part}", note=("late: slow transfers ▶", "transfer ▶"),
         finding=lambda c, where, gain: (
             f"{c['name']} overlapping the transfers made them {_ms(c['excess_ns'])} of GPU time slower "
             f"(the contention fit); without that slowdown the job {gain}." if c.get("reference") == "fit" else
             f"{c['name']}: transfers took {_ms(c['excess_ns'])} of GPU time beyond the fast ones of their kind "
             f"(contention or a slow link); at that pace the job {gain}."),
         candidates=f"{_PICKERS}.transfers:transfer_candidates"),
    Kind("idle", IDLE, "rank", label="idle", unnamed="GPU idle, no dependency recorded", subject="Unexplained GPU idle",
         caption="GPU idle with no recorded dependency: {part}", note=("GPU idle, launch on time ▶", "idle ▶"),
         finding=lambda c, where, gain: (
             f"{where}: its GPU sat idle {_ms(c['excess_ns'])} with no recorded dependency explaining it; "
             f"without that the job {gain}."),
         candidates=f"{_PICKERS}.idle:idle_candidates"),
    Kind("slow_device", RANK, "rank", label="slow GPU", unnamed="slow GPU (every op)", subject="A slow GPU",
         caption="slow GPU on rank {rank}: {part}", note=("late: slow GPU ▶", "GPU ▶"),
         finding=lambda c, where, gain: (
             f"{where}: its GPU ran every kernel and copy {c['slowdown']:.0%} slower than the other ranks' "
             f"(a throttled or faulty device); at their pace the job {gain}{_parts(c)}."),
         candidates=f"{_PICKERS}.rank:device_candidates"),
    Kind("api_stall", RANK, "rank", label="API stall", unnamed="stalled CUDA API calls", subject="Stalled API calls",
         caption="CUDA API calls stalled on rank {rank} ({name}): {part}", note=("late: API stall ▶", "API ▶"),
         finding=lambda c, where, gain: (
             f"{where}: {count(c['runs'], 'CUDA API call')} that do not wait for the GPU stalled inside the runtime "
             f"({_ms(c['excess_ns'])} beyond the other ranks' durations, most in {c['name']}); at their durations the "
             f"job {gain}{_parts(c)}."),
         candidates=f"{_PICKERS}.rank:api_candidates"),
    Kind("host_bound", RANK, "rank", label="host-bound", unnamed="host (every range)", subject="A host-bound rank",
         caption="host-bound rank {rank}: {part}", note=("late: host-bound ▶", "host ▶"),
         finding=lambda c, where, gain: (
             f"{where}: its host ran {_ms(c['excess_ns'])} behind the other ranks' pace across its ranges "
             f"(host-bound: its GPU waited for launches); at their pace the job {gain}{_parts(c)}."),
         candidates=f"{_PICKERS}.rank:host_bound_candidates"),
    # Not replayed: where no rank runs the straggler's program, what ran on it while the others waited.
    Kind("window", KERNEL, "rank", label="window", unnamed="kernel", subject="{kernel}", qualifier="window",
         caption="{kernel}\n    ran on the straggler while the others waited (no reference rank): {ns}", note=_KERNEL_NOTE,
         finding=None, candidates=None),
    # Not replayed: the wait that fixing every cause at once does not save.
    Kind("unexplained", UNEXPLAINED, "rank", label="unexplained", unnamed="unexplained wait", subject="Unexplained wait",
         caption="nothing the replay found explains {part}", note=("unexplained ▶", "? ▶"), finding=None, candidates=None),
)}


def of(kind: str) -> Kind:
    """The registry entry of a kind; UnknownCause where there is none."""
    try:
        return CAUSES[kind]
    except KeyError:
        raise UnknownCause(f"unknown cause kind {kind!r} (known: {', '.join(CAUSES)})") from None


def kinds(*families: Family, replayed: bool | None = None) -> tuple[str, ...]:
    """The kinds of these families (all where none is given), in registry order; only those the
    replay proposes (or only those it does not) where `replayed` is given."""
    return tuple(k.kind for k in CAUSES.values() if (not families or k.family in families)
                 and (replayed is None or k.replayed == replayed))


def naming_fields(cause: dict) -> dict:
    """The fields that name a what-if cause in a blame entry (kernel and kernel_full, nvtx, name)."""
    return {field: cause[source] for field, source in of(cause["cause"]).family.fields}


def candidate_function(kind: Kind) -> Callable:
    """A replayed kind's candidate function, imported from its dotted name."""
    module, name = kind.candidates.split(":")
    return getattr(importlib.import_module(module), name)


def _field(cause: Any, name: str) -> Any:
    """A field of a cause: of a typed record of the result (result.WhatIfCause, a blame variant),
    or of the JSON data the attribution builds the result from (and html.py still reads)."""
    return cause[name] if isinstance(cause, Mapping) else getattr(cause, name)


def where(cause: Any, job_wide: str = "every rank") -> str:
    """Where a cause acts, in words: its rank, else its host(s), else the whole job."""
    rank, host = _field(cause, "rank"), _field(cause, "host")
    return f"rank {rank}" if rank is not None else (host or job_wide)


def rank_or_hosts(rank: int | str | None) -> str:
    """Where a compared cause acts (compare's rows hold a rank, or the hosts of a cause on every
    rank of them, in one field): 'rank 3', 'ault42.cscs.ch, ault43.cscs.ch' or 'all'."""
    return where({"rank": rank, "host": None} if isinstance(rank, int) else {"rank": None, "host": rank}, job_wide="all")


def in_few_words(entry: dict) -> str:
    """A blame entry's cause in a few words (a step's top blocker, a store column)."""
    k = of(entry["cause"])
    if k.family is KERNEL:
        return entry.get("kernel") or entry["cause"]
    if k.family is HOST:
        return f"host in {entry.get('nvtx') or 'no named range'}" + (f" on {entry['host']}" if k.acts_on == "host" else "")
    if k.family is TRANSFER:
        return f"slow transfers ({entry.get('name')})"
    if k.family is RANK:
        return k.label + (f" ({entry['name']})" if entry.get("name") else "")
    return entry["cause"]


def column_text(cause: Any | None) -> str | None:
    """A what-if cause in a few words, for a column (the store's top_cause, batch's table)."""
    if not cause:
        return None
    return f"{_field(cause, 'cause')} {_field(cause, 'name') or ''} on {where(cause)}".replace("  ", " ")


def table_label(cause: Any) -> str:
    """What a what-if cause is, in a table cell."""
    k, name = of(_field(cause, "cause")), _field(cause, "name")
    if k.family is HOST:
        return f"host in '{name or 'no named range'}'"
    if k.family is RANK:
        return k.unnamed + (f", most in {name}" if name else "")
    return name or k.unnamed


_NVTX_COUNTERS = re.compile(r"(, (seq|op_id) = \d+)+$|(?<=#)\d+$")


def nvtx_family(name: str | None) -> str | None:
    """An NVTX name without its per-call counters (PyTorch's `, seq = N, op_id = N`, a step's
    `#N`), so that every call of one operation is counted together: how host causes are named."""
    return _NVTX_COUNTERS.sub(lambda m: "N" if m.group(0).isdigit() else "", name) if name else name
