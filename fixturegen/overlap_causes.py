"""Causes where overlapping work slows other work, with bystanders that overlap it without slowing it.

* ``kernel_contention``: beside each of the style's main collectives, on every rank and in every
  step, three kernels start on side streams with the collective (they wait for the same ready
  event and the NCCL stream's previous collective): a flash-attention backward kernel
  (``SLOWER``) and two bystanders, a GEMM and a flash-attention forward kernel. Each runs a drawn
  share of the transfer (U(0.15, 1.3) x its un-contended time, per kernel, rank and instance), so
  how much each overlaps varies. Only ``SLOWER`` slows the transfer: 1.6x while it overlaps (on any
  member: the ring runs at its slowest member's pace). No transfer of the main traffic runs alone.
* ``kernel_contention_clean``: the same in odd steps only; the even steps' collectives overlap only
  what the base program runs beside them.
* ``paired_contention``: as ``kernel_contention``, and ``PARTNER`` always runs beside ``SLOWER`` with
  the same duration (a kernel the same op launches with it): the data cannot tell the two apart.
* ``nccl_slows_compute``: the other direction. ``VICTIM`` runs on the compute stream right after each
  main collective is launched (while the NCCL kernel runs: 30% slower, NCCL holding SMs and memory
  bandwidth), and once per step in the forward pass, where no NCCL kernel runs (its own speed).

Removed, the kernels still run: transfers at their un-contended speed (the first three), ``VICTIM``
at its own speed beside NCCL (the last). These kernels are the base program's for the truth's
runs (their rows have no owner), so the no-cause run is the same job minus the slowdown.
"""

from __future__ import annotations

import numpy as np

from . import catalog as cat
from .catalog import BYSTANDER_FLASH, BYSTANDER_GEMM, PARTNER, SLOWER, US, VICTIM
from .program import STREAM_COMPUTE, STREAM_SIDE

OVERLAP_CAUSES = ("kernel_contention", "kernel_contention_clean", "paired_contention", "nccl_slows_compute")
TRANSFER_CAUSES = OVERLAP_CAUSES[:3]
SLOWER_FACTOR = 1.6
VICTIM_FACTOR = 1.3
SHARE = (0.15, 1.3)  # a planted kernel's duration over the transfer's un-contended time

def steps_of(typ, steps):
    """The steps a cause acts in: odd ones for the variant with clean instances, else all."""
    st = np.ones(steps, bool)
    if typ == "kernel_contention_clean":
        if steps < 2:
            raise ValueError(f"{typ} needs steps >= 2 (it acts in odd steps)")
        st[::2] = False
    return st


def plant(planter, c, style, anchors, cols, t, rng, transfer_of, primary):
    """Rank's rows for one overlap cause (its kernels on side streams beside the main collectives,
    or VICTIM on the compute stream), drawn from the cause's own stream `rng`."""
    targets = primary(style, anchors)
    for s in np.flatnonzero(c.steps).tolist():
        if c.type == "nccl_slows_compute":
            def alone(b):
                with b.cpu_op(cat.ATEN_OP[cat.SPEC[VICTIM]]):
                    b.launch(VICTIM)
            planter.rows_for(c, s, anchors["extra_kernel"], alone)
        for j, a in enumerate(targets):
            key = (a["comm"], int(cols["seq"][s * t + a["row"]]))
            if c.type == "nccl_slows_compute":
                def beside(b):
                    with b.cpu_op(cat.ATEN_OP[cat.SPEC[VICTIM]]):
                        i = b.launch(VICTIM, stream=STREAM_COMPUTE)
                    planter.slowed_by_nccl.append((c.index, i))
                planter.rows_for(c, s, (a["last"], a["depth"]), beside)
                continue
            x0 = transfer_of(key)
            share = rng.uniform(*SHARE, 3)
            kernels = [(SLOWER, share[0]), (BYSTANDER_GEMM, share[1]), (BYSTANDER_FLASH, share[2])]
            if c.type == "paired_contention":
                kernels.insert(1, (PARTNER, share[0]))

            def build(b, a=a, key=key, x0=x0, kernels=kernels, j=j):
                for n, (kern, sh) in enumerate(kernels):
                    side = STREAM_SIDE + 4 * ((len(kernels) * j + n) % 8)
                    b.wait(side, a["ready"], klass="hook")
                    if a["prev_end"]:
                        b.wait(side, a["prev_end"], klass="hook")
                    with b.cpu_op(cat.ATEN_OP[cat.SPEC[kern]]):
                        i = b.launch(kern, stream=side)
                    planter.gpu_durations.append((i, max(5 * US, int(round(sh * x0)))))
                    if kern is SLOWER:
                        planter.contenders.append((c.index, key, i, SLOWER_FACTOR))
            planter.rows_for(c, s, (a["last"], a["depth"]), build)


def victim_extra(rows, gdur):
    """The extra VICTIM takes beside NCCL: (factor - 1) x its drawn duration."""
    return np.rint(gdur[rows] * (VICTIM_FACTOR - 1.0)).astype(np.int64)


def truth_fields(c):
    """What truth.json says of an overlap cause beyond the common fields."""
    if c.type == "nccl_slows_compute":
        return {"kernel": VICTIM.short, "kernel_demangled": VICTIM.demangled, "stream": STREAM_COMPUTE,
                "factor": VICTIM_FACTOR}
    d = {"kernel": SLOWER.short, "kernel_demangled": SLOWER.demangled, "factor": SLOWER_FACTOR,
         "bystanders": [BYSTANDER_GEMM.short, BYSTANDER_FLASH.short]}
    if c.type == "paired_contention":
        d["partner"] = PARTNER.short
    return d
