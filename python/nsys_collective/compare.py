"""What changed between two runs: two `analyze --json` documents in, one comparison out.

`compare_documents` is pure (two typed documents in, `Result.document` of a fresh or a stored run;
a JSON-ready dict out), so the same comparison serves the command line, the Python API and stored
runs alike. Every number that differs between the runs is a triple `{"a": ..., "b": ..., "delta":
b - a}`; a cause or rank absent from one run counts 0 there (it blocked nothing), a figure unknown
in one run (null) gives a null delta.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from nsys_collective import causes as cause_kinds
from nsys_collective.render.compare import render_comparison, write_compare_chart
from nsys_collective.result import ContentionEntry, Document, Spread
from nsys_collective.units import duration as _d

COMPARISON_SCHEMA_VERSION = 2
# A cause is worth a sentence when it inflicted at least this share of its run's collective wait.
SIGNIFICANT_SHARE = 0.10
# A total "changed" when it moved by at least this fraction; below it, it "barely changed".
CHANGE_SHARE = 0.05
# A cause grew or shrank when its inflicted wait moved by at least this fraction.
CAUSE_CHANGE_SHARE = 0.25
MAX_FINDINGS = 8


@dataclass(frozen=True)
class Comparison:
    """Run A against run B (deltas are B - A); `doc` is `compare --json`."""

    doc: dict

    @property
    def findings(self) -> list[str]:
        return self.doc["findings"]

    def render(self) -> None:
        """Print the comparison as `collectivetrace-nsys compare` does (verdict, then tables)."""
        render_comparison(self.doc)

    def chart(self, path, force: bool = False, protect=()) -> list[Path]:
        """Write the comparison chart as path (PNG) and the same name with .svg; return both. As
        every output (outputs.py): never over `protect`, an existing file only with `force` and
        only one this tool wrote, in an existing folder, whole or not at all."""
        return write_compare_chart(self.doc, path, force, protect)


def _triple(a, b) -> dict:
    return {"a": a, "b": b, "delta": None if a is None or b is None else b - a}


def _change(t: dict) -> float | None:
    """Relative change b/a - 1 of a triple; None when a is zero or unknown."""
    return t["delta"] / t["a"] if t["delta"] is not None and t["a"] else None


# Identity and summary ----------------------------------------------------------------------------

def _identity(doc: Document, source: str | None) -> dict:
    return {
        "source": source,
        "inputs": [i.path for i in doc.inputs],
        "tool_version": doc.tool_version,
        "schema_version": doc.schema_version,
        "ranks": len(doc.ranks),
        "hosts": len({r.host for r in doc.ranks}),
        "collectives": len(doc.collectives),
    }


def _same(a, b) -> dict:
    return {"a": a, "b": b, "changed": a != b}


def _summary(a: Document, b: Document) -> dict:
    sa, sb = a.summary, b.summary
    return {"wait_ns": _triple(sa.wait_ns, sb.wait_ns), "transfer_ns": _triple(sa.transfer_ns, sb.transfer_ns),
            "nccl_time_ns": _triple(sa.nccl_time_ns, sb.nccl_time_ns), "collectives": _triple(sa.collectives, sb.collectives),
            "explained_wait_share": _triple(sa.explained_wait_share, sb.explained_wait_share),
            "top_blocking_kernel": _same(sa.top_blocking_kernel, sb.top_blocking_kernel),
            "top_straggler_rank": _same(sa.top_straggler_rank, sb.top_straggler_rank)}


# Blocking causes ----------------------------------------------------------------------------------

def _causes(doc: Document) -> dict[tuple, dict]:
    """(cause, name, rank or host) -> the run's cause: its what-if causes with what fixing each
    saves (`wait_saved_ns`), or, from a document without a what-if, its blocking entries with the
    wait they inflicted. Kernels are keyed by full name (short names of template variants can
    collide), host time by its NVTX range."""
    out = {}
    if doc.whatif:
        for e in doc.whatif.causes:
            family = cause_kinds.of(e.cause).family
            out[(e.cause, e.name_full or e.name, e.rank if e.rank is not None else e.host)] = {
                "kernel": e.name if family is cause_kinds.KERNEL else None, "kernel_full": e.name_full,
                "nvtx": e.name if family is cause_kinds.HOST else None, "wait_saved_ns": e.wait_saved_ns,
                "step_time_saved_ns": e.step_time_saved_ns, "blame_ns": e.excess_ns, "collectives": e.collectives,
                "confidence": e.confidence}
        return out
    for k in doc.blocking_kernels:
        out[(k.cause, k.kernel_full or k.kernel, k.rank)] = {
            "kernel": k.kernel, "kernel_full": k.kernel_full, "nvtx": None, "wait_saved_ns": k.inflicted_wait_ns,
            "step_time_saved_ns": k.step_time_saved_ns, "blame_ns": k.blame_ns, "collectives": k.collectives,
            "confidence": k.confidence}
    for h in doc.blocking_launches:
        out[("host", h.nvtx, h.rank)] = {
            "kernel": None, "kernel_full": None, "nvtx": h.nvtx, "wait_saved_ns": h.inflicted_wait_ns,
            "step_time_saved_ns": h.step_time_saved_ns, "blame_ns": h.blame_ns, "collectives": h.collectives,
            "confidence": h.confidence}
    return out


def _blocking(a: dict, b: dict) -> list[dict]:
    ca, cb = _causes(a), _causes(b)
    rows = []
    for key in dict.fromkeys([*ca, *cb]):
        ea, eb = ca.get(key, {}), cb.get(key, {})
        e = ea or eb
        rows.append({
            "cause": key[0],
            "kernel": e.get("kernel"), "kernel_full": e.get("kernel_full"), "nvtx": e.get("nvtx"),
            "rank": key[2],
            "wait_saved_ns": _triple(ea.get("wait_saved_ns", 0), eb.get("wait_saved_ns", 0)),
            "step_time_saved_ns": _triple(ea.get("step_time_saved_ns", 0), eb.get("step_time_saved_ns", 0)),
            "blame_ns": _triple(ea.get("blame_ns", 0), eb.get("blame_ns", 0)),
            "collectives": _triple(ea.get("collectives", 0), eb.get("collectives", 0)),
            "confidence": {"a": ea.get("confidence"), "b": eb.get("confidence")},
        })
    rows.sort(key=lambda r: (-abs(r["wait_saved_ns"]["delta"]), -r["wait_saved_ns"]["b"]))
    return rows


def _by_cause(blocking: list[dict]) -> list[dict]:
    """The blocking rows summed over ranks, per kernel (or NVTX range): where a cause's wait comes
    from in each run, so a kernel that moved from one rank to another shows as one row."""
    groups: dict[tuple, dict] = {}
    for r in blocking:
        key = (r["cause"], r["kernel_full"] or r["kernel"], r["nvtx"])
        g = groups.setdefault(key, {"cause": r["cause"], "kernel": r["kernel"], "kernel_full": r["kernel_full"],
                                    "nvtx": r["nvtx"], "by_rank": []})
        g["by_rank"].append({"rank": r["rank"], "a": r["wait_saved_ns"]["a"], "b": r["wait_saved_ns"]["b"],
                             "confidence": r["confidence"]})
    out = []
    for g in groups.values():
        g["by_rank"].sort(key=lambda x: (x["rank"] is None, x["rank"]))
        total_a, total_b = sum(x["a"] for x in g["by_rank"]), sum(x["b"] for x in g["by_rank"])
        top = {side: max(g["by_rank"], key=lambda x: x[side])["rank"] if any(x[side] for x in g["by_rank"]) else None
               for side in ("a", "b")}
        # High when the analysis of that run was confident about the cause on any rank.
        confidence = {side: "high" if any(x["confidence"][side] == "high" for x in g["by_rank"])
                      else "low" if any(x[side] for x in g["by_rank"]) else None for side in ("a", "b")}
        g.update({"wait_saved_ns": _triple(total_a, total_b), "top_rank": top, "confidence": confidence,
                  "moved": top["a"] is not None and top["b"] is not None and top["a"] != top["b"]})
        out.append(g)
    out.sort(key=lambda g: -max(g["wait_saved_ns"]["a"], g["wait_saved_ns"]["b"]))
    return out


# Operations, stragglers, alignment, contention ----------------------------------------------------

def _per_op(doc: Document) -> dict[str, dict]:
    out: dict[str, dict] = defaultdict(lambda: {"count": 0, "wait_ns": 0, "transfer_ns": 0})
    for c in doc.collectives:
        o = out[c.op]
        o["count"] += 1
        o["wait_ns"] += c.wait_cost_ns
        o["transfer_ns"] += c.transfer_ns * c.ranks  # GPU-time, as summary.transfer_ns
    return out


def _operations(a: Document, b: Document) -> list[dict]:
    pa, pb = _per_op(a), _per_op(b)
    zero = {"count": 0, "wait_ns": 0, "transfer_ns": 0}
    rows = [{"op": op, **{k: _triple(pa.get(op, zero)[k], pb.get(op, zero)[k]) for k in zero}}
            for op in dict.fromkeys([*pa, *pb])]
    return sorted(rows, key=lambda r: -max(r["wait_ns"]["a"] + r["transfer_ns"]["a"], r["wait_ns"]["b"] + r["transfer_ns"]["b"]))


def _per_rank(doc: Document) -> dict[int, dict]:
    out: dict[int, dict] = {r.rank: {"host": r.host, "last": 0, "wait_caused_ns": 0} for r in doc.ranks}
    for c in doc.collectives:
        s = out.setdefault(c.straggler_rank, {"host": None, "last": 0, "wait_caused_ns": 0})
        s["last"] += 1
        s["wait_caused_ns"] += c.wait_cost_ns
    return out


def _stragglers(a: Document, b: Document) -> list[dict]:
    ra, rb = _per_rank(a), _per_rank(b)
    zero = {"host": None, "last": 0, "wait_caused_ns": 0}
    rows = [{"rank": r, "host": {"a": ra.get(r, zero)["host"], "b": rb.get(r, zero)["host"]},
             "last": _triple(ra.get(r, zero)["last"], rb.get(r, zero)["last"]),
             "wait_caused_ns": _triple(ra.get(r, zero)["wait_caused_ns"], rb.get(r, zero)["wait_caused_ns"])}
            for r in sorted({*ra, *rb})]
    # Ranks that never arrived last in either run say nothing here.
    return [r for r in rows if r["last"]["a"] or r["last"]["b"]]


def _alignment(a: Document, b: Document) -> dict:
    la, lb = a.alignment, b.alignment

    def quantiles(spread: Spread | None) -> tuple:
        return (None, None, None) if spread is None else (spread.p50, spread.p95, spread.max)

    return {
        "method": {"a": la.method, "b": lb.method},
        "end_spread_ns_after": {q: _triple(x, y) for q, x, y in zip(("p50", "p95", "max"), quantiles(la.end_spread_ns_after),
                                                                   quantiles(lb.end_spread_ns_after))},
        "violations_after": _triple(la.violations_after, lb.violations_after),
        "instances_used": _triple(la.instances_used, lb.instances_used),
    }


def _contention(a: Document, b: Document) -> list[dict]:
    def by_kernel(doc: Document) -> dict[str, ContentionEntry]:
        return {e.kernel_full or e.kernel: e for e in doc.contention}

    ka, kb = by_kernel(a), by_kernel(b)
    rows = []
    for key in dict.fromkeys([*ka, *kb]):
        ea, eb = ka.get(key), kb.get(key)
        e = ea or eb
        # Absent: it overlapped nothing, so it slowed nothing (0); present with null: unknown.
        rows.append({"kernel": e.kernel, "kernel_full": e.kernel_full,
                     "contention_ns": _triple(ea.contention_ns if ea else 0, eb.contention_ns if eb else 0),
                     "overlap_ns": _triple(ea.overlap_ns if ea else 0, eb.overlap_ns if eb else 0),
                     "collectives": _triple(ea.collectives if ea else 0, eb.collectives if eb else 0)})
    rows.sort(key=lambda r: (-abs(r["contention_ns"]["delta"] or 0), -abs(r["overlap_ns"]["delta"])))
    return rows


# Findings -------------------------------------------------------------------------------------------

def _name(g: dict) -> str:
    """A cause as the subject of a sentence."""
    # The kernel's whole name: two GEMMs cut at a fixed width read alike.
    return cause_kinds.of(g["cause"]).subject.format(kernel=g["kernel"] or "-", nvtx=g["nvtx"] or "no NVTX range")


def _total_sentence(what: str, t: dict, always: bool = True) -> str | None:
    """A sentence on how a total changed; with always=False only when it changed noticeably."""
    if t["a"] is None or t["b"] is None:
        return None
    if not always and abs(t["delta"]) <= CHANGE_SHARE * abs(t["a"]):
        return None
    if t["delta"] == 0:
        return f"{what} is unchanged ({_d(t['a'])})."
    change = _change(t)
    values = f"({_d(t['a'])} → {_d(t['b'])})"
    if change is None:
        return f"{what} went from none to {_d(t['b'])}." if t["b"] else None
    if abs(change) < CHANGE_SHARE:
        return f"{what} barely changed {values}."
    if change >= 1:
        return f"{what} rose {t['b'] / t['a']:.1f}-fold {values}."
    return f"{what} {'rose' if change > 0 else 'fell'} by {abs(change):.0%} {values}."


def _findings(cmp: dict) -> list[str]:
    s = cmp["summary"]
    wait = s["wait_ns"]
    out = []
    if cmp["a"]["collectives"] == 0 and cmp["b"]["collectives"] == 0:
        return ["Neither run has a collective matched across ranks: there is nothing to compare."]
    if (sentence := _total_sentence("Total collective wait", wait)):
        out.append(sentence)

    def significant(g, side):
        """A cause the analysis of that run was confident about, with a large share of its wait."""
        return (g["confidence"][side] == "high" and bool(wait[side])
                and g["wait_saved_ns"][side] >= SIGNIFICANT_SHARE * wait[side])

    def rank_wait(g, side):
        return next(x[side] for x in g["by_rank"] if x["rank"] == g["top_rank"][side])

    for g in cmp["blocking_by_cause"]:
        if len(out) >= MAX_FINDINGS:
            break
        sig_a, sig_b = significant(g, "a"), significant(g, "b")
        if not (sig_a or sig_b):
            continue
        t, name = g["wait_saved_ns"], _name(g)
        ra, rb = g["top_rank"]["a"], g["top_rank"]["b"]
        change = _change(t)
        # Slow transfers are plural ("they"), a kernel is one thing ("it").
        it, s_, is_ = ("they", "", "are") if cause_kinds.of(g["cause"]).plural else ("it", "s", "is")
        if sig_a and sig_b and g["moved"]:
            out.append(f"{name} moved: {it} made rank {ra} late in A ({_d(rank_wait(g, 'a'))} of wait) "
                       f"and rank {rb} late in B ({_d(rank_wait(g, 'b'))}).")
        elif change is not None and abs(change) < CAUSE_CHANGE_SHARE:
            continue  # the same cause, about as costly: nothing to say
        elif sig_b and t["a"] < CAUSE_CHANGE_SHARE * t["b"]:
            out.append(f"{name} {is_} new in B: {it} made rank {rb} late ({_d(rank_wait(g, 'b'))} of wait, "
                       f"{t['b'] / wait['b']:.0%} of B's wait; {_d(t['a'])} in A).")
        elif sig_a and t["b"] < CAUSE_CHANGE_SHARE * t["a"]:
            out.append(f"{name} no longer block{s_} in B: {it} made rank {ra} late in A ({_d(rank_wait(g, 'a'))} of wait), "
                       f"{_d(t['b'])} in B.")
        else:
            side = "b" if sig_b else "a"
            out.append(f"{name} {'grew' if t['delta'] > 0 else 'shrank'} by {abs(change):.0%}: "
                       f"{_d(t['a'])} → {_d(t['b'])} of wait its fix saves (mostly through {cause_kinds.rank_or_hosts(g['top_rank'][side])}).")
    top = s["top_straggler_rank"]
    if top["changed"] and top["a"] is not None and top["b"] is not None:
        out.append(f"The rank that cost the most wait changed from rank {top['a']} in A to rank {top['b']} in B.")
    if (sentence := _total_sentence("GPU transfer time", s["transfer_ns"], always=False)):
        out.append(sentence)
    for r in cmp["contention"][:1]:
        c = r["contention_ns"]
        transfer = max(s["transfer_ns"]["a"] or 0, s["transfer_ns"]["b"] or 0)
        if c["delta"] and transfer and abs(c["delta"]) >= 0.02 * transfer:
            out.append(f"{r['kernel'] or '-'} slowed the transfers by {_d(c['b'])} in B "
                       f"against {_d(c['a'])} in A.")
    if cmp["a"]["ranks"] != cmp["b"]["ranks"]:
        out.append(f"The runs have different numbers of ranks ({cmp['a']['ranks']} and {cmp['b']['ranks']}): "
                   "totals over ranks compare different jobs.")
    counts = [f"{o['op']} {o['count']['a']} → {o['count']['b']}" for o in cmp["operations"] if o["count"]["delta"]]
    if counts:
        out.append(f"The runs ran different collectives ({', '.join(counts)}): totals compare different amounts of work.")
    v = cmp["alignment"]["violations_after"]
    if (v["a"] or 0) > 0 or (v["b"] or 0) > 0:
        out.append(f"Clock alignment left causality violations (A: {v['a']}, B: {v['b']}): "
                   "per-rank deltas are less certain.")
    return out


def compare_documents(a: Document, b: Document, *, sources: tuple[str | None, str | None] = (None, None)) -> dict:
    """The comparison of run A (`a`, the baseline) with run B (`b`): the deltas are b - a.
    `sources` says where each document came from (a path, "run 12"), for people reading it."""
    blocking = _blocking(a, b)
    cmp = {
        "schema_version": COMPARISON_SCHEMA_VERSION,
        "a": _identity(a, sources[0]),
        "b": _identity(b, sources[1]),
        "summary": _summary(a, b),
        "blocking": blocking,
        "blocking_by_cause": _by_cause(blocking),
        "operations": _operations(a, b),
        "stragglers": _stragglers(a, b),
        "alignment": _alignment(a, b),
        "contention": _contention(a, b),
        "warnings": [],
    }
    if a.schema_version != b.schema_version:
        cmp["warnings"].append(f"the runs were stored with different --json schema versions "
                               f"({a.schema_version} and {b.schema_version})")
    cmp["findings"] = _findings(cmp)
    return cmp
