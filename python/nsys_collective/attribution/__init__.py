"""Attribution (method.md sections 4 and 5): what blocked each collective (blocking), what slowed
its transfer (contention, with GPU metrics), per-step results and the findings in plain words.
It works on the model (`model.job.Job`) only, never on raw capture columns."""

from __future__ import annotations

from dataclasses import dataclass

from nsys_collective.attribution import blocking, contention, whatif
from nsys_collective.attribution.findings import findings
from nsys_collective.attribution.steps import per_step
from nsys_collective.model.job import Job


@dataclass(frozen=True)
class Attribution:
    blocking: blocking.Blocking
    contention: contention.Contention
    steps: list[dict]
    findings: list[str]
    warnings: list[str]


def attribute(job: Job, step_pattern: str | None = None) -> Attribution:
    ct = contention.attribute(job)
    tolerance = blocking.tolerance(job)
    w = whatif.analyze(job, ct.kind, tolerance, step_pattern)
    b = blocking.attribute(job, w, tolerance)
    warnings = ct.warnings + (w.warnings if w else [])
    return Attribution(blocking=b, contention=ct, steps=per_step(job, b), findings=findings(job, b, ct), warnings=warnings)
