#!/usr/bin/env python3
"""Write synthetic multi-rank Nsight Systems SQLite exports (or PyTorch profiler traces) with a planted truth.

One ``rep_<RANK>.sqlite`` per rank (as ``nsys profile -o rep_%q{RANK}`` on every rank followed
by ``nsys export --type sqlite``), and ``truth.json`` beside them saying what was planted.
Deterministic: the same arguments and ``--seed`` give a byte-identical ``truth.json`` and
identical table contents. ``--format kineto`` writes the same simulated job as one PyTorch
profiler (Kineto) trace per rank instead, ``rank_<RANK>.json.gz`` (see "Kineto traces" below):
same seed, same events, same truth, byte-identical files.

Usage::

    python scripts/generate_fixture.py OUT_DIR [--ranks 8] [--hosts 2] [--steps 10]
        [--kernels-per-step 64] [--buckets 4]
        [--scenario mixed|slow_kernel|extra_kernel|late_launch|contention|balanced]
        [--seed 0] [--normalized-time] [--shuffle-rows] [--drift-ppm 0.0]
        [--nsys-version 2024.5|2026.2] [--contention-ranks one|all] [--force]
        [--format nsys|kineto] [--kineto-base-boundary]

or, from Python, ``generate(out_dir, ranks=8, hosts=2, ..., format="nsys", kineto_base_boundary=False)
-> dict`` (the truth).
It refuses to write into a non-empty OUT_DIR unless ``--force`` (``force=True``).

Tables written (DDL copied verbatim from real exports, see ``DDL_2024_5``):
META_DATA_EXPORT, META_DATA_CAPTURE, TARGET_INFO_SESSION_START_TIME, TARGET_INFO_SYSTEM_ENV,
TARGET_INFO_GPU, StringIds, PROCESSES, ThreadNames, CUPTI_ACTIVITY_KIND_KERNEL,
CUPTI_ACTIVITY_KIND_RUNTIME, CUPTI_ACTIVITY_KIND_MEMCPY, NVTX_EVENTS. Nothing else (no ENUM_*
tables, no indexes, as real exports carry none).

The simulated job
-----------------
* Rank r is one process (``python3``) on one GPU ('NVIDIA H100 80GB HBM3', 132 SMs). Ranks are
  split evenly over hosts ``node0..node{H-1}`` (the first hosts take one more when it does not
  divide); device = local rank. PIDs are container-like and repeat across hosts
  (``pid = base + local_rank``, same base everywhere), so a pid alone does not name a rank.
  ``globalPid = 1<<48 | pid<<24`` (VM byte 1, as in the real files), the main thread has
  ``tid = pid`` and ``globalTid = globalPid | tid``.
* Every step: two H2D memcpys (stream 7), the forward pass (about 32% of the K compute kernels,
  GEMMs, flash attention, layer norm, element-wise, softmax), then the backward pass split into
  B chunks ("gradient buckets"). After chunk b the bucket is all-reduced:
  ``ncclDevKernel_AllReduce_Sum_bf16_RING_LL`` on stream 13 (blockX 640, gridX = channels),
  and the compute stream waits for it (no compute/communication overlap; so each collective
  has its own compute segment, and every rank restarts together after it). The optimizer
  (2 kernels) runs after the last bucket. K counts compute kernels only; B is lowered until
  every chunk holds at least 8 kernels (a full backward layer pattern).
* NCCL semantics, on TRUE time: rank r's NCCL kernel starts when its compute predecessor is
  done (arrival a_r); all ranks end at ``max_r a_r + transfer`` plus U(-2, 2) us jitter.
  transfer = 20 us + bytes * 2(n-1)/n / busbw (busbw 40 GB/s across hosts, 180 GB/s on one
  host), times 1.6 for the collectives that the contention scenario slows.
* Every kernel and memcpy has a runtime call on the main thread 3-6 us before it, with the same
  correlationId (unique per rank): ``cudaLaunchKernel_v7000`` for compute kernels,
  ``cuLaunchKernelEx`` (driver API, eventClass 1, as NCCL 2.19+ does) for NCCL kernels,
  ``cudaMemcpyAsync_v3020`` for copies. Runtime calls on the main thread never overlap.
* NVTX on the main thread: the 'NCCL' domain-create row (eventType 75, domainId 1), one
  ``ncclCommInitRank`` range, an ``ncclAllReduce`` range (domain 1, name via textId, as
  registered strings are in real files) around each NCCL launch, inside a PyTorch-style
  ``nccl:all_reduce`` range (domain 0, inline text); ``ProfilerStep#N`` (inline text) around
  each step; a short ``DataLoader.__next__`` range (via textId) at the start of each step.
* Durations: lognormal around a per-kernel mean (cv 3-5%), at least 8 us; GPU gaps 1-3 us.

Scenarios (the planted rank(s) are drawn from the seed and recorded in truth.json):
* ``slow_kernel``: on rank S the backward dgrad GEMM
  (``sm90_xmma_gemm_..._nn_n_tilesize128x256x64...``, twice per backward layer, so in every
  bucket's segment) runs 35% longer in every step. S is the straggler of every collective.
* ``extra_kernel``: rank S runs one extra ``index_put_kernel`` (~380 us) in the forward pass of
  every step (data imbalance): S is late for bucket 0 of every step.
* ``late_launch``: on rank S, in every step, the host launches the last backward kernel before
  bucket 0's NCCL kernel ~2 ms late (U(0.85, 1.15) x 2 ms), while the main thread sits in a
  ``DataLoader.__next__`` NVTX range covering the GPU's idle gap.
* ``contention``: in every odd step a GEMM on a second compute stream (21) overlaps the transfer
  phase of each bucket's all-reduce on rank S (``--contention-ranks all``: on every rank); those
  transfers take 1.6x as long on all ranks. Arrivals are balanced (even steps give the
  clean baseline for the same sizes).
* ``balanced``: nothing planted, only jitter (control).
* ``mixed``: slow_kernel on rank A in EVEN steps + late_launch on rank B (A != B) in ODD steps,
  so every collective carries at most one planted cause.

Clocks: ``recorded_utc = true + offset_ns[host] + round(drift_ppm[host] * 1e-6 * (true - t0_ns))``.
Ranks on one host share offset and drift. node0 is the reference (0, 0); other hosts get an
offset of 0.5-8 ms (random sign) and drift +X (odd host index) or -X (even) for
``--drift-ppm X``. Each rank's session starts ~1.8 s before step 0, a few ms apart;
``TARGET_INFO_SESSION_START_TIME.utcEpochNs`` is that start on the rank's own clock. Stored
timestamps: ``recorded_utc - utcEpochNs`` (default), or absolute ``recorded_utc`` with
``--normalized-time`` (``EXPORT_PARAM_TIME_NORMALIZE = 'true'``). ``--shuffle-rows`` writes the
KERNEL, RUNTIME, MEMCPY and NVTX_EVENTS rows in a (seeded) random order, as nsys 2025.6+ exports
are not time-ordered; otherwise rows are in start order. ``--nsys-version 2026.2`` uses the
2026.2 (schema 3.25.0) DDL for the tables that changed (KERNEL with cluster/qmd/
tensorSizeMinusOneElements columns, MEMCPY with copyCount, session start with systemClockNs).

Kineto traces (``--format kineto``)
-----------------------------------
One ``rank_<RANK>.json.gz`` per rank (gzip level 6, no name or mtime in the header), the text laid
out as Kineto's ChromeTraceLogger writes it (PyTorch 2.x, one event per few lines):
``schemaVersion`` 1, ``deviceProperties`` (one entry per GPU of the host: id, name, totalGlobalMem,
computeMajor/Minor 9.0, numSms 132, ...), metadata (``cupti_version``, ``cuda_runtime_version``,
``cuda_driver_version``, ``distributedInfo`` {backend 'nccl', rank, world_size, pg_count,
pg_config, nccl_version}, ``generated_by``), ``traceEvents``, then ``traceName``,
``displayTimeUnit`` and ``baseTimeNanoseconds`` after the events (as finalizeTrace writes them).
``ts``/``dur`` are us with exactly 3 decimals, ``ts`` relative to ``baseTimeNanoseconds`` = the
rank's program-load wall clock (its ``utc_epoch_ns``, on its own clock) floored to a block of
7,889,238 s (~91 days), as Kineto's ChromeTraceBaseTime does. Host clock offsets and drift are
planted exactly as for nsys. Events, on the same true times as the nsys export's rows:
* CPU side, ``pid`` = the OS pid (as nsys: ``base + local_rank``), ``tid`` = pid (main thread):
  ``cpu_op`` ATen ops around each compute launch (``aten::mm``, ``aten::addmm``,
  ``aten::_flash_attention_forward``, ..., ``aten::copy_`` for the copies) and ``record_param_comms``
  at the nsys ``nccl:all_reduce`` range's times around each NCCL launch (args: Collective name
  'allreduce' (what ProcessGroupNCCL::allreduce records), dtype 'BFloat16', In/Out msg nelems,
  Group size, Process Group Name '0' / Description 'default_pg' / Ranks, Rank, Seq (1-based));
  ``user_annotation`` ranges ``nccl:all_reduce`` (at the nsys ``ncclAllReduce`` range's times),
  ``ProfilerStep#N`` and ``DataLoader.__next__`` (same times as the NVTX ranges); NCCL's own NVTX
  (domain create, ``ncclCommInitRank``) has no Kineto counterpart and is left out. CPU ops carry
  ``External id`` (1, 2, ... in start order), ``Record function id``, ``Ev Idx``.
* Launch calls (same correlation ids as nsys): ``cuda_runtime`` ``cudaLaunchKernel`` (cbid 211)
  and ``cudaMemcpyAsync`` (cbid 41); the NCCL launch ``cuLaunchKernelEx`` is a driver call, so
  ``cuda_driver`` (cbid 652), as Kineto files CUPTI driver records. Args: External id (the
  enclosing CPU op's), cbid, correlation; each followed by its ``ac2g`` flow start ("s").
* GPU side, ``pid`` = device, ``tid`` = stream: ``kernel`` (name = the demangled name; args
  External id, queued, device, context, stream, correlation, registers per thread, shared memory,
  blocks per SM, warps per SM, grid, block, est. achieved occupancy %; NCCL kernels also get the
  record_param_comms' collective args, as Kineto copies them) and ``gpu_memcpy``
  ``Memcpy HtoD (Pinned -> Device)`` (bytes, memory bandwidth (GB/s)), each with its flow end ("f").
* The profiler span (``Trace`` "PyTorch Profiler (0)"), process and thread names (``M``) and the
  ``Record Window End`` instant. Order: span, CPU ops by start, CUPTI records by start, names, end
  (``--shuffle-rows``: the CPU ops and CUPTI records in a seeded random order).
``--kineto-base-boundary`` moves t0 (only; with ``--format nsys`` too, for an nsys twin) so that
the first block boundary after T0_NS falls in the largest gap between the ranks' program starts
(each on its own clock): the ranks on either side get bases one block (91 days) apart although
their events are simultaneous (the trap of comparing ``ts`` across ranks). ``--normalized-time`` and ``--nsys-version`` apply to nsys only.

truth.json (all times integer ns; "true" times are absolute UTC ns on the TRUE clock)
-------------------------------------------------------------------------------------
``generator``, ``format_version`` (1), ``format`` ('kineto'; absent for nsys), ``seed``,
``scenario``, ``params`` (every generate() argument but out_dir/force, plus the effective
``buckets``; ``format`` and ``kineto_base_boundary`` only when not at their defaults, so that nsys
sets made before these options existed stay byte-identical), ``export``
({product_version, schema_version}), ``t0_ns`` (true start of step 0, the drift reference),
``time_normalized``, ``clock_model`` (the formula above, as text),
``streams`` ({compute: 7, nccl: 13, side: 21}),
``hosts``: {host: {offset_ns, drift_ppm, ranks: [..]}},
``ranks``: [{rank, host, local_rank, pid, device, global_pid, global_tid, file, utc_epoch_ns,
  kernels (rows in CUPTI_ACTIVITY_KIND_KERNEL), nccl_kernels, memcpys, runtime_calls,
  nvtx_events (all NVTX_EVENTS rows), nvtx_ranges (eventType 59 rows), strings (StringIds rows)}];
  for kineto: [{rank, host, local_rank, pid, tid, device, file (rank_<RANK>.json.gz), utc_epoch_ns
  (the program-load clock reading), base_time_ns (baseTimeNanoseconds), kernels ("kernel" events),
  nccl_kernels, memcpys ("gpu_memcpy"), runtime_calls ("cuda_runtime" + "cuda_driver"),
  driver_calls ("cuda_driver"), cpu_ops ("cpu_op", record_param_comms included),
  record_param_comms, user_annotations, nvtx_ranges (user_annotations + record_param_comms: the
  ranges a reader makes of them), trace_events (entries of traceEvents)}],
``kineto`` (kineto only): {block_ns, base_boundary, boundary_ns (the block start between the
  ranks' bases, or null), base_time_ns (the distinct bases), collective_name, dtype, launch_calls},
``collectives``: [{seq (k-th NCCL kernel of every rank), step, bucket, op 'AllReduce', kernel,
  dtype 'bf16', bytes, arrival_ns [per rank, true], end_ns [per rank, true], last_arrival_ns,
  straggler_rank, ref_arrival_ns (median of arrivals, floor), skew_ns (last - ref), wait_ns [per
  rank: last - a_r], wait_cost_ns (sum of wait_ns), base_transfer_ns, transfer_ns (the one the
  ranks ran: base, or base x 1.6 when slowed; each end_ns is last_arrival_ns + transfer_ns +
  jitter), slowed (bool), slowdown_factor, planted: [{type, rank, ns}] (ns: the lateness
  that cause put into this collective's segment on that rank; for contention the extra
  transfer ns)}],
``causes``: [one per planted cause: {type, rank (int or null), steps, collectives (seqs
  the cause touched), ... per type:
  slow_kernel: kernel, kernel_demangled, stream, factor, occurrences_per_step,
    extra_ns_per_step, extra_ns_total;
  extra_kernel: kernel, kernel_demangled, stream, kernel_ns_per_step,
    extra_ns_per_step (kernel + its gap), extra_ns_total;
  late_launch: kernel, kernel_demangled (the kernel whose launch came late),
    nvtx ('DataLoader.__next__'), bucket, delay_ns_per_step, extra_ns_per_step, extra_ns_total;
  contention: ranks, kernel, stream, factor, extra_transfer_ns (per collective),
    contention_ns_total (extra transfer summed over all ranks' NCCL kernels),
    expected: {collectives_slowed, extra_transfer_ns};
  the blocking causes' expected: {collectives_delayed (touched collectives where the cause's
    rank was the straggler), lateness_ns (planted ns summed over those), skew_ns,
    inflicted_wait_ns (wait_cost_ns summed over those)}}],
``expected``: {straggler_counts [per rank], top_straggler_rank, wait_cost_ns_total,
  skew_ns_total, top_cause ({type, rank, kernel, nvtx} with the largest inflicted wait, or
  null)}.
Row counts in ``ranks[]`` equal ``SELECT COUNT(*)`` of the tables; tests check it.
"""

