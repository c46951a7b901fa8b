"""What-if blame (docs/method.md section 4): what fixing each cause would save, measured by replaying the
job's dependency graph with that cause removed.

1. The graph (`graph`): every rank's CUDA API calls and GPU ops on the aligned clock, with the
   recorded synchronization and event records, and the collectives' members, go to the native
   `ReplayGraph` (crates/core/src/whatif; docs/whatif-replay.md), which infers what is not recorded
   and replays the whole job in one forward pass.
2. Candidates, picked cheaply from excess over a reference, one module per family: `kernels`
   (kernel, extra_kernel), `host` (host, host_group), `transfers` (transfer), `idle` (idle). Each
   picker takes a `candidate.Context` and returns `candidate.Candidate`s, each with the change that
   fixes it.
3. The replays (`replay`): each candidate alone, and the causes found fixed together (the ideal), in parallel.
"""

from nsys_collective.attribution.whatif.candidate import Candidate
from nsys_collective.attribution.whatif.replay import WhatIf, analyze

__all__ = ["Candidate", "WhatIf", "analyze"]
