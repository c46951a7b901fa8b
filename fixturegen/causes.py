"""What can make a job wait, planted one at a time or several at once.

* ``slow_kernel``: on one rank the backward dgrad GEMM runs 35% longer (every step; pp: odd steps,
  so the stage has itself as reference). Removed: the kernel runs its drawn, un-slowed duration.
* ``extra_kernel``: one rank runs an extra ``index_put_kernel`` (~380 us) early in the forward pass
  of every step (data imbalance). Removed: the kernel and its launch are not there.
* ``host_stall``: one rank's host thread loses ~2 ms (x U(0.85, 1.15) per step) inside a named
  range in every step: ``dataloader`` (inside ``DataLoader.__next__``, while the GPU idles after the
  previous step's ``.item()``), ``gc`` (a ``gc.collect`` range after it) or ``item`` (a ``log_metrics``
  range in the forward pass: a synchronous D2H ``cudaMemcpy`` of a metric, which drains the GPU's
  queue, then ~2 ms of host work). Removed: the stall (and the range's calls) is not there.
* ``host_group``: the data-loader stall on every rank of one host, drawn per rank (a node whose
  ranks are all late together). Removed: no rank of the node stalls.
* ``contention``: in odd steps, a GEMM on a side stream of one rank (``--contention-ranks all``:
  every rank) starts with each of the style's main collectives (it waits for the same ready event,
  and for the NCCL stream's previous collective) and runs through its transfer: transfers progress
  1.6x slower while it overlaps them, and a ring runs at its slowest member's pace. The GEMMs of
  one step take side streams 21, 25, 29, ... in turn (PyTorch hands out pooled streams), so one
  does not queue behind another. Removed: transfers run at their un-contended speed; the GEMM
  still runs.
* ``slow_network``: in odd steps, the collectives with traffic leaving or entering one host (members
  on it and off it) transfer 1.8x slower. Removed: normal speed.
* ``slow_device``, ``api_stall``, ``oneoff_stall``, ``nested_stall``: a slow GPU, a stalling CUDA
  runtime, a one-off host stall and nested ranges over one stall on one rank (``stragglers.py``).
* ``kernel_contention``, ``kernel_contention_clean``, ``paired_contention``, ``nccl_slows_compute``:
  overlapping kernels of which one slows the other work and the rest do not (overlap_causes.py).
* ``balanced``: nothing planted (control). ``mixed``: slow_kernel on one rank in even steps and a
  data-loader host_stall on another in odd steps (the demo).

The rank(s) and host are drawn from the seed and recorded in truth.json: a permutation of the ranks
(of the hosts) by the seed, and a fixed slot in it per cause type, so a cause acts on the same rank
whichever other causes are planted (and different cause types on different ranks, given four
ranks or more). Every number a cause draws comes from its own random stream, so the base program is
unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from . import catalog as cat
from .catalog import US
from . import overlap_causes, stragglers
from .program import G_D2H, STALL_NS, STREAM_SIDE, Builder, _rng

CAUSES = (("slow_kernel", "extra_kernel", "host_stall", "host_group", "contention", "slow_network")
          + stragglers.RANK_CAUSES + overlap_causes.OVERLAP_CAUSES)
ALIASES = {"late_launch": "host_stall"}  # the first generator's name for a data-loader stall
SCENARIOS = ("balanced", "mixed") + CAUSES
STALL_KINDS = ("dataloader", "gc", "item")
STALL_RANGES = {"dataloader": "DataLoader.__next__", "gc": "gc.collect", "item": "log_metrics"}
SLOW_FACTOR = 1.35
CONTENTION_FACTOR = 1.6
NETWORK_FACTOR = 1.8
CONTENDER_SLACK = 300 * US  # the contending GEMM outlasts the slowed transfer by about this much
SIDE_STREAMS = 8  # contending GEMMs rotate over side streams 21, 25, ... (8 of them)
RANK_SLOTS = {"slow_kernel": 0, "host_stall": 1, "extra_kernel": 2, "contention": 3, **stragglers.SLOTS}
HOST_CAUSES = ("host_group", "slow_network")


@dataclass
class Cause:
    index: int
    type: str
    steps: np.ndarray  # bool per step
    rank: int | None = None
    host: int | None = None
    ranks: list = field(default_factory=list)  # the ranks it acts on
    kind: str | None = None  # host_stall: dataloader | gc | item
    factor: float | None = None
    # filled while planting
    rows: dict = field(default_factory=dict)  # rank -> merged row indices it owns or lengthens
    extra: dict = field(default_factory=dict)  # rank -> planted ns per step (int64 array)
    instances: list = field(default_factory=list)  # instance keys it slows

    @property
    def id(self):
        return self.type


def parse_scenario(scenario):
    """'balanced', 'mixed', a cause, or causes joined with '+' -> list of (type, step rule)."""
    if scenario == "balanced":
        return []
    if scenario == "mixed":
        return [("slow_kernel", "even"), ("host_stall", "odd")]
    out = []
    for part in scenario.split("+"):
        t = ALIASES.get(part, part)
        if t not in CAUSES:
            raise ValueError(f"unknown scenario {scenario!r}: {part!r} is not one of {', '.join(SCENARIOS)} "
                             "(or causes joined with '+')")
        if t in [o[0] for o in out]:
            raise ValueError(f"scenario {scenario!r} names {t} twice")
        out.append((t, None))
    return out


def plan(scenario, lay, steps, seed, contention_ranks="one", stall="dataloader"):
    """Which rank / host each cause acts on, in which steps."""
    wanted = parse_scenario(scenario)
    if stall not in STALL_KINDS:
        raise ValueError(f"unknown stall kind {stall!r}; one of {', '.join(STALL_KINDS)}")
    rng = _rng(seed, 4)
    rank_order = [int(x) for x in rng.permutation(lay.ranks)]
    host_order = [int(x) for x in _rng(seed, 4, 1).permutation(lay.hosts)]
    all_steps = np.ones(steps, bool)
    even = np.arange(steps) % 2 == 0
    causes = []
    for typ, rule in wanted:
        if typ in overlap_causes.OVERLAP_CAUSES:  # every rank, in the steps the variant says
            c = Cause(len(causes), typ, overlap_causes.steps_of(typ, steps), ranks=list(range(lay.ranks)))
            c.factor = overlap_causes.VICTIM_FACTOR if typ == "nccl_slows_compute" else overlap_causes.SLOWER_FACTOR
            causes.append(c)
            continue
        if typ in ("contention", "slow_network") or rule == "odd":
            if steps < 2:
                raise ValueError(f"{typ} needs steps >= 2 (it acts in odd steps)")
            st = ~even
        elif rule == "even":
            st = even.copy()
        elif typ in stragglers.RANK_CAUSES:
            st = stragglers.steps_of(typ, steps)
        elif typ == "slow_kernel" and lay.style == "pp":
            if steps < 2:
                raise ValueError("slow_kernel with pp needs steps >= 2 (it acts in odd steps)")
            st = ~even
        else:
            st = all_steps.copy()
        c = Cause(len(causes), typ, st)
        # Each cause type has its own slot in the seed's rank (host) order, so a cause lands on the
        # same rank whichever other causes are planted: a scenario minus one cause is the scenario
        # of the others. Distinct types get distinct ranks while there are enough ranks.
        if typ in RANK_SLOTS and (typ != "contention" or contention_ranks == "one"):
            c.rank = rank_order[RANK_SLOTS[typ] % lay.ranks]
            c.ranks = [c.rank]
        elif typ == "contention":
            c.ranks = list(range(lay.ranks))
        if typ in HOST_CAUSES:
            if lay.hosts < 2:
                raise ValueError(f"{typ} needs at least 2 hosts")
            c.host = host_order[HOST_CAUSES.index(typ) % lay.hosts]
            c.ranks = [r for r in range(lay.ranks) if lay.host_of[r] == c.host]
        if typ in ("host_stall", "host_group"):
            c.kind = stall if typ == "host_stall" else "dataloader"
        c.factor = {"slow_kernel": SLOW_FACTOR, "contention": CONTENTION_FACTOR,
                    "slow_network": NETWORK_FACTOR}.get(typ)
        if typ == "slow_device":
            c.factor = float(_rng(seed, 4, 2).uniform(*stragglers.DEVICE_FACTOR))
        causes.append(c)
    return causes


def primary_collectives(style, anchors):
    """The collectives of a step a contending kernel sits beside: the style's main traffic."""
    colls = anchors.get("collectives", [])
    if style == "ddp":
        return colls
    if style == "fsdp":
        return [c for c in colls if c["tag"].startswith("rs")]
    if style == "tp":
        return [c for c in colls if c["tag"].startswith("tpf") and c["tag"].endswith("m")]
    if style == "tp+ddp":
        return [c for c in colls if c["tag"].startswith("dp")]
    return [c for c in colls if c["tag"][:2] in ("sf", "rf")]  # pp: the forward sends and receives