from __future__ import annotations

import argparse
import datetime
import gzip
import json
import sqlite3
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path

import numpy as np

SCRIPT = "scripts/generate_fixture.py"
SCENARIOS = ("mixed", "slow_kernel", "extra_kernel", "late_launch", "contention", "balanced")

# DDL of the tables we fill, copied verbatim (sqlite_master.sql) from a real export:
# /work/shared/data/real/fs24-ring-6rank-2node/example_2_nsys_report_ault44.cscs.ch_739537.sqlite
# (nsys 2024.5.1.113, schema 3.13.2; ZhiyiHu1999/DistributedSysLab_FS24 @ 78d6d24d).
DDL_2024_5 = {
    "META_DATA_EXPORT": """\
CREATE TABLE META_DATA_EXPORT (
    -- information about nsys export process

    name                        TEXT      NOT NULL,                    -- Name of meta-data record
    value                       TEXT                                   -- Value of meta-data record
)""",
    "META_DATA_CAPTURE": """\
CREATE TABLE META_DATA_CAPTURE (
    -- information about nsys capture parameters

    name                        TEXT      NOT NULL,                    -- Name of meta-data record
    value                       TEXT                                   -- Value of meta-data record
)""",
    "TARGET_INFO_SESSION_START_TIME": """\
CREATE TABLE TARGET_INFO_SESSION_START_TIME (
    utcEpochNs                  INTEGER,                               -- UTC Epoch timestamp at start of the capture (ns).
    utcTime                     TEXT,                                  -- Start of the capture in UTC.
    localTime                   TEXT                                   -- Start of the capture in local time of target.
)""",
    "TARGET_INFO_SYSTEM_ENV": """\
CREATE TABLE TARGET_INFO_SYSTEM_ENV (
    globalVid                   INTEGER,                               -- Serialized GlobalId.
    devStateName                TEXT      NOT NULL,                    -- Device state name.
    name                        TEXT      NOT NULL,                    -- Property name.
    nameEnum                    INTEGER   NOT NULL,                    -- Property enum value.
    value                       TEXT      NOT NULL                     -- Property value.
)""",
    "TARGET_INFO_GPU": """\
CREATE TABLE TARGET_INFO_GPU (
    vmId                        INTEGER   NOT NULL,                    -- Serialized GlobalId.
    id                          INTEGER   NOT NULL,                    -- Device ID.
    name                        TEXT,                                  -- Device name.
    busLocation                 TEXT,                                  -- PCI bus location.
    isDiscrete                  INTEGER,                               -- True if discrete, false if integrated.
    l2CacheSize                 INTEGER,                               -- Size of L2 cache (B).
    totalMemory                 INTEGER,                               -- Total amount of memory on the device (B).
    memoryBandwidth             INTEGER,                               -- Amount of memory transferred (B).
    clockRate                   INTEGER,                               -- Clock frequency (Hz).
    smCount                     INTEGER,                               -- Number of multiprocessors on the device.
    pwGpuId                     INTEGER,                               -- PerfWorks GPU ID.
    uuid                        TEXT,                                  -- Device UUID.
    luid                        INTEGER,                               -- Device LUID.
    chipName                    TEXT,                                  -- Chip name.
    cuDevice                    INTEGER,                               -- CUDA device ID.
    ctxswDevPath                TEXT,                                  -- GPU context switch device node path.
    ctrlDevPath                 TEXT,                                  -- GPU control device node path.
    revision                    INTEGER,                               -- Revision number.
    nodeMask                    INTEGER,                               -- Device node mask.
    constantMemory              INTEGER,                               -- Memory available on device for __constant__ variables (B).
    maxIPC                      INTEGER,                               -- Maximum instructions per count.
    maxRegistersPerBlock        INTEGER,                               -- Maximum number of 32-bit registers available per block.
    maxShmemPerBlock            INTEGER,                               -- Maximum optin shared memory per block.
    maxShmemPerBlockOptin       INTEGER,                               -- Maximum optin shared memory per block.
    maxShmemPerSm               INTEGER,                               -- Maximum shared memory available per multiprocessor (B).
    maxRegistersPerSm           INTEGER,                               -- Maximum number of 32-bit registers available per multiprocessor.
    threadsPerWarp              INTEGER,                               -- Warp size in threads.
    asyncEngines                INTEGER,                               -- Number of asynchronous engines.
    maxWarpsPerSm               INTEGER,                               -- Maximum number of warps per multiprocessor.
    maxBlocksPerSm              INTEGER,                               -- Maximum number of blocks per multiprocessor.
    maxThreadsPerBlock          INTEGER,                               -- Maximum number of threads per block.
    maxBlockDimX                INTEGER,                               -- Maximum X-dimension of a block.
    maxBlockDimY                INTEGER,                               -- Maximum Y-dimension of a block.
    maxBlockDimZ                INTEGER,                               -- Maximum Z-dimension of a block.
    maxGridDimX                 INTEGER,                               -- Maximum X-dimension of a grid.
    maxGridDimY                 INTEGER,                               -- Maximum Y-dimension of a grid.
    maxGridDimZ                 INTEGER,                               -- Maximum Z-dimension of a grid.
    computeMajor                INTEGER,                               -- Major compute capability version number.
    computeMinor                INTEGER,                               -- Minor compute capability version number.
    smMajor                     INTEGER,                               -- Major multiprocessor version number.
    smMinor                     INTEGER                                -- Minor multiprocessor version number.
)""",
    "StringIds": """\
CREATE TABLE StringIds (
    -- Consolidation of repetitive string values.

    id                          INTEGER   NOT NULL   PRIMARY KEY,      -- ID reference value.
    value                       TEXT      NOT NULL                     -- String value.
)""",
    "PROCESSES": """\
CREATE TABLE PROCESSES (
    -- Names and identifiers of processes captured in the report.

    globalPid                   INTEGER,                               -- Serialized GlobalId.
    pid                         INTEGER,                               -- The process ID.
    name                        TEXT                                   -- The process name.
)""",
    "ThreadNames": """\
CREATE TABLE ThreadNames (
    nameId                      INTEGER   NOT NULL,                    -- REFERENCES StringIds(id) -- Thread name
    priority                    INTEGER,                               -- Priority of the thread.
    globalTid                   INTEGER                                -- Serialized GlobalId.
)""",
    "CUPTI_ACTIVITY_KIND_KERNEL": """\
CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (
    start                       INTEGER   NOT NULL,                    -- Event start timestamp (ns).
    end                         INTEGER   NOT NULL,                    -- Event end timestamp (ns).
    deviceId                    INTEGER   NOT NULL,                    -- Device ID.
    contextId                   INTEGER   NOT NULL,                    -- Context ID.
    greenContextId              INTEGER,                               -- Green context ID.
    streamId                    INTEGER   NOT NULL,                    -- Stream ID.
    correlationId               INTEGER,                               -- REFERENCES CUPTI_ACTIVITY_KIND_RUNTIME(correlationId)
    globalPid                   INTEGER,                               -- Serialized GlobalId.
    demangledName               INTEGER   NOT NULL,                    -- REFERENCES StringIds(id) -- Kernel function name w/ templates
    shortName                   INTEGER   NOT NULL,                    -- REFERENCES StringIds(id) -- Base kernel function name
    mangledName                 INTEGER,                               -- REFERENCES StringIds(id) -- Raw C++ mangled kernel function name
    launchType                  INTEGER,                               -- REFERENCES ENUM_CUDA_KERNEL_LAUNCH_TYPE(id)
    cacheConfig                 INTEGER,                               -- REFERENCES ENUM_CUDA_FUNC_CACHE_CONFIG(id)
    registersPerThread          INTEGER   NOT NULL,                    -- Number of registers required for each thread executing the kernel.
    gridX                       INTEGER   NOT NULL,                    -- X-dimension grid size.
    gridY                       INTEGER   NOT NULL,                    -- Y-dimension grid size.
    gridZ                       INTEGER   NOT NULL,                    -- Z-dimension grid size.
    blockX                      INTEGER   NOT NULL,                    -- X-dimension block size.
    blockY                      INTEGER   NOT NULL,                    -- Y-dimension block size.
    blockZ                      INTEGER   NOT NULL,                    -- Z-dimension block size.
    staticSharedMemory          INTEGER   NOT NULL,                    -- Static shared memory allocated for the kernel (B).
    dynamicSharedMemory         INTEGER   NOT NULL,                    -- Dynamic shared memory reserved for the kernel (B).
    localMemoryPerThread        INTEGER   NOT NULL,                    -- Amount of local memory reserved for each thread (B).
    localMemoryTotal            INTEGER   NOT NULL,                    -- Total amount of local memory reserved for the kernel (B).
    gridId                      INTEGER   NOT NULL,                    -- Unique grid ID of the kernel assigned at runtime.
    sharedMemoryExecuted        INTEGER,                               -- Shared memory size set by the driver.
    graphNodeId                 INTEGER,                               -- REFERENCES CUDA_GRAPH_NODE_EVENTS(graphNodeId)
    sharedMemoryLimitConfig     INTEGER                                -- REFERENCES ENUM_CUDA_SHARED_MEM_LIMIT_CONFIG(id)
)""",
    "CUPTI_ACTIVITY_KIND_RUNTIME": """\
CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (
    start                       INTEGER   NOT NULL,                    -- Event start timestamp (ns).
    end                         INTEGER   NOT NULL,                    -- Event end timestamp (ns).
    eventClass                  INTEGER   NOT NULL,                    -- REFERENCES ENUM_NSYS_EVENT_CLASS(id)
    globalTid                   INTEGER,                               -- Serialized GlobalId.
    correlationId               INTEGER,                               -- ID used to identify events that this function call has triggered.
    nameId                      INTEGER   NOT NULL,                    -- REFERENCES StringIds(id) -- Function name
    returnValue                 INTEGER   NOT NULL,                    -- Return value of the function call.
    callchainId                 INTEGER                                -- REFERENCES CUDA_CALLCHAINS(id)
)""",
    "CUPTI_ACTIVITY_KIND_MEMCPY": """\
CREATE TABLE CUPTI_ACTIVITY_KIND_MEMCPY (
    start                       INTEGER   NOT NULL,                    -- Event start timestamp (ns).
    end                         INTEGER   NOT NULL,                    -- Event end timestamp (ns).
    deviceId                    INTEGER   NOT NULL,                    -- Device ID.
    contextId                   INTEGER   NOT NULL,                    -- Context ID.
    greenContextId              INTEGER,                               -- Green context ID.
    streamId                    INTEGER   NOT NULL,                    -- Stream ID.
    correlationId               INTEGER,                               -- REFERENCES CUPTI_ACTIVITY_KIND_RUNTIME(correlationId)
    globalPid                   INTEGER,                               -- Serialized GlobalId.
    bytes                       INTEGER   NOT NULL,                    -- Number of bytes transferred (B).
    copyKind                    INTEGER   NOT NULL,                    -- REFERENCES ENUM_CUDA_MEMCPY_OPER(id)
    deprecatedSrcId             INTEGER,                               -- Deprecated, use srcDeviceId instead.
    srcKind                     INTEGER,                               -- REFERENCES ENUM_CUDA_MEM_KIND(id)
    dstKind                     INTEGER,                               -- REFERENCES ENUM_CUDA_MEM_KIND(id)
    srcDeviceId                 INTEGER,                               -- Source device ID.
    srcContextId                INTEGER,                               -- Source context ID.
    dstDeviceId                 INTEGER,                               -- Destination device ID.
    dstContextId                INTEGER,                               -- Destination context ID.
    migrationCause              INTEGER,                               -- REFERENCES ENUM_CUDA_UNIF_MEM_MIGRATION(id)
    graphNodeId                 INTEGER,                               -- REFERENCES CUDA_GRAPH_NODE_EVENTS(graphNodeId)
    virtualAddress              INTEGER                                -- Virtual base address of the page/s being transferred.
)""",
    "NVTX_EVENTS": """\
CREATE TABLE NVTX_EVENTS (
    start                       INTEGER   NOT NULL,                    -- Event start timestamp (ns).
    end                         INTEGER,                               -- Event end timestamp (ns).
    eventType                   INTEGER   NOT NULL,                    -- REFERENCES ENUM_NSYS_EVENT_TYPE(id)
    rangeId                     INTEGER,                               -- Correlation ID returned from a nvtxRangeStart call.
    category                    INTEGER,                               -- User-controlled ID that can be used to group events.
    color                       INTEGER,                               -- Encoded ARGB color value.
    text                        TEXT,                                  -- Explicit name/text (non-registered string)
    globalTid                   INTEGER,                               -- Serialized GlobalId.
    endGlobalTid                INTEGER,                               -- Serialized GlobalId.
    textId                      INTEGER,                               -- REFERENCES StringIds(id) -- Registered NVTX domain/string
    domainId                    INTEGER,                               -- User-controlled ID that can be used to group events.
    uint64Value                 INTEGER,                               -- One of possible payload value union members.
    int64Value                  INTEGER,                               -- One of possible payload value union members.
    doubleValue                 REAL,                                  -- One of possible payload value union members.
    uint32Value                 INTEGER,                               -- One of possible payload value union members.
    int32Value                  INTEGER,                               -- One of possible payload value union members.
    floatValue                  REAL,                                  -- One of possible payload value union members.
    jsonTextId                  INTEGER,                               -- One of possible payload value union members.
    jsonText                    TEXT,                                  -- One of possible payload value union members.
    binaryData                  TEXT                                   -- Binary payload. See docs for format.
)""",
}
# Tables whose DDL nsys 2026.2.1.210 (schema 3.25.0) changed, copied verbatim from
# /work/shared/data/real/nsys-ai-2gpu/mfu_2gpu_before.sqlite (GindaChen/nsys-ai @ ab196ea2); used with
# --nsys-version 2026.2. That (derived) file has no TARGET_INFO_GPU: the 3.13.2 one is kept.
DDL_2026_2_CHANGED = {
    "TARGET_INFO_SESSION_START_TIME": """\
CREATE TABLE TARGET_INFO_SESSION_START_TIME (
    utcEpochNs                  INTEGER,                               -- UTC Epoch timestamp at start of the capture (ns).
    utcTime                     TEXT,                                  -- Start of the capture in UTC.
    localTime                   TEXT,                                  -- Start of the capture in local time of target.
    systemClockNs               INTEGER                                -- Target system clock timestamp at start of the capture (ns).
)""",
    "CUPTI_ACTIVITY_KIND_KERNEL": """\
CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (
    start                       INTEGER   NOT NULL,                    -- Event start timestamp (ns).
    end                         INTEGER   NOT NULL,                    -- Event end timestamp (ns).
    deviceId                    INTEGER   NOT NULL,                    -- Device ID.
    contextId                   INTEGER   NOT NULL,                    -- Context ID.
    greenContextId              INTEGER,                               -- Green context ID.
    streamId                    INTEGER   NOT NULL,                    -- Stream ID.
    correlationId               INTEGER,                               -- REFERENCES CUPTI_ACTIVITY_KIND_RUNTIME(correlationId)
    globalPid                   INTEGER,                               -- Serialized GlobalId.
    demangledName               INTEGER   NOT NULL,                    -- REFERENCES StringIds(id) -- Kernel function name w/ templates
    shortName                   INTEGER   NOT NULL,                    -- REFERENCES StringIds(id) -- Base kernel function name
    mangledName                 INTEGER,                               -- REFERENCES StringIds(id) -- Raw C++ mangled kernel function name
    launchType                  INTEGER,                               -- REFERENCES ENUM_CUDA_KERNEL_LAUNCH_TYPE(id)
    cacheConfig                 INTEGER,                               -- REFERENCES ENUM_CUDA_FUNC_CACHE_CONFIG(id)
    registersPerThread          INTEGER   NOT NULL,                    -- Number of registers required for each thread executing the kernel.
    gridX                       INTEGER   NOT NULL,                    -- X-dimension grid size.
    gridY                       INTEGER   NOT NULL,                    -- Y-dimension grid size.
    gridZ                       INTEGER   NOT NULL,                    -- Z-dimension grid size.
    blockX                      INTEGER   NOT NULL,                    -- X-dimension block size.
    blockY                      INTEGER   NOT NULL,                    -- Y-dimension block size.
    blockZ                      INTEGER   NOT NULL,                    -- Z-dimension block size.
    staticSharedMemory          INTEGER   NOT NULL,                    -- Static shared memory allocated for the kernel (B).
    dynamicSharedMemory         INTEGER   NOT NULL,                    -- Dynamic shared memory reserved for the kernel (B).
    localMemoryPerThread        INTEGER   NOT NULL,                    -- Amount of local memory reserved for each thread (B).
    localMemoryTotal            INTEGER   NOT NULL,                    -- Total amount of local memory reserved for the kernel (B).
    gridId                      INTEGER   NOT NULL,                    -- Unique grid ID of the kernel assigned at runtime.
    sharedMemoryExecuted        INTEGER,                               -- Shared memory size set by the driver.
    graphNodeId                 INTEGER,                               -- REFERENCES CUDA_GRAPH_NODE_EVENTS(graphNodeId)
    sharedMemoryLimitConfig     INTEGER,                               -- REFERENCES ENUM_CUDA_SHARED_MEM_LIMIT_CONFIG(id)
    qmdBulkReleaseDone          INTEGER,                               -- QMD bulk release done timestamp from CWD events.
    qmdPreexitDone              INTEGER,                               -- QMD pre-exit done timestamp from CWD events.
    qmdLastCtaDone              INTEGER,                               -- QMD last CTA done timestamp from CWD events.
    graphId                     INTEGER,                               -- Kernel graph ID.
    clusterX                    INTEGER,                               -- Cluster X dimension.
    clusterY                    INTEGER,                               -- Cluster Y dimension.
    clusterZ                    INTEGER,                               -- Cluster Z dimension.
    clusterSchedulingPolicy     INTEGER,                               -- Cluster scheduling policy.
    maxPotentialClusterSize     INTEGER,                               -- Maximum potential cluster size.
    maxActiveClusters           INTEGER,                               -- Maximum active clusters.
    sharedMemoryRequestedPercentage   INTEGER,                         -- Shared memory requested percentage.
    tensorSizeMinusOneElements   TEXT      NOT NULL                    -- TMA descriptor tensor size minus one elements array.
)""",
    "CUPTI_ACTIVITY_KIND_MEMCPY": """\
CREATE TABLE CUPTI_ACTIVITY_KIND_MEMCPY (
    start                       INTEGER   NOT NULL,                    -- Event start timestamp (ns).
    end                         INTEGER   NOT NULL,                    -- Event end timestamp (ns).
    deviceId                    INTEGER   NOT NULL,                    -- Device ID.
    contextId                   INTEGER   NOT NULL,                    -- Context ID.
    greenContextId              INTEGER,                               -- Green context ID.
    streamId                    INTEGER   NOT NULL,                    -- Stream ID.
    correlationId               INTEGER,                               -- REFERENCES CUPTI_ACTIVITY_KIND_RUNTIME(correlationId)
    globalPid                   INTEGER,                               -- Serialized GlobalId.
    bytes                       INTEGER   NOT NULL,                    -- Number of bytes transferred (B).
    copyKind                    INTEGER   NOT NULL,                    -- REFERENCES ENUM_CUDA_MEMCPY_OPER(id)
    deprecatedSrcId             INTEGER,                               -- Deprecated, use srcDeviceId instead.
    srcKind                     INTEGER,                               -- REFERENCES ENUM_CUDA_MEM_KIND(id)
    dstKind                     INTEGER,                               -- REFERENCES ENUM_CUDA_MEM_KIND(id)
    srcDeviceId                 INTEGER,                               -- Source device ID.
    srcContextId                INTEGER,                               -- Source context ID.
    dstDeviceId                 INTEGER,                               -- Destination device ID.
    dstContextId                INTEGER,                               -- Destination context ID.
    migrationCause              INTEGER,                               -- REFERENCES ENUM_CUDA_UNIF_MEM_MIGRATION(id)
    graphNodeId                 INTEGER,                               -- REFERENCES CUDA_GRAPH_NODE_EVENTS(graphNodeId)
    virtualAddress              INTEGER,                               -- Virtual base address of the page/s being transferred.
    copyCount                   INTEGER                                -- The total number of memcopy operations traced in this record. In CUDA MemcpyBatchAsync APIs, multiple memcpy operations may be batched together for optimization purposes based on certain heuristics.
)""",
}

