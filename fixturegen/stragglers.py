"""Causes that make a whole rank, or one moment of one rank, late (issue 19).

* ``slow_device``: every kernel, copy and memset of one rank runs ``factor`` (U(1.05, 1.10), drawn
  once) times as long, every step: a throttled or faulty GPU, the commonest hardware straggler.
  Removed: every op runs its drawn, un-slowed duration.
* ``api_stall``: a host-bound rank whose CUDA runtime stalls: in every step ``API_STALLS`` of its
  non-blocking calls (cudaLaunchKernel, cuLaunchKernelEx, cudaMemcpyAsync, cudaMemsetAsync,
  cudaEventRecord, cudaStreamWaitEvent), drawn uniformly, each take a lognormal extra (median
  ``API_STALL_NS``, sigma 0.5) inside the call (the real traces' outliers: Megatron's
  cudaLaunchKernel 26 ms, cudaEventRecord 22 ms; DLRM's cudaMemcpyAsync 0.4-1 ms against a 4-5 us
  median). The work the call enqueues starts only after it returns. Removed: the calls take their
  drawn durations.
* ``oneoff_stall``: once (step ``steps // 2``), on one rank, mid-step (after the middle collective
  of the step's c10d calls: mid-backward in DDP), a ``gc.collect`` range no other rank runs, of
  ~``ONEOFF_NS`` pure host time. The host is ahead of the GPU there, so the GPU's queue hides part
  of the stall. Removed: the range is not there.
* ``nested_stall``: once (step 1), on one rank, in the forward pass, nested ranges no other rank
  runs, ``save_checkpoint`` > ``torch.save`` > ``_pickle.dump``, a few us of host time in each
  outer one and ~``NESTED_NS`` in the innermost: one stall under three names. Removed: the ranges
  are not there.

Each draws from its own random stream (causes.plant gives it one), so the base program is unchanged.
"""

from __future__ import annotations

import numpy as np

from .catalog import MS, US
from .program import (
    A_EVENT_RECORD,
    A_LAUNCH,
    A_LAUNCH_EX,
    A_MEMCPY_ASYNC,
    A_MEMSET_ASYNC,
    A_STREAM_WAIT,
    G_D2H,
    G_H2D,
    G_KERNEL,
    G_MEMSET,
)

RANK_CAUSES = ("slow_device", "api_stall", "oneoff_stall", "nested_stall")
# A cause type's slot in the seed's rank order (after causes.RANK_SLOTS' 0-3): distinct from the
# first four types' ranks modulo 4, and from each other.
SLOTS = {"slow_device": 4, "api_stall": 5, "oneoff_stall": 6, "nested_stall": 7}
DEVICE_FACTOR = (1.05, 1.10)
API_STALLS = 3  # stalled calls per step
API_STALL_NS = 1_500 * US
API_STALL_SIGMA = 0.5
API_STALL_CALLS = (A_LAUNCH, A_LAUNCH_EX, A_MEMCPY_ASYNC, A_MEMSET_ASYNC, A_EVENT_RECORD, A_STREAM_WAIT)
ONEOFF_NS = 10 * MS
NESTED_NS = 3 * MS
NESTED_OUTER_NS = (20 * US, 30 * US)  # own host time of save_checkpoint and torch.save
NVTX = {"oneoff_stall": "gc.collect", "nested_stall": "_pickle.dump"}
CONTEXT = {"nested_stall": ["save_checkpoint", "torch.save"]}  # the ranges around the innermost, outermost first


def steps_of(typ, steps):
    """The steps a cause type acts in (bool per step)."""
    st = np.zeros(steps, bool)
    if typ == "oneoff_stall":
        st[steps // 2] = True
    elif typ == "nested_stall":
        st[min(1, steps - 1)] = True
    else:
        st[:] = True
    return st


def plant(c, p, cols, anchors, rng):
    """Rank's rows and extra durations of cause `c` (a causes.Planter `p`; `cols` the base program)."""
    st = np.flatnonzero(c.steps)
    if c.type == "slow_device":
        g = cols["gkind"]
        rows = np.flatnonzero(np.isin(g, (G_KERNEL, G_H2D, G_D2H, G_MEMSET)) & c.steps[cols["step"]])
        p.extra_gpu.append((c.index, rows, np.rint(cols["gdur"][rows] * (c.factor - 1.0)).astype(np.int64)))
    elif c.type == "api_stall":
        picked = []
        for s in st.tolist():
            rows = np.flatnonzero(np.isin(cols["api"], API_STALL_CALLS) & (cols["step"] == s))
            picked.append(np.sort(rng.choice(rows, size=min(API_STALLS, len(rows)), replace=False)))
        rows = np.concatenate(picked)
        extra = np.rint(API_STALL_NS * np.exp(API_STALL_SIGMA * rng.standard_normal(len(rows)))).astype(np.int64)
        p.extra_host.append((c.index, rows, extra))
    elif c.type == "oneoff_stall":
        colls = anchors.get("collectives", [])
        a = colls[len(colls) // 2]
        ns = int(round(ONEOFF_NS * rng.uniform(0.9, 1.1)))
        for s in st.tolist():
            def build(b):
                with b.range(NVTX["oneoff_stall"]):
                    i = b.host("host")
                p.host_durations.append((i, ns))
            p.rows_for(c, s, (a["last"], a["depth"]), build)
    elif c.type == "nested_stall":
        outer = rng.integers(*NESTED_OUTER_NS, size=2)
        ns = int(round(NESTED_NS * rng.uniform(0.9, 1.1)))
        for s in st.tolist():
            def build(b):
                with b.range(CONTEXT["nested_stall"][0]):
                    p.host_durations.append((b.host("host"), int(outer[0])))
                    with b.range(CONTEXT["nested_stall"][1]):
                        p.host_durations.append((b.host("host"), int(outer[1])))
                        with b.range(NVTX["nested_stall"]):
                            p.host_durations.append((b.host("host"), ns))
            p.rows_for(c, s, anchors["item"], build)


def truth_fields(c):
    """The cause's own fields in truth.json."""
    if c.type == "slow_device":
        return {"factor": round(float(c.factor), 4), "ops": "kernels, memcpys and memsets"}
    if c.type == "api_stall":
        return {"calls_per_step": API_STALLS, "stall_median_ns": API_STALL_NS}
    d = {"nvtx": NVTX[c.type], "stall_ns": ONEOFF_NS if c.type == "oneoff_stall" else NESTED_NS}
    if c.type in CONTEXT:
        d["context"] = CONTEXT[c.type]
    return d
