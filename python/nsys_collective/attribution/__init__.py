"""Attribution (method.md sections 4 and 5): what blocked each collective (blocking), what slowed
its transfer (contention, with GPU metrics), per-step results and the findings in plain words.
It works on the model (`model.job.Job`) only, never on raw capture columns."""

from __future__ import annotations

from dataclasses import dataclass

from nsys_collective.attribution import blocking, contention
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


def attribute(job: Job) -> Attribution:
    b = blocking.attribute(job)
    ct = contention.attribute(job)
    return Attribution(blocking=b, contention=ct, steps=per_step(job, b), findings=findings(job, b, ct), warnings=ct.warnings)