EXPORT_VERSIONS = {
    "2024.5": {"product": "2024.5.1.113", "schema": "3.13.2", "cksum": "1271772049 158887"},
    "2026.2": {"product": "2026.2.1.210", "schema": "3.25.0", "cksum": "306658267 182758"},
}

US = 1_000
MS = 1_000_000
T0_NS = 1_750_000_000_000_000_000  # true UTC of step 0 (2025-06-15T15:06:40Z), fixed
GLOBAL_VID = 1 << 48  # VM byte 1, HW byte 0: what the real files show
STREAM_COMPUTE, STREAM_NCCL, STREAM_SIDE = 7, 13, 21
CONTEXT_ID = 1
MIN_DUR = 8 * US  # keeps each launch call before its kernel and the calls from overlapping
SLOW_FACTOR = 1.35
CONTENTION_FACTOR = 1.6
LATE_DELAY = 2 * MS
DATALOADER = "DataLoader.__next__"
COPY_BYTES = 262_144  # two int64 token tensors per step
NCCL_DOMAIN_ID = 1


@dataclass(frozen=True)
class Kern:
    short: str
    demangled: str
    mangled: str
    mean_ns: int
    cv: float
    grid: tuple
    block: tuple
    regs: int
    static_smem: int
    dyn_smem: int
    smem_exec: int
    cluster: tuple = (0, 0, 0)


def _cublas(name, mean_ns, grid, cluster=(2, 1, 1)):
    # cuBLAS sm90 kernels: short == demangled == mangled (as nvjet_* in the 2026.2 file)
    return Kern(name, name, name, mean_ns, 0.03, grid, (384, 1, 1), 168, 0, 213_196, 233_472, cluster)


def _ew(functor_demangled, functor_mangled, mean_ns, grid=(65_536, 1, 1)):
    return Kern(
        "vectorized_elementwise_kernel",
        f"void at::native::vectorized_elementwise_kernel<(int)4, {functor_demangled}, "
        "std::array<char *, (unsigned long)3>>(int, T2, T3)",
        f"_ZN2at6native29vectorized_elementwise_kernelILi4E{functor_mangled}St5arrayIPcLm3EEEEviT0_T1_",
        mean_ns, 0.05, grid, (128, 1, 1), 28, 0, 0, 0,
    )


LN_FWD = Kern(
    "vectorized_layer_norm_kernel",
    "void at::native::<unnamed>::vectorized_layer_norm_kernel<c10::BFloat16, float, (bool)0>"
    "(int, T2, const T1 *, const T1 *, const T1 *, T2 *, T2 *, T1 *)",
    "_ZN2at6native53_GLOBAL__N__21739cd4_20_layer_norm_kernel_cu_9c5ada8a28vectorized_layer_norm_"
    "kernelIN3c108BFloat16EfLb0EEEviT0_PKT_S8_S8_PS5_S9_PS6_",
    38 * US, 0.04, (16_384, 1, 1), (32, 4, 1), 39, 0, 24, 0,
)
GEMM_QKV = _cublas(
    "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_"
    "execute_segment_k_off_kernel__5x_cublas", 185 * US, (66, 2, 1))
FLASH_FWD = Kern(
    "flash_fwd_kernel",
    "void flash::flash_fwd_kernel<Flash_fwd_kernel_traits<(int)128, (int)128, (int)64, (int)4, "
    "(bool)0, (bool)0, cutlass::bfloat16_t, Flash_kernel_traits<(int)128, (int)128, (int)64, (int)4, "
    "cutlass::bfloat16_t>>, (bool)1, (bool)0, (bool)0, (bool)0, (bool)1, (bool)1, (bool)0, (bool)0>"
    "(flash::Flash_fwd_params)",
    "_ZN5flash16flash_fwd_kernelI23Flash_fwd_kernel_traitsILi128ELi128ELi64ELi4ELb0ELb0EN7cutlass10"
    "bfloat16_tE19Flash_kernel_traitsILi128ELi128ELi64ELi4ES2_EELb1ELb0ELb0ELb0ELb1ELb1ELb0ELb0EEEv"
    "NS_16Flash_fwd_paramsE",
    240 * US, 0.03, (16, 32, 4), (128, 1, 1), 255, 0, 65_536, 135_168,
)
GEMM_PROJ = _cublas("nvjet_tst_192x192_64x4_2x1_v_bz_coopB_bias_TNN", 120 * US, (132, 1, 1))
ADD = _ew("at::native::CUDAFunctor_add<c10::BFloat16>", "NS0_15CUDAFunctor_addIN3c108BFloat16EEE", 22 * US)
GEMM_MLP = _cublas(
    "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x256x64_warpgroupsize2x1x1_"
    "execute_segment_k_off_kernel__5x_cublas", 310 * US, (132, 1, 1))
