"""One rank's run as a PyTorch profiler (Kineto) trace, ``rank_<RANK>.json.gz``.

The text is laid out as Kineto's ChromeTraceLogger writes it (PyTorch 2.x, one event per few
lines; libkineto/src/output_json.cpp): ``schemaVersion`` 1, ``deviceProperties``, metadata
(``cupti_version``, ``cuda_runtime_version``, ``cuda_driver_version``, ``distributedInfo``,
``generated_by``), ``traceEvents``, then ``traceName``, ``displayTimeUnit`` and
``baseTimeNanoseconds`` after the events. ``ts``/``dur`` are us with exactly 3 decimals relative to
``baseTimeNanoseconds`` (the program-load wall clock floored to a 7,889,238 s block, as
ChromeTraceBaseTime does). Events, on the same true times as the nsys twin's rows:

* CPU side (``pid`` = OS pid, ``tid`` = pid): ``cpu_op`` ATen ops around each launch and copy,
  ``aten::item`` > ``aten::_local_scalar_dense`` around ``.item()``, ``record_param_comms`` around
  each c10d collective (PyTorch 2.5's args: Collective name, dtype, In/Out msg nelems, Group size,
  In/Out split size, Process Group Name/Description/Ranks, Global rank start/stride, Rank, Seq;
  Src/Dst Rank for send/recv), ``user_annotation`` ranges (ProfilerStep#N, DataLoader.__next__,
  forward, backward, optimizer, the stall ranges, and PyTorch's ``nccl:*`` range at the times of
  NCCL's own NVTX range). CPU ops carry ``External id`` (1, 2, ... in start order), ``Record
  function id``, ``Ev Idx``.
* CUDA API calls (same correlation ids as nsys), each with the ``External id`` of the innermost CPU
  op or annotation around it: ``cuda_runtime`` ``cudaLaunchKernel`` (cbid 211), ``cudaMemcpyAsync``
  (41), ``cudaMemcpy`` (31), ``cudaMemsetAsync`` (51), ``cudaEventRecord`` (135),
  ``cudaStreamWaitEvent`` (147), ``cudaStreamSynchronize`` (131), ``cudaDeviceSynchronize`` (165),
  ``cudaEventSynchronize`` (137) (cbids as the real DLRM traces and CUPTI's cbid table have them),
  ``cuda_driver`` ``cuLaunchKernelEx`` (652) for NCCL. Kineto's RuntimeActivity::flowStart makes
  launches, copies, memsets, stream/device synchronize and stream waits start an ``ac2g`` flow
  ("s"); the other calls (event record / synchronize) write a flow end ("f") bound to themselves, as
  ChromeTraceLogger::handleActivity does for any activity with a correlation id (the real DLRM
  traces show the same for their non-launch calls).
* GPU side (``pid`` = device, ``tid`` = stream): ``kernel`` (CUPTI kernel args; NCCL kernels also
  get record_param_comms' collective args, as output_json.cpp copies them), ``gpu_memcpy``
  (``Memcpy HtoD (Pinned -> Device)``, ``Memcpy DtoH (Device -> Pageable)``) and ``gpu_memset``
  (``Memset (Device)``) with bytes and bandwidth, each followed by its flow end.
* ``cuda_sync`` (unless ``--no-sync-records``; PyTorch writes them with
  ``_ExperimentalConfig(enable_cuda_sync_events=True)``): per CUPTI synchronization record, on
  (device, stream; tid 1 for the invalid stream -1 of context and event syncs, Kineto's
  sanitizeTid), named by libkineto's syncTypeString (``Event Sync``, ``Stream Wait Event``,
  ``Stream Sync``, ``Context Sync``), args as CudaSyncActivity::metadataJson writes them
  (libkineto/src/CuptiActivity.cpp): External id, ``cuda_sync_kind``, then for event syncs and
  stream waits ``wait_on_stream`` (the stream the event was recorded on),
  ``wait_on_cuda_event_record_corr_id`` (the correlation id of that cudaEventRecord) and
  ``wait_on_cuda_event_id``, then stream, correlation, device, context; each followed by its flow
  end. Kineto fills the wait_on_* fields from CUPTI's CUDA_EVENT records, the latest record of the
  (context, event) pair (CuptiActivityProfiler::handleCudaEventActivity / handleCudaSyncActivity,
  libkineto/src/CuptiActivityProfiler.cpp), and logs a stream wait only on a stream that ran GPU
  work (logDeferredEvents): every waiting stream here does. HTA (HolisticTraceAnalysis) pairs a
  "Stream Wait Event" with its cudaEventRecord through ``wait_on_cuda_event_record_corr_id``. The
  CUDA_EVENT records themselves are not written (Kineto logs them, as ``cuda_event``, only from
  CUDA 12.8 on). ``cudaEventRecord`` calls are kept: Kineto's runtime blocklist
  (isBlockListedRuntimeCbid) dropped them once (the real DLRM traces have none) and keeps them since
  it learned cuda_sync ("Support cudaEventRecord and cudaEventSynchronize").
* The profiler span, process and thread names (``M``), the ``Record Window End`` instant.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np

from . import catalog as cat
from .nsys import CONTEXT_ID, clock
from .program import (
    A_DEVICE_SYNC,
    A_EVENT_RECORD,
    A_EVENT_SYNC,
    A_LAUNCH,
    A_LAUNCH_EX,
    A_MEMCPY,
    A_MEMCPY_ASYNC,
    A_MEMSET_ASYNC,
    A_STREAM_SYNC,
    A_STREAM_WAIT,
    G_D2H,
    G_H2D,
    G_KERNEL,
    G_MEMSET,
    G_NCCL,
    _rng,
)
from .records import SYNC_CONTEXT, SYNC_EVENT, SYNC_STREAM, SYNC_STREAM_WAIT

KINETO_BLOCK_NS = 7_889_238 * 10**9  # ChromeTraceBaseTime: the load-time wall clock floored to ~3 months
KINETO_PRODUCT = "PyTorch 2.5.1 profiler (Kineto)"
KINETO_SCHEMA = 1
KINETO_DTYPE = "BFloat16"
# (category, name, CUPTI callback id, starts an ac2g flow) of each call
LAUNCH = {A_LAUNCH: ("cuda_runtime", "cudaLaunchKernel", 211, True),
          A_LAUNCH_EX: ("cuda_driver", "cuLaunchKernelEx", 652, True),
          A_MEMCPY_ASYNC: ("cuda_runtime", "cudaMemcpyAsync", 41, True),
          A_MEMCPY: ("cuda_runtime", "cudaMemcpy", 31, True),
          A_MEMSET_ASYNC: ("cuda_runtime", "cudaMemsetAsync", 51, True),
          A_EVENT_RECORD: ("cuda_runtime", "cudaEventRecord", 135, False),
          A_STREAM_WAIT: ("cuda_runtime", "cudaStreamWaitEvent", 147, True),
          A_STREAM_SYNC: ("cuda_runtime", "cudaStreamSynchronize", 131, True),
          A_DEVICE_SYNC: ("cuda_runtime", "cudaDeviceSynchronize", 165, True),
          A_EVENT_SYNC: ("cuda_runtime", "cudaEventSynchronize", 137, False)}
SYNC_NAMES = {SYNC_EVENT: "Event Sync", SYNC_STREAM_WAIT: "Stream Wait Event", SYNC_STREAM: "Stream Sync",
              SYNC_CONTEXT: "Context Sync"}
MEMCPY_NAMES = {G_H2D: "Memcpy HtoD (Pinned -> Device)", G_D2H: "Memcpy DtoH (Device -> Pageable)"}
MEMSET_NAME = "Memset (Device)"


def us(ns):
    """Kineto's time text: integer us, '.', three digits of ns."""
    assert ns >= 0, "an event before its rank's baseTimeNanoseconds"
    return f"{ns // 1000}.{ns % 1000:03d}"


