"""What each figure means, said once: `analyze --help`, `collectivetrace-nsys glossary` and the HTML
report all print these words (docs/method.md sections 3 to 5 hold the arithmetic)."""

from __future__ import annotations

# (term, definition), in the order a reader meets them: a collective's timing, then its causes.
TERMS: tuple[tuple[str, str], ...] = (
    ("arrival", "When a rank's NCCL kernel of a collective starts, on the aligned clock."),
    ("straggler", "The rank that arrives last in a collective."),
    ("wait", "Time a rank's NCCL kernel spins until the last rank arrives (last arrival minus its own "
             "arrival). A collective's wait (wait cost) is the sum over its ranks; every total over ranks is GPU time."),
    ("skew", "Last arrival minus the median arrival of a collective: how late the straggler was against a "
             "typical rank. It is smaller than the spread."),
    ("spread", "Last minus first: of the arrivals of a collective, or of its ends (end-time spread, "
               "the clock alignment's measure: after alignment the ends of a collective should coincide)."),
    ("transfer", "Of one collective: its median end minus its last arrival, moving the data once every rank is "
                 "there. 'shortest' is the shortest NCCL kernel of the collective, a check that needs no clock alignment."),
    ("GPU transfer", "Transfer summed over each collective's ranks (GPU time): the per-step and whole-run totals, "
                     "a collective on 2 ranks counting its transfer twice."),
    ("excess", "How much longer a cause ran on its rank than its reference (the same work on the other "
               "ranks, or in its own other steps), summed over the run."),
    ("wait saved", "The wait the job would no longer spend with the cause removed: its dependency graph "
                   "replayed without it, GPU time over all ranks and collectives. Causes overlap, so their "
                   "savings do not add up; 'avoidable' is the causes found removed together (the ideal). 'adds N': "
                   "fixed alone, the cause's rank would wait N longer for another (negative in --json); it saves step time only."),
    ("step time saved", "How much sooner each step would end with the cause removed (replayed); the "
                        "figure a training job's throughput follows."),
    ("confidence", "high: the cause is systematic (a kernel 10%+ slower or run more often, a host range "
                   "50%+ longer, on most occurrences) and saves at least 10% of the wait; low: anything else, "
                   "often jitter."),
    ("fidelity", "How well the replay reproduces the capture: the share of GPU operation starts that the "
                 "recorded and inferred dependencies explain, and the error of the replayed starts."),
    ("transfer slowdown", "The transfer time a kernel overlapping the transfers added, GPU time over the member ranks: "
                          "its coefficient x its overlap in the contention fit."),
    ("contention fit", "Per class of transfers (communicator, operation, rank count, size), transfer time = a "
                       "baseline + the sum over the overlapping kernels of a coefficient x the overlap, fitted by "
                       "bounded least squares over every collective, so the baseline is known even where no "
                       "transfer ran alone. Each kernel must earn its coefficient: one the data cannot tell from no effect "
                       "(a partial F test at 5% over all the kernels tested) gets 0 and the rest are refitted. Kernels "
                       "that always overlap together are one group; transfers nothing overlapped cross-check the baselines."),
    ("90% range", "The range a fitted figure falls in for 90% of bootstrap refits (collectives resampled within "
                  "their class); confidence is high when its low end is at least half the figure."),
    ("longer by", "How much longer a cause (a kernel, a host range) ran than its reference, as a share of the "
                  "reference (what-if causes' `slowdown`)."),
    ("compute slowdown", "How much longer a compute kernel's runs beside NCCL took than the fit of its duration against "
                         "its overlap with NCCL kernels says they would alone, as a share of that (contention's other direction)."),
    ("NCCL added", "The compute time the NCCL kernels running beside a compute kernel added to its runs: the fit's "
                   "coefficient x its overlap with NCCL."),
    ("SM footprint", "The share of the GPU's SMs a compute kernel occupies (its blocks over the SM count, at most 1)."),
    ("compute overlap", "The share of a rank's NCCL kernel time during which a compute kernel also ran on its GPU."),
    ("GPU idle", "Time a rank's GPU ran nothing, split into host wait (the host had not yet launched the "
                 "work that ended the gap), sync wait (that work waited on another stream or an event) and other."),
    ("host sync", "Time a rank's process spent in cudaDeviceSynchronize, cudaStreamSynchronize and "
                  "cudaEventSynchronize calls, and how many."),
    ("clock offset", "What alignment adds to a host's clock so that the ends of each collective coincide "
                     "across ranks; drift is its change per second, in ppm."),
    ("causality violations", "Collectives in which some rank ended before another one started: impossible "
                             "on true clocks, so a measure of misaligned ones."),
)

# What each `ranks[].zero_overlap_cause` says: a few words for a table cell, and the fix where one is known.
ZERO_OVERLAP: dict[str, tuple[str, str | None]] = {
    "same_stream": ("NCCL on the compute stream", "give it a stream of its own"),
    "no_compute": ("no compute kernels", None),
    "serialized": ("compute and NCCL take turns", None),
}


def text() -> str:
    """The glossary as plain lines, for a terminal or `--help`."""
    return "\n".join(f"{term}: {definition}" for term, definition in TERMS)
