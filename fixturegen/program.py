"""The job model: what every rank's host thread does, step after step, as an explicit program.

A rank's program is one table of *host operations* in the order its main thread performs them:
pure host work (``HOST``: the data loader, garbage collection, logging) and CUDA API calls
(kernel launches, copies, memsets, event records, stream waits, synchronize calls). A call that
puts work on a GPU stream (launch, copy, memset) owns that GPU operation: the GPU op *is* its row
(same index), so ``gkind >= 0`` marks the rows that are also GPU work. Collectives are NCCL kernels
with a communicator and a sequence number; the k-th operation of a communicator on every member
rank is one instance (NCCL's ordering rule).

A step is built once per rank as a template by the style builders below (``ddp``, ``fsdp``,
``tp``, ``pp``, ``tp+ddp``), tiled over the steps, and its random numbers drawn for all steps at
once (``draw``). Causes (``causes.py``) add their own operations afterwards with their own random
streams, so the base program and every base draw are the same whether or not a cause is planted:
removing a cause, or generating the same seed without it, changes nothing else.

Stream ids (per process, as nsys numbers them): compute 7, the data-parallel NCCL stream 13, FSDP's
unshard stream 11, all-gather 15 and reduce-scatter 19 streams, the tensor-parallel NCCL stream 17,
pipeline p2p streams 13 (to the previous stage) and 17 (to the next), the side stream 21.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np

from . import catalog as cat
from .catalog import MS, SPEC, US

# host operation kinds (API calls and pure host work)
A_HOST, A_LAUNCH, A_LAUNCH_EX, A_MEMCPY_ASYNC, A_MEMCPY, A_MEMSET_ASYNC = 0, 1, 2, 3, 4, 5
A_EVENT_RECORD, A_STREAM_WAIT, A_STREAM_SYNC, A_DEVICE_SYNC, A_EVENT_SYNC = 6, 7, 8, 9, 10
BLOCKING = (A_MEMCPY, A_STREAM_SYNC, A_DEVICE_SYNC, A_EVENT_SYNC)
# GPU operation kinds
G_NONE, G_KERNEL, G_NCCL, G_H2D, G_D2H, G_MEMSET, G_WAIT = -1, 0, 1, 2, 3, 4, 5
# G_WAIT: a cudaStreamWaitEvent is a zero-length marker on the waiting stream: everything enqueued on
# that stream after it starts after the event's work (and an event recorded later captures it).

STREAM_COMPUTE, STREAM_UNSHARD, STREAM_DP, STREAM_AG, STREAM_TP, STREAM_RS, STREAM_SIDE = 7, 11, 13, 15, 17, 19, 21
STREAM_PP_PREV, STREAM_PP_NEXT = 13, 17
STREAM_NCCL = STREAM_DP  # the first generator's name for the DDP stream

STYLES = ("ddp", "fsdp", "tp", "pp", "tp+ddp")
DATALOADER = "DataLoader.__next__"
STEP_RANGE = "ProfilerStep#{step}"

COPY_BYTES = 262_144  # the batch: two int64 token tensors per step
LOSS_BYTES = 4  # the loss, fetched by .item() (D2H into pageable memory)
BUCKET_BYTES, LAST_BUCKET_BYTES = 25 * 2**20, 9 * 2**20  # DDP's 25 MiB buckets
FSDP_BYTES = 24 * 2**20  # one layer's flat parameters (bf16), all-gathered and reduce-scattered
TP_BYTES = 8 * 2**20  # one layer's activations (bf16), all-reduced by tensor parallelism
PP_BYTES = 8 * 2**20  # one microbatch's activations or their gradients, sent between stages
MEMSET_BYTES = 25 * 2**20  # the gradient buffer zeroed before backward

# Host-time classes: (gap low, gap high, call low, call high) in ns, uniform. The gap is host time
# spent before the op (Python, ATen dispatch), the call its own duration (for blocking calls, the
# part before they start waiting).
CLASSES = {
    "aten": (5 * US, 10 * US, 1_500, 3_500),       # an ATen op launching its kernel
    "copy": (6 * US, 12 * US, 3 * US, 6 * US),      # aten::copy_ -> cudaMemcpyAsync
    "memset": (4 * US, 8 * US, 2 * US, 4 * US),     # aten::zero_ -> cudaMemsetAsync
    "c10d": (8 * US, 15 * US, 800, 2 * US),         # entering a c10d collective (first call)
    "c10d_in": (800, 2 * US, 800, 2 * US),          # the next calls inside it
    "nccl": (1 * US, 2 * US, 3 * US, 6 * US),       # ncclAllReduce & co. -> cuLaunchKernelEx
    "hook": (2 * US, 4 * US, 800, 2 * US),          # DDP / FSDP hooks: stream waits, events
    "sync": (3 * US, 6 * US, 1 * US, 2 * US),       # synchronize calls, before blocking
    "item": (8 * US, 14 * US, 3 * US, 5 * US),      # aten::item -> the D2H copy
    "step": (1 * US, 2 * US, 2 * US, 4 * US),       # HOST: the profiler's step bookkeeping
    "dataloader": (1 * US, 2 * US, 0, 0),           # HOST: the data loader (duration below)
    "host": (1 * US, 2 * US, 0, 0),                 # HOST work whose duration a cause sets
}
CLASS_ID = {k: i for i, k in enumerate(CLASSES)}
DATALOADER_NS, DATALOADER_CV = 350 * US, 0.05
STALL_NS = 2 * MS  # host_stall / host_group: the extra host time per planted step (x U(0.85, 1.15))
SYNC_RETURN = (2 * US, 6 * US)  # a blocking call returns this long after the GPU work it waits for
LAUNCH_LATENCY = (1 * US, 3 * US)  # GPU work can start this long after its call returned
MIN_KERNEL_NS = 2 * US

# range flags: where a range is written
R_NVTX, R_KINETO = 1, 2
# nsys NVTX naming: inline text, or a registered string (textId); domain 0 (default) or NCCL
NV_TEXT, NV_REGISTERED = 0, 1
NCCL_DOMAIN_ID = 1


@dataclass
class Range:
    """A host-time range (NVTX push/pop in nsys; cpu_op / user_annotation in Kineto) over the host
    operations first..last (indices into the rank's op table)."""
    first: int
    last: int
    name: str
    flags: int  # R_NVTX | R_KINETO
    depth: int
    nvtx: int = NV_TEXT  # inline text or registered string
    domain: int = 0
    kineto_cat: str = "user_annotation"
    kineto_name: str | None = None  # when Kineto names it differently
    args: dict | None = None  # Kineto args (record_param_comms)
    owner: int = -1  # cause index, -1 for the base program
    step: int = -1


class Builder:
    """Records one step (or a cause's additions) of one rank's host thread as rows."""

    def __init__(self, rank, events):
        self.rank = rank
        self.rows = []  # dicts, see _row
        self.ranges = []
        self.stack = []
        self.anchors = {}
        self.events = events  # name -> event id, shared by a rank's base and cause builders
        self.comm_seq = {}  # communicator -> ops issued so far in this template
        self.last_end = {}  # NCCL stream -> end event of its last collective

    # --- rows
    def _row(self, api, klass, **kw):
        row = {"api": api, "klass": CLASS_ID[klass], "stream": -1, "event": -1, "gkind": G_NONE, "spec": -1,
               "bytes": 0, "comm": -1, "seq": -1, "label": -1, "depth": len(self.stack), "copy": 0,
               "peer": -1, "op": ""}
        row.update(kw)
        self.rows.append(row)
        return len(self.rows) - 1

    def event(self, name):
        if name not in self.events:
            self.events[name] = len(self.events) + 1  # CUPTI event ids: small integers, reused
        return self.events[name]

    def host(self, klass="host", label=-1):
        return self._row(A_HOST, klass, label=label)

    def launch(self, kern, stream=STREAM_COMPUTE, klass="aten"):
        return self._row(A_LAUNCH, klass, stream=stream, gkind=G_KERNEL, spec=SPEC[kern])

    def memcpy(self, kind, nbytes, stream=STREAM_COMPUTE, sync=False, klass="copy"):
        return self._row(A_MEMCPY if sync else A_MEMCPY_ASYNC, klass, stream=stream, gkind=kind, bytes=nbytes,
                         copy=1)

    def memset(self, nbytes, stream=STREAM_COMPUTE):
        return self._row(A_MEMSET_ASYNC, "memset", stream=stream, gkind=G_MEMSET, bytes=nbytes)

    def record(self, stream, event, klass="c10d_in"):
        return self._row(A_EVENT_RECORD, klass, stream=stream, event=self.event(event))

    def wait(self, stream, event, klass="c10d_in"):
        return self._row(A_STREAM_WAIT, klass, stream=stream, event=self.event(event), gkind=G_WAIT)

    def stream_sync(self, stream=STREAM_COMPUTE):
        return self._row(A_STREAM_SYNC, "sync", stream=stream)

    def device_sync(self):
        return self._row(A_DEVICE_SYNC, "sync")

    def event_sync(self, event):
        return self._row(A_EVENT_SYNC, "sync", event=self.event(event))

    def nccl(self, comm, op, stream, nbytes, label, peer=-1):
        seq = self.comm_seq.get(comm, 0)
        self.comm_seq[comm] = seq + 1
        kern = cat.NCCL_OPS[op][0]
        return self._row(A_LAUNCH_EX, "nccl", stream=stream, gkind=G_NCCL, spec=SPEC[kern], bytes=nbytes, comm=comm,
                         seq=seq, label=label, peer=peer, op=op)

    # --- ranges
    @contextmanager
    def range(self, name, flags=R_NVTX | R_KINETO, **kw):
        first = len(self.rows)
        self.stack.append(name)
        try:
            yield
        finally:
            self.stack.pop()
        last = len(self.rows) - 1
        assert last >= first, f"empty range {name}"
        self.ranges.append(Range(first, last, name, flags, len(self.stack), **kw))

    def cpu_op(self, name):
        """A Kineto-only cpu_op (PyTorch's ATen op, which nsys does not see without emit_nvtx)."""
        return self.range(name, R_KINETO, kineto_cat="cpu_op")

    def mark(self, name):
        """Name the point after the last row so far (and the range depth there): causes insert there."""
        self.anchors[name] = (len(self.rows) - 1, len(self.stack))

    # --- PyTorch's c10d ProcessGroupNCCL pattern around one collective or p2p op
    def c10d(self, comm, op, nccl_stream, nbytes, label, tag, current=STREAM_COMPUTE, wait_after=False, peer=-1,
             group=None):
        """record(current) -> wait(nccl stream) -> [ncclX] cuLaunchKernelEx -> record end event on the NCCL
        stream; work.wait() (wait_after) makes the current stream wait for that end event."""
        kern, nccl_name, torch_name, coll_name = cat.NCCL_OPS[op]
        ready, end = f"{tag}:ready", f"{tag}:end"
        prev_end = self.last_end.get(nccl_stream)
        args = {"Collective name": coll_name, "op": op, "bytes": nbytes, "group": group, "peer": peer}
        with self.range(torch_name, kineto_cat="cpu_op", kineto_name="record_param_comms", args=args):
            self.record(current, ready, klass="c10d")
            self.wait(nccl_stream, ready)
            with self.range(nccl_name, nvtx=NV_REGISTERED, domain=NCCL_DOMAIN_ID, kineto_name=torch_name):
                i = self.nccl(comm, op, nccl_stream, nbytes, label, peer)
            self.record(nccl_stream, end)
        if wait_after:
            self.wait(current, end, klass="hook")
        self.last_end[nccl_stream] = end
        self.anchors.setdefault("collectives", []).append(
            {"row": i, "last": len(self.rows) - 1, "depth": len(self.stack), "ready": ready, "end": end,
             "prev_end": prev_end, "comm": comm, "tag": tag, "stream": nccl_stream})
        return i


# ---------------------------------------------------------------------------------------------
# Job layout: ranks, hosts, communicators


@dataclass
class Comm:
    """A communicator (process group): its members (global ranks, in NCCL rank order), the NCCL
    stream it runs on at each member, and whether it carries point-to-point traffic."""
    index: int
    name: str
    ranks: list
    stream: dict  # rank -> stream id
    p2p: bool = False
    desc: str = ""


@dataclass
class Layout:
    style: str
    ranks: int
    hosts: int
    host_of: list
    local_of: list
    sizes: list
    comms: list = field(default_factory=list)

    def comm(self, name):
        return next(c for c in self.comms if c.name == name)


def layout(style, ranks, hosts):
    """Hosts take ranks in order (sizes differ by at most one); the communicators of the style."""
    sizes = [ranks // hosts + (1 if h < ranks % hosts else 0) for h in range(hosts)]
    host_of, local_of = [], []
    for h, n in enumerate(sizes):
        host_of += [h] * n
        local_of += list(range(n))
    lay = Layout(style, ranks, hosts, host_of, local_of, sizes)
    world = list(range(ranks))

    def add(name, members, stream, p2p=False, desc=""):
        s = stream if isinstance(stream, dict) else {r: stream for r in members}
        lay.comms.append(Comm(len(lay.comms), name, list(members), s, p2p, desc))

    if style == "ddp":
        add("dp", world, STREAM_DP, desc="default_pg")
    elif style == "fsdp":
        add("fsdp_ag", world, STREAM_AG, desc="default_pg")
        add("fsdp_rs", world, STREAM_RS, desc="fsdp_reduce_scatter")
    elif style == "tp":
        add("tp", world, STREAM_TP, desc="default_pg")
    elif style == "tp+ddp":
        if len(set(sizes)) != 1 or hosts < 2:
            raise ValueError("tp+ddp needs at least 2 hosts with the same number of ranks each")
        for h in range(hosts):  # tensor parallel inside a node
            add(f"tp{h}", [r for r in world if host_of[r] == h], STREAM_TP, desc="tensor_parallel")
        for lr in range(sizes[0]):  # data parallel across nodes
            add(f"dp{lr}", [r for r in world if local_of[r] == lr], STREAM_DP, desc="data_parallel")
    elif style == "pp":
        for s in range(ranks - 1):  # one 2-rank communicator (and stream) per pair of neighbouring stages
            add(f"pp{s}-{s + 1}", [s, s + 1], {s: STREAM_PP_NEXT, s + 1: STREAM_PP_PREV}, p2p=True, desc="p2p")
    else:
        raise ValueError(f"unknown style {style!r}; one of {', '.join(STYLES)}")
    return lay


def comms_of(lay, rank):
    return [c for c in lay.comms if rank in c.ranks]


# ---------------------------------------------------------------------------------------------
# Step templates, one per style


def _prologue(b):
    b.host("step")
    with b.range(DATALOADER, nvtx=NV_REGISTERED):
        b.host("dataloader", label=1)
    b.mark("dataloader")


def _copies(b):
    for _ in range(2):
        with b.cpu_op("aten::copy_"):
            b.memcpy(G_H2D, COPY_BYTES)


def _launch_all(b, kernels, marks=None):
    for n, k in enumerate(kernels):
        with b.cpu_op(cat.ATEN_OP[SPEC[k]]):
            b.launch(k)
        if marks and n in marks:
            b.mark(marks[n])


def _loss_item(b):
    """loss.item(): a D2H copy into pageable memory, then cudaStreamSynchronize (as PyTorch does)."""
    with b.cpu_op("aten::item"), b.cpu_op("aten::_local_scalar_dense"):
        b.memcpy(G_D2H, LOSS_BYTES, klass="item")
        b.stream_sync(STREAM_COMPUTE)


def _optimizer(b):
    with b.range("optimizer"):
        _launch_all(b, cat.OPT_PATTERN)


def ddp_split(k, buckets):
    """The first generator's DDP step: forward ~32% of the k compute kernels, backward split into
    buckets of at least one backward layer pattern, 2 optimizer kernels."""
    n_opt = 2
    n_fwd = max(1, round(0.32 * k))
    n_bwd = k - n_fwd - n_opt
    b = max(1, min(buckets, n_bwd // len(cat.BWD_PATTERN)))
    fwd = [cat.FWD_PATTERN[i % len(cat.FWD_PATTERN)] for i in range(n_fwd)]
    bwd = [cat.BWD_PATTERN[i % len(cat.BWD_PATTERN)] for i in range(n_bwd)]
    chunks = [list(c) for c in np.array_split(np.array(bwd, dtype=object), b)]
    return fwd, chunks


def build_ddp(b, lay, rank, k, buckets):
    fwd, chunks = ddp_split(k, buckets)
    comm = lay.comm("dp").index
    _prologue(b)
    with b.range("forward"):
        _copies(b)
        _launch_all(b, fwd, {0: "extra_kernel", len(fwd) // 2: "item"})
    with b.range("backward"):
        with b.cpu_op("aten::zero_"):
            b.memset(MEMSET_BYTES)
        for n, chunk in enumerate(chunks):
            _launch_all(b, chunk)
            nbytes = LAST_BUCKET_BYTES if (len(chunks) > 1 and n == len(chunks) - 1) else BUCKET_BYTES
            b.c10d(comm, "AllReduce", STREAM_DP, nbytes, n, f"dp{n}", group="dp")
            b.mark(f"bucket{n}")
        # Reducer::finalize_backward: the current stream waits for every bucket's work
        for n in range(len(chunks)):
            b.wait(STREAM_COMPUTE, f"dp{n}:end", klass="hook")
    _optimizer(b)
    _loss_item(b)
    return len(chunks)


def layers_of(k, per_layer, n_opt=2):
    n = (k - n_opt) // per_layer
    if n < 1:
        raise ValueError(f"kernels_per_step must be at least {n_opt + per_layer} for this style")
    return n, k - n_opt - n * per_layer


def _filler(n):
    if n <= 0:
        return []
    return [cat.EMBED] + [cat.FILLER[i % len(cat.FILLER)] for i in range(n - 1)]


def build_fsdp(b, lay, rank, k, buckets):
    per_layer = len(cat.FWD_ATTN) + len(cat.FWD_MLP) + len(cat.BWD_MLP) + len(cat.BWD_ATTN)
    n_layers, n_fill = layers_of(k, per_layer)
    ag, rs = lay.comm("fsdp_ag").index, lay.comm("fsdp_rs").index

    def all_gather(tag, layer):
        b.c10d(ag, "AllGather", STREAM_AG, FSDP_BYTES, layer, tag, current=STREAM_UNSHARD, group="fsdp_ag")

    _prologue(b)
    with b.range("forward"):
        _copies(b)
        _launch_all(b, _filler(n_fill))
        # root pre-forward: the unshard stream waits for the current stream once
        b.record(STREAM_COMPUTE, "root_fwd", klass="hook")
        b.wait(STREAM_UNSHARD, "root_fwd", klass="hook")
        all_gather("agf0", 0)
        for layer in range(n_layers):
            if layer + 1 < n_layers:  # forward prefetch of the next layer's parameters
                if layer + 1 >= 2:  # limit_all_gathers: at most two in flight (event.synchronize())
                    b.event_sync(f"free{layer - 1}")
                all_gather(f"agf{layer + 1}", layer + 1)
            b.wait(STREAM_COMPUTE, f"agf{layer}:end", klass="hook")
            marks = {0: "extra_kernel", 4: "item"} if layer == 0 else None
            _launch_all(b, cat.FWD_ATTN + cat.FWD_MLP, marks)
            b.record(STREAM_COMPUTE, f"free{layer}", klass="hook")  # reshard: the parameters are free
    with b.range("backward"):
        b.record(STREAM_COMPUTE, "root_bwd", klass="hook")
        b.wait(STREAM_UNSHARD, "root_bwd", klass="hook")
        all_gather(f"agb{n_layers - 1}", n_layers - 1)
        for n, layer in enumerate(reversed(range(n_layers))):
            if layer - 1 >= 0:  # backward prefetch
                if n + 1 >= 2:
                    b.event_sync(f"bfree{layer + 1}")
                all_gather(f"agb{layer - 1}", layer - 1)
            b.wait(STREAM_COMPUTE, f"agb{layer}:end", klass="hook")
            _launch_all(b, cat.BWD_MLP + cat.BWD_ATTN)
            b.record(STREAM_COMPUTE, f"bfree{layer}", klass="hook")
            b.c10d(rs, "ReduceScatter", STREAM_RS, FSDP_BYTES, layer, f"rs{layer}", group="fsdp_rs")
            b.mark(f"rs{n}")
        b.wait(STREAM_COMPUTE, "rs0:end", klass="hook")  # _wait_for_post_backward
    _optimizer(b)
    _loss_item(b)
    return n_layers


def _tp_layer_fwd(b, tp, tag, marks=None):
    _launch_all(b, cat.FWD_ATTN, marks)
    b.c10d(tp, "AllReduce", STREAM_TP, TP_BYTES, 0, f"{tag}a", wait_after=True, group="tp")
    _launch_all(b, cat.FWD_MLP[:-1])
    b.c10d(tp, "AllReduce", STREAM_TP, TP_BYTES, 1, f"{tag}m", wait_after=True, group="tp")
    b.mark(f"{tag}m")
    _launch_all(b, cat.FWD_MLP[-1:])


def _tp_layer_bwd(b, tp, tag):
    _launch_all(b, cat.BWD_MLP)
    b.c10d(tp, "AllReduce", STREAM_TP, TP_BYTES, 2, f"{tag}m", wait_after=True, group="tp")
    _launch_all(b, cat.BWD_ATTN[:-1])
    b.c10d(tp, "AllReduce", STREAM_TP, TP_BYTES, 3, f"{tag}a", wait_after=True, group="tp")
    _launch_all(b, cat.BWD_ATTN[-1:])


def build_tp(b, lay, rank, k, buckets):
    per_layer = len(cat.FWD_ATTN) + len(cat.FWD_MLP) + len(cat.BWD_MLP) + len(cat.BWD_ATTN)
    n_layers, n_fill = layers_of(k, per_layer)
    hybrid = lay.style == "tp+ddp"
    tp = lay.comm(f"tp{lay.host_of[rank]}" if hybrid else "tp").index
    dp = lay.comm(f"dp{lay.local_of[rank]}").index if hybrid else -1
    n_buckets = max(1, min(buckets, n_layers)) if hybrid else 0
    bucket_of = np.array_split(np.arange(n_layers)[::-1], n_buckets) if hybrid else []
    _prologue(b)
    with b.range("forward"):
        _copies(b)
        _launch_all(b, _filler(n_fill))
        for layer in range(n_layers):
            _tp_layer_fwd(b, tp, f"tpf{layer}", {0: "extra_kernel", 3: "item"} if layer == 0 else None)
    with b.range("backward"):
        if hybrid:
            with b.cpu_op("aten::zero_"):
                b.memset(MEMSET_BYTES)
        done = 0
        for layer in reversed(range(n_layers)):
            _tp_layer_bwd(b, tp, f"tpb{layer}")
            if hybrid and layer == bucket_of[done][-1]:  # the bucket's last layer: its gradients are ready
                nbytes = LAST_BUCKET_BYTES if (n_buckets > 1 and done == n_buckets - 1) else BUCKET_BYTES
                b.c10d(dp, "AllReduce", STREAM_DP, nbytes, done, f"dp{done}", group="dp")
                b.mark(f"bucket{done}")
                done += 1
        for n in range(n_buckets):
            b.wait(STREAM_COMPUTE, f"dp{n}:end", klass="hook")
    _optimizer(b)
    _loss_item(b)
    return n_layers


def pp_split(k, microbatches):
    per_layer = len(cat.FWD_ATTN) + len(cat.FWD_MLP) + len(cat.BWD_MLP) + len(cat.BWD_ATTN)
    n_layers = (k - 2) // (microbatches * per_layer)
    if n_layers < 1:
        raise ValueError(f"pp needs kernels_per_step >= {2 + microbatches * per_layer} "
                         f"({microbatches} microbatches of at least one layer)")
    return n_layers


def build_pp(b, lay, rank, k, microbatches):
    """GPipe: every microbatch forward, then every microbatch backward (reverse order); the stages
    exchange activations and gradients by send/recv on one 2-rank communicator per stage pair."""
    stages = lay.ranks
    s = rank
    n_layers = pp_split(k, microbatches)
    prev = lay.comm(f"pp{s - 1}-{s}").index if s > 0 else -1
    nxt = lay.comm(f"pp{s}-{s + 1}").index if s < stages - 1 else -1
    fwd = (cat.FWD_ATTN + cat.FWD_MLP) * n_layers
    bwd = (cat.BWD_MLP + cat.BWD_ATTN) * n_layers
    if s == 0:
        fwd, bwd = [cat.EMBED] + fwd, bwd + [cat.EMBED_BWD]
    if s == stages - 1:
        fwd, bwd = fwd + [cat.LOG_SOFTMAX, cat.NLL_LOSS], [cat.LOG_SOFTMAX_BWD] + bwd

    def p2p(comm, op, stream, mb, tag, peer, wait):
        b.c10d(comm, op, stream, PP_BYTES, mb, tag, wait_after=wait, peer=peer, group="pp")

    _prologue(b)
    with b.range("forward"):
        _copies(b)
        for mb in range(microbatches):
            if s > 0:
                p2p(prev, "Recv", STREAM_PP_PREV, mb, f"rf{mb}", s - 1, True)
            _launch_all(b, fwd, {0: "extra_kernel", len(fwd) // 2: "item"} if mb == 0 else None)
            if s < stages - 1:
                p2p(nxt, "Send", STREAM_PP_NEXT, mb, f"sf{mb}", s + 1, False)
                b.mark(f"send{mb}")
    with b.range("backward"):
        for mb in reversed(range(microbatches)):
            if s < stages - 1:
                p2p(nxt, "Recv", STREAM_PP_NEXT, mb, f"rb{mb}", s + 1, True)
            _launch_all(b, bwd)
            if s > 0:
                p2p(prev, "Send", STREAM_PP_PREV, mb, f"sb{mb}", s - 1, False)
        # the sends must be done before the buffers are reused
        if s < stages - 1:
            b.wait(STREAM_COMPUTE, f"sf{microbatches - 1}:end", klass="hook")
        if s > 0:
            b.wait(STREAM_COMPUTE, "sb0:end", klass="hook")
    _optimizer(b)
    if s == stages - 1:
        _loss_item(b)
    b.device_sync()  # Megatron's timers: torch.cuda.synchronize()
    return microbatches


BUILDERS = {"ddp": build_ddp, "fsdp": build_fsdp, "tp": build_tp, "tp+ddp": build_tp, "pp": build_pp}


def step_template(lay, rank, k, buckets, microbatches, step_range=STEP_RANGE):
    """One step of rank's program: the Builder (rows, ranges, anchors) and the step's size figure
    (buckets, layers or microbatches). `step_range` names the step's range ("{step}": its number;
    without it every step has the same name, as `range_push("train_step")` gives)."""
    b = Builder(rank, {})
    with b.range(step_range):
        size = BUILDERS[lay.style](b, lay, rank, k, microbatches if lay.style == "pp" else buckets)
    return b, size


# ---------------------------------------------------------------------------------------------
# Tiling and drawing

FIELDS = ("api", "klass", "stream", "event", "gkind", "spec", "bytes", "comm", "seq", "label", "depth", "copy", "peer")


@dataclass
class Program:
    """One rank's whole program (all steps), base and cause operations merged in host order.

    Per op (row): the fields of Builder._row, ``step``, ``owner`` (cause index or -1), the drawn
    ``gap`` (host time before it), ``dur`` (its own host duration), ``lat`` (launch latency for
    GPU work, return latency for blocking calls) and ``gdur`` (GPU duration; NCCL kernels get
    theirs from the collective). ``op_name`` holds NCCL op names (AllReduce, Send, ...)."""
    rank: int
    n: int
    cols: dict
    ranges: dict  # numpy columns: first, last (rows), meta (index into range_meta), step, owner, depth
    range_meta: list  # Range templates (name, flags, naming, Kineto category and args)
    events: dict
    op_name: np.ndarray
    # per cause: planted extra durations, (cause index, op indices, extra ns)
    extra_host: list = field(default_factory=list)
    extra_gpu: list = field(default_factory=list)

    def __getattr__(self, name):
        cols = self.__dict__.get("cols")
        if cols is not None and name in cols:
            return cols[name]
        raise AttributeError(name)


def _rng(seed, *stream):
    return np.random.default_rng([seed, *stream])


def tile(b, steps):
    """The template's rows repeated over the steps: columns (numpy), per-row step and template slot."""
    t = len(b.rows)
    cols = {f: np.tile(np.array([r[f] for r in b.rows], np.int64), steps) for f in FIELDS}
    cols["step"] = np.repeat(np.arange(steps, dtype=np.int64), t)
    cols["slot"] = np.tile(np.arange(t, dtype=np.int64), steps)
    per_step = {}
    for r in b.rows:
        if r["comm"] >= 0:
            per_step[r["comm"]] = per_step.get(r["comm"], 0) + 1
    comm = cols["comm"]
    for c, n in per_step.items():
        m = comm == c
        cols["seq"][m] += cols["step"][m] * n
    op_name = np.tile(np.array([r["op"] for r in b.rows], dtype=object), steps)
    return cols, op_name


def draw(cols, rng):
    """Every base random number of a rank, for all its ops at once, in a fixed order."""
    n = len(cols["api"])
    u_gap, u_dur, u_lat, z = rng.random(n), rng.random(n), rng.random(n), rng.standard_normal(n)
    lo_g, hi_g, lo_d, hi_d = (np.array([c[i] for c in CLASSES.values()], np.float64) for i in range(4))
    k = cols["klass"]
    gap = np.rint(lo_g[k] + u_gap * (hi_g[k] - lo_g[k])).astype(np.int64)
    dur = np.rint(lo_d[k] + u_dur * (hi_d[k] - lo_d[k])).astype(np.int64)
    dl = k == CLASS_ID["dataloader"]
    dur[dl] = np.rint(DATALOADER_NS * np.exp(z[dl] * DATALOADER_CV)).astype(np.int64)
    api = cols["api"]
    blocking = np.isin(api, BLOCKING)
    lat = np.where(blocking, SYNC_RETURN[0] + u_lat * (SYNC_RETURN[1] - SYNC_RETURN[0]),
                   LAUNCH_LATENCY[0] + u_lat * (LAUNCH_LATENCY[1] - LAUNCH_LATENCY[0]))
    lat = np.rint(lat).astype(np.int64)
    gdur = gpu_durations(cols, z)
    return gap, dur, lat, gdur


def gpu_durations(cols, z):
    """Kernels: lognormal around their mean (cv per kernel); copies and memsets from their bytes."""
    spec, gkind, nbytes = cols["spec"], cols["gkind"], cols["bytes"].astype(np.float64)
    mean = np.array([k.mean_ns for k in cat.CATALOG], np.float64)
    cv = np.array([k.cv for k in cat.CATALOG])
    sp = np.where(spec < 0, 0, spec)
    d = mean[sp] * np.exp(z * cv[sp])
    # pinned H2D at ~25 GB/s, D2H into pageable memory ~8 GB/s, memsets at ~1.5 TB/s; a few us each
    d = np.where(gkind == G_H2D, (4 * US + nbytes / 25e9 * 1e9) * np.exp(z * 0.03), d)
    d = np.where(gkind == G_D2H, (2 * US + nbytes / 8e9 * 1e9) * np.exp(z * 0.03), d)
    d = np.where(gkind == G_MEMSET, (1500 + nbytes / 1.5e12 * 1e9) * np.exp(z * 0.03), d)
    d = np.where(gkind == G_NCCL, 0, np.maximum(d, MIN_KERNEL_NS))
    return np.where((gkind == G_NONE) | (gkind == G_WAIT), 0, np.rint(d)).astype(np.int64)


def base_program(lay, rank, steps, k, buckets, microbatches, seed, step_range=STEP_RANGE):
    """Rank's base program (no cause): the step template (Builder: rows, ranges, anchors, events),
    its rows tiled over the steps and drawn (columns), the NCCL op names, the step's size figure."""
    b, size = step_template(lay, rank, k, buckets, microbatches, step_range)
    cols, op_name = tile(b, steps)
    gap, dur, lat, gdur = draw(cols, _rng(seed, 1, rank))
    cols.update(gap=gap, dur=dur, lat=lat, gdur=gdur)
    return b, cols, op_name, size

