"""The results store of `batch`: one row per analyzed job in `runs`, its results as flat tables.

Any SQLAlchemy URL works (SQLite and PostgreSQL are tested). Each run keeps the whole `--json`
document of `analyze` (`runs.document`, read back exactly by `load_document`); the other tables
hold the same results flat, for SQL: `ranks`, `collectives`, `blame` (one row per cause per
collective), `blocking` (blocking_kernels and blocking_launches, told apart by `cause`),
`contention` and `alignment_hosts`. Times are integer ns (BIGINT: they exceed 2^31).

A job is stored at most once per set of inputs: (job_path, input_hash, status) is unique, so two
processes writing one store cannot store a job twice; the loser gets `AlreadyStored`.
"""

from __future__ import annotations

import datetime
import hashlib
import json
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from sqlalchemy import (BigInteger, DateTime, Engine, Float, ForeignKey, Integer, String, Text, UniqueConstraint,
                        create_engine, delete, event, insert, select)
from sqlalchemy.dialects import mysql
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, DBAPIError, IntegrityError, NoSuchModuleError
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from nsys_collective import __version__
from nsys_collective.errors import InputError
from nsys_collective.json_output import SCHEMA_VERSION


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
    # The document's summary and alignment, for queries across runs; null for failed runs.
    ranks: Mapped[int | None]
    collectives: Mapped[int | None]
    wait_ns: Mapped[int | None]
    transfer_ns: Mapped[int | None]
    nccl_time_ns: Mapped[int | None]
    explained_wait_share: Mapped[float | None]
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
    document: Mapped[str | None] = mapped_column(Text().with_variant(mysql.LONGTEXT(), "mysql"))


class RankRow(Base):
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
    reference_rank: Mapped[int | None]
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
    ns: Mapped[int | None]
    kernel: Mapped[str | None]
    kernel_full: Mapped[str | None]
    nvtx: Mapped[str | None]


class BlockingRow(Base):
    __tablename__ = "blocking"
    run_id: Mapped[int] = _run_id()
    position: Mapped[int] = mapped_column(primary_key=True)  # blocking_kernels first, then blocking_launches
    cause: Mapped[str]  # kernel / window (blocking_kernels) or host_launch (blocking_launches)
    rank: Mapped[int | None]
    kernel: Mapped[str | None]
    kernel_full: Mapped[str | None]
    nvtx: Mapped[str | None]
    blame_ns: Mapped[int | None]
    inflicted_wait_ns: Mapped[int | None]
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


class AlreadyStored(Exception):
    """`write_run` lost a race: another writer stored this job with these inputs first."""

    def __init__(self, run_id: int | None):
        super().__init__(f"already stored as run {run_id}")
        self.run_id = run_id


def _url(url: str) -> str:
    """A SQLAlchemy URL as given; a bare file path means an SQLite file."""
    return url if "://" in url else f"sqlite:///{url}"


def display_url(url: str) -> str:
    try:
        return make_url(_url(url)).render_as_string(hide_password=True)
    except ArgumentError:
        return url


def _engine(url: str) -> Engine:
    engine = create_engine(_url(url), connect_args={"timeout": 60} if _url(url).startswith("sqlite") else {})
    if engine.dialect.name == "sqlite":
        # Two processes on one file: WAL lets readers run beside the writer, the busy timeout makes
        # a writer wait instead of failing, and writers BEGIN IMMEDIATE, taking the write lock up
        # front (a deferred transaction that reads, then writes, fails at once when another wrote
        # in between). Readers begin deferred and never wait for a writer.
        @event.listens_for(engine, "connect")
        def _connect(dbapi_connection, _record):
            dbapi_connection.isolation_level = None  # SQLAlchemy's "begin" below sends BEGIN
            dbapi_connection.execute("PRAGMA busy_timeout = 60000")
            dbapi_connection.execute("PRAGMA journal_mode = WAL")
            dbapi_connection.execute("PRAGMA foreign_keys = ON")

        @event.listens_for(engine, "begin")
        def _begin(connection):
            connection.exec_driver_sql("BEGIN IMMEDIATE" if connection.get_execution_options().get(_WRITE) else "BEGIN")
    return engine


