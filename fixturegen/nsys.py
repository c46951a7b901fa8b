"""One rank's run as an Nsight Systems SQLite export (``nsys export --type sqlite``).

Tables (DDL verbatim from real exports, see ``ddl.py``): META_DATA_EXPORT, META_DATA_CAPTURE,
TARGET_INFO_SESSION_START_TIME, TARGET_INFO_SYSTEM_ENV, TARGET_INFO_GPU, StringIds, PROCESSES,
ThreadNames, CUPTI_ACTIVITY_KIND_KERNEL, _RUNTIME, _MEMCPY, _MEMSET, NVTX_EVENTS and, with sync
records (the default), CUPTI_ACTIVITY_KIND_SYNCHRONIZATION, CUPTI_ACTIVITY_KIND_CUDA_EVENT and
ENUM_CUPTI_SYNC_TYPE. No indexes (real exports carry none), no other ENUM tables.

How the rows follow the real files (fs24 2024.5 exports and the nsys-ai 2026.2 export):
* RUNTIME: every CUDA API call, ``cudaLaunchKernel_v7000``, ``cuLaunchKernelEx`` (driver API,
  eventClass 1, as NCCL 2.19+ launches), ``cudaMemcpyAsync_v3020``, ``cudaMemcpy_v3020``,
  ``cudaMemsetAsync_v3020``, ``cudaEventRecord_v3020``, ``cudaStreamWaitEvent_v3020``,
  ``cudaStreamSynchronize_v3020``, ``cudaDeviceSynchronize_v3020``, ``cudaEventSynchronize_v3020``;
  correlation ids count the process's calls in order.
* SYNCHRONIZATION: one row per stream wait (syncType 2: streamId the waiting stream, eventId the
  event), stream synchronize (3: the stream, eventId 4294967295), device synchronize (4: streamId
  and eventId 4294967295) and event synchronize (1: streamId 4294967295, the event), with the
  call's correlationId; start/end inside the call (100-600 ns after it starts, 150-500 ns before it
  returns), as in the real files. 2026.2 adds eventSyncId (the record's, 0 for stream/device
  syncs) and a NULL deprecatedSyncType. A synchronous cudaMemcpy has no such row (nor in nsys).
* CUDA_EVENT: one row per cudaEventRecord: the recording stream, the call's correlationId, the
  eventId (events are reused, as PyTorch's event cache does); 2026.2 adds the device-side
  completion ``timestamp`` and the ``eventSyncId`` (a counter over the process's records). The
  real 2026.2 file holds the table with no rows (a derived window): those columns follow its DDL
  comments (*unconfirmed*).
* MEMSET: value 0, memKind 2 (device), greenContextId 0, as the fs24 rows.
"""

from __future__ import annotations

import datetime
import sqlite3

import numpy as np

from . import catalog as cat
from . import payloads as pl
from .ddl import DDL_2024_5, DDL_2024_5_SYNC, DDL_2026_2_CHANGED, DDL_2026_2_SYNC, ENUM_CUPTI_SYNC_TYPE_ROWS, EXPORT_VERSIONS
from .program import (
    A_DEVICE_SYNC,
    A_EVENT_RECORD,
    A_EVENT_SYNC,
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
    NV_REGISTERED,
    A_LAUNCH,
)
from .records import INVALID, SYNC_CONTEXT, SYNC_EVENT, SYNC_STREAM, SYNC_STREAM_WAIT

CONTEXT_ID = 1
GLOBAL_VID = 1 << 48  # VM byte 1, HW byte 0: what the real files show
RUNTIME_NAMES = {A_LAUNCH: "cudaLaunchKernel_v7000", A_LAUNCH_EX: "cuLaunchKernelEx",
                 A_MEMCPY_ASYNC: "cudaMemcpyAsync_v3020", A_MEMCPY: "cudaMemcpy_v3020",
                 A_MEMSET_ASYNC: "cudaMemsetAsync_v3020", A_EVENT_RECORD: "cudaEventRecord_v3020",
                 A_STREAM_WAIT: "cudaStreamWaitEvent_v3020", A_STREAM_SYNC: "cudaStreamSynchronize_v3020",
                 A_DEVICE_SYNC: "cudaDeviceSynchronize_v3020", A_EVENT_SYNC: "cudaEventSynchronize_v3020"}