def kx(category, name, pid, tid, ts, dur, args):
    """One complete ("X") event, laid out as Kineto's ChromeTraceLogger::handleActivity writes it."""
    return ('  {\n    "ph": "X", "cat": "%s", "name": %s, "pid": %s, "tid": %s,\n    "ts": %s, "dur": %s,\n'
            '    "args": {\n      %s\n    }\n  }'
            % (category, json.dumps(name), pid, tid, us(ts), us(dur), json.dumps(args)[1:-1]))


def kflow(ph, flow_id, pid, tid, ts):
    """The "ac2g" flow event tying a launch (ph "s") to its GPU activity (ph "f")."""
    bp = ', "bp": "e"' if ph == "f" else ""
    return ('  {\n    "ph": "%s", "id": %d, "pid": %s, "tid": %s, "ts": %s,\n    "cat": "ac2g", "name": "ac2g"%s\n  }'
            % (ph, flow_id, pid, tid, us(ts), bp))


def kmeta(name, pid, tid, ts, key, value):
    return ('  {\n    "name": "%s", "ph": "M", "ts": %s, "pid": %s, "tid": %s,\n'
            '    "args": {\n      "%s": %s\n    }\n  }' % (name, us(ts), pid, tid, key, json.dumps(value)))


def comm_args(lay, comm_index, op, nbytes, rank, seq, peer, sizes="nelems"):
    """record_param_comms' args for one c10d call (PyTorch 2.5 ProcessGroupNCCL). sizes
    "input_dims": the size only as the input's shape, "Input Dims" (as Megatron's traces carry it),
    and no dtype: the element size is the NCCL kernel name's (bf16)."""
    comm = lay.comms[comm_index]
    n = len(comm.ranks)
    elems = nbytes // 2
    in_n, out_n = {"AllGather": (elems // n, elems), "ReduceScatter": (elems, elems // n)}.get(op, (elems, elems))
    if sizes == "input_dims":
        big = max(in_n, out_n)  # nccl-tests' size: the larger side
        shape = [big // 4096, 4096] if big % 4096 == 0 else [big]
        a = {"Collective name": cat.NCCL_OPS[op][3], "Input Dims": [shape, [], []], "Input type": ["", "Scalar", "Scalar"],
             "Group size": n, "Process Group Name": str(comm.index), "Process Group Description": comm.desc,
             "Process Group Ranks": "[" + ", ".join(map(str, comm.ranks)) + "]", "Rank": comm.ranks.index(rank),
             "Seq": seq + 1}
        if op == "Send":
            a["Dst Rank"] = peer
        elif op == "Recv":
            a["Src Rank"] = peer
        return a
    ranks = comm.ranks
    stride = ranks[1] - ranks[0] if n > 1 and all(b - a == ranks[1] - ranks[0] for a, b in zip(ranks, ranks[1:])) else -1
    a = {"Collective name": cat.NCCL_OPS[op][3], "dtype": KINETO_DTYPE, "In msg nelems": in_n, "Out msg nelems": out_n,
         "Group size": n, "In split size": "[]", "Out split size": "[]", "Process Group Name": str(comm.index),
         "Process Group Description": comm.desc, "Process Group Ranks": "[" + ", ".join(map(str, ranks)) + "]",
         "Global rank start": ranks[0], "Global rank stride": stride, "Rank": ranks.index(rank), "Seq": seq + 1}
    if op == "Send":
        a["Dst Rank"] = peer
    elif op == "Recv":
        a["Src Rank"] = peer
    return a


def write_rank(path, rec, info, lay, args, generated_by, seed):
    """Write one rank's trace, gzip-compressed. Returns its event counts."""
    prog = rec.prog
    rank = prog.rank
    base = info["base_time_ns"]

    def rel(t):
        return clock(t, info["offset_ns"], info["drift_ppm"], info["t0_ns"]) - base

    pid = tid = info["pid"]
    dev = info["device"]
    api, gk = prog.api, prog.gkind

    # --- CPU side: the Kineto ranges, outer first
    kr = np.flatnonzero(rec.rg_kineto)
    order = kr[np.lexsort((-rec.rg_end[kr], rec.rg_start[kr]))]
    meta = prog.range_meta
    ext_of_range = {}
    cpu, comms_of_row = [], {}
    c_ts = rel(rec.rg_start[order])
    c_te = rel(rec.rg_end[order])
    for n, (i, ts, te) in enumerate(zip(order.tolist(), c_ts.tolist(), c_te.tolist())):
        ext = n + 1
        ext_of_range[i] = ext
        m = meta[int(rec.rg["meta"][i])]
        name = m.kineto_name or rec.range_name(i)
        a = {"External id": ext, "Record function id": 0, "Ev Idx": n}
        if m.kineto_name == "record_param_comms":
            first, last = int(rec.rg["first"][i]), int(rec.rg["last"][i])
            row = first + int(np.flatnonzero(gk[first:last + 1] == G_NCCL)[0])
            ca = comm_args(lay, int(prog.comm[row]), prog.op_name[row], int(prog.bytes[row]), rank,
                           int(prog.seq[row]), int(prog.peer[row]), args.get("kineto_sizes", "nelems"))
            a.update(ca)
            comms_of_row[row] = ca
        cpu.append((ts, kx(m.kineto_cat, name, pid, tid, ts, te - ts, a), m.kineto_cat, name))
    # the innermost CPU op around each call (ranges nest: paint outer to inner)
    ext_of_row = np.zeros(prog.n, np.int64)
    for i in kr[np.argsort(rec.rg["depth"][kr], kind="stable")].tolist():
        ext_of_row[int(rec.rg["first"][i]):int(rec.rg["last"][i]) + 1] = ext_of_range[i]

    # --- CUDA API calls, GPU work, synchronization records (CUPTI's records), with their flows
    corr = rec.corr
    calls = rec.calls
    r_ts = rel(rec.hs[calls]).tolist()
    r_te = rel(rec.he[calls]).tolist()
    records = []
    for i, ts, te in zip(calls.tolist(), r_ts, r_te):
        category, name, cbid, flow_start = LAUNCH[int(api[i])]
        c = int(corr[i])
        records.append((ts, kx(category, name, pid, tid, ts, te - ts,
                               {"External id": int(ext_of_row[i]), "cbid": cbid, "correlation": c})))
        records.append((ts, kflow("s" if flow_start else "f", c, pid, tid, ts)))
    work = np.flatnonzero(rec.gpu_act & (gk >= G_KERNEL) & (gk <= G_MEMSET))
    g_ts = rel(rec.gs[work]).tolist()
    g_te = rel(rec.ge[work]).tolist()
    n_sm = 132
    streams = set()
    counts = {"kernels": 0, "nccl_kernels": 0, "memcpys": 0, "memsets": 0}
    for i, ts, te in zip(work.tolist(), g_ts, g_te):
        k, c, ext, st = int(gk[i]), int(corr[i]), int(ext_of_row[i]), int(prog.stream[i])
        streams.add(st)
        dur = te - ts
        if k in (G_H2D, G_D2H, G_MEMSET):
            nb = int(prog.bytes[i])
            a = {"External id": ext, "device": dev, "context": CONTEXT_ID, "stream": st, "correlation": c,
                 "bytes": nb, "memory bandwidth (GB/s)": round(nb / max(dur, 1), 6)}
            if k == G_MEMSET:
                records.append((ts, kx("gpu_memset", MEMSET_NAME, dev, st, ts, dur, a)))
                counts["memsets"] += 1
            else:
                records.append((ts, kx("gpu_memcpy", MEMCPY_NAMES[k], dev, st, ts, dur, a)))
                counts["memcpys"] += 1
        else:
            kern = cat.CATALOG[int(prog.spec[i])]
            grid = (info["nccl_channels"] if k == G_NCCL else kern.grid[0], kern.grid[1], kern.grid[2])
            blocks = grid[0] * grid[1] * grid[2]
            warps_per_block = -(-(kern.block[0] * kern.block[1] * kern.block[2]) // 32)
            warps = blocks * warps_per_block / n_sm
            resident = min(warps, 64, 65_536 // max(kern.regs * 32, 1))
            a = {"External id": ext, "queued": 0, "device": dev, "context": CONTEXT_ID, "stream": st,
                 "correlation": c, "registers per thread": kern.regs,
                 "shared memory": kern.static_smem + kern.dyn_smem, "blocks per SM": round(blocks / n_sm, 6),
                 "warps per SM": round(warps, 6), "grid": list(grid), "block": list(kern.block),
                 "est. achieved occupancy %": int(round(100 * resident / 64))}
            if k == G_NCCL:  # Kineto copies the linked record_param_comms' collective into the kernel's args
                ca = comms_of_row[i]
                a.update({key: ca[key] for key in ("Collective name", "In msg nelems", "Out msg nelems", "Group size",
                                                   "dtype", "In split size", "Out split size", "Process Group Name",
                                                   "Process Group Description", "Process Group Ranks") if key in ca})
                counts["nccl_kernels"] += 1
            records.append((ts, kx("kernel", kern.demangled, dev, st, ts, dur, a)))
            counts["kernels"] += 1
        records.append((ts, kflow("f", c, dev, st, ts)))
    n_sync = 0
    if args["sync_records"]:
        s_ts = rel(rec.sync_start).tolist()
        s_te = rel(rec.sync_end).tolist()
        for j, (i, typ, ref, ts, te) in enumerate(zip(rec.syncs.tolist(), rec.sync_type.tolist(),
                                                       rec.sync_record.tolist(), s_ts, s_te)):
            kind = SYNC_NAMES[typ]
            stream = int(prog.stream[i]) if typ in (SYNC_STREAM_WAIT, SYNC_STREAM) else -1
            a = {"External id": int(ext_of_row[i]), "cuda_sync_kind": kind}
            if typ in (SYNC_STREAM_WAIT, SYNC_EVENT):
                a.update({"wait_on_stream": int(prog.stream[ref]) if ref >= 0 else -1,
                          "wait_on_cuda_event_record_corr_id": int(corr[ref]) if ref >= 0 else -1,
                          "wait_on_cuda_event_id": int(prog.event[i])})
            c = int(corr[i])
            a.update({"stream": stream, "correlation": c, "device": dev, "context": CONTEXT_ID})
            t = abs(stream)  # sanitizeTid
            records.append((ts, kx("cuda_sync", kind, dev, t, ts, te - ts, a)))
            records.append((ts, kflow("f", c, dev, t, ts)))
            n_sync += 1
    records.sort(key=lambda e: e[0])
    cpu.sort(key=lambda e: e[0])
    body = [e[1] for e in cpu] + [e for _, e in records]
    if args["shuffle_rows"]:
        body = [body[i] for i in _rng(seed, 5, rank).permutation(len(body))]

    # --- the profiler's span, process and thread names, the window end
    first = min(int(c_ts.min()), min(r_ts)) - 500_000
    last = max(int(c_te.max()), max(g_te)) + 500_000
    span = ['  {\n    "ph": "X", "cat": "Trace", "ts": %s, "dur": %s,\n    "pid": "Spans", "tid": "PyTorch Profiler",\n'
            '    "name": "PyTorch Profiler (0)",\n    "args": {\n      "Op count": 0\n    }\n  }'
            % (us(first), us(last - first)),
            kmeta("process_sort_index", '"Spans"', 0, first, "sort_index", 0x20000000),
            '  {\n    "name": "Iteration Start: PyTorch Profiler", "ph": "i", "s": "g",\n'
            '    "pid": "Traces", "tid": "Trace PyTorch Profiler", "ts": %s\n  }' % us(first)]
    names = [kmeta("process_name", pid, 0, first, "name", "python3"),
             kmeta("process_labels", pid, 0, first, "labels", "CPU"),
             kmeta("process_sort_index", pid, 0, first, "sort_index", pid)]
    for d in range(info["gpus_on_host"]):
        names += [kmeta("process_name", d, 0, first, "name", "python3"),
                  kmeta("process_labels", d, 0, first, "labels", f"GPU {d}"),
                  kmeta("process_sort_index", d, 0, first, "sort_index", 0x1000000 + d)]
    for st in sorted(streams):
        names += [kmeta("thread_name", dev, st, first, "name", f"stream {st} "),
                  kmeta("thread_sort_index", dev, st, first, "sort_index", st)]
    names += [kmeta("thread_name", pid, tid, first, "name", f"thread {tid} (python3)"),
              kmeta("thread_sort_index", pid, tid, first, "sort_index", tid)]
    end = ('  {\n    "name": "Record Window End", "ph": "i", "s": "g",\n    "pid": "", "tid": "", "ts": %s\n  }'
           % us(last))
    events = span + body + names + [end]

    # --- the file: Kineto's handleTraceStart, the events, finalizeTrace
    props = []
    for d in range(info["gpus_on_host"]):
        props.append(
            '    {\n      "id": %d, "name": "NVIDIA H100 80GB HBM3", "totalGlobalMem": 85024112640,\n'
            '      "computeMajor": 9, "computeMinor": 0,\n'
            '      "maxThreadsPerBlock": 1024, "maxThreadsPerMultiprocessor": 2048,\n'
            '      "regsPerBlock": 65536, "regsPerMultiprocessor": 65536, "warpSize": 32,\n'
            '      "sharedMemPerBlock": 49152, "sharedMemPerMultiprocessor": 233472,\n'
            '      "numSms": 132, "sharedMemPerBlockOptin": 232448\n    }' % d)
    pgs = [c for c in lay.comms if rank in c.ranks]
    dist = {"backend": "nccl", "rank": rank, "world_size": lay.ranks, "pg_count": len(pgs),
            "pg_config": [{"pg_name": str(c.index), "pg_desc": c.desc, "backend_config": "cuda:nccl",
                           "pg_size": len(c.ranks), "ranks": c.ranks} for c in pgs], "nccl_version": "2.21.5"}
    metadata = {"cupti_version": 24, "cuda_runtime_version": 12040, "cuda_driver_version": 12040,
                "distributedInfo": dist, "generated_by": generated_by}
    token = "".join(_rng(seed, 10, rank).choice(list("abcdefghijklmnopqrstuvwxyz0123456789_"), 8))
    text = ("\n{\n  \"schemaVersion\": %d,\n  \"deviceProperties\": [\n%s\n  ],%s\n  \"traceEvents\": [\n%s\n  ],\n"
            "  \"traceName\": \"/tmp/tmp%s.json\",\n  \"displayTimeUnit\": \"ms\",\n  \"baseTimeNanoseconds\": %d\n}"
            % (KINETO_SCHEMA, ",\n".join(props),
               "".join(f"\n  {json.dumps(k)}: {json.dumps(v)}," for k, v in metadata.items()),
               ",\n".join(events), token, base))
    Path(path).write_bytes(gzip.compress(text.encode(), compresslevel=6, mtime=0))
    n_ua = sum(1 for e in cpu if e[2] == "user_annotation")
    n_comms = sum(1 for e in cpu if e[3] == "record_param_comms")
    n_driver = int((api[calls] == A_LAUNCH_EX).sum())
    return {**counts, "runtime_calls": len(calls), "driver_calls": n_driver, "cpu_ops": len(cpu) - n_ua,
            "record_param_comms": n_comms, "user_annotations": n_ua, "nvtx_ranges": n_ua + n_comms,
            "cuda_sync": n_sync, "trace_events": len(events)}