_WRITE = "collectivetrace_write"


def _writer(engine: Engine) -> Engine:
    """The engine for a transaction that writes (on SQLite: BEGIN IMMEDIATE)."""
    return engine.execution_options(**{_WRITE: True})


def open_store(url: str) -> Engine:
    """The store at `url`, its tables created if absent. Raises `InputError` when it cannot be
    opened (bad URL, missing driver, server unreachable, folder missing)."""
    try:
        engine = _engine(url)
        for attempt in range(3):
            try:
                Base.metadata.create_all(_writer(engine))
                break
            except DBAPIError:
                # Another process created the tables between our check and our CREATE: check again.
                if attempt == 2:
                    raise
    except (ArgumentError, NoSuchModuleError, DBAPIError, ImportError) as e:
        reason = str(getattr(e, "orig", None) or e).strip().splitlines()[0]
        raise InputError(f"{display_url(url)}: cannot open the results store: {reason}") from None
    return engine


def file_sha256(path: Path, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def input_hash(folder: Path, files: Sequence[Path]) -> str:
    """sha256 over the inputs' paths relative to the job folder, sizes and content hashes (sorted),
    so the same inputs hash alike wherever their folder lies, and any changed byte makes them new."""
    folder = Path(folder)
    rel = [(Path(f).relative_to(folder).as_posix() if Path(f).is_relative_to(folder) else str(f), Path(f)) for f in files]
    rel.sort()
    with ThreadPoolExecutor(max_workers=min(8, max(1, len(rel)))) as pool:  # hashlib releases the GIL
        digests = list(pool.map(file_sha256, [f for _, f in rel]))
    h = hashlib.sha256()
    for (name, f), digest in zip(rel, digests):
        h.update(f"{name}\0{f.stat().st_size}\0{digest}\n".encode())
    return h.hexdigest()


def stored_hash(engine: Engine, job_path: str) -> str | None:
    """The input hash of the job's latest successful run, None when it has none."""
    with engine.begin() as conn:
        return conn.scalar(select(Run.input_hash).where(Run.job_path == str(job_path), Run.status == "ok")
                           .order_by(Run.id.desc()).limit(1))


def stored_failure(engine: Engine, job_path: str, input_hash: str) -> str | None:
    """The error of a failed run of the job with these very inputs by this tool version, if any:
    analyzing it again would fail again."""
    with engine.begin() as conn:
        return conn.scalar(select(Run.error).where(
            Run.job_path == str(job_path), Run.input_hash == input_hash, Run.status == "failed",
            Run.tool_version == __version__).order_by(Run.id.desc()).limit(1))


def _pick(model, row: dict, **extra) -> dict:
    """A value for every column of `model` from `row` (None where absent: one executemany needs
    the same keys in every row); lists and nested dicts stay in the document."""
    out = {c.key: row.get(c.key) for c in model.__table__.columns}
    out.update(extra)
    return out


def _summary_columns(doc: dict) -> dict:
    s, a = doc["summary"], doc["alignment"]
    before, after = a.get("end_spread_ns_before") or {}, a.get("end_spread_ns_after") or {}
    return {
        **{k: s.get(k) for k in ("ranks", "collectives", "wait_ns", "transfer_ns", "nccl_time_ns",
                                 "explained_wait_share", "top_blocking_kernel", "top_straggler_rank")},
        "alignment_method": a.get("method"), "t_ref_ns": a.get("t_ref_ns"),
        **{f"spread_before_{q}_ns": before.get(q) for q in ("p50", "p95", "max")},
        **{f"spread_after_{q}_ns": after.get(q) for q in ("p50", "p95", "max")},
        "violations_before": a.get("violations_before"), "violations_after": a.get("violations_after"),
    }


def _child_rows(run_id: int, doc: dict) -> dict:
    blocking = [dict(e, cause=e.get("cause", "kernel")) for e in doc["blocking_kernels"]]
    blocking += [dict(e, cause="host_launch") for e in doc["blocking_launches"]]
    return {
        RankRow: [_pick(RankRow, r, run_id=run_id) for r in doc["ranks"]],
        CollectiveRow: [_pick(CollectiveRow, c, run_id=run_id, collective=c["id"]) for c in doc["collectives"]],
        BlameRow: [_pick(BlameRow, b, run_id=run_id, collective=c["id"], position=i)
                   for c in doc["collectives"] for i, b in enumerate(c["blame"] or [])],
        BlockingRow: [_pick(BlockingRow, e, run_id=run_id, position=i) for i, e in enumerate(blocking)],
        ContentionRow: [_pick(ContentionRow, e, run_id=run_id, position=i) for i, e in enumerate(doc["contention"])],
        AlignmentHostRow: [_pick(AlignmentHostRow, h, run_id=run_id, position=i) for i, h in enumerate(doc["alignment"]["hosts"])],
    }


def write_run(engine: Engine, job: str | Path, inputs: Sequence, input_hash: str, doc_or_error: dict | str,
              *, name: str | None = None) -> int:
    """Stores one run of the job folder `job` (`name`: how to call it, default the folder's name)
    in one transaction: the document (a dict) with its tables, or a failure (the error text).
    Earlier failed runs of the job go: it has a newer record now. Returns the run id; raises
    `AlreadyStored` when another writer stored the job with these inputs first."""
    failed = isinstance(doc_or_error, str)
    job_path = str(job)
    run = {
        "job": name or Path(job).name, "job_path": job_path, "inputs": len(inputs), "input_hash": input_hash,
        "tool_version": __version__, "schema_version": SCHEMA_VERSION if failed else doc_or_error["schema_version"],
        "created_at": datetime.datetime.now(datetime.timezone.utc),
        "status": "failed" if failed else "ok", "error": doc_or_error if failed else None,
        "document": None if failed else json.dumps(doc_or_error),
        **({} if failed else _summary_columns(doc_or_error)),
    }
    try:
        with _writer(engine).begin() as conn:
            conn.execute(delete(Run).where(Run.job_path == job_path, Run.status == "failed"))
            run_id = conn.execute(insert(Run).values(**run).returning(Run.id)).scalar_one()
            if not failed:
                for model, rows in _child_rows(run_id, doc_or_error).items():
                    if rows:
                        conn.execute(insert(model), rows)
        return run_id
    except IntegrityError:
        with engine.begin() as conn:
            other = conn.scalar(select(Run.id).where(
                Run.job_path == job_path, Run.input_hash == input_hash, Run.status == run["status"]))
        if other is None:
            raise  # not the race on runs_once_per_inputs: a real error
        raise AlreadyStored(other) from None


def list_runs(engine: Engine) -> list[dict]:
    """Every run, oldest first, without its document."""
    columns = [c for c in Run.__table__.columns if c.key != "document"]
    with engine.begin() as conn:
        return [dict(row._mapping) for row in conn.execute(select(*columns).order_by(Run.id))]


def load_document(url_or_engine: str | Engine, run_id: int) -> dict:
    """The `analyze --json` document stored for run `run_id`. Raises `InputError` when the store
    has no such run or the run failed (its error is in the message)."""
    if isinstance(url_or_engine, str):
        url = make_url(_url(url_or_engine))
        if url.get_backend_name() == "sqlite" and url.database and not Path(url.database).is_file():
            raise InputError(f"{url.database}: no such results store")
    engine = _engine(url_or_engine) if isinstance(url_or_engine, str) else url_or_engine
    try:
        with engine.begin() as conn:
            row = conn.execute(select(Run.status, Run.error, Run.document, Run.job).where(Run.id == run_id)).first()
    except DBAPIError as e:  # no store there, or no runs table in it
        reason = str(getattr(e, "orig", None) or e).strip().splitlines()[0]
        raise InputError(f"{display_url(str(engine.url))}: cannot read run {run_id}: {reason}") from None
    finally:
        if engine is not url_or_engine:
            engine.dispose()
    if row is None:
        raise InputError(f"{display_url(str(engine.url))}: no run {run_id} in this store")
    if row.status != "ok":
        raise InputError(f"run {run_id} ({row.job}) failed, it has no results: {row.error}")
    return json.loads(row.document)