GELU = _ew(
    "at::native::<unnamed>::GeluCUDAKernelImpl(at::TensorIteratorBase &, at::native::GeluType)::"
    "[lambda() (instance 2)]::operator ()() const::[lambda(c10::BFloat16) (instance 1)]",
    "ZZN2at6native18GeluCUDAKernelImplERNS_18TensorIteratorBaseENS0_8GeluTypeEENKUlvE0_clEvEUlN3c10"
    "8BFloat16EE_", 31 * US)
SOFTMAX = Kern(
    "softmax_warp_forward",
    "void softmax_warp_forward<c10::BFloat16, c10::BFloat16, float, (int)5, (bool)0, (bool)0>"
    "(T2 *, const T1 *, int, int, int, const bool *, int, bool)",
    "_Z20softmax_warp_forwardIN3c108BFloat16ES1_fLi5ELb0ELb0EEvPT0_PKT_iiiPKbib",
    16 * US, 0.05, (4_096, 1, 1), (128, 1, 1), 40, 0, 0, 0,
)
GELU_BWD = _ew(
    "at::native::<unnamed>::GeluBackwardCUDAKernelImpl(at::TensorIteratorBase &, at::native::GeluType)"
    "::[lambda() (instance 2)]::operator ()() const::[lambda(c10::BFloat16, c10::BFloat16) (instance 1)]",
    "ZZN2at6native26GeluBackwardCUDAKernelImplERNS_18TensorIteratorBaseENS0_8GeluTypeEENKUlvE0_clEv"
    "EUlN3c108BFloat16ES6_E_", 34 * US)
GEMM_DGRAD = _cublas(
    "sm90_xmma_gemm_bf16bf16_bf16f32_f32_nn_n_tilesize128x256x64_warpgroupsize2x1x1_"
    "execute_segment_k_off_kernel__5x_cublas", 205 * US, (132, 1, 1))
GEMM_WGRAD = _cublas(
    "sm90_xmma_gemm_bf16bf16_bf16f32_f32_nt_n_tilesize256x128x64_warpgroupsize2x1x1_"
    "execute_segment_k_on_kernel__5x_cublas", 215 * US, (132, 1, 1))
FLASH_BWD = Kern(
    "flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel",
    "void flash::flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel<Flash_bwd_kernel_traits<(int)128, "
    "(int)64, (int)128, (int)8, (int)2, (int)4, (int)2, (bool)0, (bool)0, cutlass::bfloat16_t, "
    "Flash_kernel_traits<(int)128, (int)64, (int)128, (int)8, cutlass::bfloat16_t>>, (bool)1, (bool)0, "
    "(bool)0, (bool)0, (bool)1, (bool)0, (bool)0>(flash::Flash_bwd_params)",
    "_ZN5flash44flash_bwd_dq_dk_dv_loop_seqk_parallel_kernelI23Flash_bwd_kernel_traitsILi128ELi64E"
    "Li128ELi8ELi2ELi4ELi2ELb0ELb0EN7cutlass10bfloat16_tE19Flash_kernel_traitsILi128ELi64ELi128ELi8E"
    "S2_EELb1ELb0ELb0ELb0ELb1ELb0ELb0EEEvNS_16Flash_bwd_paramsE",
    560 * US, 0.03, (32, 32, 4), (256, 1, 1), 255, 0, 147_456, 233_472,
)
LN_BWD = Kern(
    "layer_norm_grad_input_kernel",
    "void at::native::<unnamed>::layer_norm_grad_input_kernel<c10::BFloat16, float>"
    "(const T1 *, const T1 *, const T2 *, const T2 *, const T1 *, T1 *, int)",
    "_ZN2at6native53_GLOBAL__N__21739cd4_20_layer_norm_kernel_cu_9c5ada8a28layer_norm_grad_input_"
    "kernelIN3c108BFloat16EfEEvPKT_S7_PKT0_SA_S7_PS5_i",
    46 * US, 0.04, (16_384, 1, 1), (128, 1, 1), 40, 0, 0, 0,
)
GAMMA_BETA = Kern(
    "GammaBetaBackwardCUDAKernel_32x32",
    "void at::native::<unnamed>::GammaBetaBackwardCUDAKernel_32x32<c10::BFloat16, float>"
    "(long, long, const T1 *, const T1 *, const T2 *, const T2 *, T1 *, T1 *)",
    "_ZN2at6native53_GLOBAL__N__21739cd4_20_layer_norm_kernel_cu_9c5ada8a33GammaBetaBackwardCUDA"
    "Kernel_32x32IN3c108BFloat16EfEEvllPKT_S7_PKT0_SA_PS5_SB_",
    30 * US, 0.04, (128, 1, 1), (32, 32, 1), 64, 8_448, 0, 16_384,
)
ADAM = Kern(
    "multi_tensor_apply_kernel",
    "void at::native::<unnamed>::multi_tensor_apply_kernel<at::native::<unnamed>::TensorListMetadata"
    "<(int)4>, at::native::<unnamed>::FusedAdamMathFunctor<c10::BFloat16, (int)4, "
    "(at::native::ADAM_MODE)1, (bool)0>, double *, double, double, double, double, double, bool, "
    "const float *, const float *>(T1, T2, T3...)",
    "_ZN2at6native12_GLOBAL__N_125multi_tensor_apply_kernelINS1_18TensorListMetadataILi4EEENS1_20"
    "FusedAdamMathFunctorIN3c108BFloat16ELi4ELNS0_9ADAM_MODEE1ELb0EEEJPddddddbPKfSB_EEEvT_T0_DpT1_",
    650 * US, 0.03, (320, 1, 1), (512, 1, 1), 64, 0, 0, 0,
)
ZERO = _ew("at::native::FillFunctor<c10::BFloat16>", "NS0_11FillFunctorIN3c108BFloat16EEE", 12 * US)
INDEX_PUT = Kern(
    "index_put_kernel",
    "void at::native::index_put_kernel<c10::BFloat16, long>"
    "(c10::BFloat16 *, const long *, const c10::BFloat16 *, long, long)",
    "_ZN2at6native16index_put_kernelIN3c108BFloat16ElEEvPT_PKT0_PKS4_ll",
    380 * US, 0.05, (2_048, 1, 1), (256, 1, 1), 32, 0, 0, 0,
)
CONTEND = _cublas(
    "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize256x128x64_warpgroupsize2x1x1_"
    "execute_segment_k_off_kernel__5x_cublas", 0, (132, 1, 1))
_NCCL_NAME = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL"
NCCL = Kern(
    _NCCL_NAME,
    f"{_NCCL_NAME}(ncclDevKernelArgsStorage<(unsigned long)4096>)",
    f"_Z{len(_NCCL_NAME)}{_NCCL_NAME}24ncclDevKernelArgsStorageILm4096EE",
    0, 0.0, (16, 1, 1), (640, 1, 1), 96, 21_568, 82_240, 135_168,
)

# One transformer layer's kernels; the step cycles through these patterns.
FWD_PATTERN = [LN_FWD, GEMM_QKV, FLASH_FWD, GEMM_PROJ, ADD, LN_FWD, GEMM_MLP, GELU, GEMM_PROJ, ADD, SOFTMAX]
BWD_PATTERN = [GELU_BWD, GEMM_DGRAD, GEMM_WGRAD, FLASH_BWD, LN_BWD, GAMMA_BETA, GEMM_DGRAD, GEMM_WGRAD]
OPT_PATTERN = [ADAM, ZERO]
CATALOG = list(dict.fromkeys(FWD_PATTERN + BWD_PATTERN + OPT_PATTERN + [INDEX_PUT, CONTEND, NCCL]))
SPEC = {k: i for i, k in enumerate(CATALOG)}
SLOW_KERNEL = GEMM_DGRAD

# op kinds in a rank's program
K_COMPUTE, K_COPY, K_NCCL, K_SIDE = 0, 1, 2, 3

RUNTIME_NAMES = ["cudaLaunchKernel_v7000", "cuLaunchKernelEx", "cudaMemcpyAsync_v3020"]
NVTX_STRINGS = ["ncclCommInitRank", "ncclAllReduce", DATALOADER]
THREAD_NAMES = ["python3", "pt_nccl_watchdg"]

# --format kineto: PyTorch profiler traces (see the docstring's "Kineto traces")
FORMATS = ("nsys", "kineto")
KINETO_BLOCK_NS = 7_889_238 * 10**9  # ChromeTraceBaseTime: the load-time wall clock floored to ~3 months
KINETO_PRODUCT = "PyTorch 2.5.1 profiler (Kineto)"
KINETO_SCHEMA = 1
KINETO_COLLECTIVE = "allreduce"  # record_param_comms' "Collective name" (ProcessGroupNCCL::allreduce)
KINETO_DTYPE = "BFloat16"
KINETO_MEMCPY = "Memcpy HtoD (Pinned -> Device)"
# (category, name, CUPTI callback id) of the launch call of each op kind
KINETO_LAUNCH = {K_COMPUTE: ("cuda_runtime", "cudaLaunchKernel", 211), K_SIDE: ("cuda_runtime", "cudaLaunchKernel", 211),
                 K_COPY: ("cuda_runtime", "cudaMemcpyAsync", 41), K_NCCL: ("cuda_driver", "cuLaunchKernelEx", 652)}
# the ATen op (cpu_op) around each compute kernel's launch
ATEN_OP = {SPEC[k]: op for k, op in [
    (LN_FWD, "aten::native_layer_norm"), (GEMM_QKV, "aten::addmm"), (FLASH_FWD, "aten::_flash_attention_forward"),
    (GEMM_PROJ, "aten::addmm"), (ADD, "aten::add"), (GEMM_MLP, "aten::addmm"), (GELU, "aten::gelu"),
    (SOFTMAX, "aten::_softmax"), (GELU_BWD, "aten::gelu_backward"), (GEMM_DGRAD, "aten::mm"), (GEMM_WGRAD, "aten::mm"),
    (FLASH_BWD, "aten::_flash_attention_backward"), (LN_BWD, "aten::native_layer_norm_backward"),
    (GAMMA_BETA, "aten::native_layer_norm_backward"), (ADAM, "aten::_fused_adam_"), (ZERO, "aten::fill_"),
    (INDEX_PUT, "aten::index_put_"), (CONTEND, "aten::mm")]}

BUS_LOCATIONS = ["0000:18:00.0", "0000:2a:00.0", "0000:3a:00.0", "0000:5d:00.0",
                 "0000:9a:00.0", "0000:ab:00.0", "0000:ba:00.0", "0000:db:00.0"]


def _rng(seed, *stream):
    # Independent, named random streams: changing one option does not reshuffle the others.
    return np.random.default_rng([seed, *stream])


