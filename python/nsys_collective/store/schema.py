"""The tables of the results store (SQLAlchemy ORM): one row per analyzed job in `runs`, its
results as flat tables for SQL (`ranks`, `collectives`, `blame`, `blocking`, `contention`,
`alignment_hosts`). Times are integer ns (BIGINT: they exceed 2^31)."""

from __future__ import annotations

import datetime

from sqlalchemy import BigInteger, DateTime, Float, ForeignKey, Integer, String, Text, UniqueConstraint
from sqlalchemy.dialects import mysql
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

LONG_TEXT = Text().with_variant(mysql.LONGTEXT(), "mysql")


class Base(DeclarativeBase):
    # Every int is BIGINT (ns values), every str TEXT (kernel names have no useful bound).
    type_annotation_map = {int: BigInteger, str: Text, float: Float}


def _run_id(primary_key: bool = True) -> Mapped[int]:
    return mapped_column(Integer, ForeignKey("runs.id", ondelete="CASCADE"), primary_key=primary_key)


class Run(Base):
    __tablename__ = "runs"
    __table_args__ = (UniqueConstraint("job_path", "input_hash", "status", name="runs_once_per_inputs"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)  # INTEGER: SQLite's autoincrementing rowid
    job: Mapped[str]  # the job folder relative to the batch ROOT
    job_path: Mapped[str] = mapped_column(String(4096))
    input_hash: Mapped[str] = mapped_column(String(64))
    inputs: Mapped[int]  # how many reports/exports
    tool_version: Mapped[str] = mapped_column(String(64))
    schema_version: Mapped[int]
    created_at: Mapped[datetime.datetime] = mapped_column(DateTime(timezone=True))
    status: Mapped[str] = mapped_column(String(8))  # 'ok' or 'failed'
    error: Mapped[str | None]
    # A failure of the store or the machine (disk full), not of the inputs: the next batch tries
    # again without --retry-failed. Null for runs stored before it was kept (not retried).
    retryable: Mapped[bool | None]
    # The document's summary and alignment, for queries across runs; null for failed runs.
    ranks: Mapped[int | None]
    collectives: Mapped[int | None]
    wait_ns: Mapped[int | None]
    transfer_ns: Mapped[int | None]
    nccl_time_ns: Mapped[int | None]
    explained_wait_share: Mapped[float | None]
    avoidable_wait_ns: Mapped[int | None]
    top_cause: Mapped[str | None]  # e.g. "kernel sm90_xmma_gemm... on rank 3"
    top_blocking_kernel: Mapped[str | None]
    top_straggler_rank: Mapped[int | None]
    alignment_method: Mapped[str | None]
    t_ref_ns: Mapped[int | None]
    spread_before_p50_ns: Mapped[int | None]
    spread_before_p95_ns: Mapped[int | None]
    spread_before_max_ns: Mapped[int | None]
    spread_after_p50_ns: Mapped[int | None]
    spread_after_p95_ns: Mapped[int | None]
    spread_after_max_ns: Mapped[int | None]
    violations_before: Mapped[int | None]
    violations_after: Mapped[int | None]
    # The --json document as text: read back exactly (key order, NaN), whatever the database.
    document: Mapped[str | None] = mapped_column(LONG_TEXT)
    # What the report draws beside the document (result.Evidence), as JSON; null for failed runs
    # and runs stored before it was kept.
    evidence: Mapped[str | None] = mapped_column(LONG_TEXT)


class RankTableRow(Base):
    __tablename__ = "ranks"
    run_id: Mapped[int] = _run_id()
    rank: Mapped[int] = mapped_column(primary_key=True)
    host: Mapped[str | None]
    pid: Mapped[int | None]
    device: Mapped[int | None]
    report: Mapped[str | None]
    rank_source: Mapped[str | None]
    clock_offset_ns: Mapped[int | None]
    clock_drift_ppm: Mapped[float | None]
    kernels: Mapped[int | None]
    nccl_kernels: Mapped[int | None]
    nccl_time_ns: Mapped[int | None]
    compute_overlap_ns: Mapped[int | None]
    overlap_share: Mapped[float | None]
    first_ns: Mapped[int | None]
    last_ns: Mapped[int | None]


class CollectiveRow(Base):
    # Stores made before this also hold a reference_rank column: null in every row since schema 2
    # (the document lost the field), left in place.
    __tablename__ = "collectives"
    run_id: Mapped[int] = _run_id()
    collective: Mapped[int] = mapped_column(primary_key=True)  # the document's collectives[].id
    comm: Mapped[str | None]
    seq: Mapped[int | None]
    op: Mapped[str | None]
    bytes: Mapped[int | None]
    ranks: Mapped[int | None]
    start_ns: Mapped[int | None]
    last_arrival_ns: Mapped[int | None]
    straggler_rank: Mapped[int | None]
    skew_ns: Mapped[int | None]
    wait_cost_ns: Mapped[int | None]
    transfer_ns: Mapped[int | None]
    transfer_shortest_ns: Mapped[int | None]
    busbw_gbps: Mapped[float | None]
    blame_method: Mapped[str | None]
    compute_overlap_ns: Mapped[int | None]
    sm_pressure: Mapped[float | None]
    baseline_transfer_ns: Mapped[int | None]
    contention_excess_ns: Mapped[int | None]
    step: Mapped[str | None]


class BlameRow(Base):
    __tablename__ = "blame"
    run_id: Mapped[int] = _run_id()
    collective: Mapped[int] = mapped_column(primary_key=True)
    position: Mapped[int] = mapped_column(primary_key=True)  # order within the collective's blame
    cause: Mapped[str]
    rank: Mapped[int | None]
    host: Mapped[str | None]
    ns: Mapped[int | None]
    wait_saved_ns: Mapped[int | None]
    step_time_saved_ns: Mapped[int | None]
    kernel: Mapped[str | None]
    kernel_full: Mapped[str | None]
    nvtx: Mapped[str | None]
    name: Mapped[str | None]


class BlockingRow(Base):
    __tablename__ = "blocking"
    run_id: Mapped[int] = _run_id()
    position: Mapped[int] = mapped_column(primary_key=True)  # blocking_kernels first, then blocking_launches
    cause: Mapped[str]  # kernel / extra_kernel (blocking_kernels), host / host_group (blocking_launches)
    rank: Mapped[int | None]
    host: Mapped[str | None]
    reference: Mapped[str | None]
    kernel: Mapped[str | None]
    kernel_full: Mapped[str | None]
    nvtx: Mapped[str | None]
    blame_ns: Mapped[int | None]
    inflicted_wait_ns: Mapped[int | None]
    wait_saved_ns: Mapped[int | None]
    step_time_saved_ns: Mapped[int | None]
    collectives: Mapped[int | None]
    slowdown: Mapped[float | None]
    runs: Mapped[int | None]
    reference_runs: Mapped[int | None]
    confidence: Mapped[str | None]


class ContentionRow(Base):
    __tablename__ = "contention"
    run_id: Mapped[int] = _run_id()
    position: Mapped[int] = mapped_column(primary_key=True)
    kernel: Mapped[str | None]
    kernel_full: Mapped[str | None]
    rank: Mapped[int | None]
    overlap_ns: Mapped[int | None]
    contention_ns: Mapped[int | None]
    sm_footprint: Mapped[float | None]
    collectives: Mapped[int | None]


class AlignmentHostRow(Base):
    __tablename__ = "alignment_hosts"
    run_id: Mapped[int] = _run_id()
    position: Mapped[int] = mapped_column(primary_key=True)
    host: Mapped[str | None]
    offset_ns: Mapped[int | None]
    drift_ppm: Mapped[float | None]