NVTX_STRINGS = ["ncclCommInitRank", "ncclAllReduce", "ncclAllGather", "ncclReduceScatter", "ncclSend", "ncclRecv",
                "DataLoader.__next__"]
THREAD_NAMES = ["python3", "pt_nccl_watchdg"]
BUS_LOCATIONS = ["0000:18:00.0", "0000:2a:00.0", "0000:3a:00.0", "0000:5d:00.0",
                 "0000:9a:00.0", "0000:ab:00.0", "0000:ba:00.0", "0000:db:00.0"]
NCCL_DOMAIN = "NCCL"
NCCL_DOMAIN_ID = 1


def clock(true_rel, offset, drift_ppm, t0):
    """Recorded UTC for true times given relative to t0 (int64 array or int)."""
    tr = np.asarray(true_rel, dtype=np.int64)
    return t0 + tr + offset + np.rint(drift_ppm * 1e-6 * tr.astype(np.float64)).astype(np.int64)


def iso(ns):
    return datetime.datetime.fromtimestamp(ns // 10**9, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S")


class Strings:
    """StringIds: ids in order of registration (the same order in every file)."""

    def __init__(self):
        self.ids = {}

    def __call__(self, s):
        if s not in self.ids:
            self.ids[s] = len(self.ids) + 1
        return self.ids[s]

    def rows(self):
        return [(i, s) for s, i in self.ids.items()]


# Rows bound from Python cost per value: the writer binds a row's start, its correlation id and one
# integer packing its duration (bits 14-53), stream (6-13), kernel spec or API (1-5) and an NCCL
# flag (0), and unpacks them in SQL.
_DUR, _STREAM, _SPEC, _FLAG, _CORR = "(k.p >> 14)", "((k.p >> 6) & 255)", "((k.p >> 1) & 31)", "(k.p & 1)", "k.corr"


def _pack(dur, stream, spec, flag):
    dur, stream, spec = (np.asarray(x, np.int64) for x in (dur, stream, spec))
    assert dur.min(initial=0) >= 0 and dur.max(initial=0) < 2**40
    assert stream.min(initial=0) >= 0 and stream.max(initial=0) < 256 and spec.max(initial=0) < 32
    return (dur << 14) | (stream << 6) | (spec << 1) | np.asarray(flag, np.int64)


def _insert(db, table, cols, rows):
    db.executemany(f"INSERT INTO {table} ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})", rows)


def _comm_hash(comm):
    """A communicator's NCCL commHash (any 64-bit value NCCL derives from its unique id)."""
    return (0x9E3779B97F4A7C15 * (comm + 1)) & (2**64 - 1)


def ddl_for(version, sync_records):
    ddl = dict(DDL_2024_5)
    if version == "2026.2":
        ddl.update(DDL_2026_2_CHANGED)
    sync = DDL_2026_2_SYNC if version == "2026.2" else DDL_2024_5_SYNC
    ddl["CUPTI_ACTIVITY_KIND_MEMSET"] = sync["CUPTI_ACTIVITY_KIND_MEMSET"]
    if sync_records:
        for t in ("CUPTI_ACTIVITY_KIND_SYNCHRONIZATION", "CUPTI_ACTIVITY_KIND_CUDA_EVENT", "ENUM_CUPTI_SYNC_TYPE"):
            ddl[t] = sync[t]
    return ddl


def write_rank(path, rec, info, args, generated_by, shuffle_rng, comm_sizes=None):
    """Write one rank's export. Returns its row counts. With ``args["nvtx_payloads"]`` (and the
    members of each communicator, `comm_sizes`), NCCL's API ranges carry their payload blobs."""
    prog = rec.prog
    ver = args["nsys_version"]
    norm = args["normalized_time"]
    sync_records = args["sync_records"]
    epoch = info["utc_epoch_ns"]

    def stored(t):
        r = clock(t, info["offset_ns"], info["drift_ppm"], info["t0_ns"])
        return r if norm else r - epoch

    strings = Strings()
    for k in cat.BASE_CATALOG:
        strings(k.demangled), strings(k.short), strings(k.mangled)
    for s in list(RUNTIME_NAMES.values()) + NVTX_STRINGS + THREAD_NAMES:
        strings(s)
    # the overlap causes' kernels only where this rank runs them (the other sets' files unchanged)
    specs = [i for i in range(len(cat.CATALOG)) if i < len(cat.BASE_CATALOG) or (prog.spec == i).any()]
    for k in (cat.CATALOG[i] for i in specs[len(cat.BASE_CATALOG):]):
        strings(k.demangled), strings(k.short), strings(k.mangled)
    gpid, gtid, dev = info["global_pid"], info["global_tid"], info["device"]

    def order(key):
        # start order (stable), or a seeded permutation for --shuffle-rows
        key = np.asarray(key)
        return shuffle_rng.permutation(len(key)) if shuffle_rng is not None else np.argsort(key, kind="stable")

    db = sqlite3.connect(path)
    db.execute("PRAGMA journal_mode=OFF")
    db.execute("PRAGMA synchronous=OFF")
    db.execute("PRAGMA temp_store=MEMORY")
    db.execute("BEGIN")
    ddl = ddl_for(ver, sync_records)
    blobs = bool(args.get("nvtx_payloads"))
    for sql in list(ddl.values()) + (list(pl.DDL.values()) if blobs else []):
        db.execute(sql)

    act, gk = rec.act, prog.gkind
    corr = rec.corr
    ids = strings.ids

    # --- kernels: the per-row values go through a temporary table, the per-kernel ones are joined in
    # SQL (a million 28-column rows bind 4x fewer Python values this way)
    kidx = np.flatnonzero(rec.gpu_act & ((gk == G_KERNEL) | (gk == G_NCCL)))
    ko = kidx[order(rec.gs[kidx])]
    is_nccl = gk[ko] == G_NCCL
    n_k = len(ko)
    ids = strings.ids
    # three values per row: the start, the correlation id, and the rest packed into one integer
    ks = stored(rec.gs[ko])
    packed = _pack(stored(rec.ge[ko]) - ks, prog.stream[ko], prog.spec[ko], is_nccl)
    db.execute("CREATE TEMP TABLE k (start INTEGER, p INTEGER, corr INTEGER)")
    _insert(db, "temp.k", ["start", "p", "corr"], zip(ks.tolist(), packed.tolist(), corr[ko].tolist()))
    db.execute("CREATE TEMP TABLE spec (id INTEGER PRIMARY KEY, demangled INTEGER, short INTEGER, mangled INTEGER, "
               "regs INTEGER, gx INTEGER, gy INTEGER, gz INTEGER, bx INTEGER, by INTEGER, bz INTEGER, ssm INTEGER, "
               "dsm INTEGER, smexec INTEGER, cx INTEGER, cy INTEGER, cz INTEGER, mpcs INTEGER, mac INTEGER)")
    _insert(db, "temp.spec", ["id", "demangled", "short", "mangled", "regs", "gx", "gy", "gz", "bx", "by", "bz", "ssm",
                              "dsm", "smexec", "cx", "cy", "cz", "mpcs", "mac"],
            [(i, ids[k.demangled], ids[k.short], ids[k.mangled], k.regs, *k.grid, *k.block, k.static_smem, k.dyn_smem,
              k.smem_exec, *k.cluster, 8 if k.cluster[0] else 0, 66 if k.cluster[0] else 0)
             for i, k in ((i, cat.CATALOG[i]) for i in specs)])
    kcols = ["start", "end", "deviceId", "contextId", "greenContextId", "streamId", "correlationId",
             "globalPid", "demangledName", "shortName", "mangledName", "launchType", "cacheConfig",
             "registersPerThread", "gridX", "gridY", "gridZ", "blockX", "blockY", "blockZ",
             "staticSharedMemory", "dynamicSharedMemory", "localMemoryPerThread", "localMemoryTotal",
             "gridId", "sharedMemoryExecuted", "graphNodeId", "sharedMemoryLimitConfig"]
    ksel = (f"k.start, k.start + {_DUR}, :dev, :ctx, 0, {_STREAM}, {_CORR}, :gpid, s.demangled, s.short, s.mangled, 1, "
            f"1, s.regs, CASE WHEN {_FLAG} THEN :channels ELSE s.gx END, s.gy, s.gz, s.bx, s.by, s.bz, s.ssm, s.dsm, 0, "
            f"250871808, {_CORR} - 3000, s.smexec, NULL, 1")
    if ver == "2026.2":
        kcols += ["qmdBulkReleaseDone", "qmdPreexitDone", "qmdLastCtaDone", "graphId", "clusterX",
                  "clusterY", "clusterZ", "clusterSchedulingPolicy", "maxPotentialClusterSize",
                  "maxActiveClusters", "sharedMemoryRequestedPercentage", "tensorSizeMinusOneElements"]
        ksel += ", NULL, NULL, NULL, NULL, s.cx, s.cy, s.cz, 1, s.mpcs, s.mac, NULL, '[]'"
    db.execute(f"INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL ({', '.join(kcols)}) SELECT {ksel} "
               f"FROM temp.k k JOIN temp.spec s ON s.id = {_SPEC} ORDER BY k.rowid",
               {"dev": dev, "ctx": CONTEXT_ID, "gpid": gpid, "channels": info["nccl_channels"]})
    db.execute("DROP TABLE temp.k")
    db.execute("DROP TABLE temp.spec")

    # --- memcpys: pinned H2D (the batch), D2H into pageable memory (.item())
    cidx = np.flatnonzero(rec.gpu_act & ((gk == G_H2D) | (gk == G_D2H)))
    co = cidx[order(rec.gs[cidx])]
    n_c = len(co)
    h2d = gk[co] == G_H2D
    mcols = ["start", "end", "deviceId", "contextId", "greenContextId", "streamId", "correlationId",
             "globalPid", "bytes", "copyKind", "srcKind", "dstKind"]
    mdata = [stored(rec.gs[co]).tolist(), stored(rec.ge[co]).tolist(), [dev] * n_c, [CONTEXT_ID] * n_c, [0] * n_c,
             prog.stream[co].tolist(), corr[co].tolist(), [gpid] * n_c, prog.bytes[co].tolist(),
             np.where(h2d, 1, 2).tolist(), np.where(h2d, 1, 2).tolist(), np.where(h2d, 2, 0).tolist()]
    if ver == "2026.2":
        mcols.append("copyCount")
        mdata.append([1] * n_c)
    _insert(db, "CUPTI_ACTIVITY_KIND_MEMCPY", mcols, zip(*mdata))

    # --- memsets
    sidx = np.flatnonzero(rec.gpu_act & (gk == G_MEMSET))
    so = sidx[order(rec.gs[sidx])]
    n_s = len(so)
    _insert(db, "CUPTI_ACTIVITY_KIND_MEMSET",
            ["start", "end", "deviceId", "contextId", "greenContextId", "streamId", "correlationId", "globalPid",
             "value", "bytes", "graphNodeId", "memKind"],
            zip(stored(rec.gs[so]).tolist(), stored(rec.ge[so]).tolist(), [dev] * n_s, [CONTEXT_ID] * n_s, [0] * n_s,
                prog.stream[so].tolist(), corr[so].tolist(), [gpid] * n_s, [0] * n_s, prog.bytes[so].tolist(),
                [None] * n_s, [2] * n_s))

    # --- runtime calls (names joined in SQL, as the kernels' columns)
    calls = rec.calls
    ro = calls[order(rec.hs[calls])]
    n_r = len(ro)
    rs = stored(rec.hs[ro])
    packed = _pack(stored(rec.he[ro]) - rs, np.zeros(n_r, np.int64), prog.api[ro], np.zeros(n_r, bool))
    db.execute("CREATE TEMP TABLE r (start INTEGER, p INTEGER, corr INTEGER)")
    _insert(db, "temp.r", ["start", "p", "corr"], zip(rs.tolist(), packed.tolist(), corr[ro].tolist()))
    db.execute("CREATE TEMP TABLE api (id INTEGER PRIMARY KEY, name INTEGER, class INTEGER)")
    _insert(db, "temp.api", ["id", "name", "class"],
            [(a, ids[nm], 1 if a == A_LAUNCH_EX else 0) for a, nm in RUNTIME_NAMES.items()])  # driver API: eventClass 1
    db.execute("INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME (start, end, eventClass, globalTid, correlationId, nameId, "
               f"returnValue) SELECT r.start, r.start + {_DUR.replace('k.', 'r.')}, a.class, :gtid, "
               f"{_CORR.replace('k.', 'r.')}, a.name, 0 FROM temp.r r JOIN temp.api a ON a.id = {_SPEC.replace('k.', 'r.')} "
               "ORDER BY r.rowid", {"gtid": gtid})
    db.execute("DROP TABLE temp.r")
    db.execute("DROP TABLE temp.api")

    # --- synchronization and CUDA event records
    n_sync = n_ev = 0
    if sync_records:
        sy = rec.syncs
        so_ = order(rec.sync_start)
        typ = rec.sync_type
        stream = np.where((typ == SYNC_STREAM_WAIT) | (typ == SYNC_STREAM), prog.stream[sy], INVALID)
        event = np.where((typ == SYNC_STREAM_WAIT) | (typ == SYNC_EVENT), prog.event[sy], INVALID)
        ref = rec.sync_record
        esid = np.where(ref >= 0, rec.event_sync_id[np.maximum(ref, 0)], 0)
        esid = np.where((typ == SYNC_STREAM) | (typ == SYNC_CONTEXT), 0, esid)
        n_sync = len(sy)
        cols = ["start", "end", "deviceId", "contextId", "greenContextId", "streamId", "correlationId", "globalPid"]
        data = [stored(rec.sync_start[so_]).tolist(), stored(rec.sync_end[so_]).tolist(), [dev] * n_sync,
                [CONTEXT_ID] * n_sync, [None] * n_sync, stream[so_].tolist(), corr[sy[so_]].tolist(), [gpid] * n_sync]
        if ver == "2026.2":
            cols += ["deprecatedSyncType", "syncType", "eventId", "eventSyncId"]
            data += [[None] * n_sync, typ[so_].tolist(), event[so_].tolist(), esid[so_].tolist()]
        else:
            cols += ["syncType", "eventId"]
            data += [typ[so_].tolist(), event[so_].tolist()]
        _insert(db, "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION", cols, zip(*data))
        er = rec.records
        eo = order(corr[er]) if shuffle_rng is not None else np.arange(len(er))
        n_ev = len(er)
        cols = ["deviceId", "contextId", "greenContextId", "streamId", "correlationId", "globalPid", "eventId"]
        data = [[dev] * n_ev, [CONTEXT_ID] * n_ev, [None] * n_ev, prog.stream[er[eo]].tolist(),
                corr[er[eo]].tolist(), [gpid] * n_ev, prog.event[er[eo]].tolist()]
        if ver == "2026.2":
            cols = ["timestamp"] + cols + ["eventSyncId"]
            data = [stored(rec.record_done[eo]).tolist()] + data + [rec.event_sync_id[er[eo]].tolist()]
        _insert(db, "CUPTI_ACTIVITY_KIND_CUDA_EVENT", cols, zip(*data))
        _insert(db, "ENUM_CUPTI_SYNC_TYPE", ["id", "name", "label"], ENUM_CUPTI_SYNC_TYPE_ROWS)

    # --- NVTX: NCCL's domain and init ranges before the job, then every NVTX range
    ev = [(info["init_ns"] - 30_000, None, 75, NCCL_DOMAIN, None, NCCL_DOMAIN_ID, None)]
    t = info["init_ns"]
    for c, dur in enumerate(info["init_durations"]):
        init = pl.blob(NCCL_DOMAIN_ID, "ncclCommInitRank", _comm_hash(c), nranks=comm_sizes[c]) if blobs else None
        ev.append((t, t + dur, 59, None, "ncclCommInitRank", NCCL_DOMAIN_ID, init))
        t += dur + 5_000_000
    nv = np.flatnonzero(rec.rg_nvtx)
    meta = prog.range_meta
    rs, re_ = rec.rg_start, rec.rg_end
    for i in nv.tolist():
        m = meta[int(rec.rg["meta"][i])]
        name = rec.range_name(i)
        reg = m.nvtx == NV_REGISTERED
        payload = None
        if blobs and name in pl.SCHEMA_OF and m.domain == NCCL_DOMAIN_ID:
            row = int(rec.rg["first"][i])  # the API range holds its one launch
            comm, nbytes = int(prog.comm[row]), int(prog.bytes[row])
            part = prog.op_name[row] in ("AllGather", "ReduceScatter")  # NCCL records one rank's part
            payload = pl.blob(NCCL_DOMAIN_ID, name, _comm_hash(comm), nbytes // comm_sizes[comm] if part else nbytes,
                              peer=int(prog.peer[row]))
        ev.append((int(rs[i]), int(re_[i]), 59, None if reg else name, name if reg else None, m.domain, payload))
    if shuffle_rng is not None:
        nvo = [ev[i] for i in shuffle_rng.permutation(len(ev))]
    else:
        nvo = sorted(ev, key=lambda e: (e[0], -(e[1] or e[0])))
    n_st = stored(np.array([e[0] for e in nvo], np.int64)).tolist()
    n_en = stored(np.array([e[1] if e[1] is not None else 0 for e in nvo], np.int64)).tolist()
    nrows = [(s, en if e[1] is not None else None, e[2], e[3], ids[e[4]] if e[4] else None, gtid, e[5])
             + ((e[6],) if blobs else ()) for e, s, en in zip(nvo, n_st, n_en)]
    _insert(db, "NVTX_EVENTS", ["start", "end", "eventType", "text", "textId", "globalTid", "domainId"]
            + (["binaryData"] if blobs else []), nrows)
    if blobs:
        for table, columns, values in pl.rows(NCCL_DOMAIN_ID):
            _insert(db, table, columns, values)

    # --- identity, metadata
    _insert(db, "PROCESSES", ["globalPid", "pid", "name"], [(gpid, info["pid"], "python3")])
    _insert(db, "ThreadNames", ["nameId", "priority", "globalTid"],
            [(ids["python3"], 20, gtid), (ids["pt_nccl_watchdg"], 20, gpid | (info["pid"] + 97))])
    sess_cols = ["utcEpochNs", "utcTime", "localTime"]
    sess = [epoch, iso(epoch), iso(epoch)]
    if ver == "2026.2":
        sess_cols.append("systemClockNs")
        sess.append(info["system_clock_ns"])
    _insert(db, "TARGET_INFO_SESSION_START_TIME", sess_cols, [sess])
    host = info["host"]
    env_rows = [("CpuCores", 1, "224"), ("CpuArchitecture", 3, "x86_64"),
                ("CpuDescription", 13, "Intel(R) Xeon(R) Platinum 8480C"), ("NvDriverVersion", 205, "550.90.07"),
                ("OsDescription", 605, "Ubuntu 22.04.4 LTS"), ("CudaDriverVersion", 611, "12040"),
                ("Hostname", 619, host)]
    _insert(db, "TARGET_INFO_SYSTEM_ENV", ["globalVid", "devStateName", "name", "nameEnum", "value"],
            [(GLOBAL_VID, "Local (CLI)", n, e, v) for n, e, v in env_rows])
    gpus = []
    for d in range(info["gpus_on_host"]):
        bus = BUS_LOCATIONS[d] if d < len(BUS_LOCATIONS) else f"0000:{0x10 + 0x10 * d:02x}:00.0"
        gpus.append((GLOBAL_VID, d, "NVIDIA H100 80GB HBM3", bus, 1, 52_428_800, 85_024_112_640,
                     3_352_320_000_000, 1_980_000_000, 132, d, info["gpu_uuids"][d], 0, "GH100", d, "", "",
                     161, 0, 65_536, 4, 65_536, 49_152, 232_448, 233_472, 65_536, 32, 5, 64, 32, 1024,
                     1024, 1024, 64, 2_147_483_647, 65_535, 65_535, 9, 0, 9, 0))
    gcols = [ln.split()[0] for ln in DDL_2024_5["TARGET_INFO_GPU"].splitlines()[1:-1]]
    _insert(db, "TARGET_INFO_GPU", gcols, gpus)
    cap = [("DEVICE_ID", "Local (CLI)"), ("CAPTURE_EVENT_TYPE", "NvtxEvents"), ("CAPTURE_EVENT_TYPE", "Cuda"),
           ("DEVICE_TYPE", "Unix"), ("DEVICE_DISPLAY_NAME", host),
           ("PROCESS_0:HOW_TO_ATTACH", "LaunchAnother"), ("PROCESS_0:COMMAND", "python3 train.py"),
           ("PROCESS_0:WORKING_DIR", "/workspace"), ("PROCESS_0:PID", "0"),
           ("PROCESS_0:COLLECT_NVTX_TRACE", "true"), ("PROCESS_0:COLLECT_CUDA_TRACE", "true")]
    env = {"RANK": info["rank"], "LOCAL_RANK": info["local_rank"], "WORLD_SIZE": args["ranks"],
           "LOCAL_WORLD_SIZE": info["gpus_on_host"], "GROUP_RANK": info["host_index"],
           "MASTER_ADDR": "node0", "MASTER_PORT": 29500, "HOSTNAME": host,
           "CUDA_VISIBLE_DEVICES": ",".join(str(d) for d in range(info["gpus_on_host"])),
           "NCCL_ALGO": "Ring"}
    cap += [("PROCESS_0:ENVIRONMENT_VARIABLE", f'{k}="{v}"') for k, v in env.items()]
    cap += [("PROFILING_SESSION_UUID", info["session_uuid"]), ("START_TRIGGER", "Immediate")]
    _insert(db, "META_DATA_CAPTURE", ["name", "value"], cap)
    exp_time = epoch + 30 * 10**9
    meta_rows = [("EXPORT_PRODUCT_NAME", "NVIDIA Nsight Systems"),
                 ("EXPORT_PRODUCT_VERSION", EXPORT_VERSIONS[ver]["product"]),
                 ("EXPORT_PRODUCT_DATE", ver), ("EXPORT_SCHEMA_VERSION", EXPORT_VERSIONS[ver]["schema"])]
    major, minor, micro = EXPORT_VERSIONS[ver]["schema"].split(".")
    meta_rows += [("EXPORT_SCHEMA_VERSION_MAJOR", major), ("EXPORT_SCHEMA_VERSION_MINOR", minor),
                  ("EXPORT_SCHEMA_VERSION_MICRO", micro), ("EXPORT_SCHEMA_VERSION_CKSUM", EXPORT_VERSIONS[ver]["cksum"]),
                  ("EXPORT_PLATFORM", "linux-desktop"), ("EXPORT_ARCH", "x64"), ("EXPORT_TIME_UTC", iso(exp_time)),
                  ("EXPORT_HOST", host), ("EXPORT_PARAM_INPUT_FILE", f"rep_{info['rank']}.nsys-rep"),
                  ("EXPORT_PARAM_OUTPUT_FILE", f"rep_{info['rank']}.sqlite"), ("EXPORT_PARAM_OVERWRITE", "false"),
                  ("EXPORT_PARAM_LAZY", "true"), ("EXPORT_PARAM_INCLUDE_BLOBS", "true" if blobs else "false"),
                  ("EXPORT_PARAM_TIME_NORMALIZE", "true" if norm else "false"), ("EXPORT_PARAM_TIME_SHIFT", "0"),
                  ("EXPORT_CONFIG_TIME_SHIFT", str(epoch if norm else 0))]
    if ver == "2026.2":
        meta_rows.append(("EXPORT_PARAM_USE_SHUFFLE", "true"))
    meta_rows.append(("GENERATED_BY", generated_by))
    _insert(db, "META_DATA_EXPORT", ["name", "value"], meta_rows)
    _insert(db, "StringIds", ["id", "value"], strings.rows())
    db.commit()
    db.execute("VACUUM")
    db.close()
    return {"kernels": n_k, "nccl_kernels": int(is_nccl.sum()), "memcpys": n_c, "memsets": n_s, "runtime_calls": n_r,
            "sync_records": n_sync, "event_records": n_ev, "nvtx_events": len(nrows),
            "nvtx_ranges": sum(1 for e in ev if e[2] == 59), "strings": len(strings.ids)}