class Planter:
    """Builds one rank's cause rows: per row its (step, anchor slot) and an order key."""

    def __init__(self, rank, events):
        self.b = Builder(rank, events)
        self.meta = []  # (step, anchor slot, cause index, depth offset)
        self.extra_host, self.extra_gpu = [], []  # (cause, base rows, extra ns)
        self.host_durations = []  # (cause row, ns): HOST rows' stall durations
        self.gpu_durations = []  # (cause row, ns)
        self.contenders = []  # (cause index, instance key, cause row, factor)
        self.slowed_by_nccl = []  # (cause index, cause row): kernels an overlap cause lengthens

    def rows_for(self, cause, step, anchor, build):
        slot, depth = anchor
        n0, r0 = len(self.b.rows), len(self.b.ranges)
        build(self.b)
        for _ in range(len(self.b.rows) - n0):
            self.meta.append((step, slot, cause.index, depth))
        for rg in self.b.ranges[r0:]:
            rg.owner, rg.step = cause.index, step


def plant(causes, lay, rank, template, cols, events, seed, transfer_of):
    """The rows and extra durations the causes add to rank's program (before merging)."""
    p = Planter(rank, events)
    anchors = template.anchors
    t = len(template.rows)
    for c in causes:
        if rank not in c.ranks:
            continue
        rng = _rng(seed, 20 + CAUSES.index(c.type), rank)
        st = np.flatnonzero(c.steps)
        base_rows = np.arange(len(cols["api"]))
        if c.type == "slow_kernel":
            hit = (cols["spec"] == cat.SPEC[cat.SLOW_KERNEL]) & c.steps[cols["step"]]
            rows = base_rows[hit]
            p.extra_gpu.append((c.index, rows, np.rint(cols["gdur"][rows] * (c.factor - 1.0)).astype(np.int64)))
        elif c.type == "extra_kernel":
            def build(b):
                with b.cpu_op(cat.ATEN_OP[cat.SPEC[cat.EXTRA_KERNEL]]):
                    b.launch(cat.EXTRA_KERNEL)
            for s in st.tolist():
                p.rows_for(c, s, anchors["extra_kernel"], build)
        elif c.type in ("host_stall", "host_group"):
            stall = np.rint(STALL_NS * rng.uniform(0.85, 1.15, len(st))).astype(np.int64)
            if c.kind == "dataloader":
                slot = anchors["dataloader"][0]
                rows = st * t + slot
                p.extra_host.append((c.index, rows, stall))
            elif c.kind == "gc":
                for s, ns in zip(st.tolist(), stall.tolist()):
                    def build(b):
                        with b.range("gc.collect"):
                            i = b.host("host")
                        p.host_durations.append((i, ns))
                    p.rows_for(c, s, anchors["dataloader"], build)
            else:  # item: a metric fetched synchronously, then logged
                for s, ns in zip(st.tolist(), stall.tolist()):
                    def build(b):
                        with b.range("log_metrics"):
                            with b.cpu_op("aten::item"), b.cpu_op("aten::_local_scalar_dense"):
                                b.memcpy(G_D2H, 4, sync=True, klass="item")
                            i = b.host("host")
                        p.host_durations.append((i, ns))
                    p.rows_for(c, s, anchors["item"], build)
        elif c.type in stragglers.RANK_CAUSES:
            stragglers.plant(c, p, cols, anchors, rng)
        elif c.type in overlap_causes.OVERLAP_CAUSES:
            overlap_causes.plant(p, c, lay.style, anchors, cols, t, rng, transfer_of, primary_collectives)
        elif c.type == "contention":
            targets = primary_collectives(lay.style, anchors)
            for s in st.tolist():
                for j, a in enumerate(targets):
                    side = STREAM_SIDE + 4 * (j % SIDE_STREAMS)
                    key = (a["comm"], int(cols["seq"][s * t + a["row"]]))
                    x0 = transfer_of(key)
                    dur = int(round((c.factor * x0 + CONTENDER_SLACK) * rng.uniform(1.0, 1.1)))

                    def build(b, a=a, dur=dur, key=key, side=side):
                        b.wait(side, a["ready"], klass="hook")
                        if a["prev_end"]:
                            b.wait(side, a["prev_end"], klass="hook")
                        with b.cpu_op(cat.ATEN_OP[cat.SPEC[cat.CONTEND]]):
                            i = b.launch(cat.CONTEND, stream=side)
                        p.gpu_durations.append((i, dur))
                        p.contenders.append((c.index, key, i, c.factor))
                    p.rows_for(c, s, (a["last"], a["depth"]), build)
    return p