def _layout(ranks, hosts):
    """Host index and local rank of every rank; hosts take ranks in order, sizes differ by <= 1."""
    sizes = [ranks // hosts + (1 if h < ranks % hosts else 0) for h in range(hosts)]
    host_of, local_of = [], []
    for h, n in enumerate(sizes):
        host_of += [h] * n
        local_of += list(range(n))
    return host_of, local_of, sizes


def _step_template(k, buckets):
    """One step's program: list of (kind, spec index, local segment, bucket or -1)."""
    n_opt = 2 if k >= 12 else 0
    n_fwd = max(1, round(0.32 * k))
    n_bwd = k - n_fwd - n_opt
    b = max(1, min(buckets, n_bwd // len(BWD_PATTERN)))
    ops = [(K_COPY, -1, 0, -1), (K_COPY, -1, 0, -1)]
    ops += [(K_COMPUTE, SPEC[FWD_PATTERN[i % len(FWD_PATTERN)]], 0, -1) for i in range(n_fwd)]
    bwd = [SPEC[BWD_PATTERN[i % len(BWD_PATTERN)]] for i in range(n_bwd)]
    for bucket, chunk in enumerate(np.array_split(np.array(bwd, dtype=np.int64), b)):
        ops += [(K_COMPUTE, int(s), bucket, -1) for s in chunk]
        ops.append((K_NCCL, SPEC[NCCL], bucket, bucket))
    # the optimizer follows the last bucket: it belongs to the next step's first segment
    ops += [(K_COMPUTE, SPEC[OPT_PATTERN[i % len(OPT_PATTERN)]], b, -1) for i in range(n_opt)]
    return ops, b


def _bucket_bytes(b, buckets):
    return 9 * 2**20 if (buckets > 1 and b == buckets - 1) else 25 * 2**20


def _plan(scenario, ranks, steps, seed, contention_ranks):
    """Which rank gets which cause in which steps."""
    rng = _rng(seed, 4)
    picks = [int(x) for x in rng.permutation(ranks)[:2]]
    all_steps = np.ones(steps, bool)
    even = np.arange(steps) % 2 == 0
    plan = {}
    if scenario == "slow_kernel":
        plan["slow_kernel"] = {"rank": picks[0], "steps": all_steps}
    elif scenario == "extra_kernel":
        plan["extra_kernel"] = {"rank": picks[0], "steps": all_steps}
    elif scenario == "late_launch":
        plan["late_launch"] = {"rank": picks[0], "steps": all_steps}
    elif scenario == "contention":
        cr = list(range(ranks)) if contention_ranks == "all" else [picks[0]]
        plan["contention"] = {"rank": picks[0] if contention_ranks == "one" else None,
                              "ranks": cr, "steps": ~even}
    elif scenario == "mixed":
        plan["slow_kernel"] = {"rank": picks[0], "steps": even}
        plan["late_launch"] = {"rank": picks[1], "steps": ~even}
    return plan


def _rank_program(rank, template, steps, plan, seed):
    """Arrays describing rank's GPU ops in program order, with durations and gaps drawn."""
    rng = _rng(seed, 1, rank)
    t = np.array(template, dtype=np.int64)
    n = len(t)
    kind = np.tile(t[:, 0], steps)
    spec = np.tile(t[:, 1], steps)
    step = np.repeat(np.arange(steps, dtype=np.int64), n)
    b_eff = int(t[:, 3].max()) + 1
    seg = step * b_eff + np.tile(t[:, 2], steps)  # global segment = collective the op precedes
    bucket = np.tile(t[:, 3], steps)
    first_of_step = np.tile(np.arange(n) == 0, steps)

    ek = plan.get("extra_kernel")
    if ek and ek["rank"] == rank:
        # one extra kernel right after the first forward kernel of each planted step
        where = np.flatnonzero(np.tile(np.arange(n) == 3, steps) & ek["steps"][step])
        kind = np.insert(kind, where, K_COMPUTE)
        spec = np.insert(spec, where, SPEC[INDEX_PUT])
        seg = np.insert(seg, where, seg[where])
        bucket = np.insert(bucket, where, -1)
        first_of_step = np.insert(first_of_step, where, False)
        step = np.insert(step, where, step[where])
    m = len(kind)

    mean = np.array([k.mean_ns for k in CATALOG], dtype=np.float64)
    cv = np.array([k.cv for k in CATALOG])
    sp = np.where(spec < 0, 0, spec)
    dur = mean[sp] * np.exp(rng.normal(0.0, 1.0, m) * cv[sp])
    copy_ns = 4 * US + COPY_BYTES / 25e9 * 1e9  # pinned H2D at ~25 GB/s
    dur = np.where(kind == K_COPY, copy_ns * np.exp(rng.normal(0.0, 0.03, m)), dur)
    dur = np.maximum(np.rint(dur), MIN_DUR).astype(np.int64)
    gap = rng.integers(1 * US, 3 * US, m)
    gap = np.where(kind == K_NCCL, rng.integers(2 * US, 5 * US, m), gap)
    # the host spends ~40 us in the data loader before each step's first copy
    dl_gap = rng.integers(38 * US, 44 * US, m)
    gap = np.where(first_of_step, dl_gap, gap)
    lead = rng.integers(3 * US, 6 * US, m)  # launch call starts this long before the op
    call = (rng.random(m) * (lead - 2500) + 1500).astype(np.int64)  # call duration, ends >=1 us early
    extra = np.zeros(m, np.int64)  # planted ns this op added to the rank's timeline

    sk = plan.get("slow_kernel")
    if sk and sk["rank"] == rank:
        hit = (spec == SPEC[SLOW_KERNEL]) & sk["steps"][step]
        add = np.rint(dur * (SLOW_FACTOR - 1.0)).astype(np.int64)
        extra = np.where(hit, add, extra)
        dur = dur + np.where(hit, add, 0)
    if ek and ek["rank"] == rank:
        hit = spec == SPEC[INDEX_PUT]
        extra = np.where(hit, dur + gap, extra)
    ll = plan.get("late_launch")
    late_idx = np.zeros(0, np.int64)
    if ll and ll["rank"] == rank:
        # the compute kernel right before bucket 0's NCCL kernel
        nxt = np.append(kind[1:], -1)
        nxt_b = np.append(bucket[1:], -1)
        late_idx = np.flatnonzero((kind == K_COMPUTE) & (nxt == K_NCCL) & (nxt_b == 0) & ll["steps"][step])
        delay = np.rint(LATE_DELAY * _rng(seed, 7).uniform(0.85, 1.15, len(ll["steps"]))).astype(np.int64)
        d = delay[step[late_idx]]
        gap[late_idx] += d
        extra[late_idx] = d
    return {"kind": kind, "spec": spec, "step": step, "seg": seg, "bucket": bucket,
            "first_of_step": first_of_step, "dur": dur, "gap": gap, "lead": lead, "call": call,
            "extra": extra, "late_idx": late_idx}


def _simulate(progs, ranks, n_coll, x_base, slowed_factor, seed):
    """True-time schedule (relative to t0) of every op; the collectives couple the ranks."""
    rng = _rng(seed, 2)
    seg_start = np.zeros((ranks, n_coll + 1), np.int64)
    seg_len = np.zeros((ranks, n_coll + 1), np.int64)
    ngap = np.zeros((ranks, n_coll), np.int64)
    rel = []
    seg_start[:, 0] = rng.integers(0, 20 * US, ranks)  # ranks enter step 0 a few us apart
    jitter = rng.integers(-2 * US, 2 * US + 1, (ranks, n_coll))
    for r, p in enumerate(progs):
        comp = p["kind"] != K_NCCL
        w = (p["gap"] + p["dur"])[comp]
        sg = p["seg"][comp]
        np.add.at(seg_len[r], sg, w)
        before = np.concatenate([[0], np.cumsum(seg_len[r])])[sg]
        rel_end = np.cumsum(w) - before
        rel.append((comp, sg, rel_end - p["dur"][comp]))
        ngap[r] = p["gap"][p["kind"] == K_NCCL]
    arrival = np.zeros((ranks, n_coll), np.int64)
    end = np.zeros((ranks, n_coll), np.int64)
    x = np.rint(x_base * slowed_factor).astype(np.int64)
    for j in range(n_coll):
        a = seg_start[:, j] + seg_len[:, j] + ngap[:, j]
        arrival[:, j] = a
        end[:, j] = a.max() + x[j] + jitter[:, j]
        seg_start[:, j + 1] = end[:, j]  # the compute stream waits for the all-reduce
    for r, p in enumerate(progs):
        comp, sg, rstart = rel[r]
        start = np.empty(len(p["kind"]), np.int64)
        start[comp] = seg_start[r, sg] + rstart
        start[~comp] = arrival[r]
        stop = start + p["dur"]
        stop[~comp] = end[r]
        p["start"], p["end"] = start, stop
    return arrival, end, x


def _add_side_kernels(progs, plan, arrival, x, coll_step, seed):
    """Contention: a GEMM on stream 21 overlapping the transfer phase [L, e] of slowed collectives."""
    c = plan.get("contention")
    if not c:
        return
    rng = _rng(seed, 8)
    js = np.flatnonzero(c["steps"][coll_step])
    last = arrival.max(axis=0)
    for r in c["ranks"]:
        p = progs[r]
        delta = rng.integers(10 * US, 30 * US, len(js))
        tail = rng.integers(20 * US, 60 * US, len(js))
        st = last[js] + delta
        du = x[js] - delta - tail  # ends before the (slowed) transfer does
        k = len(js)
        lead = rng.integers(3 * US, 6 * US, k)
        add = {"kind": np.full(k, K_SIDE), "spec": np.full(k, SPEC[CONTEND]), "step": coll_step[js],
               "seg": js, "bucket": np.full(k, -1), "first_of_step": np.zeros(k, bool),
               "dur": du, "gap": np.zeros(k, np.int64), "lead": lead,
               "call": (rng.random(k) * (lead - 2500) + 1500).astype(np.int64),
               "extra": np.zeros(k, np.int64), "start": st, "end": st + du}
        for key, v in add.items():
            p[key] = np.concatenate([p[key], v.astype(p[key].dtype)])


class _Strings:
    """StringIds: ids in order of registration (the same order in every file)."""

    def __init__(self):
        self.ids = {}

    def __call__(self, s):
        if s not in self.ids:
            self.ids[s] = len(self.ids) + 1
        return self.ids[s]

    def rows(self):
        return [(i, s) for s, i in self.ids.items()]


def _clock(true_rel, offset, drift_ppm, t0=T0_NS):
    """Recorded UTC for true times given relative to t0 (int64 array or int)."""
    tr = np.asarray(true_rel, dtype=np.int64)
    return t0 + tr + offset + np.rint(drift_ppm * 1e-6 * tr.astype(np.float64)).astype(np.int64)


def _iso(ns):
    return datetime.datetime.fromtimestamp(ns // 10**9, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S")


def _insert(db, table, cols, rows):
    db.executemany(f"INSERT INTO {table} ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})", rows)


def _write_rank(path, r, info, p, nvtx, seed, args, ver, ddl):
    """Write one rank's export. Returns its row counts."""
    norm = args["normalized_time"]
    epoch = info["utc_epoch_ns"]
    rec = lambda t: _clock(t, info["offset_ns"], info["drift_ppm"], info["t0_ns"])  # noqa: E731
    stored = (lambda t: rec(t)) if norm else (lambda t: rec(t) - epoch)
    strings = _Strings()
    for k in CATALOG:
        strings(k.demangled), strings(k.short), strings(k.mangled)
    for s in RUNTIME_NAMES + NVTX_STRINGS + THREAD_NAMES:
        strings(s)
    gpid, gtid = info["global_pid"], info["global_tid"]
    shuf = _rng(seed, 5, r) if args["shuffle_rows"] else None

    def order(key):
        # start order (stable), or a seeded permutation for --shuffle-rows
        return shuf.permutation(len(key)) if shuf is not None else np.argsort(key, kind="stable")

    db = sqlite3.connect(path)
    db.execute("PRAGMA journal_mode=OFF")
    db.execute("PRAGMA synchronous=OFF")
    db.execute("BEGIN")
    for sql in ddl.values():
        db.execute(sql)

    # --- launch order: correlationIds follow the host's call order
    lstart = p["start"] - p["lead"]
    lo = np.argsort(lstart, kind="stable")
    corr = np.empty(len(lo), np.int64)
    corr[lo] = 4_000 + np.arange(len(lo))
    is_k = p["kind"] != K_COPY
    kidx = np.flatnonzero(is_k)
    grid_id = np.empty(len(lo), np.int64)
    grid_id[lo] = 1_000 + np.arange(len(lo))

    # --- kernels
    ko = kidx[order(p["start"][kidx])]
    sp = p["spec"][ko]
    kk = p["kind"][ko]
    cat = CATALOG
    col = lambda f: np.array([f(k) for k in cat], dtype=object)[sp].tolist()  # noqa: E731
    stream = np.where(kk == K_NCCL, STREAM_NCCL, np.where(kk == K_SIDE, STREAM_SIDE, STREAM_COMPUTE))
    gridx = np.array([k.grid[0] for k in cat])[sp]
    gridx = np.where(kk == K_NCCL, info["nccl_channels"], gridx)
    n_k = len(ko)
    kcols = ["start", "end", "deviceId", "contextId", "greenContextId", "streamId", "correlationId",
             "globalPid", "demangledName", "shortName", "mangledName", "launchType", "cacheConfig",
             "registersPerThread", "gridX", "gridY", "gridZ", "blockX", "blockY", "blockZ",
             "staticSharedMemory", "dynamicSharedMemory", "localMemoryPerThread", "localMemoryTotal",
             "gridId", "sharedMemoryExecuted", "graphNodeId", "sharedMemoryLimitConfig"]
    kdata = [stored(p["start"][ko]).tolist(), stored(p["end"][ko]).tolist(), [info["device"]] * n_k,
             [CONTEXT_ID] * n_k, [0] * n_k, stream.tolist(), corr[ko].tolist(), [gpid] * n_k,
             [strings.ids[d] for d in col(lambda k: k.demangled)],
             [strings.ids[s] for s in col(lambda k: k.short)],
             [strings.ids[s] for s in col(lambda k: k.mangled)],
             [1] * n_k, [1] * n_k, col(lambda k: k.regs), gridx.tolist(),
             col(lambda k: k.grid[1]), col(lambda k: k.grid[2]),
             col(lambda k: k.block[0]), col(lambda k: k.block[1]), col(lambda k: k.block[2]),
             col(lambda k: k.static_smem), col(lambda k: k.dyn_smem), [0] * n_k, [250_871_808] * n_k,
             grid_id[ko].tolist(), col(lambda k: k.smem_exec), [None] * n_k, [1] * n_k]
    if ver == "2026.2":
        kcols += ["qmdBulkReleaseDone", "qmdPreexitDone", "qmdLastCtaDone", "graphId", "clusterX",
                  "clusterY", "clusterZ", "clusterSchedulingPolicy", "maxPotentialClusterSize",
                  "maxActiveClusters", "sharedMemoryRequestedPercentage", "tensorSizeMinusOneElements"]
        clus = col(lambda k: k.cluster)
        kdata += [[None] * n_k] * 4 + [[c[0] for c in clus], [c[1] for c in clus], [c[2] for c in clus],
                                       [1] * n_k, [8 if c[0] else 0 for c in clus],
                                       [66 if c[0] else 0 for c in clus], [None] * n_k, ["[]"] * n_k]
    _insert(db, "CUPTI_ACTIVITY_KIND_KERNEL", kcols, zip(*kdata))

    # --- memcpys
    cidx = np.flatnonzero(~is_k)
    co = cidx[order(p["start"][cidx])]
    n_c = len(co)
    mcols = ["start", "end", "deviceId", "contextId", "greenContextId", "streamId", "correlationId",
             "globalPid", "bytes", "copyKind", "srcKind", "dstKind"]
    mdata = [stored(p["start"][co]).tolist(), stored(p["end"][co]).tolist(), [info["device"]] * n_c,
             [CONTEXT_ID] * n_c, [0] * n_c, [STREAM_COMPUTE] * n_c, corr[co].tolist(), [gpid] * n_c,
             [COPY_BYTES] * n_c, [1] * n_c, [1] * n_c, [2] * n_c]  # H2D, pinned -> device
    if ver == "2026.2":
        mcols.append("copyCount")
        mdata.append([1] * n_c)
    _insert(db, "CUPTI_ACTIVITY_KIND_MEMCPY", mcols, zip(*mdata))

    # --- runtime calls
    ro = order(lstart)
    name = np.where(p["kind"] == K_NCCL, strings.ids["cuLaunchKernelEx"],
                    np.where(p["kind"] == K_COPY, strings.ids["cudaMemcpyAsync_v3020"],
                             strings.ids["cudaLaunchKernel_v7000"]))
    n_r = len(ro)
    rdata = [stored(lstart[ro]).tolist(), stored(lstart[ro] + p["call"][ro]).tolist(),
             (p["kind"][ro] == K_NCCL).astype(np.int64).tolist(),  # driver API = eventClass 1
             [gtid] * n_r, corr[ro].tolist(), name[ro].tolist(), [0] * n_r]
    _insert(db, "CUPTI_ACTIVITY_KIND_RUNTIME",
            ["start", "end", "eventClass", "globalTid", "correlationId", "nameId", "returnValue"], zip(*rdata))

    # --- NVTX (true times in nvtx; names either inline text or via textId)
    nv = sorted(nvtx, key=lambda e: e[0]) if shuf is None else [nvtx[i] for i in shuf.permutation(len(nvtx))]
    n_st = stored(np.array([e[0] for e in nv], np.int64)).tolist()
    n_en = stored(np.array([e[1] if e[1] is not None else 0 for e in nv], np.int64)).tolist()
    nrows = []
    for e, s, en in zip(nv, n_st, n_en):
        _, t_end, etype, text, reg, dom = e
        nrows.append((s, en if t_end is not None else None, etype, text,
                      strings.ids[reg] if reg else None, gtid, dom))
    _insert(db, "NVTX_EVENTS", ["start", "end", "eventType", "text", "textId", "globalTid", "domainId"], nrows)

    # --- identity, metadata
    _insert(db, "PROCESSES", ["globalPid", "pid", "name"], [(gpid, info["pid"], "python3")])
    _insert(db, "ThreadNames", ["nameId", "priority", "globalTid"],
            [(strings.ids["python3"], 20, gtid), (strings.ids["pt_nccl_watchdg"], 20, gpid | (info["pid"] + 97))])
    sess_cols = ["utcEpochNs", "utcTime", "localTime"]
    sess = [epoch, _iso(epoch), _iso(epoch)]
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
    env = {"RANK": r, "LOCAL_RANK": info["local_rank"], "WORLD_SIZE": args["ranks"],
           "LOCAL_WORLD_SIZE": info["gpus_on_host"], "GROUP_RANK": info["host_index"],
           "MASTER_ADDR": "node0", "MASTER_PORT": 29500, "HOSTNAME": host,
           "CUDA_VISIBLE_DEVICES": ",".join(str(d) for d in range(info["gpus_on_host"])),
           "NCCL_ALGO": "Ring"}
    cap += [("PROCESS_0:ENVIRONMENT_VARIABLE", f'{k}="{v}"') for k, v in env.items()]
    cap += [("PROFILING_SESSION_UUID", info["session_uuid"]), ("START_TRIGGER", "Immediate")]
    _insert(db, "META_DATA_CAPTURE", ["name", "value"], cap)
    exp_time = epoch + 30 * 10**9
    meta = [("EXPORT_PRODUCT_NAME", "NVIDIA Nsight Systems"), ("EXPORT_PRODUCT_VERSION", EXPORT_VERSIONS[ver]["product"]),
            ("EXPORT_PRODUCT_DATE", ver), ("EXPORT_SCHEMA_VERSION", EXPORT_VERSIONS[ver]["schema"])]
    major, minor, micro = EXPORT_VERSIONS[ver]["schema"].split(".")
    meta += [("EXPORT_SCHEMA_VERSION_MAJOR", major), ("EXPORT_SCHEMA_VERSION_MINOR", minor),
             ("EXPORT_SCHEMA_VERSION_MICRO", micro), ("EXPORT_SCHEMA_VERSION_CKSUM", EXPORT_VERSIONS[ver]["cksum"]),
             ("EXPORT_PLATFORM", "linux-desktop"), ("EXPORT_ARCH", "x64"), ("EXPORT_TIME_UTC", _iso(exp_time)),
             ("EXPORT_HOST", host), ("EXPORT_PARAM_INPUT_FILE", f"rep_{r}.nsys-rep"),
             ("EXPORT_PARAM_OUTPUT_FILE", f"rep_{r}.sqlite"), ("EXPORT_PARAM_OVERWRITE", "false"),
             ("EXPORT_PARAM_LAZY", "true"), ("EXPORT_PARAM_INCLUDE_BLOBS", "false"),
             ("EXPORT_PARAM_TIME_NORMALIZE", "true" if norm else "false"), ("EXPORT_PARAM_TIME_SHIFT", "0"),
             ("EXPORT_CONFIG_TIME_SHIFT", str(epoch if norm else 0))]
    if ver == "2026.2":
        meta.append(("EXPORT_PARAM_USE_SHUFFLE", "true"))
    meta.append(("GENERATED_BY", f"{SCRIPT} {_args_text(args)}"))
    _insert(db, "META_DATA_EXPORT", ["name", "value"], meta)
    _insert(db, "StringIds", ["id", "value"], strings.rows())
    db.commit()
    db.execute("VACUUM")
    db.close()
    return {"kernels": n_k, "nccl_kernels": int((kk == K_NCCL).sum()), "memcpys": n_c, "runtime_calls": n_r,
            "nvtx_events": len(nrows), "nvtx_ranges": sum(1 for e in nvtx if e[2] == 59),
            "strings": len(strings.ids)}


def _args_text(args):
    """The generating arguments as a command-line tail (no OUT_DIR: files must not depend on it)."""
    a = [f"--seed {args['seed']}", f"--scenario {args['scenario']}", f"--ranks {args['ranks']}",
         f"--hosts {args['hosts']}", f"--steps {args['steps']}", f"--kernels-per-step {args['kernels_per_step']}",
         f"--buckets {args['buckets']}", f"--drift-ppm {args['drift_ppm']}", f"--nsys-version {args['nsys_version']}",
         f"--contention-ranks {args['contention_ranks']}"]
    a += ["--normalized-time"] if args["normalized_time"] else []
    a += ["--shuffle-rows"] if args["shuffle_rows"] else []
    a += [f"--format {args['format']}"] if "format" in args else []
    a += ["--kineto-base-boundary"] if args.get("kineto_base_boundary") else []
    return " ".join(a)


def _boundary_t0(session_rel, host_of, offsets, drifts):
    """--kineto-base-boundary: the t0 that puts a Kineto base-time block boundary inside the largest gap
    between the ranks' program starts (each on its own clock), so ranks on either side of it get
    baseTimeNanoseconds one block apart. The boundary is the first one after T0_NS."""
    rel = np.sort([int(_clock(session_rel[r], offsets[h], drifts[h], 0)) for r, h in enumerate(host_of)])
    gaps = np.diff(rel)
    at = int(np.argmax(gaps))
    if gaps[at] < 2:
        raise ValueError("the ranks' program starts coincide: no block boundary fits between them (change --seed)")
    boundary = (T0_NS // KINETO_BLOCK_NS + 1) * KINETO_BLOCK_NS
    return int(boundary - (rel[at] + gaps[at] // 2))


def _kineto_truth(rank_truth, args):
    bases = sorted({r["base_time_ns"] for r in rank_truth})
    return {"block_ns": KINETO_BLOCK_NS, "base_boundary": bool(args.get("kineto_base_boundary")),
            "boundary_ns": bases[-1] if len(bases) > 1 else None, "base_time_ns": bases,
            "collective_name": KINETO_COLLECTIVE, "dtype": KINETO_DTYPE,
            "launch_calls": {k: KINETO_LAUNCH[kind][1]
                             for k, kind in (("compute", K_COMPUTE), ("copy", K_COPY), ("nccl", K_NCCL))}}


def _us(ns):
    """Kineto's time text: integer us, '.', three digits of ns."""
    assert ns >= 0, "an event before its rank's baseTimeNanoseconds"
    return f"{ns // 1000}.{ns % 1000:03d}"


def _kx(cat, name, pid, tid, ts, dur, args):
    """One complete ("X") event, laid out as Kineto's ChromeTraceLogger::handleActivity writes it."""
    return ('  {\n    "ph": "X", "cat": "%s", "name": %s, "pid": %s, "tid": %s,\n    "ts": %s, "dur": %s,\n'
            '    "args": {\n      %s\n    }\n  }'
            % (cat, json.dumps(name), pid, tid, _us(ts), _us(dur), json.dumps(args)[1:-1]))


def _kflow(ph, flow_id, pid, tid, ts):
    """The "ac2g" flow event tying a launch (ph "s") to its GPU activity (ph "f")."""
    bp = ', "bp": "e"' if ph == "f" else ""
    return ('  {\n    "ph": "%s", "id": %d, "pid": %s, "tid": %s, "ts": %s,\n    "cat": "ac2g", "name": "ac2g"%s\n  }'
            % (ph, flow_id, pid, tid, _us(ts), bp))


def _kmeta(name, pid, tid, ts, key, value):
    return ('  {\n    "name": "%s", "ph": "M", "ts": %s, "pid": %s, "tid": %s,\n'
            '    "args": {\n      "%s": %s\n    }\n  }' % (name, _us(ts), pid, tid, key, json.dumps(value)))


def _write_kineto_rank(path, r, info, p, nvtx, nbytes, seed, args):
    """Write one rank's PyTorch profiler trace, gzip-compressed. Returns its event counts.

    The same ops, launches and ranges as the nsys export of the rank (same true times, same clock),
    as Kineto writes them: CPU events on (pid, tid), GPU events on (device, stream), ts in us
    relative to the rank's baseTimeNanoseconds."""
    base = info["base_time_ns"]
    rec = lambda t: _clock(t, info["offset_ns"], info["drift_ppm"], info["t0_ns"])  # noqa: E731
    pid = tid = info["pid"]
    dev = info["device"]
    ranks = args["ranks"]
    kind, spec = p["kind"], p["spec"]
    lstart = p["start"] - p["lead"]
    lend = lstart + p["call"]
    lo = np.argsort(lstart, kind="stable")
    corr = np.empty(len(lo), np.int64)
    corr[lo] = 4_000 + np.arange(len(lo))  # CUPTI correlation ids, as in the nsys export
    nccl = np.flatnonzero(kind == K_NCCL)  # program order = collective order
    group = {"Group size": ranks, "dtype": KINETO_DTYPE, "In split size": "[]", "Out split size": "[]",
             "Process Group Name": "0", "Process Group Description": "default_pg",
             "Process Group Ranks": "[" + ", ".join(map(str, range(ranks))) + "]"}

    # --- CPU side: (true start, true end, cat, name, args, launched op or -1)
    cpu = [(int(lstart[i]) - 700, int(lend[i]) + 400, "cpu_op",
            "aten::copy_" if kind[i] == K_COPY else ATEN_OP[int(spec[i])], {}, int(i))
           for i in np.flatnonzero(kind != K_NCCL)]
    seq = 0
    for s, e, etype, text, reg, _ in nvtx:
        if etype != 59 or reg == "ncclCommInitRank":
            continue  # NCCL's own NVTX (domain create, init) is not in a Kineto trace
        if text == "nccl:all_reduce":  # PyTorch's c10d op: record_param_comms around the launch
            n = int(nbytes[seq]) // 2
            comms = {"Collective name": KINETO_COLLECTIVE, "dtype": KINETO_DTYPE, "In msg nelems": n,
                     "Out msg nelems": n, **group, "Global rank start": 0, "Global rank stride": 1,
                     "Rank": r, "Seq": seq + 1}
            cpu.append((s, e, "cpu_op", "record_param_comms", comms, int(nccl[seq])))
            seq += 1
        else:  # ncclAllReduce's span: ProcessGroupNCCL's record_function range; the rest by name
            cpu.append((s, e, "user_annotation", "nccl:all_reduce" if reg == "ncclAllReduce" else text or reg, {}, -1))
    cpu.sort(key=lambda c: (c[0], -c[1]))  # outer ranges first
    ext_of = {}
    c_ts = rec(np.array([c[0] for c in cpu], np.int64)) - base
    c_te = rec(np.array([c[1] for c in cpu], np.int64)) - base
    cpu_events = []
    for n, (c, ts, te) in enumerate(zip(cpu, c_ts.tolist(), c_te.tolist())):
        ext = n + 1
        if c[5] >= 0:
            ext_of[c[5]] = ext
        a = {"External id": ext, "Record function id": 0, "Ev Idx": n, **c[4]}
        cpu_events.append((ts, _kx(c[2], c[3], pid, tid, ts, te - ts, a)))

    # --- launches and GPU activities (CUPTI records), each with its flow event
    r_ts = (rec(lstart) - base).tolist()
    r_te = (rec(lend) - base).tolist()
    g_ts = (rec(p["start"]) - base).tolist()
    g_te = (rec(p["end"]) - base).tolist()
    stream = np.where(kind == K_NCCL, STREAM_NCCL, np.where(kind == K_SIDE, STREAM_SIDE, STREAM_COMPUTE)).tolist()
    gpu_events = []
    n_sm = 132
    for i in range(len(kind)):
        k, c, ext = int(kind[i]), int(corr[i]), ext_of[i]
        cat, name, cbid = KINETO_LAUNCH[k]
        gpu_events.append((r_ts[i], _kx(cat, name, pid, tid, r_ts[i], r_te[i] - r_ts[i],
                                        {"External id": ext, "cbid": cbid, "correlation": c})))
        gpu_events.append((r_ts[i], _kflow("s", c, pid, tid, r_ts[i])))
        dur = g_te[i] - g_ts[i]
        if k == K_COPY:
            a = {"External id": ext, "device": dev, "context": CONTEXT_ID, "stream": stream[i], "correlation": c,
                 "bytes": COPY_BYTES, "memory bandwidth (GB/s)": round(COPY_BYTES / max(dur, 1), 6)}
            gpu_events.append((g_ts[i], _kx("gpu_memcpy", KINETO_MEMCPY, dev, stream[i], g_ts[i], dur, a)))
        else:
            kern = CATALOG[int(spec[i])]
            grid = (info["nccl_channels"] if k == K_NCCL else kern.grid[0], kern.grid[1], kern.grid[2])
            blocks = grid[0] * grid[1] * grid[2]
            warps_per_block = -(-(kern.block[0] * kern.block[1] * kern.block[2]) // 32)
            warps = blocks * warps_per_block / n_sm
            resident = min(warps, 64, 65_536 // max(kern.regs * 32, 1))
            a = {"External id": ext, "queued": 0, "device": dev, "context": CONTEXT_ID, "stream": stream[i],
                 "correlation": c, "registers per thread": kern.regs,
                 "shared memory": kern.static_smem + kern.dyn_smem, "blocks per SM": round(blocks / n_sm, 6),
                 "warps per SM": round(warps, 6), "grid": list(grid), "block": list(kern.block),
                 "est. achieved occupancy %": int(round(100 * resident / 64))}
            if k == K_NCCL:  # Kineto copies the linked record_param_comms' collective into the kernel's args
                j = int(np.searchsorted(nccl, i))
                n = int(nbytes[j]) // 2
                a.update({"Collective name": KINETO_COLLECTIVE, "In msg nelems": n, "Out msg nelems": n, **group})
            gpu_events.append((g_ts[i], _kx("kernel", kern.demangled, dev, stream[i], g_ts[i], dur, a)))
        gpu_events.append((g_ts[i], _kflow("f", c, dev, stream[i], g_ts[i])))
    gpu_events.sort(key=lambda e: e[0])
    body = [e for _, e in cpu_events] + [e for _, e in gpu_events]
    if args["shuffle_rows"]:
        body = [body[i] for i in _rng(seed, 5, r).permutation(len(body))]

    # --- the profiler's span, process and thread names, the window end
    first = min(int(c_ts.min()), min(r_ts)) - 500 * US
    last = max(int(c_te.max()), max(g_te)) + 500 * US
    span = ['  {\n    "ph": "X", "cat": "Trace", "ts": %s, "dur": %s,\n    "pid": "Spans", "tid": "PyTorch Profiler",\n'
            '    "name": "PyTorch Profiler (0)",\n    "args": {\n      "Op count": 0\n    }\n  }'
            % (_us(first), _us(last - first)),
            _kmeta("process_sort_index", '"Spans"', 0, first, "sort_index", 0x20000000),
            '  {\n    "name": "Iteration Start: PyTorch Profiler", "ph": "i", "s": "g",\n'
            '    "pid": "Traces", "tid": "Trace PyTorch Profiler", "ts": %s\n  }' % _us(first)]
    meta = [_kmeta("process_name", pid, 0, first, "name", "python3"),
            _kmeta("process_labels", pid, 0, first, "labels", "CPU"),
            _kmeta("process_sort_index", pid, 0, first, "sort_index", pid)]
    for d in range(info["gpus_on_host"]):
        meta += [_kmeta("process_name", d, 0, first, "name", "python3"),
                 _kmeta("process_labels", d, 0, first, "labels", f"GPU {d}"),
                 _kmeta("process_sort_index", d, 0, first, "sort_index", 0x1000000 + d)]
    for st in sorted(set(stream)):
        meta += [_kmeta("thread_name", dev, st, first, "name", f"stream {st} "),
                 _kmeta("thread_sort_index", dev, st, first, "sort_index", st)]
    meta += [_kmeta("thread_name", pid, tid, first, "name", f"thread {tid} (python3)"),
             _kmeta("thread_sort_index", pid, tid, first, "sort_index", tid)]
    end = ('  {\n    "name": "Record Window End", "ph": "i", "s": "g",\n    "pid": "", "tid": "", "ts": %s\n  }'
           % _us(last))
    events = span + body + meta + [end]

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
    dist = {"backend": "nccl", "rank": r, "world_size": ranks, "pg_count": 1,
            "pg_config": [{"pg_name": "0", "pg_desc": "default_pg", "backend_config": "cuda:nccl", "pg_size": ranks,
                           "ranks": list(range(ranks))}], "nccl_version": "2.21.5"}
    metadata = {"cupti_version": 24, "cuda_runtime_version": 12040, "cuda_driver_version": 12040,
                "distributedInfo": dist, "generated_by": f"{SCRIPT} {_args_text(args)}"}
    token = "".join(_rng(seed, 10, r).choice(list("abcdefghijklmnopqrstuvwxyz0123456789_"), 8))
    text = ("\n{\n  \"schemaVersion\": %d,\n  \"deviceProperties\": [\n%s\n  ],%s\n  \"traceEvents\": [\n%s\n  ],\n"
            "  \"traceName\": \"/tmp/tmp%s.json\",\n  \"displayTimeUnit\": \"ms\",\n  \"baseTimeNanoseconds\": %d\n}"
            % (KINETO_SCHEMA, ",\n".join(props),
               "".join(f"\n  {json.dumps(k)}: {json.dumps(v)}," for k, v in metadata.items()),
               ",\n".join(events), token, base))
    Path(path).write_bytes(gzip.compress(text.encode(), compresslevel=6, mtime=0))
    n_ua = sum(1 for c in cpu if c[2] == "user_annotation")
    n_comms = len(nccl)
    return {"kernels": int((kind != K_COPY).sum()), "nccl_kernels": n_comms, "memcpys": int((kind == K_COPY).sum()),
            "runtime_calls": len(kind), "driver_calls": n_comms, "cpu_ops": len(cpu) - n_ua,
            "record_param_comms": n_comms, "user_annotations": n_ua, "nvtx_ranges": n_ua + n_comms,
            "trace_events": len(events)}


def _nvtx_events(p, rank, seed):
    """NVTX rows for one rank as (start, end, eventType, text, registered name, domainId), true rel ns."""
    rng = _rng(seed, 9, rank)
    ev = []
    init = -600 * MS + int(rng.integers(0, 2 * MS))
    ev.append((init - 30 * US, None, 75, "NCCL", None, NCCL_DOMAIN_ID))
    ev.append((init, init + 350 * MS + int(rng.integers(0, MS)), 59, None, "ncclCommInitRank", NCCL_DOMAIN_ID))
    lstart = p["start"] - p["lead"]
    lend = lstart + p["call"]
    # NCCL API ranges around each NCCL launch, inside PyTorch's record_function range
    for i in np.flatnonzero(p["kind"] == K_NCCL):
        s, e = int(lstart[i]), int(lend[i])
        ev.append((s - 2_500, e + 1_200, 59, "nccl:all_reduce", None, 0))
        ev.append((s - 1_500, e + 800, 59, None, "ncclAllReduce", NCCL_DOMAIN_ID))
    # the data loader before each step's first copy; ProfilerStep#N from it to the next one
    first = np.flatnonzero(p["first_of_step"])
    dl = [(int(lstart[i]) - int(p["gap"][i]) + 10 * US, int(lstart[i]) - 1 * US) for i in first]
    for s, e in dl:
        ev.append((s, e, 59, None, DATALOADER, 0))
    tail = int(lend.max()) + 5 * US
    for n, (s, _) in enumerate(dl):
        e = dl[n + 1][0] - 2 * US if n + 1 < len(dl) else tail
        ev.append((s - 1 * US, e, 59, f"ProfilerStep#{n}", None, 0))
    # late launch: the main thread sits in the data loader while the GPU idles
    li = p["late_idx"]
    if len(li):
        prev = li - 1
        for a, b in zip(prev, li):
            ev.append((int(lend[a]) + 2 * US, int(lstart[b]) - 1 * US, 59, None, DATALOADER, 0))
    return ev


def generate(out_dir, ranks=8, hosts=2, steps=10, kernels_per_step=64, buckets=4, scenario="mixed", seed=0,
             normalized_time=False, shuffle_rows=False, drift_ppm=0.0, nsys_version="2024.5",
             contention_ranks="one", force=False, format="nsys", kineto_base_boundary=False):  # noqa: A002
    """Write rep_<rank>.sqlite (format "nsys") or rank_<rank>.json.gz (format "kineto") for every
    rank and truth.json into out_dir; return the truth."""
    if format not in FORMATS:
        raise ValueError(f"unknown format {format!r}; one of {', '.join(FORMATS)}")
    if format == "kineto" and (normalized_time or nsys_version != "2024.5"):
        raise ValueError("--normalized-time and --nsys-version apply to nsys exports only "
                         "(Kineto writes ts relative to baseTimeNanoseconds)")
    if scenario not in SCENARIOS:
        raise ValueError(f"unknown scenario {scenario!r}; one of {', '.join(SCENARIOS)}")
    if nsys_version not in EXPORT_VERSIONS:
        raise ValueError(f"unknown nsys version {nsys_version!r}; one of {', '.join(EXPORT_VERSIONS)}")
    if contention_ranks not in ("one", "all"):
        raise ValueError("contention_ranks must be 'one' or 'all'")
    if ranks < 2 or not 1 <= hosts <= ranks:
        raise ValueError("need ranks >= 2 and 1 <= hosts <= ranks")
    if steps < 1 or kernels_per_step < 12 or buckets < 1:
        raise ValueError("need steps >= 1, kernels_per_step >= 12, buckets >= 1")
    if scenario in ("contention", "mixed") and steps < 2:
        raise ValueError(f"scenario {scenario} needs steps >= 2")
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise FileExistsError(f"{out} exists and is not a directory")
    if out.exists() and any(out.iterdir()) and not force:
        raise FileExistsError(f"{out} is not empty (use --force to overwrite)")
    out.mkdir(parents=True, exist_ok=True)
    # --force: no leftovers of an older set, of either format
    for stale in [*out.glob("rep_*.sqlite"), *out.glob("rank_*.json.gz"), out / "truth.json"]:
        stale.unlink(missing_ok=True)
    args = {"ranks": ranks, "hosts": hosts, "steps": steps, "kernels_per_step": kernels_per_step,
            "buckets": buckets, "scenario": scenario, "seed": seed, "normalized_time": normalized_time,
            "shuffle_rows": shuffle_rows, "drift_ppm": float(drift_ppm), "nsys_version": nsys_version,
            "contention_ranks": contention_ranks}
    # The newer options join params only when not at their defaults: earlier sets stay byte-identical.
    if format != "nsys":
        args["format"] = format
    if kineto_base_boundary:
        args["kineto_base_boundary"] = True

    host_of, local_of, sizes = _layout(ranks, hosts)
    template, b_eff = _step_template(kernels_per_step, buckets)
    n_coll = steps * b_eff
    coll_step = np.arange(n_coll) // b_eff
    coll_bucket = np.arange(n_coll) % b_eff
    plan = _plan(scenario, ranks, steps, seed, contention_ranks)

    # clocks, identities
    rng = _rng(seed, 3)
    offsets = [0] + [int(rng.choice([-1, 1]) * rng.integers(500 * US, 8 * MS)) for _ in range(1, hosts)]
    drifts = [0.0] + [float(drift_ppm) * (1 if h % 2 else -1) + 0.0 for h in range(1, hosts)]  # + 0.0: no -0.0
    session_rel = -1_800 * MS + rng.integers(0, 6 * MS, ranks)  # each rank's nsys starts a few ms apart
    t0 = _boundary_t0(session_rel, host_of, offsets, drifts) if kineto_base_boundary else T0_NS
    misc = _rng(seed, 6)
    pid_base = int(misc.integers(100, 400))
    host_uuids = [[str(uuid.UUID(bytes=misc.bytes(16), version=4)) for _ in range(n)] for n in sizes]
    session_uuids = [str(uuid.UUID(bytes=misc.bytes(16), version=4)) for _ in range(ranks)]

    # transfers
    busbw = 40e9 if hosts > 1 else 180e9
    nbytes = np.array([_bucket_bytes(b, b_eff) for b in coll_bucket], np.int64)
    x_base = np.rint(20 * US + nbytes * 2 * (ranks - 1) / ranks / busbw * 1e9).astype(np.int64)
    factor = np.ones(n_coll)
    if "contention" in plan:
        factor[plan["contention"]["steps"][coll_step]] = CONTENTION_FACTOR

    progs = [_rank_program(r, template, steps, plan, seed) for r in range(ranks)]
    arrival, end, x = _simulate(progs, ranks, n_coll, x_base, factor, seed)
    _add_side_kernels(progs, plan, arrival, x, coll_step, seed)

    # ---- files
    ddl = dict(DDL_2024_5)
    if nsys_version == "2026.2":
        ddl.update(DDL_2026_2_CHANGED)
    rank_truth = []
    for r in range(ranks):
        h = host_of[r]
        pid = pid_base + local_of[r]
        gpid = GLOBAL_VID | (pid << 24)
        info = {"host": f"node{h}", "host_index": h, "local_rank": local_of[r], "device": local_of[r],
                "gpus_on_host": sizes[h], "pid": pid, "global_pid": gpid, "global_tid": gpid | pid,
                "offset_ns": offsets[h], "drift_ppm": drifts[h], "t0_ns": t0,
                "utc_epoch_ns": int(_clock(session_rel[r], offsets[h], drifts[h], t0)),
                "system_clock_ns": 28_254_349_605 + int(session_rel[r] % 10**9),
                "gpu_uuids": host_uuids[h], "session_uuid": session_uuids[r],
                "nccl_channels": 16 if hosts > 1 else 32}
        nvtx = _nvtx_events(progs[r], r, seed)
        if format == "kineto":
            # Kineto's base: the wall clock at program load (this rank's own clock), floored to a block
            info["base_time_ns"] = info["utc_epoch_ns"] - info["utc_epoch_ns"] % KINETO_BLOCK_NS
            name = f"rank_{r}.json.gz"
            counts = _write_kineto_rank(out / name, r, info, progs[r], nvtx, nbytes, seed, args)
            rank_truth.append({"rank": r, "host": info["host"], "local_rank": local_of[r], "pid": pid, "tid": pid,
                               "device": info["device"], "file": name, "utc_epoch_ns": info["utc_epoch_ns"],
                               "base_time_ns": info["base_time_ns"], **counts})
            continue
        counts = _write_rank(out / f"rep_{r}.sqlite", r, info, progs[r], nvtx, seed, args, nsys_version, ddl)
        rank_truth.append({"rank": r, "host": info["host"], "local_rank": local_of[r], "pid": pid,
                           "device": info["device"], "global_pid": gpid, "global_tid": info["global_tid"],
                           "file": f"rep_{r}.sqlite", "utc_epoch_ns": info["utc_epoch_ns"], **counts})

    truth = _truth(args, b_eff, plan, progs, arrival, end, x, x_base, factor, nbytes, coll_step, coll_bucket,
                   host_of, offsets, drifts, rank_truth, t0)
    (out / "truth.json").write_text(json.dumps(truth, indent=1) + "\n")
    return truth


def _truth(args, b_eff, plan, progs, arrival, end, x, x_base, factor, nbytes, coll_step, coll_bucket,
           host_of, offsets, drifts, rank_truth, t0=T0_NS):
    ranks, n_coll = arrival.shape
    # planted lateness per (rank, collective): the planted ns in the segment the collective closes
    planted = {}
    for r, p in enumerate(progs):
        sel = (p["extra"] > 0) & (p["seg"] < n_coll) & (p["kind"] != K_SIDE)
        for typ, mask in _cause_masks(plan, r, p).items():
            m = sel & mask
            if m.any():
                per = np.zeros(n_coll, np.int64)
                np.add.at(per, p["seg"][m], p["extra"][m])
                planted[(typ, r)] = per
    last = arrival.max(axis=0)
    straggler = arrival.argmax(axis=0)
    ref = np.floor(np.median(arrival, axis=0)).astype(np.int64)
    wait = last[None, :] - arrival
    colls = []
    for j in range(n_coll):
        pl = [{"type": t, "rank": r, "ns": int(v[j])} for (t, r), v in sorted(planted.items()) if v[j] > 0]
        if factor[j] != 1.0:
            c = plan["contention"]
            pl.append({"type": "contention", "rank": c["rank"], "ns": int(x[j] - x_base[j])})
        colls.append({"seq": j, "step": int(coll_step[j]), "bucket": int(coll_bucket[j]), "op": "AllReduce",
                      "kernel": NCCL.short, "dtype": "bf16", "bytes": int(nbytes[j]),
                      "arrival_ns": (t0 + arrival[:, j]).tolist(), "end_ns": (t0 + end[:, j]).tolist(),
                      "last_arrival_ns": int(t0 + last[j]), "straggler_rank": int(straggler[j]),
                      "ref_arrival_ns": int(t0 + ref[j]), "skew_ns": int(last[j] - ref[j]),
                      "wait_ns": wait[:, j].tolist(), "wait_cost_ns": int(wait[:, j].sum()),
                      "base_transfer_ns": int(x_base[j]), "transfer_ns": int(x[j]),
                      "slowed": bool(factor[j] != 1.0), "slowdown_factor": float(factor[j]), "planted": pl})

    causes = []
    for typ, c in plan.items():
        steps_list = np.flatnonzero(c["steps"]).tolist()
        if typ == "contention":
            js = np.flatnonzero(factor != 1.0)
            extra_x = (x - x_base)[js]
            causes.append({"type": typ, "rank": c["rank"], "ranks": c["ranks"], "kernel": CONTEND.short,
                           "stream": STREAM_SIDE, "factor": CONTENTION_FACTOR, "steps": steps_list,
                           "collectives": js.tolist(), "extra_transfer_ns": extra_x.tolist(),
                           "contention_ns_total": int(extra_x.sum() * ranks),
                           "expected": {"collectives_slowed": len(js), "extra_transfer_ns": int(extra_x.sum())}})
            continue
        r = c["rank"]
        per = planted.get((typ, r), np.zeros(n_coll, np.int64))
        js = np.flatnonzero(per > 0)
        p = progs[r]
        mask = _cause_masks(plan, r, p)[typ] & (p["extra"] > 0)
        per_step = np.zeros(args["steps"], np.int64)
        np.add.at(per_step, p["step"][mask], p["extra"][mask])
        d = {"type": typ, "rank": r, "steps": steps_list, "collectives": js.tolist()}
        if typ == "slow_kernel":
            occ = int(sum(1 for op in _step_template(args["kernels_per_step"], args["buckets"])[0]
                          if op[1] == SPEC[SLOW_KERNEL]))
            d.update({"kernel": SLOW_KERNEL.short, "kernel_demangled": SLOW_KERNEL.demangled,
                      "stream": STREAM_COMPUTE, "factor": SLOW_FACTOR, "occurrences_per_step": occ})
        elif typ == "extra_kernel":
            d.update({"kernel": INDEX_PUT.short, "kernel_demangled": INDEX_PUT.demangled, "stream": STREAM_COMPUTE,
                      "kernel_ns_per_step": _per_step(p, mask, "dur", args["steps"]).tolist()})
        elif typ == "late_launch":
            late = CATALOG[int(p["spec"][p["late_idx"][0]])]
            d.update({"kernel": late.short, "kernel_demangled": late.demangled, "nvtx": DATALOADER,
                      "bucket": 0, "delay_ns_per_step": per_step.tolist()})
        d["extra_ns_per_step"] = per_step.tolist()
        d["extra_ns_total"] = int(per_step.sum())
        hit = js[straggler[js] == r]
        d["expected"] = {"collectives_delayed": len(hit), "lateness_ns": int(per[hit].sum()),
                         "skew_ns": int((last - ref)[hit].sum()), "inflicted_wait_ns": int(wait[:, hit].sum())}
        causes.append(d)

    blocking = [c for c in causes if c["type"] != "contention"]
    top = max(blocking, key=lambda c: c["expected"]["inflicted_wait_ns"], default=None)
    counts = np.bincount(straggler, minlength=ranks)
    kineto = args.get("format") == "kineto"
    head = {"generator": SCRIPT, "format_version": 1}
    if kineto:  # absent for nsys, so that earlier sets stay byte-identical
        head["format"] = "kineto"
    stored = ("stored ts (us, 3 decimals) = (recorded_utc - base_time_ns) / 1000, base_time_ns = utc_epoch_ns "
              f"floored to a {KINETO_BLOCK_NS // 10**9}-second block" if kineto else
              "stored = recorded_utc - utc_epoch_ns (or recorded_utc when time_normalized)")
    return {
        **head, "seed": args["seed"], "scenario": args["scenario"],
        "params": {**args, "buckets_effective": b_eff},
        "export": {"product_version": KINETO_PRODUCT, "schema_version": KINETO_SCHEMA} if kineto else
                  {"product_version": EXPORT_VERSIONS[args["nsys_version"]]["product"],
                   "schema_version": EXPORT_VERSIONS[args["nsys_version"]]["schema"]},
        "t0_ns": t0, "time_normalized": args["normalized_time"],
        "clock_model": "recorded_utc = true + offset_ns + round(drift_ppm * 1e-6 * (true - t0_ns)); " + stored,
        **({"kineto": _kineto_truth(rank_truth, args)} if kineto else {}),
        "streams": {"compute": STREAM_COMPUTE, "nccl": STREAM_NCCL, "side": STREAM_SIDE},
        "hosts": {f"node{h}": {"offset_ns": offsets[h], "drift_ppm": drifts[h],
                               "ranks": [r for r in range(ranks) if host_of[r] == h]} for h in range(len(offsets))},
        "ranks": rank_truth,
        "collectives": colls,
        "causes": causes,
        "expected": {"straggler_counts": counts.tolist(), "top_straggler_rank": int(counts.argmax()),
                     "wait_cost_ns_total": int(wait.sum()), "skew_ns_total": int((last - ref).sum()),
                     "top_cause": None if top is None else
                     {"type": top["type"], "rank": top["rank"], "kernel": top.get("kernel"), "nvtx": top.get("nvtx")}},
    }


def _cause_masks(plan, r, p):
    """Which of rank r's ops carry each blocking cause's planted ns."""
    m = {}
    if "slow_kernel" in plan and plan["slow_kernel"]["rank"] == r:
        m["slow_kernel"] = p["spec"] == SPEC[SLOW_KERNEL]
    if "extra_kernel" in plan and plan["extra_kernel"]["rank"] == r:
        m["extra_kernel"] = p["spec"] == SPEC[INDEX_PUT]
    if "late_launch" in plan and plan["late_launch"]["rank"] == r:
        mm = np.zeros(len(p["kind"]), bool)
        mm[p["late_idx"]] = True
        m["late_launch"] = mm
    return m


def _per_step(p, mask, field, steps):
    out = np.zeros(steps, np.int64)
    np.add.at(out, p["step"][mask], p[field][mask])
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out_dir")
    ap.add_argument("--ranks", type=int, default=8)
    ap.add_argument("--hosts", type=int, default=2)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--kernels-per-step", type=int, default=64)
    ap.add_argument("--buckets", type=int, default=4, help="gradient buckets (all-reduces) per step")
    ap.add_argument("--scenario", choices=SCENARIOS, default="mixed")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--normalized-time", action="store_true", help="store absolute UTC ns (--ts-normalize=true)")
    ap.add_argument("--shuffle-rows", action="store_true", help="write event rows in random order (nsys 2025.6+)")
    ap.add_argument("--drift-ppm", type=float, default=0.0, help="clock drift of hosts other than node0")
    ap.add_argument("--nsys-version", choices=sorted(EXPORT_VERSIONS), default="2024.5")
    ap.add_argument("--contention-ranks", choices=("one", "all"), default="one")
    ap.add_argument("--format", choices=FORMATS, default="nsys",
                    help="nsys: rep_<rank>.sqlite exports; kineto: PyTorch profiler traces rank_<rank>.json.gz")
    ap.add_argument("--kineto-base-boundary", action="store_true",
                    help="start the ranks' programs on either side of a Kineto base-time block boundary, so "
                         "their baseTimeNanoseconds differ by one block (~91 days)")
    ap.add_argument("--force", action="store_true", help="write into a non-empty OUT_DIR")
    a = ap.parse_args(argv)
    try:
        truth = generate(a.out_dir, ranks=a.ranks, hosts=a.hosts, steps=a.steps, kernels_per_step=a.kernels_per_step,
                         buckets=a.buckets, scenario=a.scenario, seed=a.seed, normalized_time=a.normalized_time,
                         shuffle_rows=a.shuffle_rows, drift_ppm=a.drift_ppm, nsys_version=a.nsys_version,
                         contention_ranks=a.contention_ranks, force=a.force, format=a.format,
                         kineto_base_boundary=a.kineto_base_boundary)
    except (ValueError, FileExistsError) as e:
        print(f"generate_fixture: {e}", file=sys.stderr)
        return 2
    n = sum(r["kernels"] for r in truth["ranks"])
    what = "Kineto traces" if a.format == "kineto" else "exports"
    print(f"wrote {len(truth['ranks'])} {what} ({n} kernels, {len(truth['collectives'])} collectives) "
          f"and truth.json to {a.out_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
